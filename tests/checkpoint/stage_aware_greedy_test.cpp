// tests/checkpoint/stage_aware_greedy_test.cpp
// greedy_stage_aware_checkpointing (checkpoint/stage_aware.hpp) on seeded random problems:
// its plan fits every window, is maximal (no diagonal can drop one more layer), never
// beats the exact optimum, refuses what the exact solver refuses, and is deterministic.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/random.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

using namespace zeppelin;

namespace {
stage_aware_problem random_stage_aware_problem(random_generator& g) {
  stage_aware_problem p;
  p.stages = static_cast<int>(g.between(1, 4));
  p.max_layers = static_cast<int>(g.between(1, 6));
  const auto n = static_cast<std::size_t>(g.between(1, 14));
  p.prefill_chunks = g.between(1, static_cast<std::int64_t>(n));
  std::vector<std::int64_t> backward(n);
  std::iota(backward.begin(), backward.end(), std::int64_t{0});
  // chains of random length reversed, as chunk-level 1F1B orders backwards
  for (std::size_t at = 0; at < n;) {
    const std::size_t len = std::min<std::size_t>(n - at, static_cast<std::size_t>(g.between(1, 3)));
    std::reverse(backward.begin() + static_cast<std::ptrdiff_t>(at), backward.begin() + static_cast<std::ptrdiff_t>(at + len));
    at += len;
  }
  for (std::size_t k = 0; k < n; ++k)
    p.chunks.push_back({backward[k], static_cast<double>(g.between(50, 400)), static_cast<double>(g.between(5, 60))});
  for (int s = 0; s < p.stages; ++s) p.budget_bytes.push_back(static_cast<double>(g.between(200, 1500)));
  return p;
}
}  // namespace

TEST_CASE("greedy stage-aware checkpointing: fits, maximal, never below the optimum", "[checkpoint][stage_aware]") {
  random_generator g(99);
  int solved = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const stage_aware_problem p = random_stage_aware_problem(g);
    CAPTURE(trial);
    stage_aware_plan exact;
    try {
      exact = solve_stage_aware_checkpointing(p);
    } catch (const infeasible&) {
      REQUIRE_THROWS_AS(greedy_stage_aware_checkpointing(p), infeasible);
      continue;
    }
    ++solved;
    const stage_aware_plan greedy = greedy_stage_aware_checkpointing(p);
    REQUIRE(greedy == greedy_stage_aware_checkpointing(p));
    REQUIRE(fits(p, greedy.diagonal_layers));
    REQUIRE(greedy.total_layers == std::accumulate(greedy.diagonal_layers.begin(), greedy.diagonal_layers.end(), std::int64_t{0}));
    REQUIRE(greedy.total_layers >= exact.total_layers);
    REQUIRE(greedy.lower_bound == 0);
    REQUIRE(greedy.backward_position == exact.backward_position);
    for (std::size_t i = 0; i < greedy.diagonal_layers.size(); ++i) {
      if (greedy.diagonal_layers[i] == 0) continue;
      std::vector<int> lower = greedy.diagonal_layers;
      --lower[i];
      REQUIRE(!fits(p, lower));  // maximal
    }
  }
  REQUIRE(solved > 100);
}
