// zeppelin/detail/water_fill.hpp
// Integer water filling: place `amount` units over n items so that the dearest unit placed is
// as cheap as possible. The one implementation behind the partitioner's leveling of GPUs and
// nodes (partition/) and the exact remap's per-node step (remap/exact.hpp).
//   in : bases beta_k, a slope sigma, capacities cap_k >= 0, an amount Q (clamped to
//        [0, sum cap])
//   out: integers z_k in [0, cap_k], sum z = Q: the Q cheapest units, where unit u = 1..cap_k
//        of item k is worth h_k + u exactly (h_k = beta_k / sigma rounded to double; NaN
//        counts as +inf), ties to the lowest item. That minimises max_k (beta_k + sigma z_k)
//        over the items that receive units, and it is the same set as taking, one unit at a
//        time, the cheapest next unit (ties lowest index).
// The level form (bins with loads x_k under a common capacity C, the partitioner's use) is
// beta_k = x_k, sigma = 1, cap_k = C - x_k: every bin below an integer level lambda is raised
// to it and the leftover units go one each to the lowest bins at lambda.
// sigma <= 0 (or not finite): every split costs the same; items are filled in index order.
//
// How. Items with h_k = -inf take units first and items with h_k = +inf last, in index order
// (their units tie). For the finite ones, with m = min h_k, d_k = h_k - m and D_k = ceil(d_k):
// the units worth at most m + T (T an integer) are clamp(T - D_k, 0, cap_k) per item, counted
// exactly in 128-bit integers, so a binary search over T finds the largest level whose units
// fit in Q; the R left over (fewer than the items) are the next units, all worth in
// (m + T, m + T + 1], cheapest (largest D_k - d_k) first. No floating level is rounded to an
// integer, so neither costs one ulp apart (h_k near 2^63 and more) nor overflowing bases can
// leave units to repair one at a time. O(n log range) with range < 2^101 (offsets beyond 2^100
// are dearer than every unit of an item at offset 0, as caps are below 2^63).
// Host-only (plain C++20, parsed by nvcc where remap/ headers are included).
#pragma once

#include <zeppelin/core/checked_math.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Reusable buffers, so a solver fills many nodes without allocating.
struct water_fill_scratch {
  std::vector<double> start;                                // h_k
  std::vector<double> base;                                 // level form: the loads
  std::vector<token_count> room;                            // level form: cap - load
  std::vector<double> offset;                               // per item: D_k (-1: not finite)
  std::vector<double> frac;                                 // per item: D_k - d_k
  std::vector<std::pair<double, std::size_t>> candidates;  // next units
};

//! The exact fill of the items with finite h_k (the others untouched) with up to `amount`
//! units: for an integer T the units worth <= lowest + T are, per item, clamp(T - D_k, 0,
//! cap_k) with D_k = ceil(h_k - lowest), counted in 128-bit integers; a binary search finds the
//! largest T whose units fit, and the rest goes to the next units (all worth in (T, T + 1]),
//! cheapest (largest D_k - d_k) first, ties lowest index. O(n log range). Returns the units placed.
inline token_count fill_finite(std::span<const double> h, double lowest, std::span<const token_count> cap, token_count amount,
                               std::span<token_count> z, water_fill_scratch& scratch) {
  __extension__ using wide = __int128;
  const std::size_t n = cap.size();
  // offsets beyond 2^100 are dearer than every unit of an item at offset 0 (caps < 2^63)
  constexpr double far = 0x1p100;
  auto& offset = scratch.offset;  // D_k as a double (an integer <= 2^100)
  auto& frac = scratch.frac;    // D_k - d_k in [0, 1): larger is cheaper within one integer step
  offset.assign(n, -1.0);
  frac.assign(n, 0.0);
  for (std::size_t k = 0; k < n; ++k) {
    if (!std::isfinite(h[k]) || cap[k] <= 0) continue;
    const double d = std::min(h[k] - lowest, far);
    offset[k] = std::ceil(d);
    frac[k] = offset[k] - d;
  }
  const auto room = [&](std::size_t k) { return static_cast<wide>(cap[k] - z[k]); };  // z holds the -inf items' units
  const auto units_upto = [&](wide T) {
    wide total = 0;
    for (std::size_t k = 0; k < n; ++k)
      if (offset[k] >= 0) total += std::clamp<wide>(T - static_cast<wide>(offset[k]), 0, room(k));
    return total;
  };
  const wide q = amount;
  wide lo = -1, hi = static_cast<wide>(far) + (static_cast<wide>(1) << 64);  // units_upto(lo) = 0 <= q
  if (units_upto(hi) <= q) lo = hi;
  while (hi - lo > 1) {
    const wide mid = lo + (hi - lo) / 2;
    (units_upto(mid) <= q ? lo : hi) = mid;
  }
  token_count placed = 0;
  auto& next = scratch.candidates;
  next.clear();
  for (std::size_t k = 0; k < n; ++k) {
    if (offset[k] < 0) continue;
    const wide d = static_cast<wide>(offset[k]), r = room(k);
    const auto units = static_cast<token_count>(std::clamp<wide>(lo - d, 0, r));
    if (lo >= d && lo - d < r) next.emplace_back(-frac[k], k);  // its next unit is worth <= lowest + lo + 1
    z[k] += units;
    placed += units;
  }
  const auto rest = static_cast<std::size_t>(std::min<wide>(q - placed, static_cast<wide>(next.size())));
  std::partial_sort(next.begin(), next.begin() + static_cast<std::ptrdiff_t>(rest), next.end());
  for (std::size_t t = 0; t < rest; ++t) ++z[next[t].second];
  return placed + static_cast<token_count>(rest);
}

