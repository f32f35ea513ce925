// zeppelin/core/plan.hpp
// The output of a partitioner and the input of schedules, executors and the simulator:
// which token ranges of which sequence live on which rank, in which ring group.
//   plan.placements[r].shards : shards held by rank r, in the order the rank stores them
//   plan.groups[g]            : ring group g (id == g), its zone, ranks in ring order and the
//                               collective its members run (ring or all-gather)
// A shard with group == no_group belongs to a sequence held entirely by one rank.
// Plain data; validate() (core/validate.hpp) checks every invariant; fingerprint()
// (core/fingerprint.hpp) hashes it for cross-rank checks. nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Where a ring group's traffic goes (Zeppelin section 3.1).
enum class zone_kind : std::uint8_t {
  local = 0,       //!< one rank, no communication
  intra_node = 1,  //!< ring inside one node (NVLink)
  inter_node = 2,  //!< ring across nodes (NICs)
};

[[nodiscard]] constexpr std::string_view to_string(zone_kind z) noexcept {
  switch (z) {
    case zone_kind::local: return "local";
    case zone_kind::intra_node: return "intra";
    case zone_kind::inter_node: return "inter";
  }
  return "?";
}

//! How the members of a group exchange K/V for attention (Zeppelin section 3.2; the
//! baselines' LLaMA-3 CP). A property of the group, set by the partitioner.
enum class collective_kind : std::uint8_t {
  ring = 0,        //!< G rounds of point-to-point K/V passing overlapped with compute (TE CP "P2P")
  all_gather = 1,  //!< gather every member's K/V first, one attention call, reduce-scatter dK/dV
  all_to_all = 2,  //!< Ulysses: all-to-all Q, K, V from the sequence layout to the head layout
                   //!< (each member all the group's tokens for its share of the heads), attention
                   //!< per head share, all-to-all O and LSE back (DeepSpeed-Ulysses)
};

[[nodiscard]] constexpr std::string_view to_string(collective_kind c) noexcept {
  switch (c) {
    case collective_kind::ring: return "ring";
    case collective_kind::all_gather: return "all_gather";
    case collective_kind::all_to_all: return "all_to_all";
  }
  return "?";
}

using group_index = std::int32_t;
inline constexpr group_index no_group = -1;

//! A contiguous token range of one sequence stored on one rank.
struct shard {
  sequence_index seq = 0;      //!< index into the batch
  token_range range{};         //!< [begin, end) positions inside the sequence
  group_index group = no_group;  //!< ring group, or no_group for a sequence on one rank
  std::int32_t micro_batch = 0;  //!< micro-batch the shard runs in (0 for single-pass plans)
  friend constexpr bool operator==(const shard&, const shard&) = default;
};

//! The ranks that run one ring (or all-gather) over the sequences that name it.
struct ring_group {
  group_index id = 0;
  zone_kind zone = zone_kind::local;
  std::vector<rank_index> ranks{};  //!< ring order: rank i sends KV to ranks[(i+1) % size]
  collective_kind collective = collective_kind::ring;  //!< how the members exchange K/V
  friend bool operator==(const ring_group&, const ring_group&) = default;
};

//! What one rank holds.
struct placement {
  std::vector<shard> shards{};

  [[nodiscard]] token_count tokens() const noexcept {
    token_count n = 0;
    for (const auto& s : shards) n += s.range.size();
    return n;
  }
  friend bool operator==(const placement&, const placement&) = default;
};

//! Why a partitioner wrote a note: a decision the user may want to act on.
enum class note_kind : std::uint8_t {
  proportional_split = 0,   //!< inter-node sequences need more whole nodes than exist: split over shared nodes
  streamed_split = 1,       //!< the proportional split broke the capacity: inter-node sequences laid end to end
  inter_node_spill = 2,     //!< sequences that fit no node whole, split over the nodes with the most room
  intra_node_spill = 3,     //!< sequences that fit no GPU whole, split over the GPUs of their node
  metric_allocation = 4,    //!< the load metric (not token counts) governed the allocation
  contiguous_fallback = 5,  //!< the last resort: the token stream cut into equal contiguous pieces
  extra_micro_batches = 6,  //!< the batch needed more than one micro-batch
  other = 7,
};

[[nodiscard]] constexpr std::string_view to_string(note_kind k) noexcept {
  switch (k) {
    case note_kind::proportional_split: return "proportional_split";
    case note_kind::streamed_split: return "streamed_split";
    case note_kind::inter_node_spill: return "inter_node_spill";
    case note_kind::intra_node_spill: return "intra_node_spill";
    case note_kind::metric_allocation: return "metric_allocation";
    case note_kind::contiguous_fallback: return "contiguous_fallback";
    case note_kind::extra_micro_batches: return "extra_micro_batches";
    case note_kind::other: return "other";
  }
  return "?";
}

//! A named number behind a note (e.g. {"micro_batches", 3}).
struct note_value {
  std::string name;
  double value = 0;
  friend bool operator==(const note_value&, const note_value&) = default;
};

//! A decision worth telling the user, for people (text) and for programs (the rest).
struct plan_note {
  note_kind kind = note_kind::other;
  std::string text;                         //!< one sentence
  std::vector<sequence_index> sequences{};  //!< the sequences it concerns, ascending; empty: the whole plan
  std::vector<note_value> values{};
  friend bool operator==(const plan_note&, const plan_note&) = default;
};

struct plan {
  std::string method;                 //!< partitioner name, e.g. "hierarchical"
  int nodes = 0;
  int gpus_per_node = 0;
  token_count capacity = 0;           //!< tokens a rank may hold per micro-batch
  std::vector<placement> placements;  //!< one per rank, node-major
  std::vector<ring_group> groups;     //!< groups[g].id == g
  std::vector<plan_note> notes;       //!< decisions worth telling the user (fallbacks taken)

  [[nodiscard]] rank_index num_ranks() const noexcept { return static_cast<rank_index>(placements.size()); }
  //! 1 + the largest micro_batch of any shard (1 for an empty plan); INT32_MAX for a shard
  //! at INT32_MAX, a plan check_plan_indices (core/plan_indices.hpp) refuses.
  [[nodiscard]] std::int32_t micro_batches() const noexcept {
    std::int32_t m = 0;
    for (const auto& p : placements)
      for (const auto& s : p.shards) m = s.micro_batch > m ? s.micro_batch : m;
    return m == 0x7fff'ffff ? m : m + 1;
  }
  friend bool operator==(const plan&, const plan&) = default;
};

ZEPPELIN_NAMESPACE_END
