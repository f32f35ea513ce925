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
// every item is placed after at most one raise; and T_t only rises (every token-feasible
// bucket was above it). The queries go through pack/detail/bucket_index.hpp, which answers
// as the plain scan over the buckets would, in O(log buckets) typical time.
// Errors: none (the caller checks its input). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/pack/detail/bucket_index.hpp>

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

//! Places `items` in order (see the file header); returns the final T_t. The bucket queries
//! go through a bucket_index: O(items x log buckets) typical.
inline double best_fit_decreasing(std::vector<chunk_bucket>& buckets, std::span<const bucket_item> items, double open_time,
                                  double time_threshold, token_count token_threshold) {
  buckets.reserve(buckets.size() + items.size());
  bucket_index<chunk_bucket> index(buckets);
  for (const bucket_item& item : items) {
    const token_count tokens = item.slice.tokens();
    const std::size_t fewest = index.fewest();
    if (fewest == index.npos || buckets[fewest].tokens + tokens > token_threshold) {
      buckets.push_back({open_time + item.time, tokens, {item.slice}});
      index.push();
      continue;
    }
    bucket_fit fit{tokens, item.time, token_threshold, time_threshold};
    std::size_t chosen = index.first_fit(fit);
    if (chosen == index.npos) {
      // The raise: the least time + item time over the token-feasible buckets (fewest is one).
      time_threshold = fit.time_threshold = index.least_time(fit);
      chosen = index.first_fit(fit);  // finds the bucket that set the threshold, or one before it in priority
    }
    chunk_bucket& b = buckets[chosen];
    b.time += item.time;
    b.tokens += tokens;
    b.slices.push_back(item.slice);
    index.update(chosen);
  }
  return time_threshold;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
