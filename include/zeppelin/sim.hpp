// zeppelin/sim.hpp
// Umbrella header of the simulators: the event engine, cost bundle (with the SM contention
// model), options, results, lower bound, tensor-parallel view, simulate() and
// simulate_step() (and the extrapolation of a step too large to build) and the Chrome trace
// writers. The planners that price on them, and the evaluation's named methods, are in
// zeppelin/planner.hpp. Host-only.
#pragma once

#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/lower_bound.hpp>
#include <zeppelin/sim/options.hpp>
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
