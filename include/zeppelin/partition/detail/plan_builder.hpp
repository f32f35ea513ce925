// zeppelin/partition/detail/plan_builder.hpp
// What every partitioner shares: input checks with the offending numbers, and a builder
// that assembles a plan from groups and shards, or only their sums (layout_totals_store).
//   check_input(batch, topology, capacity) : capacity > 0 and total <= N * P * capacity
//   plan_builder                           : groups deduplicated by collective and rank list (a
//                                            ring over the same ranks in the same order is one group),
//                                            zone from the ranks, zigzag (optionally rotated),
//                                            weighted zigzag, whole and range shards, per-rank
//                                            shard order inter -> intra -> local (the
//                                            attention engine's queue order)
// The zigzag arithmetic it lays out (chunks, shares, the remainder dealer) is
// schedule/zigzag.hpp's; shares by room are detail/weighted_zigzag.hpp's. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/layout_totals.hpp>
#include <zeppelin/partition/detail/weighted_zigzag.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

__extension__ using int128 = __int128;

inline double dbl(std::int64_t v) { return static_cast<double>(v); }

//! N * P * capacity, saturated at the largest token_count.
inline token_count cluster_room(const topology& t, token_count capacity) {
  const int128 room = static_cast<int128>(capacity) * t.num_ranks();
  return room > std::numeric_limits<token_count>::max() ? std::numeric_limits<token_count>::max()
                                                        : static_cast<token_count>(room);
}

//! Throws invalid_argument for capacity <= 0 and infeasible for a batch larger than the
//! cluster (total > N * P * capacity), naming the numbers.
inline void check_input(const batch& b, const topology& t, token_count capacity, std::string_view method) {
  ZEPPELIN_EXPECTS(capacity > 0, std::string(method) + ": the token capacity per GPU must be positive",
                   {{"capacity", dbl(capacity)}});
  ZEPPELIN_EXPECTS(t.num_ranks() >= 1, std::string(method) + ": the topology has no GPU",
                   {{"nodes", dbl(t.nodes())}, {"gpus_per_node", dbl(t.gpus_per_node())}});
  const token_count room = cluster_room(t, capacity);
  if (b.total_tokens() > room)
    ZEPPELIN_THROW(infeasible,
                   std::string(method) + ": the batch holds more tokens than nodes * gpus_per_node * capacity",
                   {{"total_tokens", dbl(b.total_tokens())}, {"nodes", dbl(t.nodes())},
                    {"gpus_per_node", dbl(t.gpus_per_node())}, {"capacity", dbl(capacity)}, {"room", dbl(room)}});
}

//! Zone of a set of ranks (one rank: local; one node: intra; several nodes: inter).
inline zone_kind zone_of(std::span<const rank_index> ranks, const topology& t) {
  if (ranks.size() <= 1) return zone_kind::local;
  const int node = t.node_of(ranks.front());
  for (const rank_index r : ranks)
    if (t.node_of(r) != node) return zone_kind::inter_node;
  return zone_kind::intra_node;
}

//! Where a builder puts what it lays out: the plan's shards (plan_store), or their sums alone
//! (layout_totals_store: what the planner's first bound reads, without a shard in memory).
//! A store takes the groups in id order and each shard with its rank's position in the group
//! (-1 when the builder does not know it), and finishes into its result.
class plan_store {
 public:
  using result_type = plan;

  plan_store(std::string_view method, const topology& t, token_count capacity) {
    p_.method = std::string(method);
    p_.nodes = t.nodes();
    p_.gpus_per_node = t.gpus_per_node();
    p_.capacity = capacity;
    p_.placements.resize(static_cast<std::size_t>(t.num_ranks()));
    tokens_.assign(static_cast<std::size_t>(t.num_ranks()), {});
  }
  void reserve(std::size_t shards) {
    for (auto& pl : p_.placements) pl.shards.reserve(shards);
  }
  void add_group(ring_group g) { p_.groups.push_back(std::move(g)); }
  void add(rank_index r, std::int32_t /*position*/, const shard& s) {
    p_.placements[static_cast<std::size_t>(r)].shards.push_back(s);
    auto& per_mb = tokens_[static_cast<std::size_t>(r)];
    if (per_mb.size() <= static_cast<std::size_t>(s.micro_batch)) per_mb.resize(static_cast<std::size_t>(s.micro_batch) + 1, 0);
    per_mb[static_cast<std::size_t>(s.micro_batch)] += s.range.size();
  }
  void note(plan_note n) { p_.notes.push_back(std::move(n)); }

