// tests/strategy/proposal_test.cpp
// The strategy-proposal dynamic program (strategy/strategy_proposal.hpp): t monotone in GPUs
// and lengths, equal to a brute force over interval partitions on small instances, the
// strategies within the GPU budget, the candidate set distinct with a homogeneous strategy,
// and a clear error when no scheme holds the longest sequence.
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

// Brute force of the DP's model: split the cells 1..G into consecutive intervals, give
// each interval d pipelines of one scheme that holds it, within n GPUs; least largest cost.
double brute_force(const strategy_dp& dp, std::span<const scheme_profile> schemes, long long n) {
  const int G = dp.cells();
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, long long, double)> go = [&](int from, long long left, double top) {
    if (top >= best) return;
    if (from == G) {
      best = top;
      return;
    }
    for (int g = from + 1; g <= G; ++g)
      for (std::size_t k = 0; k < schemes.size(); ++k) {
        if (schemes[k].max_len < dp.cell_max(g)) continue;
        for (int d = 1; d * schemes[k].scheme.gpus() <= left; ++d)
          go(g, left - d * schemes[k].scheme.gpus(), std::max(top, dp.interval_cost(k, d, from, g)));
      }
  };
  go(0, n, 0);
  return best;
}

}  // namespace

TEST_CASE("the strategy DP equals a brute force over interval partitions on small instances", "[strategy]") {
  random_generator rng(11);
  int feasible = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::vector<scheme_profile> schemes;
    const int K = static_cast<int>(rng.between(1, 3));
    for (int k = 0; k < K; ++k) schemes.push_back(random_profile(rng, 200, 1200));
    std::vector<token_count> sample(static_cast<std::size_t>(rng.between(1, 7)));
    for (auto& l : sample) l = rng.between(1, 1000);
    const long long N = rng.between(1, 7);
    const strategy_dp dp(schemes, N, sample, {.length_step = 128});
    INFO("trial " << trial);
    for (long long n = 0; n <= N; ++n)
      for (int g = 0; g <= dp.cells(); ++g) {
        if (n > 0) REQUIRE(dp.latency(n, g) <= dp.latency(n - 1, g));
        if (g > 0) REQUIRE(dp.latency(n, g) >= dp.latency(n, g - 1));
      }
    const double expected = brute_force(dp, schemes, N);
    const double got = dp.latency(N, dp.cells());
    if (expected == std::numeric_limits<double>::infinity()) {
      REQUIRE(got == expected);
      continue;
    }
    ++feasible;
    REQUIRE(got == Approx(expected).epsilon(1e-12));
    const strategy s = dp.strategy_at(N, dp.cells());
    REQUIRE(s.gpus() <= N);
    REQUIRE(s.pipelines() >= 1);
    for (const strategy_part& p : s.parts) REQUIRE(p.pipelines >= 1);
  }
  REQUIRE(feasible > 50);
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
  REQUIRE(dp.strategy_at(32, dp.cells()).parts.back().profile.scheme.tp == 4);

  const std::vector<token_count> too_long = {100, 70000};
  const auto e = zeppelin_test::expect_error<infeasible>([&] { (void)propose_strategies(schemes, 32, too_long); });
  REQUIRE(e.value("longest") == 70000);
  REQUIRE(e.value("largest_max_len") == 65536);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)strategy_dp(schemes, 0, sample); }).value("gpus") == 0);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)strategy_dp(schemes, 8, sample, {.length_step = 0}); }).value("length_step") == 0);
  REQUIRE_THROWS_AS(strategy_dp(schemes, 8, std::vector<token_count>{}), invalid_argument);
}
