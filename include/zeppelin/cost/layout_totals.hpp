// zeppelin/cost/layout_totals.hpp
// What a layout puts where, summed: per (micro-batch, rank) the tokens it holds and the causal
// pairs of its shards outside groups, and per (group, micro-batch it serves, member) the
// tokens and causal pairs of the member's shards in that group. The planner's first bound
// (planner/plan_step_bound.hpp) reads nothing else of a plan, so a partitioner that can lay its
// plan out into these sums (partition/detail/plan_builder.hpp, layout_totals_store) is
// bounded without building its shards: 375K shards at 4M tokens over 1024 GPUs.
//   in : shards one by one (add), with the member's position in its group when the caller
//        knows it; or a whole plan (layout_totals_of)
//   out: the sums. A shard's pairs are its queries against every earlier key of its sequence
//        (causal_pairs_from_start), where the keys come from being the collective's business.
// Every sum is of integers held in doubles, exact below 2^53 (a causal-pair total of a batch
// below 2^53 pairs: 134M tokens in one sequence), so the sums do not depend on the order the
// shards come in. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct layout_totals {
  //! The micro-batches a group serves, one after another: each with its members' sums at
  //! [first, first + members) of member_tokens and member_pairs (position order).
  struct served {
    std::int32_t micro_batch = 0;
    std::size_t first = 0;
  };

  int nodes = 0;
  int gpus_per_node = 0;
  std::size_t ranks = 0;
  std::int32_t micro_batches = 1;   //!< 1 + the largest micro-batch of a shard
  std::vector<ring_group> groups;   //!< the layout's groups, groups[g].id == g
  std::vector<double> held;         //!< [micro_batch * ranks + rank]: tokens
  std::vector<double> loose_pairs;  //!< [micro_batch * ranks + rank]: pairs of its shards in no group
  std::vector<std::vector<served>> serves;  //!< [group]
  std::vector<double> member_tokens, member_pairs;

  layout_totals() = default;
  layout_totals(int nodes_, int gpus_per_node_, std::size_t ranks_)
      : nodes(nodes_), gpus_per_node(gpus_per_node_), ranks(ranks_), held(ranks_, 0.0), loose_pairs(ranks_, 0.0) {}

  //! Appends group `g` (g.id must be its index).
  void add_group(ring_group g) {
    ZEPPELIN_EXPECTS(g.id == static_cast<group_index>(groups.size()), "layout_totals: groups must come in id order",
                     {{"id", double(g.id)}, {"expected", double(groups.size())}});
    groups.push_back(std::move(g));
    serves.emplace_back();
    positions_.emplace_back();
  }

  //! Adds shard `s` of rank `r`; `position` is r's index in s.group's ranks, or -1 when the
  //! caller does not know it (found by a search, remembered for the rank's next shards).
  void add(rank_index r, std::int32_t position, const shard& s) {
    if (r < 0 || static_cast<std::size_t>(r) >= ranks || s.micro_batch < 0) [[unlikely]]
      refuse_rank(r, s.micro_batch);
    std::size_t slot = 0;
    if (s.group != no_group) {  // first, so that a refused shard changes nothing
      // shards come group by group (a zigzag deals a sequence over every member of its group);
      // the (group, micro-batch) is one key in registers: comparing the two fields as one
      // 8-byte load stalls on the shard's two 4-byte stores, half the time of a 4M-token layout
      const std::uint64_t key = key_of(s.group, s.micro_batch);
      const bool entering = key != last_key_;
      if (entering && (s.group < 0 || static_cast<std::size_t>(s.group) >= groups.size())) [[unlikely]]
        refuse_group(s.group);
      if (position < 0) position = !entering && r == last_rank_ ? last_position_ : position_of(r, s.group);
      if (entering) enter(s.group, s.micro_batch, key);
      last_rank_ = r, last_position_ = position;
      slot = last_first_ + static_cast<std::size_t>(position);
    }
    if (s.micro_batch >= micro_batches) grow(s.micro_batch);
    const std::size_t at = static_cast<std::size_t>(s.micro_batch) * ranks + static_cast<std::size_t>(r);
    const auto tokens = static_cast<double>(s.range.size());
    const auto pairs = static_cast<double>(causal_pairs_from_start(s.range));
    held[at] += tokens;
    if (s.group == no_group) {
      loose_pairs[at] += pairs;
      return;
    }
    member_tokens[slot] += tokens;
    member_pairs[slot] += pairs;
  }

 private:
  // the refusals, out of add's way (its hot path stays small enough to inline)
  [[noreturn]] void refuse_rank(rank_index r, std::int32_t micro_batch) const {
    ZEPPELIN_THROW(invalid_argument, "layout_totals: a shard's rank must be below the ranks and its micro-batch non-negative",
                   {{"rank", double(r)}, {"ranks", double(ranks)}, {"micro_batch", double(micro_batch)}});
  }
  [[noreturn]] void refuse_group(group_index g) const {
    ZEPPELIN_THROW(invalid_argument, "layout_totals: a shard names an unknown group", {{"group", double(g)}, {"groups", double(groups.size())}});
  }

  void grow(std::int32_t micro_batch) {
    micro_batches = micro_batch + 1;
    held.resize(static_cast<std::size_t>(micro_batches) * ranks, 0.0);
    loose_pairs.resize(held.size(), 0.0);
  }

  static std::uint64_t key_of(group_index g, std::int32_t micro_batch) noexcept {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(g)) << 32 | static_cast<std::uint32_t>(micro_batch);
  }

  // makes (g, micro_batch), a known group, the current one: its members' slots start at last_first_
  void enter(group_index g, std::int32_t micro_batch, std::uint64_t key) {
    auto& list = serves[static_cast<std::size_t>(g)];
    auto it = std::find_if(list.begin(), list.end(), [&](const served& x) { return x.micro_batch == micro_batch; });
    if (it == list.end()) {
      it = list.insert(list.end(), {micro_batch, member_tokens.size()});
      member_tokens.resize(member_tokens.size() + groups[static_cast<std::size_t>(g)].ranks.size(), 0.0);
      member_pairs.resize(member_tokens.size(), 0.0);
    }
    last_key_ = key, last_first_ = it->first;
  }

  // r's index in group g's ranks, from the group's (rank, position) list sorted once
  std::int32_t position_of(rank_index r, group_index g) {
    auto& sorted = positions_[static_cast<std::size_t>(g)];
    const auto& members = groups[static_cast<std::size_t>(g)].ranks;
    if (sorted.empty()) {
      for (std::size_t i = 0; i < members.size(); ++i) sorted.emplace_back(members[i], static_cast<std::int32_t>(i));
      std::sort(sorted.begin(), sorted.end());
    }
    const auto it = std::lower_bound(sorted.begin(), sorted.end(), std::pair{r, std::int32_t{-1}});
    ZEPPELIN_EXPECTS(it != sorted.end() && it->first == r, "layout_totals: a shard's rank is not a member of its group",
                     {{"rank", double(r)}, {"group", double(g)}});
    return it->second;
  }

  std::vector<std::vector<std::pair<rank_index, std::int32_t>>> positions_;  // [group], built on first need
  std::uint64_t last_key_ = key_of(no_group, -1);  // (group, micro-batch) of last_first_
  std::size_t last_first_ = 0;
  rank_index last_rank_ = -1;
  std::int32_t last_position_ = 0;
};

//! The sums of plan `p` (its shards in rank order).
[[nodiscard]] inline layout_totals layout_totals_of(const plan& p) {
  layout_totals t(p.nodes, p.gpus_per_node, p.placements.size());
  for (const ring_group& g : p.groups) t.add_group(g);
  for (std::size_t r = 0; r < p.placements.size(); ++r)
    for (const shard& s : p.placements[r].shards) t.add(static_cast<rank_index>(r), -1, s);
  return t;
}

ZEPPELIN_NAMESPACE_END
