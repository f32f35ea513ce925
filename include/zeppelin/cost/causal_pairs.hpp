// zeppelin/cost/causal_pairs.hpp
// Exact count of causal (query, key) pairs between two token ranges of ONE sequence:
//   pairs(Q, K) = #{ (q, k) : q in [Q.begin, Q.end), k in [K.begin, K.end), k <= q }
// O(1) closed form, no loops. Also the full (unmasked) count |Q| * |K|, and the pairs of Q
// against every earlier key of its sequence.
// nvcc-safe: ZEPPELIN_HOST_DEVICE constexpr.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

//! Causal pairs between query positions `q` and key positions `k` of one sequence.
//! Empty or reversed ranges count 0. Exact for positions up to max_sequence_length
//! (core/batch.hpp: 3037000499, which every batch enforces).
ZEPPELIN_HOST_DEVICE constexpr std::int64_t causal_pairs(token_range q, token_range k) noexcept {
  if (q.empty() || k.empty()) return 0;
  const std::int64_t width = k.size();
  // Query rows inside the key range see (q - k.begin + 1) keys: an arithmetic series.
  const std::int64_t lo = q.begin > k.begin ? q.begin : k.begin;
  const std::int64_t hi = q.end < k.end ? q.end : k.end;
  std::int64_t pairs = 0;
  if (hi > lo) {
    const std::int64_t a = lo - k.begin, z = hi - k.begin;  // rows see a+1 .. z keys
    pairs += (z * (z + 1) - a * (a + 1)) / 2;
  }
  // Query rows at or past k.end see the whole key range.
  const std::int64_t past = q.end - (q.begin > k.end ? q.begin : k.end);
  if (past > 0) pairs += past * width;
  return pairs;
}

//! Causal pairs of a whole sequence of `length` tokens: length * (length + 1) / 2.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t causal_pairs(token_count length) noexcept {
  return length > 0 ? length * (length + 1) / 2 : 0;
}

//! Causal pairs of queries `q` against every earlier key of their sequence, causal_pairs(q,
//! [0, q.end)), as T(q.end) - T(q.begin) with T(n) = n (n + 1) / 2: what a shard's queries
//! compute wherever its keys come from, priced per shard by the planner's bounds.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t causal_pairs_from_start(token_range q) noexcept {
  return q.empty() ? 0 : causal_pairs(q.end) - causal_pairs(q.begin);
}

//! Pairs of an unmasked block: |q| * |k|.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t full_pairs(token_range q, token_range k) noexcept {
  return q.empty() || k.empty() ? 0 : q.size() * k.size();
}

ZEPPELIN_NAMESPACE_END
