// zeppelin/partition/capacity.hpp
// The capacity L (tokens a GPU may hold per micro-batch) to plan a batch with when the user
// has no memory-derived figure: the batch's mean tokens per GPU plus a headroom.
//   in : batch, topology, slack s >= 0 (default default_capacity_slack = 1/8)
//   out: ceil(ceil(T / G) x (1 + s)) tokens, T the batch's tokens and G the topology's ranks
// The headroom is what lets an attention-balancing partitioner (hierarchical) trade tokens
// for balance and a remapping layer move them (planner/method_spec.hpp explains the 1/8 of the
// evaluation); at s = 0 every rank is filled exactly. Throws invalid_argument for a negative or
// non-finite slack and when the capacity would pass 2^62 tokens. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>

#include <cmath>

ZEPPELIN_NAMESPACE_BEGIN

//! The headroom the evaluation's methods and the tool plan with.
inline constexpr double default_capacity_slack = 1.0 / 8;

//! Tokens per GPU that hold `b` on `t` with `slack` headroom (see the file comment).
[[nodiscard]] inline token_count balanced_capacity(const batch& b, const topology& t, double slack = default_capacity_slack) {
  ZEPPELIN_EXPECTS(std::isfinite(slack) && slack >= 0, "the capacity slack must be finite and non-negative", {{"slack", slack}});
  const token_count ranks = t.num_ranks();
  const token_count mean = b.total_tokens() / ranks + (b.total_tokens() % ranks != 0);
  const double capacity = std::ceil(static_cast<double>(mean) * (1 + slack));
  ZEPPELIN_EXPECTS(capacity < 0x1p62, "the batch's tokens per GPU x (1 + slack) must stay below 2^62",
                   {{"tokens", double(b.total_tokens())}, {"ranks", double(ranks)}, {"slack", slack}});
  return capacity < 1 ? 1 : static_cast<token_count>(capacity);
}

ZEPPELIN_NAMESPACE_END
