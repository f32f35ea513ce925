// zeppelin/strategy/detail/threshold_search.hpp
// The strategy proposal by a search on the largest interval cost T, independent of the
// number of GPUs N (the dynamic program over GPU counts, gpu_table_search.hpp, is quadratic
// in N).
//   in : the problem (strategy_cells.hpp)
//   out: strategy_solution: t[g] and a strategy reaching it for every g, exactly those of
//        the dynamic program over GPU counts (up to ties between equal strategies)
// For a threshold T, the fewest GPUs f_T[g] of a strategy for cells 1..g whose every interval
// costs <= T is a dynamic program over cells alone:
//   f_T[0] = 0,  f_T[g] = min over k holding g, g' < g of f_T[g'] + N(P_k) d_k(g', g, T)
// with d_k the fewest pipelines keeping the interval within T (strategy_cells::
// fewest_pipelines); among the strategies with f_T[g] GPUs it keeps the one of least largest
// cost. t[g] is the least T with f_T[g] <= N: f_T[g] does not increase with T, and
// t[g - 1] <= t[g]. For each g, from lo = t[g - 1] and a strategy of cost hi (t[g - 1]'s
// strategy grown by cell g, or the one found with T = infinity):
//   1. the fewest GPUs f of every prefix and R of every suffix (cells (g'', g]) within hi;
//   2. every (scheme, interval, d) that a strategy within hi on at most N GPUs can hold:
//      d >= d_k(g', g'', hi) and f[g'] + N(P_k) d + R[g''] <= N. t[g] is the cost of one of
//      them (the largest of an optimal strategy) that lies in [lo, hi], or hi: collect those
//      costs (with hi close to t[g] the GPUs left over are few, and so are the candidates);
//   3. binary search them for the least T with f_T[g] <= N.
// Before step 1, two bisections of [lo, hi] with f_T narrow it; when the candidates pass
// max_candidates, twice as many more narrow it and step 1 runs again (collecting them all
// once [lo, hi] is two adjacent doubles: many intervals can cost the same). The binary search
// tests T on the collected intervals alone (no other interval can be in a strategy that
// fits). Each f_T and R_T costs O(G^2 K) at most (the scan over g' stops once the interval
// alone needs more GPUs than the best so far), about five of them per cell: O(G^3 K) in
// all, independent of N.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/strategy/detail/strategy_cells.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! f_T over the prefixes of cells 1..G (see the file comment): GPUs (> N when none), the
//! least largest cost among those strategies, and their last intervals.
struct threshold_prefixes {
  std::vector<long long> gpus;
  std::vector<double> top;
  std::vector<strategy_interval> last;

  //! The intervals of the strategy for cells 1..g, last first.
  [[nodiscard]] std::vector<strategy_interval> intervals(int g) const {
    std::vector<strategy_interval> out;
    for (int at = g; at > 0; at = last[static_cast<std::size_t>(at)].from) out.push_back(last[static_cast<std::size_t>(at)]);
    return out;
  }
};

[[nodiscard]] inline threshold_prefixes fewest_gpus_within(const strategy_cells& cells, double T, int G) {
  const long long N = cells.gpus();
  threshold_prefixes e{std::vector<long long>(static_cast<std::size_t>(G + 1), N + 1),
                       std::vector<double>(static_cast<std::size_t>(G + 1), strategy_cells::infinity),
                       std::vector<strategy_interval>(static_cast<std::size_t>(G + 1))};
  e.gpus[0] = 0;
  e.top[0] = 0;
  for (int g = 1; g <= G; ++g) {
    long long& best = e.gpus[static_cast<std::size_t>(g)];
    double& best_top = e.top[static_cast<std::size_t>(g)];
    for (std::size_t k = 0; k < cells.schemes(); ++k) {
      if (!cells.holds(k, g) || cells.least_cost(k, g) > T) continue;
      const long long size = cells.scheme(k).scheme.gpus();
      // f[g'] does not increase as g' falls and the pipelines needed do not decrease: stop
      // once the interval alone needs more GPUs than the best
      for (int from = g - 1; from >= 0; --from) {
        const long long d = cells.fewest_pipelines(k, from, g, T);
        if (d == 0 || d * size > best) break;
        const long long before = e.gpus[static_cast<std::size_t>(from)];
        if (before > N || before + d * size > best) continue;
        const double top = std::max(e.top[static_cast<std::size_t>(from)], cells.cost(k, d, from, g));
        if (before + d * size < best || top < best_top)
          best = before + d * size, best_top = top, e.last[static_cast<std::size_t>(g)] = {static_cast<int>(k), d, from, g};
      }
    }
  }
  return e;
}

