// zeppelin/core/rank_view.hpp
// One rank's part of a plan, for the code that runs on that rank: what it holds and, per group
// it belongs to, where it sits and whom it talks to.
//   in : a plan (core/plan.hpp) and a rank r
//   out: rank_view: r's node and local GPU; its shards in storage order and its tokens per
//        micro-batch; per group that lists r or that one of r's shards names (ascending id): zone, collective, r's
//        position in the ring order, the group size, the previous and next member in ring
//        order (who sends r its K/V in round 1 and whom r sends to), the sequences r holds
//        in that group and its tokens of them
// The view is derived, never stored: plan stays the one source of truth. O(plan size): the
// plan's indices are checked first (core/plan_indices.hpp), so a forged or hand-built plan
// is refused, never read out of bounds. Throws invalid_argument for a rank outside the plan,
// an index out of range, or a shard in a group that does not list r. nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/plan_indices.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A rank's place in one group of the plan.
struct group_membership {
  group_index group = no_group;
  zone_kind zone = zone_kind::local;
  collective_kind collective = collective_kind::ring;
  std::int32_t position = 0;  //!< index of the rank in group.ranks (ring order)
  std::int32_t size = 0;      //!< members
  rank_index previous = 0;    //!< ranks[(position - 1) mod size]: sends this rank K/V in a ring
  rank_index next = 0;        //!< ranks[(position + 1) mod size]: receives this rank's K/V in a ring
  std::vector<sequence_index> sequences{};  //!< the group's sequences this rank holds a shard of, ascending
  token_count tokens = 0;                   //!< this rank's tokens in the group
  friend bool operator==(const group_membership&, const group_membership&) = default;
};

//! One rank's part of a plan (see the file comment).
struct rank_view {
  rank_index rank = 0;
  int node = 0;
  int local_gpu = 0;
  std::vector<shard> shards{};                       //!< storage order (the plan's)
  std::vector<token_count> tokens_per_micro_batch{};  //!< size plan.micro_batches()
  std::vector<group_membership> groups{};            //!< ascending group id
  friend bool operator==(const rank_view&, const rank_view&) = default;

  [[nodiscard]] token_count tokens() const noexcept {
    token_count n = 0;
    for (const token_count t : tokens_per_micro_batch) n += t;
    return n;
  }
};

//! The view of rank `r` of plan `p`.
[[nodiscard]] inline rank_view rank_view_of(const plan& p, rank_index r) {
  check_plan_indices(p, "rank view");
  ZEPPELIN_EXPECTS(r >= 0 && r < p.num_ranks() && p.gpus_per_node >= 1, "rank view: no such rank in the plan",
                   {{"rank", double(r)}, {"ranks", double(p.num_ranks())}});
  rank_view v;
  v.rank = r;
  v.node = r / p.gpus_per_node;
  v.local_gpu = r % p.gpus_per_node;
  v.shards = p.placements[static_cast<std::size_t>(r)].shards;
  v.tokens_per_micro_batch.assign(static_cast<std::size_t>(p.micro_batches()), 0);
  std::vector<group_index> ids;
  for (const shard& s : v.shards) {  // indices checked above
    v.tokens_per_micro_batch[static_cast<std::size_t>(s.micro_batch)] += s.range.size();
    if (s.group != no_group) ids.push_back(s.group);
  }
  for (const ring_group& g : p.groups)  // a member may hold no shard of its group
    if (std::find(g.ranks.begin(), g.ranks.end(), r) != g.ranks.end()) ids.push_back(g.id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (const group_index id : ids) {
    const ring_group& g = p.groups[static_cast<std::size_t>(id)];
    const auto at = std::find(g.ranks.begin(), g.ranks.end(), r);
    ZEPPELIN_EXPECTS(at != g.ranks.end(), "rank view: the rank holds a shard of a group that does not list it",
                     {{"rank", double(r)}, {"group", double(id)}});
    group_membership m;
    m.group = id;
    m.zone = g.zone;
    m.collective = g.collective;
    m.position = static_cast<std::int32_t>(at - g.ranks.begin());
    m.size = static_cast<std::int32_t>(g.ranks.size());
    m.previous = g.ranks[static_cast<std::size_t>((m.position + m.size - 1) % m.size)];
    m.next = g.ranks[static_cast<std::size_t>((m.position + 1) % m.size)];
    for (const shard& s : v.shards)
      if (s.group == id) {
        m.sequences.push_back(s.seq);
        m.tokens += s.range.size();
      }
    std::sort(m.sequences.begin(), m.sequences.end());
    m.sequences.erase(std::unique(m.sequences.begin(), m.sequences.end()), m.sequences.end());
    v.groups.push_back(std::move(m));
  }
  return v;
}

ZEPPELIN_NAMESPACE_END
