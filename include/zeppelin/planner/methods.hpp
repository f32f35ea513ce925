// zeppelin/planner/methods.hpp
// Runs a method of the evaluation by name: plans the batch and simulates the step.
//   in : a method (method_specs, planner/method_spec.hpp), a batch, the PHYSICAL topology, a
//        model, method_setup
//   out: method_run: the plan (on the tensor_parallel_view when TP > 1) and its sim_result;
//        for the cost-driven `zeppelin`, the chosen candidate's (planner/cost_driven_planner.hpp),
//        named in method_run::candidate
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/planner/cost_driven_planner.hpp>
#include <zeppelin/planner/method_spec.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

#include <string>
#include <string_view>
#include <utility>

ZEPPELIN_NAMESPACE_BEGIN

//! What an executor runs for a method on one batch: the execution (partitioner, routing,
//! engine, launches, remapping; options_for gives its sim_options) and the plan.
struct planned_method {
  method_spec execution;
  plan layout;  //!< on the tensor_parallel_view of the topology
};

//! The plan and execution `spec` runs on batch `b`, exactly what run_method simulates: `spec`'s
//! partitioner, or for the cost-driven zeppelin the candidate plan_by_cost chooses (priced for
//! model `m`) with the plan it already made.
[[nodiscard]] inline planned_method plan_method(const method_spec& spec, const batch& b, const topology& physical,
                                                const model_config& m, const method_setup& setup = {}) {
  if (spec.kind == method_kind::zeppelin) {
    cost_driven_choice choice = plan_by_cost(b, physical, m, setup);
    return {choice.execution, std::move(choice.chosen.layout)};
  }
  const topology view = tensor_parallel_view(physical, setup.tensor_parallel);
  return {spec, partition_for(spec, b, view, method_capacity(setup), setup.metric, &m)};
}

//! Plans and simulates `spec` on batch `b`, physical topology `physical`, model `m`.
//! Throws what the partitioner and simulate() throw (infeasible when the batch does not fit).
[[nodiscard]] inline method_run run_method(const method_spec& spec, const batch& b, const topology& physical,
                                           const model_config& m, const method_setup& setup = {}) {
  if (spec.kind != method_kind::zeppelin) return run_spec(spec, b, physical, m, setup);
  cost_driven_choice choice = plan_by_cost(b, physical, m, setup);
  method_run run = std::move(choice.chosen);
  run.name = std::string(spec.name);
  run.result.method = run.name;
  return run;
}

[[nodiscard]] inline method_run run_method(std::string_view name, const batch& b, const topology& physical,
                                           const model_config& m, const method_setup& setup = {}) {
  return run_method(method_by_name(name), b, physical, m, setup);
}

ZEPPELIN_NAMESPACE_END