//! R_T[x]: the fewest GPUs of intervals within T covering cells (x, G] (> N when none).
[[nodiscard]] inline std::vector<long long> fewest_gpus_after(const strategy_cells& cells, double T, int G) {
  const long long N = cells.gpus();
  std::vector<long long> R(static_cast<std::size_t>(G + 1), N + 1);
  R[static_cast<std::size_t>(G)] = 0;
  for (int x = G - 1; x >= 0; --x) {
    long long& best = R[static_cast<std::size_t>(x)];
    for (std::size_t k = 0; k < cells.schemes(); ++k) {
      const long long size = cells.scheme(k).scheme.gpus();
      // the interval (x, to] grows with to: it needs no fewer pipelines, and holds no more
      for (int to = x + 1; to <= G && cells.holds(k, to); ++to) {
        const long long d = cells.least_cost(k, to) > T ? 0 : cells.fewest_pipelines(k, x, to, T);
        if (d == 0 || d * size > best) break;
        best = std::min(best, d * size + R[static_cast<std::size_t>(to)]);
      }
    }
  }
  return R;
}

//! An interval a strategy within the search's upper bound can hold, with the fewest and the
//! most pipelines it can have there.
struct relevant_interval {
  strategy_interval least;
  long long most = 0;
};

//! Strategies for cells 1..g from one for cells 1..g-1 (last interval first) and the GPUs it
//! leaves: its last interval grown by cell g and the GPUs left, or a new interval for cell
//! g alone on the GPUs left; each goes to offer(g, intervals).
template <class Offer>
void grow_previous(const strategy_cells& cells, const std::vector<strategy_interval>& previous, int g, Offer&& offer) {
  const long long left = cells.gpus() - cells.gpus_of(previous);
  if (!previous.empty() && cells.holds(static_cast<std::size_t>(previous.front().scheme), g)) {
    std::vector<strategy_interval> grown = previous;
    grown.front().to = g;
    grown.front().pipelines += left / cells.scheme(static_cast<std::size_t>(grown.front().scheme)).scheme.gpus();
    offer(g, std::move(grown));
  }
  for (std::size_t k = 0; k < cells.schemes(); ++k) {
    const long long d = left / cells.scheme(k).scheme.gpus();
    if (!cells.holds(k, g) || d < 1) continue;
    std::vector<strategy_interval> added{{static_cast<int>(k), d, g - 1, g}};
    added.insert(added.end(), previous.begin(), previous.end());
    offer(g, std::move(added));
  }
}

//! The operations threshold_search takes, about, in the unit of gpu_table_work (for choosing
//! a search): some ten passes of G^2 K / 2 interval tests per cell.
[[nodiscard]] inline double threshold_work(const strategy_cells& cells) noexcept {
  const double G = cells.cells();
  return 10 * G * G * G * static_cast<double>(cells.schemes()) / 2;
}

