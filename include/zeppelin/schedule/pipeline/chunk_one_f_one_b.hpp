// zeppelin/schedule/pipeline/chunk_one_f_one_b.hpp
// Chunk-level 1F1B, InfiniPipe's pipeline schedule (Wang et al., "InfiniPipe: Elastic
// Pipeline Parallelism for Efficient Variable-Length Long-Context LLM Training", section
// 3.3): the micro-batches are chunks (core/chunk.hpp), and consecutive chunks may be the
// slices of one long sequence, a chain. A slice's forward reads the K/V of the slices
// before it, and its K/V gradients come from the slices after it, so on every stage:
//   - a chain's forwards run in slice order (the forward order given);
//   - its backwards run in reverse slice order: the backward order takes the chains in
//     forward order and each chain's chunks last to first.
// Stage p (0-based) of P runs w_p = min(M, P - 1 - p + N_P - 1) warm-up forwards, N_P the
// longest chain (the longest sequence's slices), then alternates one forward and one
// backward, then drains the backwards. The extra N_P - 1 warm-up forwards are what lets the
// last stage finish a chain's forwards before its first backward; with every chain of one
// chunk this is 1F1B. In flight on stage p: min(M, P - p + N_P - 1) chunks, InfiniPipe's
// window |W_p| = d_p - p + N_prefill (p 1-based).
//   in : stages P, the chunks' tokens in forward order (the longest sequences first, the
//        paper's rule: pack/chunk_order.hpp), `chains`: the chunks per chain in order
//        (empty: every chunk its own chain)
//   out: pipeline_schedule of kind chunk_one_f_one_b (V = 1); micro-batch k is the k-th
//        chunk of the forward order
// Errors: detail::check_pipeline_input; invalid_argument for a chain < 1 chunk or chains
// that do not sum to the micro-batches.
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/schedule/pipeline/detail/assemble.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct chunk_one_f_one_b {
  std::vector<int> chains;  //!< chunks per chain, in forward order; empty: all chains of 1

  [[nodiscard]] pipeline_schedule build(int stages, std::span<const token_count> tokens) const {
    detail::check_pipeline_input(stages, 1, tokens);
    const int m = static_cast<int>(tokens.size());
    const std::vector<int> backward = backward_order(m);
    const int longest = chains.empty() ? 1 : *std::max_element(chains.begin(), chains.end());
    std::vector<std::vector<detail::compute_step>> order(static_cast<std::size_t>(stages));
    std::vector<int> bound(static_cast<std::size_t>(stages));
    for (int p = 0; p < stages; ++p) {
      auto& o = order[static_cast<std::size_t>(p)];
      o.reserve(2 * static_cast<std::size_t>(m));
      const int warmup = std::min(m, stages - 1 - p + longest - 1);
      for (int k = 0; k < warmup; ++k) o.push_back({pipeline_op_kind::forward, k, 0});
      for (int k = 0; k + warmup < m; ++k) {
        o.push_back({pipeline_op_kind::forward, k + warmup, 0});
        o.push_back({pipeline_op_kind::backward, backward[static_cast<std::size_t>(k)], 0});
      }
      for (int k = m - warmup; k < m; ++k) o.push_back({pipeline_op_kind::backward, backward[static_cast<std::size_t>(k)], 0});
      bound[static_cast<std::size_t>(p)] = std::min(m, stages - p + longest - 1);
    }
    return detail::assemble_pipeline(pipeline_schedule_kind::chunk_one_f_one_b, stages, 1, tokens, order, std::move(bound));
  }

  //! The micro-batches in backward order: chains in order, each chain's chunks reversed.
  [[nodiscard]] std::vector<int> backward_order(int micro_batches) const {
    std::vector<int> out(static_cast<std::size_t>(micro_batches));
    std::iota(out.begin(), out.end(), 0);
    if (chains.empty()) return out;
    long long total = 0;
    for (std::size_t c = 0; c < chains.size(); ++c) {
      ZEPPELIN_EXPECTS(chains[c] >= 1, "a chain holds at least one chunk", {{"chain", double(c)}, {"chunks", double(chains[c])}});
      total += chains[c];
    }
    ZEPPELIN_EXPECTS(total == micro_batches, "the chains must hold every micro-batch once",
                     {{"chained", double(total)}, {"micro_batches", double(micro_batches)}});
    auto at = out.begin();
    for (const int c : chains) {
      std::reverse(at, at + c);
      at += c;
    }
    return out;
  }

  //! f2b: per micro-batch (forward order), its position in the backward order.
  [[nodiscard]] std::vector<std::int64_t> backward_positions(int micro_batches) const {
    const std::vector<int> backward = backward_order(micro_batches);
    std::vector<std::int64_t> out(backward.size());
    for (std::size_t b = 0; b < backward.size(); ++b) out[static_cast<std::size_t>(backward[b])] = static_cast<std::int64_t>(b);
    return out;
  }

  static constexpr bool valid_by_construction = true;
  friend bool operator==(const chunk_one_f_one_b&, const chunk_one_f_one_b&) = default;
};
static_assert(pipeline_schedule_policy<chunk_one_f_one_b> && schedule_valid_by_construction<chunk_one_f_one_b>);

ZEPPELIN_NAMESPACE_END
