// zeppelin/sim.hpp
// Umbrella header of the step simulator: the event engine, cost bundle (with the SM
// contention model), options, results, lower bound, tensor-parallel view, simulate(), the
// evaluation's methods (and the extrapolation of a step too large to build) and the Chrome
// trace writer. Host-only.
#pragma once

#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/lower_bound.hpp>
#include <zeppelin/sim/cost_driven_planner.hpp>
#include <zeppelin/sim/method_spec.hpp>
#include <zeppelin/sim/methods.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/plan_step_bound.hpp>
#include <zeppelin/sim/result.hpp>
#include <zeppelin/sim/simulate.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/sim/sm_contention.hpp>
#include <zeppelin/sim/step_backend.hpp>
#include <zeppelin/sim/step_extrapolation.hpp>
#include <zeppelin/sim/step_memory.hpp>
#include <zeppelin/sim/step_trace.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>
#include <zeppelin/sim/trace.hpp>
