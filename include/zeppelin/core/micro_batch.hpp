// zeppelin/core/micro_batch.hpp
// One micro-batch of a pipeline: the documents packed into it (lengths, attention never
// crosses documents) and, optionally, how its context-parallel group shares the work.
//   in : document lengths (each 1 .. max_sequence_length), optional per-CP-rank shares
//   out: tokens(), and the shares the stage cost model prices (empty = the cost model's
//        default sharding, zigzag; cost/cp_shares.hpp)
// A cp_share is what ONE rank of the CP group computes for this micro-batch: the query
// tokens it owns and the causal (query, key) pairs its attention covers, summed over the
// documents. A planner that shards differently (Zeppelin's hierarchical partitioner, per
// document CP) writes its own shares.
// Errors: validate() throws invalid_argument for an empty micro-batch, a length outside
// [1, max_sequence_length], or shares whose tokens do not add up to tokens().
// nvcc-safe.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The attention work one CP rank does for one micro-batch.
struct cp_share {
  token_count tokens = 0;   //!< query tokens this rank owns
  std::int64_t pairs = 0;   //!< causal (query, key) pairs its attention computes
  friend bool operator==(const cp_share&, const cp_share&) = default;
};

struct micro_batch {
  std::vector<token_count> documents;  //!< document lengths, in packing order
  std::vector<cp_share> cp_shares;     //!< one per CP rank, or empty for the default sharding

  [[nodiscard]] token_count tokens() const noexcept {
    token_count t = 0;
    for (const token_count d : documents) t += d;
    return t;
  }
  friend bool operator==(const micro_batch&, const micro_batch&) = default;
};

//! Throws invalid_argument for an empty micro-batch, a document length outside
//! [1, max_sequence_length], negative shares, or shares whose tokens do not sum to tokens().
inline void validate(const micro_batch& mb) {
  ZEPPELIN_EXPECTS(!mb.documents.empty(), "a micro-batch needs at least one document", {});
  token_count total = 0;
  for (const token_count d : mb.documents) {
    ZEPPELIN_EXPECTS(d >= 1 && d <= max_sequence_length, "a document length must lie in [1, max_sequence_length]",
                     {{"length", double(d)}, {"max_sequence_length", double(max_sequence_length)}});
    total += d;
    ZEPPELIN_EXPECTS(total <= max_sequence_length, "a micro-batch holds at most max_sequence_length tokens",
                     {{"tokens", double(total)}});
  }
  if (mb.cp_shares.empty()) return;
  token_count shared = 0;
  for (const cp_share& s : mb.cp_shares) {
    ZEPPELIN_EXPECTS(s.tokens >= 0 && s.pairs >= 0, "a CP share cannot be negative",
                     {{"tokens", double(s.tokens)}, {"pairs", double(s.pairs)}});
    shared += s.tokens;
  }
  ZEPPELIN_EXPECTS(shared == total, "the CP shares of a micro-batch must hold all its tokens",
                   {{"shared_tokens", double(shared)}, {"micro_batch_tokens", double(total)}});
}

ZEPPELIN_NAMESPACE_END
