// zeppelin/schedule/pipeline/one_f_one_b.hpp
// 1F1B, PipeDream-flush (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
// Training", ICML 2021; Megatron-LM's forward_backward_pipelining_without_interleaving):
// stage p (0-based) runs w = min(M, P - 1 - p) warm-up forwards, then alternates one forward
// and one backward, then drains the remaining backwards. Micro-batches run in the order
// given, whatever their sizes: a variable-length 1F1B needs no padding because every send
// carries its own micro-batch's tokens and the receiver knows them from the same schedule.
// In-flight bound on stage p: min(M, P - p) micro-batches.
//   in : stages P, micro-batch tokens        out: pipeline_schedule (kind 1f1b, V = 1)
// Errors: detail::check_pipeline_input (invalid_argument, resource_limit).
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/schedule/pipeline/detail/assemble.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>

#include <algorithm>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct one_f_one_b {
  [[nodiscard]] pipeline_schedule build(int stages, std::span<const token_count> tokens) const {
    detail::check_pipeline_input(stages, 1, tokens);
    const int m = static_cast<int>(tokens.size());
    std::vector<std::vector<detail::compute_step>> order(static_cast<std::size_t>(stages));
    std::vector<int> bound(static_cast<std::size_t>(stages));
    for (int p = 0; p < stages; ++p) {
      auto& o = order[static_cast<std::size_t>(p)];
      o.reserve(2 * static_cast<std::size_t>(m));
      const int warmup = std::min(m, stages - 1 - p);
      for (int k = 0; k < warmup; ++k) o.push_back({pipeline_op_kind::forward, k, 0});
      for (int k = 0; k + warmup < m; ++k) {
        o.push_back({pipeline_op_kind::forward, k + warmup, 0});
        o.push_back({pipeline_op_kind::backward, k, 0});
      }
      for (int k = m - warmup; k < m; ++k) o.push_back({pipeline_op_kind::backward, k, 0});
      bound[static_cast<std::size_t>(p)] = std::min(m, stages - p);
    }
    return detail::assemble_pipeline(pipeline_schedule_kind::one_f_one_b, stages, 1, tokens, order, std::move(bound));
  }
  static constexpr bool valid_by_construction = true;
  friend bool operator==(const one_f_one_b&, const one_f_one_b&) = default;
};
static_assert(pipeline_schedule_policy<one_f_one_b> && schedule_valid_by_construction<one_f_one_b>);

ZEPPELIN_NAMESPACE_END
