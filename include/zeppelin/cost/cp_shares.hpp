// zeppelin/cost/cp_shares.hpp
// The attention work each rank of a context-parallel (CP) group does under the zigzag
// (load-balanced) sharding of TransformerEngine's context parallelism, which Megatron-LM uses.
//   in : document lengths (one micro-batch; attention never crosses documents), CP degree cp
//   out: one cp_share (core/micro_batch.hpp) per CP rank: the query tokens it owns and the
//        causal (query, key) pairs its attention computes, summed over the documents
// Sharding: every document of n tokens is cut into 2*cp consecutive chunks, chunk i holding
// n / (2cp) tokens plus one when i < n % (2cp) (exact for any n, also n < 2cp, where the
// last chunks are empty). Rank r owns chunks r and 2cp-1-r, so an early (cheap) chunk pairs
// with a late (expensive) one. Its pairs are those of its query chunks against every key of
// the same document at or before them: causal_pairs(chunk, [0, chunk.end)). The shares hold
// every token and every pair of the micro-batch exactly once:
//   sum_r tokens_r = sum_d n_d,   sum_r pairs_r = sum_d n_d (n_d + 1) / 2.
// Errors: invalid_argument for cp < 1, a document length outside [1, max_sequence_length],
// or (micro_batch_cp_shares) explicit shares whose count is not cp.
// Host-only (std::vector); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/cp_sharding.hpp>

#include <cstddef>
#include <initializer_list>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Per-CP-rank (tokens, causal pairs) of the zigzag sharding of `documents` over `cp` ranks
//! (see the file header). cp == 1 gives one share holding everything. Throws
//! invalid_argument for cp < 1 or a length outside [1, max_sequence_length].
[[nodiscard]] inline std::vector<cp_share> zigzag_cp_shares(std::span<const token_count> documents, int cp) {
  return shares_of(per_document_sharding{}.segments(documents, cp));
}

//! The shares a stage cost model prices for `mb` on a CP group of `cp` ranks: mb.cp_shares
//! when the planner wrote them, else zigzag_cp_shares(mb.documents, cp). Validates `mb`
//! (core/micro_batch.hpp) and throws invalid_argument for cp < 1 or explicit shares whose
//! count is not cp.
[[nodiscard]] inline std::vector<cp_share> micro_batch_cp_shares(const micro_batch& mb, int cp) {
  validate(mb);
  ZEPPELIN_EXPECTS(cp >= 1, "the CP degree must be at least 1", {{"cp", double(cp)}});
  if (mb.cp_shares.empty()) return zigzag_cp_shares(mb.documents, cp);
  ZEPPELIN_EXPECTS(mb.cp_shares.size() == static_cast<std::size_t>(cp), "a micro-batch needs one CP share per CP rank",
                   {{"shares", double(mb.cp_shares.size())}, {"cp", double(cp)}});
  return mb.cp_shares;
}

ZEPPELIN_NAMESPACE_END
