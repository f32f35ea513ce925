// zeppelin/strategy/detail/gpu_table_search.hpp
// The strategy proposal by the dynamic program over GPU counts (Hydraulis, section 7):
//   t[n][0] = 0, t[0][g > 0] = infinity,
//   t[n][g] = min(t[n - 1][g], min over (k, d: d N(P_k) <= n), g' < g of
//                 max(t[n - d N(P_k)][g'], cost_k(g', g, d))).
//   in : the problem (strategy_cells.hpp)
//   out: strategy_solution at n = N
// t[m][g'] does not decrease with g' and the cost does not increase with it, so the inner
// minimum is found by binary search: O(N G sum_k (N / N(P_k)) log G) time, O(N G) memory.
// Quadratic in N: the threshold search (threshold_search.hpp) does not depend on N and
// wins from a few hundred GPUs on. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/strategy/detail/strategy_cells.hpp>

#include <cmath>
#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! The operations gpu_table_search takes, about (for choosing a search).
[[nodiscard]] inline double gpu_table_work(const strategy_cells& cells) noexcept {
  double pipelines = 0;
  for (std::size_t k = 0; k < cells.schemes(); ++k) pipelines += static_cast<double>(cells.most_pipelines(k));
  return static_cast<double>(cells.gpus()) * cells.cells() * pipelines * std::log2(cells.cells() + 2.0);
}

[[nodiscard]] inline strategy_solution gpu_table_search(const strategy_cells& cells) {
  struct choice {
    int scheme = -1;  // -1: t[n - 1][g]
    int pipelines = 0;
    int from = 0;
  };
  const long long N = cells.gpus();
  const int G = cells.cells();
  const auto slot = [&](long long n, int g) { return static_cast<std::size_t>(n) * static_cast<std::size_t>(G + 1) + static_cast<std::size_t>(g); };
  std::vector<double> t(static_cast<std::size_t>(N + 1) * static_cast<std::size_t>(G + 1), strategy_cells::infinity);
  std::vector<choice> chosen(t.size());
  t[slot(0, 0)] = 0;
  for (long long n = 1; n <= N; ++n) {
    t[slot(n, 0)] = 0;
    for (int g = 1; g <= G; ++g) {
      double best = t[slot(n - 1, g)];
      choice pick{};
      for (std::size_t k = 0; k < cells.schemes(); ++k) {
        if (!cells.holds(k, g)) continue;
        const long long size = cells.scheme(k).scheme.gpus();
        for (int d = 1; static_cast<long long>(d) * size <= n; ++d) {
          const long long m = n - d * size;
          // lowest g' in [0, g - 1] with t[m][g'] >= cost(g', g, d)
          int lo = 0, hi = g;  // hi: none found yet
          while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (t[slot(m, mid)] >= cells.cost(k, d, mid, g))
              hi = mid;
            else
              lo = mid + 1;
          }
          const auto consider = [&](int from, double value) {
            if (value < best) best = value, pick = {static_cast<int>(k), d, from};
          };
          if (lo < g) consider(lo, t[slot(m, lo)]);
          if (lo > 0) consider(lo - 1, cells.cost(k, d, lo - 1, g));
        }
      }
      t[slot(n, g)] = best;
      chosen[slot(n, g)] = pick;
    }
  }
  strategy_solution out{std::vector<double>(static_cast<std::size_t>(G + 1)), std::vector<std::vector<strategy_interval>>(static_cast<std::size_t>(G + 1))};
  for (int g = 0; g <= G; ++g) {
    out.latency[static_cast<std::size_t>(g)] = t[slot(N, g)];
    if (t[slot(N, g)] == strategy_cells::infinity) continue;
    long long n = N;
    for (int at = g; at > 0;) {
      const choice c = chosen[slot(n, at)];
      if (c.scheme < 0) {
        --n;
        continue;
      }
      out.intervals[static_cast<std::size_t>(g)].push_back({c.scheme, c.pipelines, c.from, at});
      n -= c.pipelines * cells.scheme(static_cast<std::size_t>(c.scheme)).scheme.gpus();
      at = c.from;
    }
  }
  return out;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
