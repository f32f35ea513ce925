// The one water fill (zeppelin/detail/water_fill.hpp) against brute force: the greedy choice
// of the cheapest next unit, one unit at a time (ties lowest index), with unit u of item k
// worth h_k + u exactly, h_k = base_k / slope in double (NaN as +inf; a flat or non-finite
// slope makes every unit equal). The oracle sums in long double, exact for the values drawn
// here (integers below 2^64, or small h_k with 52 fractional bits plus units below 2^8). Both uses: the partitioner's level form (bins of loads under one
// capacity, also checked against its level definition) and the remap's general form (bases
// b cap_k, slope |c - b|, including slopes tiny against the bases and overflowing bases).
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/detail/water_fill.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace zeppelin;

namespace {

static_assert(std::numeric_limits<long double>::digits >= 64, "the oracle needs a 64-bit significand (x86 long double)");

std::vector<token_count> greedy(const std::vector<double>& base, double slope, const std::vector<token_count>& cap,
                                token_count amount) {
  const std::size_t n = cap.size();
  const bool flat = !(slope > 0) || !std::isfinite(slope);
  std::vector<double> h(n, 0.0);
  for (std::size_t k = 0; k < n && !flat; ++k) {
    h[k] = base[k] / slope;
    if (std::isnan(h[k])) h[k] = std::numeric_limits<double>::infinity();
  }
  std::vector<token_count> z(n, 0);
  for (token_count placed = 0; placed < amount; ++placed) {
    std::size_t best = n;
    long double best_value = 0;
    for (std::size_t k = 0; k < n; ++k) {
      if (z[k] >= cap[k]) continue;
      const long double v = flat ? 0.0L : static_cast<long double>(h[k]) + static_cast<long double>(z[k] + 1);
      if (best == n || v < best_value) best = k, best_value = v;
    }
    if (best == n) break;
    ++z[best];
  }
  return z;
}

// The partitioner's level definition: the largest integer level lambda <= cap with
// sum max(0, lambda - x_j) <= amount, bins below raised to it, the leftover one each to the
// lowest-index bins with x_j <= lambda.
std::vector<token_count> level_oracle(const std::vector<token_count>& load, token_count cap, token_count amount) {
  token_count level = 0;
  for (token_count v = 0; v <= cap; ++v) {
    token_count need = 0;
    for (const token_count x : load) need += std::max<token_count>(0, v - x);
    if (need <= amount) level = v;
  }
  std::vector<token_count> share(load.size(), 0);
  token_count left = amount;
  for (std::size_t j = 0; j < load.size(); ++j)
    if (load[j] < level) share[j] = level - load[j], left -= share[j];
  for (std::size_t j = 0; j < load.size() && left > 0; ++j)
    if (load[j] <= level) ++share[j], --left;
  return share;
}

}  // namespace

TEST_CASE("water_fill, level form: the greedy cheapest units and the level definition", "[remap][water_fill]") {
  random_generator rng(41);
  for (int trial = 0; trial < 3000; ++trial) {
    const auto m = static_cast<std::size_t>(rng.between(1, 8));
    const token_count cap = rng.between(0, trial % 3 == 0 ? 4 : 60);
    std::vector<token_count> load(m), room(m);
    std::vector<double> base(m);
    token_count total = 0;
    for (std::size_t k = 0; k < m; ++k) {
      load[k] = rng.between(0, cap);
      if (rng.below(4) == 0) load[k] = load[0];  // ties
      room[k] = cap - load[k];
      base[k] = static_cast<double>(load[k]);
      total += room[k];
    }
    const token_count amount = rng.between(0, total);
    INFO("trial " << trial << " bins " << m << " cap " << cap << " amount " << amount);
    const auto share = detail::water_fill(load, cap, amount);
    REQUIRE(share == greedy(base, 1.0, room, amount));
    REQUIRE(share == level_oracle(load, cap, amount));
  }
}

TEST_CASE("water_fill, general form: the greedy cheapest units, degenerate costs included", "[remap][water_fill]") {
  random_generator rng(42);
  detail::water_fill_scratch scratch;
  for (int trial = 0; trial < 6000; ++trial) {
    const auto n = static_cast<std::size_t>(rng.between(1, 8));
    std::vector<token_count> cap(n);
    for (auto& c : cap) c = rng.below(5) == 0 ? 0 : rng.between(0, trial % 2 ? 12 : 80);
    // the remap's use: base b cap_k, slope |c - b|; otherwise arbitrary bases
    const auto kind = rng.below(6);
    const double b = 0.25 + 4 * rng.uniform(), c = 0.25 + 4 * rng.uniform();
    std::vector<double> base(n);
    double slope = std::abs(c - b);
    for (std::size_t k = 0; k < n; ++k) base[k] = b * static_cast<double>(cap[k]);
    switch (kind) {
      case 0: break;
      case 1:  // nearly equal per-token costs: h_k ~ 1e16 .. 1e19
        slope = b * 2.220446049250313e-16 * static_cast<double>(rng.between(1, 4));
        break;
      case 2:  // cost times tokens overflows: infinite bases
        for (std::size_t k = 0; k < n; ++k) base[k] = 1e306 * static_cast<double>(cap[k]) * 1e10;
        slope = 1e306;
        break;
      case 3:  // flat: every split costs the same
        slope = rng.below(2) ? 0.0 : -1.0;
        break;
      case 4:  // integer-valued, many ties
        for (std::size_t k = 0; k < n; ++k) base[k] = static_cast<double>(rng.between(0, 6));
        slope = 1.0;
        break;
      default:  // huge but finite h_k, units of one item may round to equal values
        for (std::size_t k = 0; k < n; ++k) base[k] = std::ldexp(1.0 + rng.uniform(), 60) * (rng.below(2) ? 1 : 3);
        slope = 1.0;
        break;
    }
    token_count total = 0;
    for (const auto x : cap) total += x;
    const token_count amount = rng.between(0, total);
    std::vector<token_count> z(n, -7);
    detail::water_fill(base, slope, cap, amount, z, scratch);
    INFO("trial " << trial << " kind " << kind << " items " << n << " amount " << amount << " slope " << slope);
    REQUIRE(z == greedy(base, slope, cap, amount));
  }
}