  //! Largest token count of any (rank, micro-batch) so far, and where.
  [[nodiscard]] std::pair<token_count, rank_index> peak() const {
    token_count best = 0;
    rank_index where = 0;
    for (std::size_t r = 0; r < tokens_.size(); ++r)
      for (const token_count v : tokens_[r])
        if (v > best) best = v, where = static_cast<rank_index>(r);
    return {best, where};
  }

  //! The plan, each rank's shards ordered by micro-batch, then zone inter -> intra -> local
  //! (stable: the order of addition within a class).
  [[nodiscard]] plan finish() && {
    std::vector<int> rank_of_zone(p_.groups.size());  // 0 inter, 1 intra; local shards 2
    for (std::size_t g = 0; g < p_.groups.size(); ++g) rank_of_zone[g] = 2 - static_cast<int>(p_.groups[g].zone);
    const auto key = [&](const shard& s) {
      return std::pair<std::int32_t, int>{s.micro_batch, s.group == no_group ? 2 : rank_of_zone[static_cast<std::size_t>(s.group)]};
    };
    const auto before = [&](const shard& a, const shard& b) { return key(a) < key(b); };
    for (auto& pl : p_.placements)
      if (!std::is_sorted(pl.shards.begin(), pl.shards.end(), before))
        std::stable_sort(pl.shards.begin(), pl.shards.end(), before);
    return std::move(p_);
  }

 private:
  plan p_;
  std::vector<std::vector<token_count>> tokens_;  // [rank][micro_batch]
};

class layout_totals_store {
 public:
  using result_type = layout_totals;

  layout_totals_store(std::string_view, const topology& t, token_count)
      : t_(t.nodes(), t.gpus_per_node(), static_cast<std::size_t>(t.num_ranks())) {}
  void reserve(std::size_t) {}
  void add_group(ring_group g) { t_.add_group(std::move(g)); }
  void add(rank_index r, std::int32_t position, const shard& s) { t_.add(r, position, s); }
  void note(const plan_note&) {}
  //! Largest token count of any (rank, micro-batch) so far, and where (the lowest rank: the
  //! micro-batches are scanned rank by rank, as plan_store does).
  [[nodiscard]] std::pair<token_count, rank_index> peak() const {
    double best = 0;
    rank_index where = 0;
    for (std::size_t r = 0; r < t_.ranks; ++r)
      for (std::size_t at = r; at < t_.held.size(); at += t_.ranks)
        if (t_.held[at] > best) best = t_.held[at], where = static_cast<rank_index>(r);
    return {static_cast<token_count>(best), where};
  }
  [[nodiscard]] layout_totals finish() && { return std::move(t_); }

 private:
  layout_totals t_;
};

//! Assembles a layout into `Store` (plan_store: a plan; layout_totals_store: its sums).
template <class Store>
class basic_plan_builder {
 public:
  basic_plan_builder(std::string_view method, const topology& t, token_count capacity)
      : topo_(&t), method_(method), capacity_(capacity), store_(method, t, capacity) {}

  //! Reserves room for `shards` shards on every rank.
  void reserve(std::size_t shards) { store_.reserve(shards); }

  //! The group running `collective` over `ranks` (in this order); no_group for a single rank.
  group_index group_for(const std::vector<rank_index>& ranks, collective_kind collective = collective_kind::ring) {
    if (ranks.size() <= 1) return no_group;
    const auto [it, inserted] = index_.try_emplace({collective, ranks}, static_cast<group_index>(index_.size()));
    if (inserted) store_.add_group(ring_group{it->second, zone_of(ranks, *topo_), ranks, collective});
    return it->second;
  }

