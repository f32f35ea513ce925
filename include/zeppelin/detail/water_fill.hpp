// zeppelin/detail/water_fill.hpp
// Integer water filling: place `amount` units over n items so that the dearest unit placed is
// as cheap as possible. The one implementation behind the partitioner's leveling of GPUs and
// nodes (partition/) and the exact remap's per-node step (remap/exact.hpp).
//   in : bases beta_k, a slope sigma, capacities cap_k >= 0, an amount Q (clamped to
//        [0, sum cap])
//   out: integers z_k in [0, cap_k], sum z = Q: the Q cheapest units, where unit u = 1..cap_k
//        of item k is worth h_k + u with h_k = beta_k / sigma (in double; NaN counts as +inf),
//        ties to the lowest item. That minimises max_k (beta_k + sigma z_k) over the items
//        that receive units, and it is the same set as taking, one unit at a time, the
//        cheapest next unit (ties lowest index).
// The level form (bins with loads x_k under a common capacity C, the partitioner's use) is
// beta_k = x_k, sigma = 1, cap_k = C - x_k: every bin below an integer level lambda is raised
// to it and the leftover units go one each to the lowest bins at lambda.
// sigma <= 0 (or not finite): every split costs the same; items are filled in index order.
//
// How. Each item's unit values increase with u, so the Q cheapest units are a prefix of every
// item. The continuous level L* with sum_k clamp(L* - h_k, 0, cap_k) = Q (a sweep over the 2n
// sorted breakpoints) gives floors z_k = floor(L* - h_k), clamped to [0, cap_k] in double
// before the conversion (so a level far above h_k, e.g. h_k near 2^63 when sigma is tiny
// against beta, or an infinite h_k when beta overflows, cannot produce an out-of-range
// integer). In exact arithmetic they miss R < n units, the R cheapest next units. Rounding
// can leave the floors a few units off, so three repairs make the answer exact whatever the
// floors were: drop the dearest last units (ties highest index) while too many; add the
// cheapest next units while too few; swap the dearest placed unit for the cheapest unplaced
// one while the first is dearer. Each swap trades a unit outside the answer for one inside
// it, so there are at most Q swaps; floors more than n units over Q are discarded (start
// from zero). Worst case O(n Q); O(n log n) when the floors are right, the usual case.
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
  std::vector<std::pair<double, int>> events;               // breakpoints of the sweep
  std::vector<std::pair<double, std::size_t>> candidates;  // next units
};

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
  auto& h = scratch.start;
  h.resize(n);
  constexpr double inf = std::numeric_limits<double>::infinity();
  for (std::size_t k = 0; k < n; ++k) {
    h[k] = base[k] / slope;
    if (std::isnan(h[k])) h[k] = inf;
  }
  // Continuous level L*: sweep the breakpoints h_k (item k starts) and h_k + cap_k (item k
  // full) of the items with finite h_k; -inf when there are none, the last breakpoint when
  // they hold fewer than Q units (the rest then comes from the repairs below).
  auto& events = scratch.events;
  events.clear();
  for (std::size_t k = 0; k < n; ++k) {
    if (room_of(k) == 0 || !std::isfinite(h[k])) continue;
    events.emplace_back(h[k], +1);
    events.emplace_back(h[k] + static_cast<double>(cap[k]), -1);
  }
  std::sort(events.begin(), events.end());
  const auto q = static_cast<double>(amount);
  double level = events.empty() ? -inf : events.back().first;
  if (!events.empty()) {
    double filled = 0, prev = events.front().first;
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
  }
  // Every unit worth <= L*, the room clamped to [0, cap_k] before it becomes an integer.
  token_count placed = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const double room = level - h[k];
    const token_count c = room_of(k);
    z[k] = !(room > 0) ? 0 : room >= static_cast<double>(c) ? c : std::min(c, static_cast<token_count>(std::floor(room)));
    placed += z[k];
  }
  if (placed > amount + static_cast<token_count>(n)) {  // not a rounding error: start over
    std::fill(z.begin(), z.end(), token_count{0});
    placed = 0;
  }
  const auto last = [&](std::size_t k) { return h[k] + static_cast<double>(z[k]); };      // dearest placed unit
  const auto next = [&](std::size_t k) { return h[k] + static_cast<double>(z[k] + 1); };  // cheapest unplaced one
  // The dearest placed unit (ties: highest index) and the cheapest unplaced one (ties: lowest); n if none.
  const auto dearest = [&] {
    std::size_t worst = n;
    for (std::size_t k = 0; k < n; ++k)
      if (z[k] > 0 && (worst == n || last(k) >= last(worst))) worst = k;
    return worst;
  };
  const auto cheapest = [&] {
    std::size_t best = n;
    for (std::size_t k = 0; k < n; ++k)
      if (z[k] < room_of(k) && (best == n || next(k) < next(best))) best = k;
    return best;
  };
  // Too many: drop the dearest units (at most n of them).
  for (; placed > amount; --placed) --z[dearest()];
  // Too few: add the cheapest next units, up to one per item per round (one round when the
  // floors are right).
  auto& cand = scratch.candidates;
  while (placed < amount) {
    cand.clear();
    for (std::size_t k = 0; k < n; ++k)
      if (z[k] < room_of(k)) cand.emplace_back(next(k), k);
    const auto take = std::min(static_cast<std::size_t>(amount - placed), cand.size());
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(take), cand.end());
    for (std::size_t t = 0; t < take; ++t) ++z[cand[t].second];
    placed += static_cast<token_count>(take);
  }
  // Exchange: while a placed unit is dearer than an unplaced one, swap them (at most Q times).
  for (token_count swaps = 0; swaps < amount; ++swaps) {
    const std::size_t out = dearest(), in = cheapest();
    if (out == n || in == n) break;
    const double vo = last(out), vi = next(in);
    if (vo < vi || (vo == vi && out <= in)) break;  // (value, index) order: already the cheapest set
    --z[out];
    ++z[in];
  }
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
