// zeppelin/planner/detail/launch_set_bound.hpp
// The least time a rank's attention launches can take, from the plan alone: the work part of
// plan_step_bound (planner/plan_step_bound.hpp) for the shards of ring and all-gather groups and
// of sequences held whole.
//   in : a plan, the seconds of one causal pair at the best modelled rates (forward +
//        backward, every layer), the attention model (its rate tables and tile), the forward's
//        share of the pair's seconds
//   out: per (micro-batch, rank) the seconds of its launches, all of them and those of
//        all-gather groups; the pairs of all-to-all groups are left to the caller (their lanes
//        compute a share of the heads each, planner/plan_step_bound.hpp)
// Why: pricing every pair at the best rate (the rate of a 16K-row call) says nothing about
// layouts whose launches are small: a ring of 184 members over 1K tokens each computes
// calls of about 1K rows, at a seventh of that rate, and simulating such a candidate costs
// seconds that its bound could have saved.
// What the simulator charges a launch (sim/detail/attention_call.hpp): its FLOPs, at least
// those of its pairs, over the rate of its causal-equivalent size x, the sum over its blocks
// of max(padded rows, sqrt(2 pairs - rows)). A launch set is a set of blocks that every
// launch of the program falls inside: the blocks of one (micro-batch, level, rank, pass,
// round), since launches never span rounds or levels; rings join their groups' blocks of one
// round (under launch_policy::fused_round), so a set is the union over the rank's ring groups of the
// level of its blocks against origin p - k (forward) or p + k (backward); all-gather groups
// compute every origin at once, one set per level and pass; sequences held whole, one set.
// The blocks are those of schedule/ring_schedule.hpp (for_each_block of every query shard
// against every key shard of its sequence), which the collectives launch whole (launch waves
// group blocks, never cut them). With R(x) = the most the table gives at any size up to x
// (a rising envelope: tables need not rise everywhere), a launch L in set S takes at least
// pairs(L) / R(x_S) of the per-pair FLOPs, since x_L <= x_S; the launches of S together at
// least pairs(S) / R(x_S). Summed over the sets: a rank's least attention time, never below
// the pairs at the best rate. Two refinements, both from the plan alone:
//   - a launch's query rows are disjoint, and so are its key rows (program/launch_waves.hpp),
//     so no launch of a ring round is larger than the heaviest set of its blocks with disjoint
//     queries, nor of disjoint keys (per sequence, weighted interval scheduling): x_S is
//     capped at both. A zigzag round whose two query chunks read one key chunk takes two
//     launches of about half the round each, and the cap sees it;
//   - a call pays padded(rows) / rows times the FLOPs of a sequence's pairs for its rows of
//     it, which are at most the rows of it the rank computes in the set: below one tile that
//     is at least tile / rows (the least over fewer rows too), so a sequence the rank holds
//     fewer than a tile of rows of has its pairs weighted by it.
// Cost: O(shards + P) time for the P (query shard, key shard) pairs of one sequence in one
// group (about 20 ns each), O(shards + min(P, sum of G^2 over its groups)) memory, or
// O(shards) where a level has more than `max_shard_pairs` of them (0: every level) or would
// list more than max_set_parts sets (a global ring of thousands of members): that level's
// pairs are priced at the best rate (never a finer set than the launches: a rank's groups of
// one level are bounded together or not at all). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/counting_sort.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/layout_totals.hpp>
#include <zeppelin/cost/step_work.hpp>
#include <zeppelin/cost/throughput_table.hpp>
#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/group_layout.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>
#include <zeppelin/sim/detail/attention_call.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! The most `t` gives at any size up to x (x > 0).
[[nodiscard]] inline double rate_up_to(const throughput_table& t, double x) {
  double best = t.at(x);
  for (const throughput_point& p : t.points()) {
    if (p.x > x) break;
    best = std::max(best, p.flops_per_second);
  }
  return best;
}

