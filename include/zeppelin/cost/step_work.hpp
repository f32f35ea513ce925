// zeppelin/cost/step_work.hpp
// The work of one training step (forward + backward, every layer, LM head) of a batch, and
// the time it would take if spread perfectly over G GPUs.
//   in:  batch, model_config, gpu_spec, attention and linear time models
//   out: step_work: model FLOPs of attention (exact causal pairs per sequence, no padding)
//        and of the linear modules; seconds of each on one GPU with each sequence as one
//        attention call; balanced_lower_bound(G): no partition can beat it under the model.
// The lower bound prices attention at the best rate of the throughput tables (no tile or
// small-block losses) and linear work at the GEMM efficiency, with zero exposed
// communication: it is what "perfect balance" means for the simulator's efficiency figure.
// nvcc-safe (host code).
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/linear_time_model.hpp>

#include <algorithm>

ZEPPELIN_NAMESPACE_BEGIN

struct step_work {
  double attention_forward_flops = 0;   //!< all layers, exact causal pairs
  double attention_backward_flops = 0;
  double linear_forward_flops = 0;      //!< all layers' linear modules + LM head
  double linear_backward_flops = 0;
  double attention_seconds = 0;         //!< forward + backward, one GPU, one call per sequence
  double linear_seconds = 0;            //!< forward + backward, one GPU
  double best_attention_forward_rate = 0;   //!< FLOP/s: the forward table's maximum
  double best_attention_backward_rate = 0;  //!< FLOP/s: the backward table's maximum
  double linear_rate = 0;                   //!< FLOP/s: efficiency x peak

  [[nodiscard]] double attention_flops() const noexcept { return attention_forward_flops + attention_backward_flops; }
  [[nodiscard]] double linear_flops() const noexcept { return linear_forward_flops + linear_backward_flops; }
  [[nodiscard]] double total_flops() const noexcept { return attention_flops() + linear_flops(); }
  [[nodiscard]] double single_gpu_seconds() const noexcept { return attention_seconds + linear_seconds; }

  //! Seconds of the step spread perfectly over `gpus` GPUs at the best modelled rates.
  //! Throws invalid_argument for gpus < 1.
  [[nodiscard]] double balanced_lower_bound(int gpus) const {
    ZEPPELIN_EXPECTS(gpus >= 1, "a lower bound needs at least one GPU", {{"gpus", double(gpus)}});
    const double g = gpus;
    return (attention_forward_flops / best_attention_forward_rate + attention_backward_flops / best_attention_backward_rate +
            linear_flops() / linear_rate) / g;
  }
};

namespace detail {
inline double table_max(const throughput_table& t) {
  double best = 0;
  for (const auto& p : t.points()) best = std::max(best, p.flops_per_second);
  return best;
}
}  // namespace detail

//! The work of one step of batch `b` through model `m` on GPUs like `gpu`.
//! Throws invalid_argument for an invalid model or GPU, or empty time-model tables.
[[nodiscard]] inline step_work estimate_step_work(const batch& b, const model_config& m, const gpu_spec& gpu,
                                                  const attention_time_model& attention, const linear_time_model& linear = {}) {
  validate(m);
  ZEPPELIN_EXPECTS(!attention.forward.empty() && !attention.backward.empty(), "attention time model has an empty table", {});
  step_work w;
  const double layers = m.layers;
  for (const token_count len : b.lengths()) {
    const std::int64_t pairs = causal_pairs(len);
    w.attention_forward_flops += layers * attention_forward_flops(pairs, m);
    w.attention_backward_flops += layers * attention_backward_flops(pairs, m);
    w.attention_seconds += layers * (attention.forward_seconds(len, pairs, m) + attention.backward_seconds(len, pairs, m));
  }
  const double tokens = static_cast<double>(b.total_tokens());
  w.linear_forward_flops = tokens * (layers * linear_forward_flops_per_token(m) + lm_head_flops_per_token(m));
  w.linear_backward_flops = tokens * (layers * linear_backward_flops_per_token(m) + lm_head_backward_flops_per_token(m));
  w.linear_seconds = linear.seconds(w.linear_flops(), gpu);
  w.best_attention_forward_rate = detail::table_max(attention.forward);
  w.best_attention_backward_rate = detail::table_max(attention.backward);
  w.linear_rate = linear.efficiency * gpu.peak_flops;
  return w;
}

//! As above with the FlashAttention-2 tables for `gpu` (attention_time_model::for_gpu).
[[nodiscard]] inline step_work estimate_step_work(const batch& b, const model_config& m, const gpu_spec& gpu) {
  return estimate_step_work(b, m, gpu, attention_time_model::for_gpu(gpu));
}

ZEPPELIN_NAMESPACE_END
