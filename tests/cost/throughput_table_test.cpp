// tests/cost/throughput_table_test.cpp
// throughput_table: exact at the points, linear in log2(x) between them, clamped outside,
// monotone when the points are, time_monotone() as a checked predicate, and input errors.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/cost/throughput_table.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace zeppelin;

namespace {
std::vector<throughput_point> random_points(random_generator& rng, bool increasing_values) {
  std::vector<throughput_point> p;
  const auto n = 1 + rng.below(8);
  double x = 1 + 100 * rng.uniform(), v = 1e12 * (1 + rng.uniform());
  for (std::uint64_t i = 0; i < n; ++i) {
    p.push_back({x, v});
    x *= 1.01 + 3 * rng.uniform();
    v = increasing_values ? v * (1 + rng.uniform()) : 1e12 * (0.1 + 5 * rng.uniform());
  }
  return p;
}
}  // namespace

TEST_CASE("throughput_table interpolates linearly in log2(x) and clamps outside", "[cost][throughput_table]") {
  const throughput_table t{{1024, 100}, {4096, 300}, {65536, 340}};
  REQUIRE(t.at(1024) == 100);
  REQUIRE(t.at(4096) == 300);
  REQUIRE(t.at(65536) == 340);
  REQUIRE(t.at(2048) == Approx(200).epsilon(1e-14));               // half-way in log2
  REQUIRE(t.at(1024 * std::sqrt(2.0)) == Approx(150).epsilon(1e-14));
  REQUIRE(t.at(16384) == Approx(320).epsilon(1e-14));              // half-way 4096 .. 65536
  REQUIRE(t(8192) == t.at(8192));
  // Clamped at both ends.
  REQUIRE(t.at(1) == 100);
  REQUIRE(t.at(1023.999) == 100);
  REQUIRE(t.at(1e-300) == 100);
  REQUIRE(t.at(1e9) == 340);
  REQUIRE(t.at(std::numeric_limits<double>::max()) == 340);
  // A single point is a constant.
  const throughput_table one{{128, 7}};
  REQUIRE(one.at(1) == 7);
  REQUIRE(one.at(128) == 7);
  REQUIRE(one.at(1e6) == 7);
}

TEST_CASE("throughput_table is monotone and bounded by its neighbours (random tables)", "[cost][throughput_table]") {
  random_generator rng(2024, 3);
  for (int trial = 0; trial < 500; ++trial) {
    const auto points = random_points(rng, trial % 2 == 0);
    const throughput_table t(points);
    REQUIRE(t.size() == points.size());
    for (const auto& p : points) REQUIRE(t.at(p.x) == p.flops_per_second);
    const double lo = points.front().x / 4, hi = points.back().x * 4;
    double prev_x = lo, prev_v = t.at(lo);
    for (int s = 1; s <= 200; ++s) {
      const double x = lo * std::pow(hi / lo, s / 200.0);
      const double v = t.at(x);
      // Between the values of the enclosing points (or equal to the end value outside).
      std::size_t i = 0;
      while (i < points.size() && points[i].x <= x) ++i;
      const double a = points[i == 0 ? 0 : i - 1].flops_per_second;
      const double b = points[i == points.size() ? i - 1 : i].flops_per_second;
      REQUIRE(v >= std::min(a, b) * (1 - 1e-12));
      REQUIRE(v <= std::max(a, b) * (1 + 1e-12));
      if (trial % 2 == 0) REQUIRE(v >= prev_v * (1 - 1e-12));  // increasing points -> increasing table
      // time_monotone() is a promise: x / v never decreases.
      if (t.time_monotone()) REQUIRE(x / v >= prev_x / prev_v * (1 - 1e-12));
      prev_x = x;
      prev_v = v;
    }
  }
}

TEST_CASE("time_monotone detects a table where more work takes less time", "[cost][throughput_table]") {
  const throughput_table steep{{128, 10}, {256, 30}};  // 3x per doubling
  REQUIRE_FALSE(steep.time_monotone());
  REQUIRE(200 / steep.at(200) < 128 / steep.at(128));  // the violation is real
  REQUIRE(throughput_table{{128, 10}, {256, 16.9}}.time_monotone());      // 1.69x per doubling: fine
  REQUIRE_FALSE(throughput_table{{128, 10}, {256, 17.0}}.time_monotone()); // 1.70x: not
  REQUIRE(throughput_table{{128, 50}, {256, 10}}.time_monotone());        // falling rates are fine
}

TEST_CASE("throughput_table::scaled multiplies every value", "[cost][throughput_table]") {
  const throughput_table t{{1, 2}, {4, 8}};
  const auto s = t.scaled(0.5);
  REQUIRE(s.points() == std::vector<throughput_point>{{1, 1}, {4, 4}});
  REQUIRE(s.at(2) == Approx(t.at(2) / 2));
  REQUIRE_THROWS_AS(t.scaled(0), invalid_argument);
  REQUIRE_THROWS_AS(t.scaled(std::nan("")), invalid_argument);
}

TEST_CASE("throughput_table rejects bad input", "[cost][throughput_table]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  REQUIRE_THROWS_AS(throughput_table(std::vector<throughput_point>{}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{1, 1}, {nan, 2}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{1, nan}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{1, inf}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{inf, 1}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{0, 1}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{-4, 1}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{1, 0}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{1, -1}}), invalid_argument);
  REQUIRE_THROWS_AS((throughput_table{{1, 1}, {1, 2}}), invalid_argument);  // duplicate x
  try {
    throughput_table{{1, 1}, {8, 2}, {4, 3}};  // unsorted
    FAIL("unsorted table accepted");
  } catch (const invalid_argument& e) {
    REQUIRE(e.value("index") == 2.0);
    REQUIRE(e.value("previous_x") == 8.0);
    REQUIRE(e.value("x") == 4.0);
  }
  const throughput_table t{{1, 1}};
  REQUIRE_THROWS_AS(t.at(0), invalid_argument);
  REQUIRE_THROWS_AS(t.at(-1), invalid_argument);
  REQUIRE_THROWS_AS(t.at(nan), invalid_argument);
  REQUIRE_THROWS_AS(t.at(inf), invalid_argument);
  REQUIRE_THROWS_AS(throughput_table{}.at(1), invalid_argument);
  REQUIRE(throughput_table{}.empty());
}