//! How many times slower than at the best rates a launch of causal-equivalent size x runs at
//! least, per pass: each pass weighted by its share of a pair's seconds at the best rates, so
//! that forward_at(x) + backward_at(x) is 1 for a launch as large as the tables' best.
struct launch_slowdown {
  attention_time_model attention{};
  double forward_share = 1;  //!< forward seconds / (forward + backward) of a pair at the best rates

  [[nodiscard]] double forward_at(double x) const { return forward_share * penalty(attention.forward, x); }
  [[nodiscard]] double backward_at(double x) const { return (1 - forward_share) * penalty(attention.backward, x); }
  [[nodiscard]] double at(double x) const { return forward_at(x) + backward_at(x); }

 private:
  // best rate / the best rate up to x (1 for an empty table or x <= 0: no penalty claimed)
  static double penalty(const throughput_table& t, double x) {
    if (t.points().empty() || !(x > 0)) return 1;
    const double best = table_max(t), up_to_x = rate_up_to(t, x);
    return up_to_x > 0 && best > up_to_x ? best / up_to_x : 1;
  }
};


//! A block of a ring position's round: against origin `origin`, of sequence `seq`.
struct ring_block {
  std::int32_t origin;
  sequence_index seq;
  token_range q, k;
  double x;
};

//! Scratch of heaviest_disjoint.
struct interval_scratch {
  struct sized {
    token_range range;
    double x;
  };
  std::vector<sized> by_end;
  std::vector<double> best;  // [i]: the heaviest choice among the first i intervals by end
  std::vector<std::size_t> bucket;  // add_sequence_caps: per origin, where its blocks start
  std::vector<ring_block> grouped;  // add_sequence_caps: the blocks grouped by origin
};

//! The largest sum of x over blocks whose `side` ranges are pairwise disjoint (weighted
//! interval scheduling, O(n log n)).
[[nodiscard]] inline double heaviest_disjoint(std::span<const ring_block> blocks, token_range ring_block::*side,
                                              interval_scratch& scratch) {
  // one or two blocks (most (origin, sequence) pairs of a zigzag round): no sort
  if (blocks.size() == 1) return blocks[0].x;
  if (blocks.size() == 2) {
    const token_range a = blocks[0].*side, b = blocks[1].*side;
    const bool disjoint = a.end <= b.begin || b.end <= a.begin;
    return disjoint ? blocks[0].x + blocks[1].x : std::max(blocks[0].x, blocks[1].x);
  }
  auto& by_end = scratch.by_end;
  by_end.clear();
  for (const ring_block& b : blocks) by_end.push_back({b.*side, b.x});
  std::sort(by_end.begin(), by_end.end(), [](const auto& a, const auto& b) { return a.range.end < b.range.end; });
  scratch.best.assign(by_end.size() + 1, 0.0);
  for (std::size_t i = 0; i < by_end.size(); ++i) {
    const auto before = std::upper_bound(by_end.begin(), by_end.begin() + static_cast<std::ptrdiff_t>(i), by_end[i].range.begin,
                                         [](token_count at, const auto& a) { return at < a.range.end; });
    scratch.best[i + 1] = std::max(scratch.best[i], by_end[i].x + scratch.best[static_cast<std::size_t>(before - by_end.begin())]);
  }
  return scratch.best.back();
}

//! A ring position's launch-size caps as its sequences' blocks come in, one sequence at a time
//! (so that a position's blocks are never all held at once): no launch of an origin's round is
//! larger than the heaviest choice of its blocks with disjoint queries or, if less, with disjoint
//! keys, summed over its sequences (a launch's query rows are disjoint, and so are its key rows:
//! program/launch_waves.hpp). Per origin, the two sums so far.
struct launch_size_caps {
  std::vector<double> by_queries, by_keys;  // [origin]; by_queries -1: no block of it yet
  std::vector<std::int32_t> origins;        // those with blocks
};

