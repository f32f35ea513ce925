// zeppelin/remap/detail/water_fill.hpp
// Integer water-filling, the per-node step of the exact remap solver.
//   in : bases beta_k (cost already paid by item k), a slope sigma >= 0, capacities
//        cap_k >= 0 and an amount Q with 0 <= Q <= sum cap
//   out: integers z_k in [0, cap_k] with sum z = Q minimising max_k (beta_k + sigma z_k)
// Why it is exact. In units of sigma, unit number u = 1..cap_k of item k costs
// h_k + u (h_k = beta_k / sigma), increasing in u, so every feasible z takes a prefix of each
// item's units: Q distinct units whose largest value is at least the Q-th smallest value of
// the whole multiset. Taking exactly the Q smallest units reaches that bound. They are found
// in O(n log n): the continuous level L* with sum_k clamp(L* - h_k, 0, cap_k) = Q (a sweep
// over the 2n sorted breakpoints), then all units of value <= L* (floors), then the
// R = Q - sum floors < n missing units, which are the R smallest "next" units: each lies in
// (L*, L* + 1) while every other unit is worth >= L* + 1. Ties go to the lowest index.
// A final loop repairs the one-unit errors floating-point rounding may cause at the floors.
// sigma == 0: every split costs the same; items are filled in index order.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Reusable buffers so a solver calls water_fill once per node without allocating.
struct water_fill_scratch {
  std::vector<std::pair<double, int>> events;
  std::vector<std::pair<double, std::size_t>> candidates;
};

inline void water_fill(const double* base, double slope, const token_count* cap, std::size_t n, token_count amount,
                       token_count* z, water_fill_scratch& scratch) {
  token_count total = 0;
  for (std::size_t k = 0; k < n; ++k) total += cap[k];
  if (amount <= 0 || slope <= 0 || amount >= total) {
    // Nothing to place, all of it, or a flat cost: fill in index order.
    token_count left = std::min(amount, total);
    for (std::size_t k = 0; k < n; ++k) {
      z[k] = std::min(cap[k], std::max<token_count>(left, 0));
      left -= z[k];
    }
    return;
  }
  // Continuous level L*: sweep the breakpoints h_k (item k starts) and h_k + cap_k (item k full).
  auto& events = scratch.events;
  events.clear();
  for (std::size_t k = 0; k < n; ++k) {
    if (cap[k] == 0) continue;
    const double h = base[k] / slope;
    events.emplace_back(h, +1);
    events.emplace_back(h + static_cast<double>(cap[k]), -1);
  }
  std::sort(events.begin(), events.end());
  const auto q = static_cast<double>(amount);
  double filled = 0, prev = events.front().first, level = events.back().first;
  int active = 0;
  for (const auto& [at, delta] : events) {
    const double next = filled + active * (at - prev);
    if (active > 0 && next >= q) {
      level = prev + (q - filled) / active;
      break;
    }
    filled = next;
    prev = at;
    active += delta;
  }
  // Every unit worth <= L*.
  token_count placed = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double room = level - base[k] / slope;
    z[k] = room <= 0 ? 0 : std::min(cap[k], static_cast<token_count>(std::floor(room)));
    placed += z[k];
  }
  // Rounding repair (rare): drop the most expensive units, ties to the highest index.
  while (placed > amount) {
    std::size_t worst = n;
    double worst_value = 0;
    for (std::size_t k = 0; k < n; ++k) {
      if (z[k] == 0) continue;
      const double v = base[k] / slope + static_cast<double>(z[k]);
      if (worst == n || v >= worst_value) worst = k, worst_value = v;
    }
    --z[worst];
    --placed;
  }
  // The missing units: the cheapest next unit of each item, ties to the lowest index.
  auto& cand = scratch.candidates;
  while (placed < amount) {
    cand.clear();
    for (std::size_t k = 0; k < n; ++k)
      if (z[k] < cap[k]) cand.emplace_back(base[k] / slope + static_cast<double>(z[k] + 1), k);
    const auto take = std::min(static_cast<std::size_t>(amount - placed), cand.size());
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(take), cand.end());
    for (std::size_t t = 0; t < take; ++t) ++z[cand[t].second];
    placed += static_cast<token_count>(take);
  }
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