[[nodiscard]] inline strategy_solution threshold_search(const strategy_cells& cells, std::size_t max_candidates = std::size_t{1} << 16) {
  const long long N = cells.gpus();
  const int G = cells.cells();
  const double infinity = strategy_cells::infinity;
  strategy_solution out{std::vector<double>(static_cast<std::size_t>(G + 1), infinity),
                        std::vector<std::vector<strategy_interval>>(static_cast<std::size_t>(G + 1))};
  out.latency[0] = 0;
  std::vector<double> reached(static_cast<std::size_t>(G + 1), infinity);  // the cost of out.intervals[g]
  const auto offer = [&](int g, std::vector<strategy_interval> intervals) {
    const double top = cells.top(intervals);
    if (top < reached[static_cast<std::size_t>(g)]) reached[static_cast<std::size_t>(g)] = top, out.intervals[static_cast<std::size_t>(g)] = std::move(intervals);
  };
  // f_T on cells 1..g; true when cells 1..g fit, keeping the strategy found for g
  const auto fits = [&](double T, int g, threshold_prefixes* prefixes = nullptr) {
    threshold_prefixes e = fewest_gpus_within(cells, T, g);
    const bool ok = e.gpus[static_cast<std::size_t>(g)] <= N;
    if (ok) offer(g, e.intervals(g));
    if (prefixes) *prefixes = std::move(e);
    return ok;
  };
  {  // T = infinity: every interval needs one pipeline; what does not fit then never does
    const threshold_prefixes e = fewest_gpus_within(cells, infinity, G);
    for (int g = 1; g <= G; ++g)
      if (e.gpus[static_cast<std::size_t>(g)] <= N) offer(g, e.intervals(g));
  }
  const auto key = [](double x) { return static_cast<std::int64_t>(std::bit_cast<std::uint64_t>(x)); };
  const auto value = [](std::int64_t k) { return std::bit_cast<double>(static_cast<std::uint64_t>(k)); };
  for (int g = 1; g <= G; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    if (reached[gi] == infinity) break;  // nor does any longer prefix fit
    grow_previous(cells, out.intervals[gi - 1], g, offer);
    double lo = out.latency[gi - 1];  // t[g] >= lo; lo itself untried
    bool lo_tried = false;            // whether lo is known not to fit
    // bisections of [lo, reached[g]] (on the order of doubles, so that they end) narrow it
    // before the candidates are collected: they grow with its width. True when it narrowed.
    const auto narrow = [&](int steps) {
      bool narrowed = false;
      for (int step = 0; step < steps && reached[gi] > lo; ++step) {
        const double mid = value(key(lo) + (key(reached[gi]) - key(lo)) / 2);
        if (!(mid > lo && mid < reached[gi])) break;
        if (!fits(mid, g)) lo = mid, lo_tried = true;
        narrowed = true;
      }
      return narrowed;
    };
    int narrowing = 2;  // fewer leave many candidates; more cost more passes than they save
    std::size_t limit = max_candidates;  // none once [lo, hi] cannot narrow (equal costs)
    narrow(narrowing);
    while (reached[gi] > lo) {
      // the bounds within hi hold for every T <= hi, and f_hi may bring a cheaper strategy
      const double hi = reached[gi];
      threshold_prefixes f;
      fits(hi, g, &f);
      const std::vector<long long> R = fewest_gpus_after(cells, hi, g);
      // every (scheme, interval) a strategy within hi on at most N GPUs can hold, with the
      // range of its pipelines, and every cost in [lo, hi] (or (lo, hi]) they can have
      std::vector<relevant_interval> relevant;
      std::vector<double> candidates;
      for (int to = 1; to <= g && candidates.size() <= limit; ++to) {
        const long long after = R[static_cast<std::size_t>(to)];
        if (after > N) continue;
        for (std::size_t k = 0; k < cells.schemes() && candidates.size() <= limit; ++k) {
          if (!cells.holds(k, to) || cells.least_cost(k, to) > hi) continue;
          const long long size = cells.scheme(k).scheme.gpus();
          for (int from = to - 1; from >= 0 && candidates.size() <= limit; --from) {
            const long long d0 = cells.fewest_pipelines(k, from, to, hi);
            if (d0 == 0 || d0 * size + after > N) break;
            const long long before = f.gpus[static_cast<std::size_t>(from)];
            if (before + d0 * size + after > N) continue;
            const long long d1 = std::min((N - before - after) / size, cells.most_pipelines(k));
            relevant.push_back({{static_cast<int>(k), d0, from, to}, d1});
            for (long long d = d0; d <= d1; ++d) {
              const double c = cells.cost(k, d, from, to);
              if (c < lo || (lo_tried && c == lo)) break;
              candidates.push_back(c);
            }
          }
        }
      }
      if (candidates.size() > limit) {  // narrow further, then collect again
        narrowing = std::min(2 * narrowing, 64);
        if (!narrow(narrowing)) limit = std::numeric_limits<std::size_t>::max();
        continue;
      }
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      // the least candidate that fits (reached[g] <= hi fits): only the relevant intervals
      // can make a strategy that does, so the test runs on them alone
      std::stable_sort(relevant.begin(), relevant.end(), [](const relevant_interval& x, const relevant_interval& y) { return x.least.to < y.least.to; });
      const auto fits_relevant = [&](double T) {
        std::vector<long long> gpus(static_cast<std::size_t>(g + 1), N + 1);
        std::vector<std::pair<std::size_t, long long>> pick(static_cast<std::size_t>(g + 1));  // (relevant index, pipelines)
        gpus[0] = 0;
        for (std::size_t i = 0; i < relevant.size(); ++i) {
          const relevant_interval& r = relevant[i];
          const auto k = static_cast<std::size_t>(r.least.scheme);
          const long long before = gpus[static_cast<std::size_t>(r.least.from)];
          if (before > N) continue;
          const long long hi_d = cells.fewest_pipelines(k, r.least.from, r.least.to, T);  // >= r.least.pipelines: T <= hi
          if (hi_d == 0 || hi_d > r.most) continue;
          const long long total = before + hi_d * cells.scheme(k).scheme.gpus();
          if (total < gpus[static_cast<std::size_t>(r.least.to)]) gpus[static_cast<std::size_t>(r.least.to)] = total, pick[static_cast<std::size_t>(r.least.to)] = {i, hi_d};
        }
        if (gpus[gi] > N) return false;
        std::vector<strategy_interval> intervals;
        for (int at = g; at > 0; at = intervals.back().from) {
          intervals.push_back(relevant[pick[static_cast<std::size_t>(at)].first].least);
          intervals.back().pipelines = pick[static_cast<std::size_t>(at)].second;
        }
        offer(g, std::move(intervals));
        return true;
      };
      std::size_t a = 0, b = candidates.size();
      while (b > 0 && candidates[b - 1] >= reached[gi]) --b;
      while (a < b) {
        const std::size_t mid = a + (b - a) / 2;
        if (fits_relevant(candidates[mid]))
          b = mid;
        else
          a = mid + 1;
      }
      lo = a < candidates.size() && candidates[a] < reached[gi] ? candidates[a] : reached[gi];  // t[g]: reached[g] is now lo
    }
    out.latency[gi] = reached[gi];
  }
  return out;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