  //! Shards of sequence `seq` zigzag-split over `ranks` (ring order), all in group `g`;
  //! zigzag position p goes to ranks[(p + offset) mod G] (zigzag_dealer). Empty chunks
  //! (length < 2G) are skipped; a position's head and tail are one shard when they touch.
  void add_zigzag(sequence_index seq, token_count length, std::span<const rank_index> ranks, group_index g,
                  std::int32_t micro_batch = 0, std::int32_t offset = 0) {
    const auto G = static_cast<std::int32_t>(ranks.size());
    // a sequence of L <= G tokens fills the heads of positions [0, L) alone (the longer
    // chunks first: schedule/zigzag.hpp), so the positions after it hold nothing: O(min(L, G))
    // per sequence, not O(G) (a million one-token sequences on a wide ring)
    const std::int32_t holding = length < G ? static_cast<std::int32_t>(length) : G;
    const zigzag_split split(length, G);
    for (std::int32_t i = 0, position = offset % G; i < holding; ++i, position = position + 1 == G ? 0 : position + 1) {
      const zigzag_pair z = split.at(i);
      add_pair(ranks[static_cast<std::size_t>(position)], seq, z.head, z.tail, g, micro_batch, g == no_group ? -1 : position);
    }
  }

  //! Shards of sequence `seq` split over `ranks` (ring order) with token shares `shares`
  //! (all >= 1, sum = length) by detail/weighted_zigzag.hpp, all in group `g`.
  void add_weighted_zigzag(sequence_index seq, token_count length, std::span<const rank_index> ranks,
                           std::span<const token_count> shares, group_index g, std::int32_t micro_batch = 0) {
    const std::vector<weighted_chunks> parts = weighted_zigzag(length, shares);
    for (std::size_t i = 0; i < parts.size(); ++i)
      add_pair(ranks[i], seq, parts[i].head, parts[i].tail, g, micro_batch, g == no_group ? -1 : static_cast<std::int32_t>(i));
  }

  //! One shard [range) of sequence `seq` on rank r; `position` is r's index in group g's ranks
  //! when the caller knows it (-1: found when a store needs it).
  void add_range(rank_index r, sequence_index seq, token_range range, group_index g, std::int32_t micro_batch = 0,
                 std::int32_t position = -1) {
    store_.add(r, position, shard{seq, range, g, micro_batch});
  }

  //! A position's head and tail on rank r: one shard when they touch, empty ones skipped.
  void add_pair(rank_index r, sequence_index seq, token_range head, token_range tail, group_index g,
                std::int32_t micro_batch, std::int32_t position = -1) {
    if (!head.empty() && !tail.empty() && head.end == tail.begin) {
      add_range(r, seq, {head.begin, tail.end}, g, micro_batch, position);
    } else {
      if (!head.empty()) add_range(r, seq, head, g, micro_batch, position);
      if (!tail.empty()) add_range(r, seq, tail, g, micro_batch, position);
    }
  }

  void note(plan_note n) { store_.note(std::move(n)); }

  //! Largest token count of any (rank, micro-batch) so far, and where.
  [[nodiscard]] std::pair<token_count, rank_index> peak() const { return store_.peak(); }

  //! Throws infeasible when a rank holds more than the capacity (naming rank, tokens,
  //! capacity): the layout this method prescribes needs a larger capacity.
  void require_capacity() const {
    const auto [tokens, rank] = peak();
    if (tokens > capacity_)
      ZEPPELIN_THROW(infeasible, std::string(method_) + ": the layout needs more tokens on a GPU than the capacity",
                     {{"rank", dbl(rank)}, {"tokens", dbl(tokens)}, {"capacity", dbl(capacity_)}});
  }

  //! The store's result: a plan (each rank's shards ordered by micro-batch, then zone inter ->
  //! intra -> local, stable) or its sums.
  [[nodiscard]] typename Store::result_type finish() && { return std::move(store_).finish(); }

 private:
  const topology* topo_;
  std::string method_;
  token_count capacity_;
  Store store_;
  std::map<std::pair<collective_kind, std::vector<rank_index>>, group_index> index_;
};

using plan_builder = basic_plan_builder<plan_store>;

//! Sequence indices sorted by length descending, ties by index ascending.
inline std::vector<sequence_index> by_length_descending(const batch& b) {
  std::vector<sequence_index> order(static_cast<std::size_t>(b.size()));
  for (sequence_index i = 0; i < b.size(); ++i) order[static_cast<std::size_t>(i)] = i;
  const auto len = b.lengths();
  std::stable_sort(order.begin(), order.end(), [&](sequence_index x, sequence_index y) {
    return len[static_cast<std::size_t>(x)] > len[static_cast<std::size_t>(y)];
  });
  return order;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
