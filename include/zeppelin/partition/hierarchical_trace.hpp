// zeppelin/partition/hierarchical_trace.hpp
// What the hierarchical partitioner decided, beside its plan (partition/hierarchical.hpp):
// the zone thresholds it used, which fallbacks and splits it took, and where every sequence
// went. For tests, tools and tuning; the plan alone is what executes. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The decisions behind one hierarchical plan.
struct hierarchical_trace {
  //! Inter-node threshold s1: z2 = sequences with length >= s1 (P * L: overflowing sequences
  //! are split, not moved to z2 by lowering s1).
  token_count inter_threshold = 0;
  //! Passes of Alg. 1 (1: the spill replaced the paper's restart loop).
  std::int32_t inter_passes = 0;
  //! z2 was laid out by the proportional rank split (sum ceil(|s| / s_avg) > N).
  bool proportional = false;
  //! The contiguous fallback was taken.
  bool contiguous = false;
  //! Intra-node threshold s0 per node (z0 = sequences of the node shorter than it; L, as
  //! local sequences that fit no GPU are split rather than lowering s0; 0 when contiguous).
  std::vector<token_count> local_threshold;
  //! Per sequence: its node when in z01 and placed whole on a node, -1 when in z2, split over
  //! nodes (inter_spilled) or contiguous.
  std::vector<std::int32_t> node_of_sequence;
  //! z01 sequences that fit no node whole, split over the nodes with room (batch indices, ascending).
  std::vector<sequence_index> inter_spilled;
  //! Sequences split by room inside their node: local ones that fit no GPU whole, intra-node
  //! ones whose equal zigzag fits no k GPUs (batch indices, ascending).
  std::vector<sequence_index> intra_spilled;
  //! The proportional split needed more than L on a rank: z2 was laid end to end over the ranks.
  bool streamed = false;
  //! The node allocation that sized the rings and chose nodes and GPUs (its `name`:
  //! "tokens" for token_allocation, "metric" for metric_allocation).
  std::string_view allocation;
  friend bool operator==(const hierarchical_trace&, const hierarchical_trace&) = default;
};

ZEPPELIN_NAMESPACE_END
