// The launch sets of the plan step bound (planner/detail/launch_set_bound.hpp): the exact seconds
// of a ring of two on hand-computed blocks; a rank in two rings of one level priced per round
// over both (fused launches join them); the fallback for a level over the block budget is
// the best-rate price; sets never price below it; a round's launch size is capped by its blocks
// of disjoint queries and of disjoint keys (checked against brute force), and a sequence below
// a tile pays its padding. (That the bound stays below the simulated step is
// tests/planner/cost_driven_planner_test.cpp.)
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/partition.hpp>
#include <zeppelin/planner/detail/launch_set_bound.hpp>
#include <zeppelin/sim/cost_model.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

using namespace zeppelin;

namespace {

constexpr std::size_t every_pair = std::size_t{1} << 40;  // no level over the budget

detail::launch_slowdown slowdown_of_cluster_c() {
  const topology t = cluster_by_name("c", 1, 2);
  return {sim_cost_model::for_topology(t).attention, 0.3};
}

// `seqs` sequences of 2 * half tokens, each over its own ring of ranks {0, 1} in one node
// (first half on rank 0, second on rank 1), micro-batch 0
plan two_rings(int seqs, token_count half) {
  plan p{"manual", 1, 2, 4 * half * seqs, {placement{}, placement{}}, {}, {}};
  for (int s = 0; s < seqs; ++s) {
    p.groups.push_back(ring_group{s, zone_kind::intra_node, {0, 1}, collective_kind::ring});
    p.placements[0].shards.push_back(shard{s, {0, half}, s, 0});
    p.placements[1].shards.push_back(shard{s, {half, 2 * half}, s, 0});
  }
  return p;
}

// the blocks of rank 1 in two_rings: its causal half, and its full block against rank 0's half
struct rank_one_blocks {
  double causal, full, x_full;
  explicit rank_one_blocks(token_count half)
      : causal(static_cast<double>(causal_pairs(half))),
        full(static_cast<double>(half) * static_cast<double>(half)),
        x_full(std::sqrt(2 * full - static_cast<double>(half))) {}
};

}  // namespace

TEST_CASE("launch sets: a ring of two, block by block", "[sim][planner]") {
  const detail::launch_slowdown slow = slowdown_of_cluster_c();
  const token_count half = 2048;
  const double per_pair = 1e-12;
  const detail::launch_seconds s = detail::launch_set_seconds(two_rings(1, half), per_pair, slow, every_pair);
  // rank 0: its causal half, one set per pass (round 0); rank 1: its causal half (round 0)
  // and the full block against rank 0's half (forward round 1, backward round 1)
  const rank_one_blocks one(half);
  CHECK(s.own[0] == Approx(per_pair * one.causal * slow.at(2048)).epsilon(1e-12));
  CHECK(s.own[1] == Approx(per_pair * (one.causal * slow.at(2048) + one.full * slow.at(one.x_full))).epsilon(1e-12));
  CHECK(s.gathered[0] == 0);
  CHECK(s.gathered[1] == 0);
  CHECK(slow.at(2048) > 1);  // 2K rows: below the tables' best size
}

TEST_CASE("launch sets: a rank's rings of one level are priced per round together", "[sim][planner]") {
  const detail::launch_slowdown slow = slowdown_of_cluster_c();
  const token_count half = 1024;
  const double per_pair = 1e-12;
  const detail::launch_seconds s = detail::launch_set_seconds(two_rings(3, half), per_pair, slow, every_pair);
  const rank_one_blocks one(half);
  // round 0: the three causal halves in one set, round 1: the three full blocks in one set
  CHECK(s.own[1] == Approx(per_pair * 3 * (one.causal * slow.at(3 * 1024) + one.full * slow.at(3 * one.x_full))).epsilon(1e-12));
  // apart, each ring's launches would be smaller and slower: the joined price is lower
  const detail::launch_seconds apart = detail::launch_set_seconds(two_rings(1, half), per_pair, slow, every_pair);
  CHECK(s.own[1] < 3 * apart.own[1]);
}

TEST_CASE("launch sets: over the budget a level is priced at the best rate, never below", "[sim][planner]") {
  const detail::launch_slowdown slow = slowdown_of_cluster_c();
  const double per_pair = 1e-12;
  for (const token_count half : {1, 100, 1000, 5000, 40000}) {
    CAPTURE(half);
    const plan p = two_rings(2, half);
    const detail::launch_seconds sets = detail::launch_set_seconds(p, per_pair, slow, every_pair);
    const detail::launch_seconds best = detail::launch_set_seconds(p, per_pair, slow, 0);
    for (std::size_t r = 0; r < 2; ++r) {
      double pairs = 0;
      for (const shard& sh : p.placements[r].shards) pairs += static_cast<double>(causal_pairs(sh.range, token_range{0, sh.range.end}));
      CHECK(best.own[r] == Approx(per_pair * pairs).epsilon(1e-12));
      CHECK(sets.own[r] >= best.own[r] * (1 - 1e-12));
    }
  }
}

