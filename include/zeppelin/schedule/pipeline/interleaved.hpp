// zeppelin/schedule/pipeline/interleaved.hpp
// Interleaved 1F1B with virtual stages (Narayanan et al., "Efficient Large-Scale Language
// Model Training on GPU Clusters Using Megatron-LM", SC'21, section 2.2.2; Megatron-LM's
// forward_backward_pipelining_with_interleaving): each of the P stages holds V model chunks
// (stage s, chunk c = virtual stage c * P + s), which cuts the bubble by V at the price of V
// times the pipeline messages.
// Order: micro-batches run in groups; forwards go group by group, chunk 0..V-1 within a
// group; backwards the same with chunks V-1..0. Megatron-LM's groups hold exactly P
// micro-batches and it asserts M % P == 0; here the floor(M / P) groups share the M
// micro-batches as evenly as possible (sizes P .. 2P - 1; one group of M when M < P), so any
// M works: a group smaller than P after a full one would make stage 0 wait for a chunk
// boundary that the 1F1B alternation has not let through yet (a cycle: the validator finds it
// for M = 4, P = 3). Stage p runs
//   w = min(M V, (V - 1) g + 2 (P - 1 - p))   warm-up forwards (g = the first group's size,
// Megatron-LM's count with g = P), then alternates one forward and one backward, then drains.
// In-flight bound on stage p: min(M V, w + 1) (micro-batch, chunk) pairs. V = 1 is 1F1B.
// Any P >= 1 works with V > 1 (Megatron-LM asks for P > 2): on one or two stages activations
// and gradients share an ordered pair of stages, and detail/assemble.hpp posts both streams
// in the one order NCCL's matching needs.
//   in : stages P, micro-batch tokens; virtual_stages V (member, >= 1)
//   out: pipeline_schedule (kind interleaved)
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

struct interleaved_one_f_one_b {
  int virtual_stages = 2;  //!< model chunks per stage (V)

  [[nodiscard]] pipeline_schedule build(int stages, std::span<const token_count> tokens) const {
    detail::check_pipeline_input(stages, virtual_stages, tokens);
    const int m = static_cast<int>(tokens.size());
    const int v = virtual_stages;
    const int units = m * v;
    // The forward and backward unit orders, the same on every stage.
    std::vector<detail::compute_step> forwards, backwards;
    forwards.reserve(static_cast<std::size_t>(units));
    backwards.reserve(static_cast<std::size_t>(units));
    const int groups = std::max(1, m / stages);
    for (int g = 0, first = 0; g < groups; ++g) {
      const int last = first + (g == 0 ? m - (groups - 1) * stages : stages);
      for (int c = 0; c < v; ++c)
        for (int k = first; k < last; ++k) forwards.push_back({pipeline_op_kind::forward, k, c});
      for (int c = v - 1; c >= 0; --c)
        for (int k = first; k < last; ++k) backwards.push_back({pipeline_op_kind::backward, k, c});
      first = last;
    }
    const int first_group = m - (groups - 1) * stages;
    std::vector<std::vector<detail::compute_step>> order(static_cast<std::size_t>(stages));
    std::vector<int> bound(static_cast<std::size_t>(stages));
    for (int p = 0; p < stages; ++p) {
      const int warmup = v == 1 ? std::min(m, stages - 1 - p)
                                : std::min(units, (v - 1) * first_group + 2 * (stages - 1 - p));
      auto& o = order[static_cast<std::size_t>(p)];
      o.reserve(2 * static_cast<std::size_t>(units));
      for (int u = 0; u < warmup; ++u) o.push_back(forwards[static_cast<std::size_t>(u)]);
      for (int u = 0; u + warmup < units; ++u) {
        o.push_back(forwards[static_cast<std::size_t>(u + warmup)]);
        o.push_back(backwards[static_cast<std::size_t>(u)]);
      }
      for (int u = units - warmup; u < units; ++u) o.push_back(backwards[static_cast<std::size_t>(u)]);
      bound[static_cast<std::size_t>(p)] = std::min(units, warmup + 1);
    }
    return detail::assemble_pipeline(pipeline_schedule_kind::interleaved, stages, v, tokens, order, std::move(bound));
  }
  static constexpr bool valid_by_construction = true;
  friend bool operator==(const interleaved_one_f_one_b&, const interleaved_one_f_one_b&) = default;
};
static_assert(pipeline_schedule_policy<interleaved_one_f_one_b> && schedule_valid_by_construction<interleaved_one_f_one_b>);

ZEPPELIN_NAMESPACE_END
