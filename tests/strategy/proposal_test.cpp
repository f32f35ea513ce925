// tests/strategy/proposal_test.cpp
// The strategy proposal (strategy/strategy_proposal.hpp): both exact searches (over GPU counts
// and over the largest cost) equal a brute force over interval partitions on small instances
// and each other on larger ones, t monotone in GPUs and lengths, the strategies within the
// GPU budget, the candidate set distinct with a homogeneous strategy, and clear errors.
#include <catch2/catch.hpp>
#include <zeppelin/strategy.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

#include "../support/expect_error.hpp"
#include "helpers.hpp"

using namespace zeppelin;
using namespace strategy_test;

namespace {

// Brute force of the proposal's model: split the cells 1..g into consecutive intervals, give
// each interval d pipelines of one scheme that holds it, within N GPUs; least largest cost.
double brute_force(const detail::strategy_cells& cells, int g) {
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, long long, double)> go = [&](int from, long long left, double top) {
    if (top >= best) return;
    if (from == g) {
      best = top;
      return;
    }
    for (int to = from + 1; to <= g; ++to)
      for (std::size_t k = 0; k < cells.schemes(); ++k) {
        if (!cells.holds(k, to)) continue;
        for (long long d = 1; d * cells.scheme(k).scheme.gpus() <= left; ++d)
          go(to, left - d * cells.scheme(k).scheme.gpus(), std::max(top, cells.cost(k, d, from, to)));
      }
  };
  go(0, cells.gpus(), 0);
  return best;
}

// A search's answer for every prefix: non-decreasing, and reached by its strategy within N.
void require_consistent(const detail::strategy_cells& cells, const detail::strategy_solution& s) {
  REQUIRE(s.latency.size() == static_cast<std::size_t>(cells.cells() + 1));
  REQUIRE(s.latency[0] == 0);
  for (int g = 1; g <= cells.cells(); ++g) {
    const auto gi = static_cast<std::size_t>(g);
    REQUIRE(s.latency[gi] >= s.latency[gi - 1]);
    if (s.latency[gi] == std::numeric_limits<double>::infinity()) continue;
    REQUIRE(cells.gpus_of(s.intervals[gi]) <= cells.gpus());
    REQUIRE(cells.top(s.intervals[gi]) == s.latency[gi]);
    int at = g;  // the intervals tile cells 1..g, last first
    for (const detail::strategy_interval& i : s.intervals[gi]) {
      REQUIRE(i.to == at);
      REQUIRE(i.pipelines >= 1);
      REQUIRE(cells.holds(static_cast<std::size_t>(i.scheme), i.to));
      at = i.from;
    }
    REQUIRE(at == 0);
  }
}

}  // namespace

TEST_CASE("both strategy searches equal a brute force over interval partitions on small instances", "[strategy]") {
  random_generator rng(11);
  int feasible = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::vector<scheme_profile> schemes = random_profiles(rng, 1, 3, 200, 1200);
    std::vector<token_count> sample(static_cast<std::size_t>(rng.between(1, 7)));
    for (auto& l : sample) l = rng.between(1, 1000);
    const long long N = rng.between(1, 7);
    const detail::strategy_cells cells(schemes, N, sample, 128, 1);
    INFO("trial " << trial);
    const detail::strategy_solution table = detail::gpu_table_search(cells), threshold = detail::threshold_search(cells);
    require_consistent(cells, table);
    require_consistent(cells, threshold);
    for (int g = 1; g <= cells.cells(); ++g) {
      const double expected = brute_force(cells, g);
      REQUIRE(table.latency[static_cast<std::size_t>(g)] == expected);
      REQUIRE(threshold.latency[static_cast<std::size_t>(g)] == expected);
    }
    if (table.latency.back() < std::numeric_limits<double>::infinity()) ++feasible;
  }
  REQUIRE(feasible > 50);
}

