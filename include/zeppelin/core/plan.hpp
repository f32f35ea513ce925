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

struct plan {
  std::string method;                 //!< partitioner name, e.g. "hierarchical"
  int nodes = 0;
  int gpus_per_node = 0;
  token_count capacity = 0;           //!< tokens a rank may hold per micro-batch
  std::vector<placement> placements;  //!< one per rank, node-major
  std::vector<ring_group> groups;     //!< groups[g].id == g
  std::vector<std::string> notes;     //!< decisions worth telling the user (fallbacks taken)

  [[nodiscard]] rank_index num_ranks() const noexcept { return static_cast<rank_index>(placements.size()); }
  //! 1 + the largest micro_batch of any shard (1 for an empty plan).
  [[nodiscard]] std::int32_t micro_batches() const noexcept {
    std::int32_t m = 0;
    for (const auto& p : placements)
      for (const auto& s : p.shards) m = s.micro_batch > m ? s.micro_batch : m;
    return m + 1;
  }
  friend bool operator==(const plan&, const plan&) = default;
};

ZEPPELIN_NAMESPACE_END