TEST_CASE("launch sets: only the flagged ranks are priced by their sets, the others at the best rate", "[sim][planner]") {
  // each rank's entry is its own (its queries' pairs): flagging some ranks changes nothing for
  // them, and the others read exactly as with every pair at the best rate
  const detail::launch_slowdown slow = slowdown_of_cluster_c();
  const double per_pair = 1e-12;
  for (const token_count half : {1, 100, 5000}) {
    for (const int seqs : {1, 2, 3}) {
      CAPTURE(half, seqs);
      const plan p = two_rings(seqs, half);
      const std::size_t ranks = p.placements.size();
      const detail::launch_seconds sets = detail::launch_set_seconds(p, per_pair, slow, every_pair);
      const detail::launch_seconds best = detail::launch_set_seconds(p, per_pair, slow, 0);
      for (std::size_t flagged = 0; flagged < ranks; ++flagged) {
        std::vector<std::uint8_t> priced(ranks, 0);
        priced[flagged] = 1;
        const detail::launch_seconds some = detail::launch_set_seconds(p, per_pair, slow, every_pair, priced);
        for (std::size_t r = 0; r < ranks; ++r) {
          CHECK(some.own[r] == (r == flagged ? sets.own[r] : best.own[r]));
          CHECK(some.gathered[r] == (r == flagged ? sets.gathered[r] : best.gathered[r]));
        }
      }
      CHECK_THROWS_AS(detail::launch_set_seconds(p, per_pair, slow, every_pair, std::vector<std::uint8_t>(ranks + 1, 1)), invalid_argument);
    }
  }
}

TEST_CASE("launch sets: the heaviest blocks with disjoint ranges, against brute force", "[sim][planner]") {
  random_generator rng(2026, 11);
  detail::interval_scratch scratch;
  for (int trial = 0; trial < 300; ++trial) {
    const auto n = static_cast<std::size_t>(1 + rng.below(9));
    std::vector<detail::ring_block> blocks;
    for (std::size_t i = 0; i < n; ++i) {
      const auto begin = static_cast<token_count>(rng.below(40)), size = static_cast<token_count>(1 + rng.below(15));
      const token_range q{begin, begin + size}, k{size, 2 * size + begin / 2};
      blocks.push_back({0, 0, q, k, 1 + static_cast<double>(rng.below(100))});
    }
    for (token_range detail::ring_block::*side : {&detail::ring_block::q, &detail::ring_block::k}) {
      double best = 0;
      for (std::uint32_t set = 0; set < (1u << n); ++set) {
        bool disjoint = true;
        double x = 0;
        for (std::size_t i = 0; i < n && disjoint; ++i) {
          if (!(set >> i & 1)) continue;
          x += blocks[i].x;
          for (std::size_t j = 0; j < i; ++j)
            if (set >> j & 1) {
              const token_range a = blocks[i].*side, b = blocks[j].*side;
              disjoint = disjoint && (a.end <= b.begin || b.end <= a.begin);
            }
        }
        if (disjoint) best = std::max(best, x);
      }
      CAPTURE(trial, n);
      CHECK(detail::heaviest_disjoint(blocks, side, scratch) == best);
    }
  }
}