//! Writes to `z` (size n) the Q cheapest units over items with bases `base`, slope `slope`
//! and capacities `cap` (all size n); see the file comment.
inline void water_fill(std::span<const double> base, double slope, std::span<const token_count> cap, token_count amount,
                       std::span<token_count> z, water_fill_scratch& scratch) {
  const std::size_t n = cap.size();
  token_count total = 0;
  for (std::size_t k = 0; k < n; ++k) total = saturating_add(total, std::max<token_count>(cap[k], 0));  // caps may be huge
  const auto room_of = [&](std::size_t k) { return std::max<token_count>(cap[k], 0); };
  if (amount <= 0 || amount >= total || !(slope > 0) || !std::isfinite(slope)) {
    // Nothing to place, all of it, or a flat cost: fill in index order.
    token_count left = std::clamp<token_count>(amount, 0, total);
    for (std::size_t k = 0; k < n; ++k) {
      z[k] = std::min(room_of(k), left);
      left -= z[k];
    }
    return;
  }
  // Items with h_k = -inf come first and items with h_k = +inf (or NaN) last, each group in
  // index order (their units all tie); the finite ones are placed exactly in between.
  auto& h = scratch.start;
  h.resize(n);
  constexpr double inf = std::numeric_limits<double>::infinity();
  double lowest = inf;
  for (std::size_t k = 0; k < n; ++k) {
    h[k] = base[k] / slope;
    if (std::isnan(h[k])) h[k] = inf;
    if (std::isfinite(h[k]) && room_of(k) > 0) lowest = std::min(lowest, h[k]);
  }
  std::fill(z.begin(), z.end(), token_count{0});
  token_count left = amount;
  const auto fill_in_order = [&](auto&& wanted) {
    for (std::size_t k = 0; k < n && left > 0; ++k)
      if (wanted(h[k])) z[k] = std::min(room_of(k), left), left -= z[k];
  };
  fill_in_order([&](double x) { return x == -inf; });
  if (left > 0 && lowest < inf) left -= fill_finite(h, lowest, cap, left, z, scratch);
  fill_in_order([&](double x) { return x == inf; });
}

//! Level form: writes to `share` (size m) the shares of `amount` units over bins of loads
//! `load` under the common capacity `cap` (amount <= sum (cap - load_k)): the largest integer
//! level lambda with sum max(0, lambda - load_k) <= amount, every bin below it raised to it,
//! the leftover one unit each to the lowest-index bins at lambda. The water fill with
//! beta = load, sigma = 1, cap_k = cap - load_k.
inline void water_fill(std::span<const token_count> load, token_count cap, token_count amount, std::span<token_count> share,
                       water_fill_scratch& scratch) {
  const std::size_t m = load.size();
  scratch.base.resize(m);
  scratch.room.resize(m);
  for (std::size_t k = 0; k < m; ++k) scratch.base[k] = static_cast<double>(load[k]), scratch.room[k] = cap - load[k];
  water_fill(scratch.base, 1.0, scratch.room, amount, share, scratch);
}

//! The level form, returning the shares.
inline std::vector<token_count> water_fill(std::span<const token_count> load, token_count cap, token_count amount) {
  std::vector<token_count> share(load.size(), 0);
  water_fill_scratch scratch;
  water_fill(load, cap, amount, share, scratch);
  return share;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
