// zeppelin/schedule/block_mask.hpp
// The mask of one attention block (queries Q x keys K of ONE sequence, by token position):
//   none   : no key precedes any query; the block is skipped (0 pairs)
//   causal : key k is visible to query q iff k <= q (absolute positions)
//   full   : every key is visible to every query
// block_pairs() counts the (query, key) pairs a block computes; classify_block() derives
// the mask from positions alone.
// nvcc-safe: ZEPPELIN_HOST_DEVICE constexpr.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! Mask of an attention block; `none` means the block is skipped.
enum class block_mask : std::uint8_t { none = 0, causal = 1, full = 2 };

[[nodiscard]] constexpr std::string_view to_string(block_mask m) noexcept {
  switch (m) {
    case block_mask::none: return "none";
    case block_mask::causal: return "causal";
    case block_mask::full: return "full";
  }
  return "?";
}

//! (query, key) pairs a block of queries `q` and keys `k` computes under `mask`:
//! 0 for none, causal_pairs(q, k) for causal, |q| * |k| for full.
ZEPPELIN_HOST_DEVICE constexpr std::int64_t block_pairs(token_range q, token_range k, block_mask mask) noexcept {
  switch (mask) {
    case block_mask::causal: return causal_pairs(q, k);
    case block_mask::full: return full_pairs(q, k);
    case block_mask::none: break;
  }
  return 0;
}

//! The cheapest exact mask of the block (q, k) of one sequence under causal attention:
//! none when no key precedes or equals any query (or a range is empty), full when every key
//! precedes or equals every query (k.end - 1 <= q.begin), causal otherwise.
ZEPPELIN_HOST_DEVICE constexpr block_mask classify_block(token_range q, token_range k) noexcept {
  if (q.empty() || k.empty() || k.begin > q.end - 1) return block_mask::none;
  if (k.end - 1 <= q.begin) return block_mask::full;
  return block_mask::causal;
}

ZEPPELIN_NAMESPACE_END
