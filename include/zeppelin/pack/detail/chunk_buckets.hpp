// zeppelin/pack/detail/chunk_buckets.hpp
// The packing phase of InfiniPipe's workload-balanced chunking (Wang et al., "InfiniPipe:
// Elastic Pipeline Parallelism for Efficient Variable-Length Long-Context LLM Training",
// Algorithm 1, lines 3-16): best-fit decreasing of whole short sequences into buckets under
// a time threshold T_t and a token threshold T_m.
//   in : the buckets so far (one per tail slice, in order), the items (short sequences)
//        already sorted by time, longest first, the fixed time a new bucket starts with,
//        T_t and T_m
//   out: the items appended to the buckets (new buckets at the end, in opening order);
//        the final T_t
// Rule, per item: if even the bucket with the fewest tokens cannot take its tokens (or
// there is no bucket), it opens a new bucket. Otherwise it goes to the first bucket in
// priority order (lowest time / tokens, the paper's "proportion of long sequences"; ties:
// fewer tokens, then lower index) with time + item time <= T_t and tokens + item tokens
// <= T_m. If there is none, T_t rises to the least (time + item time) over the buckets
// whose tokens fit, and the rule is applied again (it now places the item).
// Termination: the paper's line 16 raises T_t to min over ALL buckets of (time + item
// time); when that bucket is token-infeasible and every token-feasible bucket is slower, no
// bucket ever fits and the retry loops forever (it can even lower T_t). Taking the minimum
// over the token-feasible buckets (non-empty: the fewest-tokens bucket fits, or a new
// bucket was opened) makes that bucket fit at once, with the same floating-point sum, so
// every item is placed after at most one raise: O(items x buckets); and T_t only rises
// (every token-feasible bucket was above it).
// Errors: none (the caller checks its input). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/core/chunk.hpp>

#include <cstddef>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! A bucket: its time (the chunk's fixed time plus its slices' marginal times), its tokens
//! and its slices (a tail slice first, when it has one).
struct chunk_bucket {
  double time = 0;
  token_count tokens = 0;
  std::vector<chunk_slice> slices;
  friend bool operator==(const chunk_bucket&, const chunk_bucket&) = default;
};

//! A whole short sequence with its marginal time.
struct bucket_item {
  double time = 0;
  chunk_slice slice;
};

//! True when bucket a comes before bucket b in the priority order (lower time per token,
//! then fewer tokens; the caller breaks the remaining ties by index).
[[nodiscard]] inline bool precedes(const chunk_bucket& a, const chunk_bucket& b) noexcept {
  const double x = a.time * static_cast<double>(b.tokens), y = b.time * static_cast<double>(a.tokens);
  return x != y ? x < y : a.tokens < b.tokens;
}

//! Places `items` in order (see the file header); returns the final T_t.
inline double best_fit_decreasing(std::vector<chunk_bucket>& buckets, std::span<const bucket_item> items, double open_time,
                                  double time_threshold, token_count token_threshold) {
  for (const bucket_item& item : items) {
    const token_count tokens = item.slice.tokens();
    const auto token_fits = [&](const chunk_bucket& b) { return b.tokens + tokens <= token_threshold; };
    std::size_t fewest = 0;
    for (std::size_t i = 1; i < buckets.size(); ++i)
      if (buckets[i].tokens < buckets[fewest].tokens) fewest = i;
    if (buckets.empty() || !token_fits(buckets[fewest])) {
      buckets.push_back({open_time + item.time, tokens, {item.slice}});
      continue;
    }
    const auto first_fit = [&] {
      std::size_t chosen = buckets.size();
      for (std::size_t i = 0; i < buckets.size(); ++i) {
        const chunk_bucket& b = buckets[i];
        if (token_fits(b) && b.time + item.time <= time_threshold && (chosen == buckets.size() || precedes(b, buckets[chosen])))
          chosen = i;
      }
      return chosen;
    };
    std::size_t chosen = first_fit();
    if (chosen == buckets.size()) {
      // The raise: the least time + item time over the token-feasible buckets (fewest is one).
      time_threshold = buckets[fewest].time + item.time;
      for (const chunk_bucket& b : buckets)
        if (token_fits(b) && b.time + item.time < time_threshold) time_threshold = b.time + item.time;
      chosen = first_fit();  // finds the bucket that set the threshold, or one before it in priority
    }
    chunk_bucket& b = buckets[chosen];
    b.time += item.time;
    b.tokens += tokens;
    b.slices.push_back(item.slice);
  }
  return time_threshold;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
