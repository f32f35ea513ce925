// tests/cost/quadratic_fit_test.cpp
// fit_quadratic / fit_quadratic_no_intercept: exact recovery from noiseless points up to
// lengths of 10^6, least-squares optimality on noisy seeded points (the residual is
// orthogonal to every column, and an independent normal-equation solve agrees), errors.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/cost/quadratic_fit.hpp>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

using namespace zeppelin;

namespace {
// Gaussian elimination with partial pivoting on the (scaled) normal equations in long
// double: an independent oracle for small, well-scaled problems.
template <std::size_t K>
std::array<long double, K> normal_equations(const std::vector<profile_point>& pts, long double scale) {
  std::array<std::array<long double, K + 1>, K> m{};
  for (const auto& p : pts) {
    const long double x = p.length / scale;
    std::array<long double, K> row{};
    row[0] = x * x;
    row[1] = x;
    if constexpr (K == 3) row[2] = 1;
    for (std::size_t i = 0; i < K; ++i) {
      for (std::size_t j = 0; j < K; ++j) m[i][j] += row[i] * row[j];
      m[i][K] += row[i] * p.seconds;
    }
  }
  for (std::size_t c = 0; c < K; ++c) {
    std::size_t best = c;
    for (std::size_t r = c + 1; r < K; ++r)
      if (std::fabs(m[r][c]) > std::fabs(m[best][c])) best = r;
    std::swap(m[c], m[best]);
    for (std::size_t r = 0; r < K; ++r) {
      if (r == c) continue;
      const long double f = m[r][c] / m[c][c];
      for (std::size_t j = c; j <= K; ++j) m[r][j] -= f * m[c][j];
    }
  }
  std::array<long double, K> z{};
  for (std::size_t i = 0; i < K; ++i) z[i] = m[i][K] / m[i][i];
  z[0] /= scale * scale;
  z[1] /= scale;
  return z;
}

double rss(const std::vector<profile_point>& pts, const quadratic_profile& q) {
  long double s = 0;
  for (const auto& p : pts) {
    const long double r = static_cast<long double>(q.at(p.length)) - p.seconds;
    s += r * r;
  }
  return static_cast<double>(s);
}
}  // namespace

TEST_CASE("fit_quadratic recovers noiseless coefficients up to lengths of 1e6", "[cost][quadratic_fit]") {
  const quadratic_profile truth{.a = 3.2e-12, .b = 4.5e-7, .c = 2.1e-3};
  std::vector<profile_point> pts;
  for (double l = 1000; l <= 1e6; l *= 1.7) pts.push_back({l, truth.at(l)});
  pts.push_back({1e6, truth.at(1e6)});
  const auto fit = fit_quadratic(pts);
  REQUIRE(fit.a == Approx(truth.a).epsilon(1e-9));
  REQUIRE(fit.b == Approx(truth.b).epsilon(1e-9));
  REQUIRE(fit.c == Approx(truth.c).epsilon(1e-9));

  // Exactly three points determine it too, and small lengths with a dominant constant.
  const quadratic_profile small{.a = 1e-9, .b = 2e-6, .c = 5e-4};
  const std::vector<profile_point> three{{1, small.at(1)}, {2, small.at(2)}, {3, small.at(3)}};
  const auto f3 = fit_quadratic(three);
  REQUIRE(f3.a == Approx(small.a).epsilon(1e-9));
  REQUIRE(f3.b == Approx(small.b).epsilon(1e-9));
  REQUIRE(f3.c == Approx(small.c).epsilon(1e-9));
}

TEST_CASE("fit_quadratic_no_intercept recovers a d^2 + b d", "[cost][quadratic_fit]") {
  const quadratic_profile truth{.a = 7.5e-12, .b = 1.25e-7, .c = 0};
  std::vector<profile_point> pts{{0, 0}};  // a zero-length point is allowed and carries no information
  for (double l = 512; l <= 1048576; l *= 2) pts.push_back({l, truth.at(l)});
  const auto fit = fit_quadratic_no_intercept(pts);
  REQUIRE(fit.a == Approx(truth.a).epsilon(1e-9));
  REQUIRE(fit.b == Approx(truth.b).epsilon(1e-9));
  REQUIRE(fit.c == 0);
  const std::vector<profile_point> two{{100, truth.at(100)}, {300, truth.at(300)}};
  REQUIRE(fit_quadratic_no_intercept(two).a == Approx(truth.a).epsilon(1e-9));
}

