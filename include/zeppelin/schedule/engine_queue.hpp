// zeppelin/schedule/engine_queue.hpp
// The execution order of the attention engine on each rank (Zeppelin 3.2).
// In : a plan.
// Out: per rank, its attention tasks in the order the engine runs them:
//      micro-batch ascending, then the inter-node queue (ring groups spanning nodes, by group
//      id), the intra-node queue (ring groups inside a node, by group id), and last the local
//      queue (sequences held by this rank alone, by sequence index). Inter-node rings start
//      first because their rounds are the slowest to hide; local work needs no communication
//      and fills the tail. A group of zone `local` (one rank) runs its sequences as local tasks.
// Each task lists the indices of the rank's shards it consumes (placement order), so every
// shard of the rank appears in exactly one task.
// Host-only (std::vector); no range-v3, so nvcc compiles it in host code.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One unit of attention work on one rank.
struct engine_task {
  zone_kind zone = zone_kind::local;  //!< queue: inter_node, intra_node or local
  std::int32_t micro_batch = 0;
  group_index group = no_group;       //!< the ring group (rings), or the shard's group / no_group (local)
  sequence_index seq = -1;            //!< the sequence (local tasks); -1 for a ring task (it covers all its sequences)
  std::vector<std::int32_t> shards;   //!< indices into plan.placements[rank].shards, ascending
  friend bool operator==(const engine_task&, const engine_task&) = default;
};

//! The ordered tasks of one rank.
struct engine_queue {
  rank_index rank = 0;
  std::vector<engine_task> tasks;
  friend bool operator==(const engine_queue&, const engine_queue&) = default;
};

//! Queue rank of a zone: inter-node runs first (0), intra-node next (1), local last (2).
[[nodiscard]] constexpr int queue_order(zone_kind z) noexcept {
  return z == zone_kind::inter_node ? 0 : z == zone_kind::intra_node ? 1 : 2;
}

//! The engine queue of rank `r` of plan `p`. Throws invalid_argument when r is out of range or a
//! shard names a group the plan does not have.
[[nodiscard]] inline engine_queue make_engine_queue(const plan& p, rank_index r) {
  ZEPPELIN_EXPECTS(r >= 0 && r < p.num_ranks(), "engine queue: rank out of range",
                   {{"rank", static_cast<double>(r)}, {"ranks", static_cast<double>(p.num_ranks())}});
  const auto& shards = p.placements[static_cast<std::size_t>(r)].shards;
  // (micro_batch, queue, group or sequence key) -> task; built as sorted keyed entries
  struct keyed {
    std::int32_t micro_batch;
    int queue;
    std::int64_t key;  // group id for rings, sequence index for local work
    std::int32_t shard;
  };
  std::vector<keyed> items;
  items.reserve(shards.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const shard& sh = shards[i];
    zone_kind z = zone_kind::local;
    if (sh.group != no_group) {
      ZEPPELIN_EXPECTS(sh.group >= 0 && sh.group < static_cast<group_index>(p.groups.size()),
                       "engine queue: shard names an unknown group",
                       {{"rank", static_cast<double>(r)}, {"shard", static_cast<double>(i)}, {"group", static_cast<double>(sh.group)}});
      z = p.groups[static_cast<std::size_t>(sh.group)].zone;
    }
    const int q = queue_order(z);
    items.push_back({sh.micro_batch, q, q == 2 ? std::int64_t{sh.seq} : std::int64_t{sh.group}, static_cast<std::int32_t>(i)});
  }
  std::sort(items.begin(), items.end(), [](const keyed& a, const keyed& b) {
    return std::tie(a.micro_batch, a.queue, a.key, a.shard) < std::tie(b.micro_batch, b.queue, b.key, b.shard);
  });

  engine_queue out;
  out.rank = r;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const keyed& it = items[i];
    const bool same = i > 0 && items[i - 1].micro_batch == it.micro_batch && items[i - 1].queue == it.queue &&
                      items[i - 1].key == it.key;
    if (!same) {
      const shard& sh = shards[static_cast<std::size_t>(it.shard)];
      engine_task t;
      t.micro_batch = it.micro_batch;
      if (it.queue == 2) {
        t.zone = zone_kind::local;
        t.group = sh.group;
        t.seq = sh.seq;
      } else {
        t.zone = p.groups[static_cast<std::size_t>(sh.group)].zone;
        t.group = sh.group;
      }
      out.tasks.push_back(std::move(t));
    }
    out.tasks.back().shards.push_back(it.shard);
  }
  return out;
}

//! make_engine_queue for every rank, indexed by rank.
[[nodiscard]] inline std::vector<engine_queue> make_engine_queues(const plan& p) {
  std::vector<engine_queue> out;
  out.reserve(static_cast<std::size_t>(p.num_ranks()));
  for (rank_index r = 0; r < p.num_ranks(); ++r) out.push_back(make_engine_queue(p, r));
  return out;
}

ZEPPELIN_NAMESPACE_END