//! Adds one sequence's blocks (any origins, in any order; reordered) to `caps`. The blocks are
//! grouped by origin with a stable counting sort, O(blocks + origins), or a stable comparison
//! sort when their origins span more than twice their number (a few blocks far apart on a wide
//! ring).
inline void add_sequence_caps(std::vector<ring_block>& blocks, interval_scratch& scratch, launch_size_caps& caps) {
  stable_sort_by_key(blocks, [](const ring_block& b) { return b.origin; }, scratch.grouped, scratch.bucket);
  for (std::size_t e = 0, f = 0; e < blocks.size(); e = f) {
    for (f = e; f < blocks.size() && blocks[f].origin == blocks[e].origin;) ++f;
    const std::span<const ring_block> of_origin(blocks.data() + e, f - e);
    const auto origin = static_cast<std::size_t>(blocks[e].origin);
    if (origin >= caps.by_queries.size()) caps.by_queries.resize(origin + 1, -1.0), caps.by_keys.resize(origin + 1, 0.0);
    if (caps.by_queries[origin] < 0) caps.by_queries[origin] = 0, caps.origins.push_back(blocks[e].origin);
    caps.by_queries[origin] += heaviest_disjoint(of_origin, &ring_block::q, scratch);
    caps.by_keys[origin] += heaviest_disjoint(of_origin, &ring_block::k, scratch);
  }
}

//! Calls cap(origin, x) for each origin of `caps`, ascending, x the lesser of its two sums, and
//! empties `caps` for the next position.
template <class Cap>
void take_launch_size_caps(launch_size_caps& caps, Cap&& cap) {
  std::sort(caps.origins.begin(), caps.origins.end());
  for (const std::int32_t origin : caps.origins) {
    const auto o = static_cast<std::size_t>(origin);
    cap(origin, std::min(caps.by_queries[o], caps.by_keys[o]));
    caps.by_queries[o] = -1, caps.by_keys[o] = 0;
  }
  caps.origins.clear();
}

//! Seconds of attention per (micro-batch, rank): all of the rank's launches outside all-to-all
//! groups, and of those the launches of all-gather groups. Index: micro_batch * ranks + rank.
struct launch_seconds {
  std::vector<double> own, gathered;
};

//! Sets a level may list at once (two per computing pair of ring positions): a bound on the
//! memory the pricing takes, about 24 bytes each.
inline constexpr std::size_t max_set_parts = std::size_t{1} << 21;

//! Every rank's launches of layout `t` with every pair at the best rate: `per_pair` seconds
//! each, pairs of all-to-all groups left out (plan_step_bound spreads a group's pairs over its
//! members).
[[nodiscard]] inline launch_seconds best_rate_seconds(const layout_totals& t, double per_pair) {
  launch_seconds out;
  std::vector<double> gathered(t.loose_pairs.size(), 0.0);  // pairs, then seconds
  std::vector<double> own = t.loose_pairs;
  for (std::size_t g = 0; g < t.groups.size(); ++g) {
    const collective_kind c = t.groups[g].collective;
    if (c == collective_kind::all_to_all) continue;
    const auto& members = t.groups[g].ranks;
    for (const layout_totals::served& x : t.serves[g])
      for (std::size_t i = 0; i < members.size(); ++i) {
        const std::size_t at = static_cast<std::size_t>(x.micro_batch) * t.ranks + static_cast<std::size_t>(members[i]);
        own[at] += t.member_pairs[x.first + i];
        if (c == collective_kind::all_gather) gathered[at] += t.member_pairs[x.first + i];
      }
  }
  for (double& v : own) v *= per_pair;
  for (double& v : gathered) v *= per_pair;
  return {std::move(own), std::move(gathered)};
}