TEST_CASE("fits are least-squares optimal on noisy points", "[cost][quadratic_fit]") {
  random_generator rng(31337, 0);
  for (int trial = 0; trial < 50; ++trial) {
    const quadratic_profile truth{.a = 1e-12 * (1 + rng.uniform()), .b = 1e-7 * (1 + rng.uniform()), .c = 1e-3 * rng.uniform()};
    std::vector<profile_point> pts;
    const auto n = static_cast<int>(rng.between(4, 40));
    const double max_len = trial % 2 ? 1e6 : 3e4;
    for (int i = 0; i < n; ++i) {
      const double l = static_cast<double>(rng.between(1, static_cast<std::int64_t>(max_len)));
      pts.push_back({l, truth.at(l) * (0.9 + 0.2 * rng.uniform())});
    }
    pts.push_back({max_len, truth.at(max_len)});
    for (const bool intercept : {true, false}) {
      const auto fit = intercept ? fit_quadratic(pts) : fit_quadratic_no_intercept(pts);
      // Residual orthogonal to each column (scaled by the column's and the data's norms).
      long double g[3] = {0, 0, 0}, n2[3] = {0, 0, 0}, ny = 0;
      for (const auto& p : pts) {
        const long double x = p.length / max_len;
        const long double r = static_cast<long double>(fit.at(p.length)) - p.seconds;
        const long double col[3] = {x * x, x, 1};
        for (int j = 0; j < 3; ++j) {
          g[j] += col[j] * r;
          n2[j] += col[j] * col[j];
        }
        ny += static_cast<long double>(p.seconds) * p.seconds;
      }
      for (int j = 0; j < (intercept ? 3 : 2); ++j)
        REQUIRE(std::fabs(static_cast<double>(g[j] / std::sqrt(n2[j] * ny))) < 1e-12);
      // No nearby coefficient vector does better.
      const double best = rss(pts, fit);
      const double typical = truth.at(max_len);
      for (const double eps : {1e-4, -1e-4}) {
        REQUIRE(rss(pts, {fit.a * (1 + eps), fit.b, fit.c}) > best);
        REQUIRE(rss(pts, {fit.a, fit.b * (1 + eps), fit.c}) > best);
        if (intercept) REQUIRE(rss(pts, {fit.a, fit.b, fit.c + eps * typical}) > best);
      }
      // The independent normal-equation solve agrees.
      if (intercept) {
        const auto z = normal_equations<3>(pts, max_len);
        REQUIRE(fit.a == Approx(static_cast<double>(z[0])).epsilon(1e-7));
        REQUIRE(fit.b == Approx(static_cast<double>(z[1])).epsilon(1e-7));
        REQUIRE(fit.c == Approx(static_cast<double>(z[2])).epsilon(1e-7).margin(1e-12));
      } else {
        const auto z = normal_equations<2>(pts, max_len);
        REQUIRE(fit.a == Approx(static_cast<double>(z[0])).epsilon(1e-7));
        REQUIRE(fit.b == Approx(static_cast<double>(z[1])).epsilon(1e-7));
      }
    }
  }
}

TEST_CASE("fits reject too few distinct lengths and bad values", "[cost][quadratic_fit]") {
  const std::vector<profile_point> two{{100, 1}, {200, 2}, {200, 2.5}};
  REQUIRE_THROWS_AS(fit_quadratic(two), invalid_argument);
  REQUIRE_NOTHROW(fit_quadratic_no_intercept(two));
  const std::vector<profile_point> one_positive{{0, 0}, {200, 2}, {200, 3}};
  REQUIRE_THROWS_AS(fit_quadratic_no_intercept(one_positive), invalid_argument);
  REQUIRE_THROWS_AS(fit_quadratic(std::vector<profile_point>{}), invalid_argument);
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const profile_point bad : {profile_point{nan, 1}, profile_point{1, nan}, profile_point{inf, 1}, profile_point{1, inf},
                                  profile_point{-1, 1}, profile_point{1, -1}}) {
    const std::vector<profile_point> pts{{1, 1}, {2, 2}, {3, 4}, bad};
    REQUIRE_THROWS_AS(fit_quadratic(pts), invalid_argument);
    REQUIRE_THROWS_AS(fit_quadratic_no_intercept(pts), invalid_argument);
  }
  try {
    (void)fit_quadratic(two);
    FAIL("expected invalid_argument");
  } catch (const invalid_argument& e) {
    REQUIRE(e.value("distinct_lengths") == 2.0);
    REQUIRE(e.value("needed") == 3.0);
  }
}
