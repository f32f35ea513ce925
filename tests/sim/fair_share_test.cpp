// Max-min fair rates (sim/detail/fair_share.hpp) on seeded random flow sets: equal to a plain
// progressive filling that rescans every port each round, within capacity, and max-min fair
// (every flow crosses a saturated port on which no flow gets more), also when the solver's
// scratch is reused across calls of different sizes.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/sim/detail/fair_share.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace zeppelin;

namespace {

struct flow_set {
  std::vector<double> capacity;
  std::vector<std::int32_t> send, receive;
};

// `ports` ports of capacity 1..100 (a few of them equal, so shares tie), `flows` flows between
// two distinct ports, half of them through a few busy ports
flow_set random_flows(random_generator& rng, int ports, int flows) {
  flow_set s;
  for (int p = 0; p < ports; ++p) s.capacity.push_back(p % 5 == 0 ? 50.0 : 1.0 + static_cast<double>(rng.below(100)));
  const auto port = [&] {
    return rng.below(2) == 0 ? static_cast<std::int32_t>(rng.below(std::min<std::uint64_t>(3, static_cast<std::uint64_t>(ports))))
                             : static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(ports)));
  };
  for (int f = 0; f < flows; ++f) {
    std::int32_t a = port(), b = port();
    while (b == a) b = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(ports)));
    s.send.push_back(a);
    s.receive.push_back(b);
  }
  return s;
}

// progressive filling by rescanning: each round the port of least share (capacity left /
// unfrozen flows; ties: lower index) fixes its unfrozen flows at that share, in flow order
std::vector<double> reference_rates(const flow_set& s) {
  const std::size_t n = s.send.size();
  std::vector<double> rates(n, 0.0), left = s.capacity;
  std::vector<int> users(s.capacity.size(), 0);
  std::vector<char> frozen(n, 0);
  for (std::size_t i = 0; i < n; ++i) ++users[static_cast<std::size_t>(s.send[i])], ++users[static_cast<std::size_t>(s.receive[i])];
  for (;;) {
    std::int32_t best = -1;
    double least = 0;
    for (std::size_t p = 0; p < left.size(); ++p)
      if (users[p] > 0 && (best < 0 || left[p] / users[p] < least)) best = static_cast<std::int32_t>(p), least = left[p] / users[p];
    if (best < 0) return rates;
    for (std::size_t i = 0; i < n; ++i) {
      if (frozen[i] || (s.send[i] != best && s.receive[i] != best)) continue;
      frozen[i] = 1;
      rates[i] = least;
      for (const std::int32_t x : {s.send[i], s.receive[i]}) {
        left[static_cast<std::size_t>(x)] = std::max(0.0, left[static_cast<std::size_t>(x)] - least);
        --users[static_cast<std::size_t>(x)];
      }
    }
  }
}

void check_max_min(const flow_set& s, const std::vector<double>& rates) {
  std::vector<double> load(s.capacity.size(), 0.0), top(s.capacity.size(), 0.0);
  for (std::size_t i = 0; i < rates.size(); ++i)
    for (const std::int32_t p : {s.send[i], s.receive[i]}) {
      load[static_cast<std::size_t>(p)] += rates[i];
      top[static_cast<std::size_t>(p)] = std::max(top[static_cast<std::size_t>(p)], rates[i]);
    }
  for (std::size_t p = 0; p < load.size(); ++p) CHECK(load[p] <= s.capacity[p] * (1 + 1e-12));
  for (std::size_t i = 0; i < rates.size(); ++i) {
    CHECK(rates[i] > 0);
    bool bottleneck = false;
    for (const std::int32_t p : {s.send[i], s.receive[i]}) {
      const auto q = static_cast<std::size_t>(p);
      bottleneck = bottleneck || (load[q] >= s.capacity[q] * (1 - 1e-9) && rates[i] >= top[q] * (1 - 1e-12));
    }
    CHECK(bottleneck);
  }
}

}  // namespace

TEST_CASE("fair share equals progressive filling and is max-min fair on random flow sets", "[sim][fair_share]") {
  random_generator rng(20261126, 3);
  detail::fair_share_state solver;
  int compared = 0;
  for (const int ports : {2, 3, 8, 40}) {
    solver = {};
    solver.capacity.clear();
    for (int trial = 0; trial < 60; ++trial) {
      const flow_set s = random_flows(rng, ports, static_cast<int>(rng.below(trial % 3 == 0 ? 6 : 200)));
      solver.capacity = s.capacity;
      std::vector<double> rates;
      solver.solve(s.send, s.receive, rates);  // the scratch of the previous call is reused
      const std::vector<double> expected = reference_rates(s);
      REQUIRE(rates.size() == expected.size());
      for (std::size_t i = 0; i < rates.size(); ++i) CHECK(rates[i] == Approx(expected[i]).epsilon(1e-12));
      check_max_min(s, rates);
      ++compared;
    }
  }
  CHECK(compared == 240);
}

TEST_CASE("fair share: flows on disjoint ports do not affect each other", "[sim][fair_share]") {
  detail::fair_share_state solver;
  solver.capacity = {10, 10, 30, 30};
  std::vector<double> rates;
  // two flows share port 0 (5 each); one alone on ports 2 -> 3 gets all of 30
  solver.solve({0, 0, 2}, {1, 1, 3}, rates);
  CHECK(rates == std::vector<double>{5, 5, 30});
  solver.solve({}, {}, rates);
  CHECK(rates.empty());
}