//! `priced`, when not empty, has one entry per rank: the ranks with a nonzero entry are
//! priced by their launch sets, the others keep their entries of `best` (best_rate_seconds of
//! the plan), so that bounding one rank of a wide ring costs its own pairs only. Every rank's
//! entry is still a lower bound: a rank's sets never price its pairs below the best rate.
[[nodiscard]] inline launch_seconds launch_set_seconds(const plan& p, launch_seconds best, double per_pair, const launch_slowdown& slowdown,
                                                      std::size_t max_shard_pairs, std::span<const std::uint8_t> priced = {}) {
  const std::size_t ranks = p.placements.size();
  ZEPPELIN_EXPECTS(priced.empty() || priced.size() == ranks, "launch_set_seconds: one priced flag per rank",
                   {{"flags", double(priced.size())}, {"ranks", double(ranks)}});
  const auto by_sets = [&](rank_index r) { return priced.empty() || priced[static_cast<std::size_t>(r)] != 0; };
  launch_seconds out = std::move(best);
  if (max_shard_pairs == 0) return out;
  for (std::size_t at = 0; at < out.own.size(); ++at)
    if (by_sets(static_cast<rank_index>(at % ranks))) out.own[at] = out.gathered[at] = 0;
  std::vector<collective_kind> collectives(p.groups.size());  // [group], read per shard
  for (std::size_t g = 0; g < p.groups.size(); ++g) collectives[g] = p.groups[g].collective;
  const auto collective_of = [&](group_index g) { return g == no_group ? collective_kind::ring : collectives[static_cast<std::size_t>(g)]; };
  // a shard's pairs (its queries against every earlier key of its sequence) at the best rate
  const auto at_best_rate = [&](std::int32_t micro_batch, std::size_t rank, group_index g, token_range range) {
    const double seconds = per_pair * static_cast<double>(causal_pairs_from_start(range));
    const std::size_t at = static_cast<std::size_t>(micro_batch) * ranks + rank;
    out.own[at] += seconds;
    if (collective_of(g) == collective_kind::all_gather) out.gathered[at] += seconds;
  };
  // what a set is made of (see the file comment)
  enum which : std::int32_t { ring_forward = 0, ring_backward = 1, gathered = 2, local = 3 };
  // a level: (micro-batch, zone), the local level's zone -1 (sequences held whole and groups
  // inside one rank)
  struct held {
    std::int32_t micro_batch, zone, group;  // group: no_group for the local level
    sequence_index seq;
    std::int32_t position;  // in the group
    rank_index rank;
    token_range range;
  };
  // per group: (rank, position), by rank, sorted when a shard first needs it
  std::vector<std::vector<std::pair<rank_index, std::int32_t>>> positions(p.groups.size());
  const auto position_of = [&](rank_index rank, group_index group) {
    auto& at = positions[static_cast<std::size_t>(group)];
    if (at.empty()) {
      const auto& members = p.groups[static_cast<std::size_t>(group)].ranks;
      for (std::size_t i = 0; i < members.size(); ++i) at.emplace_back(members[i], static_cast<std::int32_t>(i));
      std::sort(at.begin(), at.end());
    }
    return std::lower_bound(at.begin(), at.end(), std::pair{rank, std::int32_t{-1}})->second;
  };
  // the shards launch sets price: every shard but those of all-to-all groups (whose lanes the
  // caller prices)
  std::vector<held> shards;
  for (std::size_t r = 0; r < ranks; ++r) {
    const auto rank = static_cast<rank_index>(r);
    group_index last_group = no_group;  // a rank's shards of one group come together: its position found once
    std::int32_t last_position = 0;
    for (const shard& s : p.placements[r].shards) {
      if (s.range.empty()) continue;
      const ring_group* g = s.group == no_group ? nullptr : &p.groups[static_cast<std::size_t>(s.group)];
      if (!g || g->zone == zone_kind::local) {
        shards.push_back({s.micro_batch, -1, no_group, s.seq, 0, rank, s.range});
        continue;
      }
      if (g->collective == collective_kind::all_to_all) continue;
      if (s.group != last_group) last_group = s.group, last_position = position_of(rank, s.group);
      shards.push_back({s.micro_batch, static_cast<std::int32_t>(g->zone), s.group, s.seq, last_position, rank, s.range});
    }
  }
  if (shards.empty()) return out;
  // by level, group, sequence (and, local, rank): the shards that pair up are adjacent. The
  // order of (micro-batch, zone, group, sequence, rank, first row), a unique key, in O(shards +
  // sequences + groups): stable counting sorts from the least significant key up, the rank
  // coming in order (shards are listed rank by rank); first rows are sorted only where a rank's
  // shards of one sequence were not listed in order (a million shards: 0.3 s by comparison)
  {
    std::vector<held> scratch;
    std::vector<std::size_t> at;
    const auto bucket_by = [&](auto&& key) {
      std::size_t buckets = 0;
      for (const held& h : shards) buckets = std::max(buckets, key(h) + 1);
      stable_counting_sort(shards, buckets, key, scratch, at);
    };
    bucket_by([](const held& h) { return static_cast<std::size_t>(h.seq); });
    bucket_by([](const held& h) { return static_cast<std::size_t>(h.group + 1); });      // no_group = -1 first
    bucket_by([](const held& h) { return static_cast<std::size_t>(h.zone + 1); });       // local level (-1) first
    bucket_by([](const held& h) { return static_cast<std::size_t>(h.micro_batch); });
    const auto same_rank_run = [](const held& a, const held& b) {
      return a.micro_batch == b.micro_batch && a.zone == b.zone && a.group == b.group && a.seq == b.seq && a.rank == b.rank;
    };
    const auto by_first_row = [](const held& a, const held& b) { return a.range.begin < b.range.begin; };
    for (std::size_t e = 0, f = 0; e < shards.size(); e = f) {
      for (f = e + 1; f < shards.size() && same_rank_run(shards[f], shards[e]);) ++f;
      const auto from = shards.begin() + static_cast<std::ptrdiff_t>(e), to = shards.begin() + static_cast<std::ptrdiff_t>(f);
      if (!std::is_sorted(from, to, by_first_row)) std::sort(from, to, by_first_row);
    }
  }
  const auto same_level = [](const held& a, const held& b) { return a.micro_batch == b.micro_batch && a.zone == b.zone; };
  const auto pair_up = [](const held& a, const held& b) { return a.group == b.group && a.seq == b.seq && (a.group != no_group || a.rank == b.rank); };

  // a set's blocks summed: (rank, which, round) -> pairs, causal-equivalent size
  struct set_part {
    rank_index rank;
    std::int32_t which;
    std::int32_t round;
    double pairs;
    double x;
  };
  // pairs: weighted by the least tile padding of their sequence's rows (see padding_of)
  struct sum {
    double pairs = 0, x = 0;
  };
  // a block's padding-weighted pairs and causal-equivalent size, as the simulator sums it over
  // a launch (sim/detail/attention_call.hpp)
  const auto weighted = [&](token_range q, token_range k, block_mask m, double padding) {
    const auto pairs = static_cast<double>(block_pairs(q, k, m));
    return sum{pairs * padding, causal_equivalent_rows(slowdown.attention, q.size(), pairs)};
  };
  // A call tiles each sequence's query rows apart: its pairs cost padded(rows) / rows times
  // their FLOPs, for the rows of the sequence in the call, at most the `held` rows of it that
  // the rank computes in the set. padded(r) / r is least over r <= held at held itself when
  // held is below one tile (padded(r) is one tile there), and 1 otherwise (r = one tile).
  const auto padding_of = [&](token_count held) {
    return held >= slowdown.attention.tile_rows ? 1.0 : slowdown.attention.padding_factor(held);
  };
  std::vector<set_part> parts;            // ring sets, sorted and summed per level
  std::vector<sum> one_set(ranks);        // per rank: its level's one set (all-gather or local)
  std::vector<rank_index> with_one_set;   // the ranks with one, in first-touch order
  std::vector<std::size_t> run_end(shards.size()), run_begin(shards.size()), by_position;
  std::vector<sum> by_origin;          // per origin position of the group: what the current position computes with it
  std::vector<std::int32_t> touched;   // origins with something, in first-touch order
  std::vector<ring_block> round_blocks;  // the current position's ring blocks of one sequence, to cap its sets' sizes
  launch_size_caps caps;
  interval_scratch intervals;
  const auto add = [&](std::int32_t micro_batch, const set_part& s) {
    const double times = s.which == ring_forward ? slowdown.forward_at(s.x) : s.which == ring_backward ? slowdown.backward_at(s.x) : slowdown.at(s.x);
    const std::size_t at = static_cast<std::size_t>(micro_batch) * ranks + static_cast<std::size_t>(s.rank);
    out.own[at] += per_pair * s.pairs * times;
    if (s.which == gathered) out.gathered[at] += per_pair * s.pairs * times;
  };
  const auto which_of = [&](const held& h) {
    if (h.group == no_group) return local;
    return collective_of(h.group) == collective_kind::all_gather ? gathered : ring_forward;
  };
  for (std::size_t a = 0, b = 0; a < shards.size(); a = b) {
    for (b = a; b < shards.size() && same_level(shards[b], shards[a]);) ++b;
    const std::int32_t micro_batch = shards[a].micro_batch;
    std::size_t shard_pairs = 0, position_pairs = 0;  // the work, and at most the sets it makes
    for (std::size_t c = a, d = a; c < b; c = d) {
      for (d = c; d < b && pair_up(shards[d], shards[c]);) ++d;
      for (std::size_t i = c; i < d; ++i) run_begin[i] = c, run_end[i] = d;
      shard_pairs += (d - c) * (d - c);
      if (d == b || shards[d].group != shards[c].group) {
        const std::size_t G = shards[c].group == no_group ? 1 : p.groups[static_cast<std::size_t>(shards[c].group)].ranks.size();
        position_pairs += G * G;
      }
    }
    if (shard_pairs > max_shard_pairs || std::min(shard_pairs, position_pairs) > max_set_parts) {  // the level's pairs at the best rates
      for (std::size_t c = a; c < b; ++c)
        if (by_sets(shards[c].rank)) at_best_rate(micro_batch, static_cast<std::size_t>(shards[c].rank), shards[c].group, shards[c].range);
      continue;
    }
    parts.clear();
    for (std::size_t g0 = a, g1 = a; g0 < b; g0 = g1) {
      for (g1 = g0; g1 < b && shards[g1].group == shards[g0].group;) ++g1;
      const std::int32_t w = which_of(shards[g0]);
      if (w == local) {  // a run is one rank's shards of one sequence
        for (std::size_t c = g0; c < g1; c = run_end[c]) {
          if (!by_sets(shards[c].rank)) continue;
          sum& total = one_set[static_cast<std::size_t>(shards[c].rank)];
          if (total.pairs == 0) with_one_set.push_back(shards[c].rank);
          token_count held = 0;
          for (std::size_t q = c; q < run_end[c]; ++q) held += shards[q].range.size();
          const double padding = padding_of(held);
          for (std::size_t q = c; q < run_end[c]; ++q)
            for (std::size_t k = c; k < run_end[c]; ++k)
              for_each_block(shards[q].range, shards[k].range, [&](token_range qr, token_range kr, block_mask m) {
                const sum block = weighted(qr, kr, m, padding);
                total.pairs += block.pairs, total.x += block.x;
              });
        }
        continue;
      }
      // position by position: what it computes against each origin (one set per round of a
      // ring, one for an all-gather member)
      const auto G = static_cast<std::int32_t>(p.groups[static_cast<std::size_t>(shards[g0].group)].ranks.size());
      by_position.clear();
      for (std::size_t i = g0; i < g1; ++i) by_position.push_back(i);
      std::stable_sort(by_position.begin(), by_position.end(), [&](std::size_t x, std::size_t y) { return shards[x].position < shards[y].position; });
      by_origin.assign(static_cast<std::size_t>(G), sum{});
      for (std::size_t c = 0, d = 0; c < by_position.size(); c = d) {
        const std::int32_t from = shards[by_position[c]].position;
        const rank_index rank = shards[by_position[c]].rank;
        touched.clear();
        for (d = c; d < by_position.size() && shards[by_position[d]].position == from; ++d) {}
        if (!by_sets(rank)) continue;  // its queries' pairs are at the best rate already
        // the position's shards of one sequence are adjacent (stable sort of a by-sequence list)
        for (std::size_t e = c, f = c; e < d; e = f) {
          token_count held = 0;
          for (f = e; f < d && shards[by_position[f]].seq == shards[by_position[e]].seq; ++f) held += shards[by_position[f]].range.size();
          const double padding = padding_of(held);
          for (std::size_t i = e; i < f; ++i) {
            const std::size_t q = by_position[i];
            for (std::size_t k = run_begin[q]; k < run_end[q]; ++k) {
              sum& with = by_origin[static_cast<std::size_t>(shards[k].position)];
              const double before = with.pairs;
              for_each_block(shards[q].range, shards[k].range, [&](token_range qr, token_range kr, block_mask m) {
                const sum block = weighted(qr, kr, m, padding);
                with.pairs += block.pairs, with.x += block.x;
                if (w != gathered) round_blocks.push_back({shards[k].position, shards[q].seq, qr, kr, block.x});
              });
              if (before == 0 && with.pairs > 0) touched.push_back(shards[k].position);
            }
          }
          add_sequence_caps(round_blocks, intervals, caps);
          round_blocks.clear();
        }
        take_launch_size_caps(caps, [&](std::int32_t origin, double x) {
          sum& with = by_origin[static_cast<std::size_t>(origin)];
          with.x = std::min(with.x, x);
        });
        sum& all = one_set[static_cast<std::size_t>(rank)];
        for (const std::int32_t origin : touched) {
          sum& with = by_origin[static_cast<std::size_t>(origin)];
          if (w == gathered) {
            if (all.pairs == 0) with_one_set.push_back(rank);
            all.pairs += with.pairs, all.x += with.x;
          } else {  // forward round k holds origin p - k, backward round k origin p + k
            parts.push_back({rank, ring_forward, ((from - origin) % G + G) % G, with.pairs, with.x});
            parts.push_back({rank, ring_backward, ((origin - from) % G + G) % G, with.pairs, with.x});
          }
          with = sum{};
        }
      }
    }
    // a level is local, or holds groups: the one set per rank is of its kind
    const std::int32_t one_kind = shards[a].zone < 0 ? local : gathered;
    for (const rank_index r : with_one_set) {
      sum& one = one_set[static_cast<std::size_t>(r)];
      parts.push_back({r, one_kind, 0, one.pairs, one.x});
      one = sum{};
    }
    with_one_set.clear();
    std::sort(parts.begin(), parts.end(),
              [](const set_part& x, const set_part& y) { return std::tie(x.rank, x.which, x.round) < std::tie(y.rank, y.which, y.round); });
    for (std::size_t c = 0, d = 0; c < parts.size(); c = d) {
      set_part set = parts[c];
      for (d = c + 1; d < parts.size() && parts[d].rank == set.rank && parts[d].which == set.which && parts[d].round == set.round; ++d)
        set.pairs += parts[d].pairs, set.x += parts[d].x;
      add(micro_batch, set);
    }
  }
  return out;
}


//! launch_set_seconds from the best rates of `p` (every rank's at the best rate when
//! max_shard_pairs is 0).
[[nodiscard]] inline launch_seconds launch_set_seconds(const plan& p, double per_pair, const launch_slowdown& slowdown,
                                                      std::size_t max_shard_pairs, std::span<const std::uint8_t> priced = {}) {
  return launch_set_seconds(p, best_rate_seconds(layout_totals_of(p), per_pair), per_pair, slowdown, max_shard_pairs, priced);
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
