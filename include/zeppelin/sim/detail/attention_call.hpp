// zeppelin/sim/detail/attention_call.hpp
// The price of ONE varlen attention call made of several (sequence, query rows, pairs) items.
//   in : items (part, sequence, query position range, causal pairs computed), the attention
//        model, heads, head dim
//   out: forward and backward seconds of the call, the forward FLOPs it executes (tile
//        padding included) and the pairs it computes
// A varlen FlashAttention launch tiles every sequence's query rows separately, so, with s
// running over the (part, sequence) pairs of the call (a part is the ring group an item
// comes from in a launch fused over several groups, sim_options::launch; items of different
// parts are never merged, so fusing launches never changes their padding):
//   rows_s     = size of the union of the query ranges of sequence s in the call
//   executed   = sum_s flops(pairs_s) * padded(rows_s) / rows_s      (per-sequence tile padding)
//   x_s        = max(padded(rows_s), sqrt(2 pairs_s - rows_s))        (causal-equivalent length)
//   rate       = table.at(sum_s x_s)                                  (the launch's total work)
// The throughput tables are profiles of CAUSAL calls, where a call of x rows computes about
// x^2 / 2 pairs; a ring block of r query rows against c > r earlier keys (full mask) does
// r c pairs, the work of a causal call of sqrt(2 r c) rows, and keeps the SMs as busy as
// one. Indexing by rows alone would price it like a call with r^2 / 2 pairs. (A causal call of
// L rows has 2 pairs - L = L^2, so x = padded(L) there.)
//   seconds    = executed / rate (forward), 2.5 x executed / backward rate (backward)
// One causal sequence in one call gives exactly attention_time_model::forward_seconds(rows,
// pairs) (2 pairs - rows = rows^2 for it).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/cost/attention_time_model.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct call_item {
  std::int32_t part = 0;  //!< tiled apart from the other parts (a fused launch: the group)
  sequence_index seq = 0;
  token_range q{};
  std::int64_t pairs = 0;
};

struct call_cost {
  double forward_s = 0;
  double backward_s = 0;
  double flops = 0;         //!< forward FLOPs executed, tile padding included (backward: x attention_backward_ratio)
  std::int64_t pairs = 0;   //!< (query, key) pairs computed per query head
};

//! x of one sequence's `rows` query rows and `pairs` pairs in a call (see the file comment).
[[nodiscard]] inline double causal_equivalent_rows(const attention_time_model& m, token_count rows, double pairs) {
  return std::max(static_cast<double>(m.padded_rows(rows)), std::sqrt(std::max(0.0, 2.0 * pairs - static_cast<double>(rows))));
}

//! Prices one call; `items` is reordered.
inline call_cost price_call(std::vector<call_item>& items, const attention_time_model& m, int heads, int head_dim) {
  std::sort(items.begin(), items.end(), [](const call_item& a, const call_item& b) {
    return a.part != b.part ? a.part < b.part : a.seq != b.seq ? a.seq < b.seq : a.q.begin < b.q.begin;
  });
  double executed = 0, x = 0;
  std::int64_t total_pairs = 0;
  std::size_t i = 0;
  while (i < items.size()) {
    const std::int32_t part = items[i].part;
    const sequence_index s = items[i].seq;
    token_count rows = 0;
    std::int64_t pairs = 0;
    token_count cover_end = -1;
    for (; i < items.size() && items[i].part == part && items[i].seq == s; ++i) {
      const call_item& it = items[i];
      pairs += it.pairs;
      const token_count b = std::max(it.q.begin, cover_end);
      if (it.q.end > b) rows += it.q.end - b;
      cover_end = std::max(cover_end, it.q.end);
    }
    if (pairs == 0) continue;
    total_pairs += pairs;
    executed += m.forward_flops(rows, pairs, heads, head_dim);
    x += causal_equivalent_rows(m, rows, static_cast<double>(pairs));
  }
  if (executed == 0) return {};
  return {executed / m.forward.at(x), attention_backward_ratio * executed / m.backward.at(x), executed, total_pairs};
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
