// The launch sets of the plan step bound (sim/detail/launch_set_bound.hpp): the exact seconds
// of a ring of two on hand-computed blocks; a rank in two rings of one level priced per round
// over both (fused launches join them); the fallback for a level over the block budget is
// the best-rate price; sets never price below it. (That the bound stays below the simulated
// step is tests/sim/cost_driven_planner_test.cpp.)
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/detail/launch_set_bound.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
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
