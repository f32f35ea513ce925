// zeppelin/cost/varlen_attention_time.hpp
// Time of ONE varlen attention call over several sequences (cost/cp_sharding.hpp segments).
//   in : an attention_time_model, the call's segments {query rows, causal pairs}, query
//        heads and head dim
//   out: seconds, forward or backward
// FlashAttention's varlen kernels tile each sequence's query rows separately, so a segment
// of rows executes FLOPs(pairs) x padded(rows) / rows (attention_time_model.hpp's padding
// rule, segment by segment); the call runs at the table's rate for its total padded rows.
// One segment gives exactly attention_time_model::forward_seconds / backward_seconds. Many
// segments shorter than a tile pay for the rows they leave empty: what WLB-LLM's adaptive
// CP sharding weighs (its Fig. 10: latency flat below 128 query rows).
// Errors: what attention_time_model's checks throw (negative counts, pairs without rows,
// heads or head_dim < 1). Host-only; nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/cp_sharding.hpp>

#include <span>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
template <bool Backward>
double varlen_seconds(const attention_time_model& m, std::span<const attention_segment> segments, int heads, int head_dim) {
  double flops = 0;
  token_count padded = 0;
  for (const attention_segment& s : segments) {
    flops += Backward ? m.backward_flops(s.rows, s.pairs, heads, head_dim) : m.forward_flops(s.rows, s.pairs, heads, head_dim);
    if (s.pairs > 0) padded += m.padded_rows(s.rows);
  }
  if (flops == 0) return 0.0;
  return flops / (Backward ? m.backward : m.forward).at(static_cast<double>(padded));
}
}  // namespace detail

[[nodiscard]] inline double varlen_forward_seconds(const attention_time_model& m, std::span<const attention_segment> segments, int heads,
                                                   int head_dim) {
  return detail::varlen_seconds<false>(m, segments, heads, head_dim);
}
[[nodiscard]] inline double varlen_backward_seconds(const attention_time_model& m, std::span<const attention_segment> segments, int heads,
                                                    int head_dim) {
  return detail::varlen_seconds<true>(m, segments, heads, head_dim);
}

ZEPPELIN_NAMESPACE_END