TEST_CASE("launch sets: a round's cap per origin does not depend on the order of its blocks", "[sim][planner]") {
  // cap(origin) = the sum over the origin's sequences of the heaviest disjoint-query blocks, or
  // if less of the disjoint-key ones; blocks listed by sequence (as the bound lists them) or
  // shuffled must give the same caps, each origin once, ascending
  random_generator rng(2026, 12);
  detail::interval_scratch scratch;
  detail::launch_size_caps caps;  // reused: taking the caps leaves it empty for the next position
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<detail::ring_block> blocks;
    const auto n = static_cast<std::size_t>(1 + rng.below(40));
    for (std::size_t i = 0; i < n; ++i) {
      const auto begin = static_cast<token_count>(rng.below(40)), size = static_cast<token_count>(1 + rng.below(15));
      blocks.push_back({static_cast<std::int32_t>(rng.below(6)) + 3, static_cast<sequence_index>(rng.below(4)), {begin, begin + size},
                        {size, 2 * size + begin / 2}, 1 + static_cast<double>(rng.below(100))});
    }
    std::vector<std::pair<std::int32_t, double>> expected;
    for (std::int32_t origin = 0; origin < 10; ++origin) {
      double by_queries = 0, by_keys = 0;
      bool any = false;
      for (sequence_index seq = 0; seq < 4; ++seq) {
        std::vector<detail::ring_block> mine;
        for (const detail::ring_block& b : blocks)
          if (b.origin == origin && b.seq == seq) mine.push_back(b);
        if (mine.empty()) continue;
        any = true;
        by_queries += detail::heaviest_disjoint(mine, &detail::ring_block::q, scratch);
        by_keys += detail::heaviest_disjoint(mine, &detail::ring_block::k, scratch);
      }
      if (any) expected.emplace_back(origin, std::min(by_queries, by_keys));
    }
    for (const bool by_sequence : {true, false}) {
      std::vector<detail::ring_block> listed = blocks;
      if (by_sequence)
        std::stable_sort(listed.begin(), listed.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
      // as launch_set_seconds adds them: one sequence's blocks at a time, in its listed order
      std::vector<std::pair<std::int32_t, double>> got;
      for (sequence_index seq = 0; seq < 4; ++seq) {
        std::vector<detail::ring_block> of_sequence;
        for (const detail::ring_block& b : listed)
          if (b.seq == seq) of_sequence.push_back(b);
        detail::add_sequence_caps(of_sequence, scratch, caps);
      }
      detail::take_launch_size_caps(caps, [&](std::int32_t origin, double x) { got.emplace_back(origin, x); });
      CAPTURE(trial, by_sequence);
      REQUIRE(got.size() == expected.size());
      for (std::size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].first == expected[i].first);
        CHECK(got[i].second == Approx(expected[i].second).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("launch sets: a plan's seconds do not depend on the order of each rank's shards", "[sim][planner]") {
  // the bound orders the shards by a unique key (level, group, sequence, rank, first row):
  // shuffling each placement, which puts a rank's zigzag head after its tail, must change no bit
  const detail::launch_slowdown slow = slowdown_of_cluster_c();
  random_generator rng(2026, 13);
  for (int trial = 0; trial < 60; ++trial) {
    const topology t = cluster_by_name("c", static_cast<int>(1 + rng.below(3)), static_cast<int>(1 + rng.below(4)));
    std::vector<token_count> lengths;
    for (int i = 0, n = static_cast<int>(1 + rng.below(30)); i < n; ++i) lengths.push_back(static_cast<token_count>(1 + rng.below(3000)));
    const batch b(lengths);
    const token_count capacity = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks() + 64;
    for (const plan& p : {even_split{.capacity = capacity}.partition(b, t), hierarchical<>{.capacity = capacity}.partition(b, t),
                          micro_batched<hybrid_dp>{.capacity = capacity, .inner = {}, .micro_batches = 2}.partition(b, t)}) {
      const detail::launch_seconds in_order = detail::launch_set_seconds(p, 1e-12, slow, every_pair);
      plan shuffled = p;
      for (placement& pl : shuffled.placements)
        for (std::size_t i = pl.shards.size(); i > 1; --i) std::swap(pl.shards[i - 1], pl.shards[rng.below(i)]);
      const detail::launch_seconds any_order = detail::launch_set_seconds(shuffled, 1e-12, slow, every_pair);
      CAPTURE(trial, p.method);
      CHECK(any_order.own == in_order.own);
      CHECK(any_order.gathered == in_order.gathered);
    }
  }
}

TEST_CASE("launch sets: a zigzag round whose queries read one key chunk twice takes two launches", "[sim][planner]") {
  // chunks c0 .. c3 of one sequence over a ring of two: rank 0 holds c0 and c3, rank 1 c1 and
  // c2. Rank 0's round 0: c0 causal, c3 against c0 (full) and c3 causal; at most c0 causal and
  // one of c3's blocks share a launch (c3's query rows, and c0's key rows, appear once per
  // launch). Round 1: c3 against c1 and against c2, both full: one launch each.
  const detail::launch_slowdown slow = slowdown_of_cluster_c();
  const token_count q = 1024;
  const double per_pair = 1e-12;
  plan p{"manual", 1, 2, 4 * q, {placement{}, placement{}}, {ring_group{0, zone_kind::intra_node, {0, 1}, collective_kind::ring}}, {}};
  p.placements[0].shards = {shard{0, {0, q}, 0, 0}, shard{0, {3 * q, 4 * q}, 0, 0}};
  p.placements[1].shards = {shard{0, {q, 2 * q}, 0, 0}, shard{0, {2 * q, 3 * q}, 0, 0}};
  const detail::launch_seconds s = detail::launch_set_seconds(p, per_pair, slow, every_pair);
  const double causal = static_cast<double>(causal_pairs(q)), full = static_cast<double>(q) * static_cast<double>(q);
  const double x_full = std::sqrt(2 * full - static_cast<double>(q));
  const double round0 = (2 * causal + full) * slow.at(static_cast<double>(q) + x_full), round1 = 2 * full * slow.at(x_full);
  CHECK(s.own[0] == Approx(per_pair * (round0 + round1)).epsilon(1e-12));
  CHECK(slow.at(x_full) > slow.at(2 * x_full));  // one launch of both blocks would be faster
}

TEST_CASE("launch sets: a sequence shorter than a tile pays its padding", "[sim][planner]") {
  const detail::launch_slowdown slow = slowdown_of_cluster_c();
  const double per_pair = 1e-12;
  const token_count n = 32;  // a quarter of a 128-row tile
  const plan p{"manual", 1, 1, n, {placement{{shard{0, {0, n}, no_group, 0}}}}, {}, {}};
  const detail::launch_seconds s = detail::launch_set_seconds(p, per_pair, slow, every_pair);
  CHECK(s.own[0] == Approx(per_pair * static_cast<double>(causal_pairs(n)) * 4 * slow.at(128)).epsilon(1e-12));
}
