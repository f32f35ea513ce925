// tests/strategy/helpers.hpp
// Shared by the strategy tests: synthetic scheme profiles and seeded random ones.
#pragma once

#include <zeppelin/core/random.hpp>
#include <zeppelin/strategy.hpp>

#include <vector>

namespace strategy_test {

using namespace zeppelin;

inline scheme_profile profile(int tp, int pp, token_count max_len, double a, double b, double c, token_count util_len = 1) {
  return {.scheme = {tp, pp, 1}, .max_len = max_len, .util_len = util_len, .latency = {a, b, c}};
}

//! A random profile: tp, pp in 1..2, MaxLen in [lo, hi], positive a, b, c.
inline scheme_profile random_profile(random_generator& rng, token_count lo, token_count hi) {
  const int tp = static_cast<int>(rng.between(1, 2)), pp = static_cast<int>(rng.between(1, 2));
  const double speed = 1.0 / (tp * pp);
  return profile(tp, pp, rng.between(lo, hi), speed * 1e-3 * static_cast<double>(rng.between(1, 9)),
                 speed * static_cast<double>(rng.between(1, 9)), static_cast<double>(rng.between(0, 20)));
}

//! Between `fewest` and `most` random profiles (random_profile), the count drawn first.
inline std::vector<scheme_profile> random_profiles(random_generator& rng, int fewest, int most, token_count lo, token_count hi) {
  std::vector<scheme_profile> out(static_cast<std::size_t>(rng.between(fewest, most)));
  for (scheme_profile& p : out) p = random_profile(rng, lo, hi);
  return out;
}

}  // namespace strategy_test
