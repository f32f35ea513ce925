// zeppelin/strategy.hpp
// Umbrella header of Hydraulis' heterogeneous strategies: parallel schemes and their cost
// models (MaxLen, UtilLen, T(l, P)), the strategy-proposal dynamic program, dispatch across
// pipelines (stage 1), packing within a pipeline (stage 2), the per-iteration choice, and the
// switching between strategies (its mutual slices, their element layout, each GPU's traffic).
// Host-only.
#pragma once

#include <zeppelin/strategy/dispatch.hpp>
#include <zeppelin/strategy/homogeneous_baseline.hpp>
#include <zeppelin/strategy/iteration_plan.hpp>
#include <zeppelin/strategy/iteration_step_plan.hpp>
#include <zeppelin/strategy/parallel_scheme.hpp>
#include <zeppelin/strategy/pipeline_packing.hpp>
#include <zeppelin/strategy/plan_strategy.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>
#include <zeppelin/strategy/switching.hpp>
#include <zeppelin/strategy/switching_layout.hpp>
#include <zeppelin/strategy/switching_traffic.hpp>