TEST_CASE("the threshold search equals the dynamic program over GPU counts on every prefix", "[strategy]") {
  // Clusters and samples past brute force: exact equality of every t[g]. A small candidate
  // limit forces the narrowing path as well.
  random_generator rng(23);
  for (int trial = 0; trial < 40; ++trial) {
    const std::vector<scheme_profile> schemes = random_profiles(rng, 1, 5, 500, 20000);
    std::vector<token_count> sample(static_cast<std::size_t>(rng.between(1, 300)));
    for (auto& l : sample) l = rng.below(8) == 0 ? rng.between(4000, 20000) : rng.between(1, 4000);
    const long long N = rng.between(1, 96);
    const detail::strategy_cells cells(schemes, N, sample, rng.between(64, 1024), static_cast<double>(rng.between(1, 4)));
    INFO("trial " << trial << " N " << N << " cells " << cells.cells());
    const detail::strategy_solution table = detail::gpu_table_search(cells);
    const detail::strategy_solution threshold = detail::threshold_search(cells, trial % 2 == 0 ? std::size_t{1} << 16 : 8);
    require_consistent(cells, threshold);
    REQUIRE(threshold.latency == table.latency);
  }
}

TEST_CASE("strategy_dp: monotone in GPUs, with clear errors for cells out of range", "[strategy]") {
  const std::vector<scheme_profile> schemes = {profile(1, 1, 4096, 1e-7, 1e-3, 0.01), profile(2, 1, 16384, 6e-8, 6e-4, 0.01)};
  random_generator rng(5);
  std::vector<token_count> sample(200);
  for (auto& l : sample) l = rng.between(64, 16000);
  double previous = std::numeric_limits<double>::infinity();
  for (long long n = 1; n <= 40; n += 3) {
    const strategy_dp dp(schemes, n, sample);
    REQUIRE(dp.latency(dp.cells()) <= previous);
    previous = dp.latency(dp.cells());
  }
  const strategy_dp dp(schemes, 8, sample);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)dp.latency(dp.cells() + 1); }).value("cell") == dp.cells() + 1);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)dp.cell_max(0); }).value("lowest") == 1);
  REQUIRE(authors_length_step(64) == 128);
  REQUIRE(authors_length_step(1024) == 1024);
}

TEST_CASE("propose_strategies: distinct candidates within the budget, a homogeneous one, and errors", "[strategy]") {
  const std::vector<scheme_profile> schemes = {profile(1, 1, 4096, 1e-7, 1e-3, 0.01), profile(2, 1, 16384, 6e-8, 6e-4, 0.01),
                                               profile(4, 2, 65536, 2e-8, 3e-4, 0.02)};
  random_generator rng(3);
  std::vector<token_count> sample(400);
  for (auto& l : sample) l = rng.below(10) == 0 ? rng.between(8192, 60000) : rng.between(64, 4096);
  const std::vector<strategy> candidates = propose_strategies(schemes, 32, sample);
  REQUIRE(!candidates.empty());
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    REQUIRE(candidates[i].gpus() <= 32);
    for (std::size_t j = 0; j < i; ++j) REQUIRE_FALSE(candidates[i].same_pipelines(candidates[j]));
  }
  REQUIRE(std::any_of(candidates.begin(), candidates.end(), [](const strategy& s) { return s.parts.size() == 1; }));
  // the strategy for the whole sample uses the long-sequence scheme, and beats every single-scheme one
  const strategy_dp dp(schemes, 32, sample);
  REQUIRE(dp.strategy_at(dp.cells()).parts.back().profile.scheme.tp == 4);

  const std::vector<token_count> too_long = {100, 70000};
  const auto e = zeppelin_test::expect_error<infeasible>([&] { (void)propose_strategies(schemes, 32, too_long); });
  REQUIRE(e.value("longest") == 70000);
  REQUIRE(e.value("largest_max_len") == 65536);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)strategy_dp(schemes, 0, sample); }).value("gpus") == 0);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)strategy_dp(schemes, 8, sample, {.length_step = 0}); }).value("length_step") == 0);
  REQUIRE_THROWS_AS(strategy_dp(schemes, 8, std::vector<token_count>{}), invalid_argument);
}
