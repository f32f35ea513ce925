// zeppelin/sim/lower_bound.hpp
// The lower bound every simulated step is measured against.
//   in : batch, model, topology (the tensor_parallel_view when TP > 1), cost model
//   out: seconds: the step's attention FLOPs (exact causal pairs, forward and backward, every
//        layer) at the best rate of the attention tables plus its linear FLOPs (every layer
//        and the LM head) at the GEMM rate, spread perfectly over all GPUs, with no exposed
//        communication and no tile padding (cost/step_work.hpp balanced_lower_bound).
// No plan can beat it under the cost model: each rank's simulated attention calls execute at
// least their exact FLOPs at most the table's best rate, and the linear modules process
// every token once per layer. efficiency = lower_bound / step time. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/step_work.hpp>
#include <zeppelin/sim/cost_model.hpp>

ZEPPELIN_NAMESPACE_BEGIN

//! Seconds of one training step of `b` on `t` under perfect balance and zero exposed
//! communication (see the file comment).
[[nodiscard]] inline double step_lower_bound(const batch& b, const model_config& m, const topology& t,
                                             const sim_cost_model& cost) {
  return estimate_step_work(b, m, t.gpu(), cost.attention, cost.linear).balanced_lower_bound(t.num_ranks());
}

//! step_lower_bound with sim_cost_model::for_topology(t).
[[nodiscard]] inline double step_lower_bound(const batch& b, const model_config& m, const topology& t) {
  return step_lower_bound(b, m, t, sim_cost_model::for_topology(t));
}

ZEPPELIN_NAMESPACE_END
