// zeppelin/partition/metric_allocation.hpp
// A node allocation for the hierarchical partitioner in which the load metric decides
// wherever the paper's Alg. 1 and 2 balance tokens: how many ranks each ring gets, which
// nodes and GPUs take sequences, where locals go. The capacity L stays a hard constraint.
// Rules (sequences longest first, "load" = the metric's):
//   z2 rings (|s| >= P L, as in the paper): each starts with the fewest ranks that hold it,
//     max(2, ceil(|s| / L)); then, D'Hondt on the load, the ring of the largest per-rank load
//     takes one more rank while that lowers the bottleneck max(largest ring load, lambda),
//     lambda = the level at which the other sequences, as a fluid of their mean load per token
//     poured lowest load first over every rank up to L, run out; when the top ring does not
//     improve, the longest is tried once. Rings take consecutive ranks, node-major; the z2
//     sequences are streamed when even the fewest ranks exceed R.
//   z01 node: the node of least load with room for the sequence whole (ties lowest).
//   z1 ring: k = the fewest GPUs (>= 2, >= ceil(|s| / L), <= P) whose per-rank ring load is
//     <= tau = the node's load / P (the metric's c_avg, counting every fragment and sequence
//     of the node), on the k GPUs of least load with room for the zigzag share; k grows when
//     fewer have room; none: a fragment group by room.
// Not the default: it balances the metric better but did not simulate faster on average
// (docs/partitioning.md). Host-only.
#pragma once

#include <zeppelin/core/checked_math.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/partition/detail/hierarchical_solver.hpp>
#include <zeppelin/partition/hierarchical_trace.hpp>
#include <zeppelin/partition/node_allocation.hpp>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Node allocation by the load metric (hierarchical<Metric, metric_allocation>).
struct metric_allocation {
  static constexpr std::string_view name = "metric";

  //! z2 rings widened by D'Hondt on the metric while the bottleneck falls, or streamed.
  template <class Solver>
  void layout_inter(Solver& s, std::size_t m, hierarchical_trace& trace) const {
    if (m == 0) return;
    const token_count L = s.capacity(), R = s.num_ranks();
    std::vector<token_count> g(m);
    token_count used = 0;
    for (std::size_t i = 0; i < m; ++i) {
      g[i] = std::min(s.length(i), std::max<token_count>(2, ceil_div(s.length(i), L)));
      used += g[i];
    }
    if (used > R) {
      s.stream(m, trace);
      return;
    }
    double rest_tokens = 0, rest_cost = 0;
    for (std::size_t i = m; i < s.positions(); ++i) rest_tokens += static_cast<double>(s.length(i)), rest_cost += s.cost(i);
    auto best = bottleneck(s, m, g, rest_tokens, rest_cost);
    const auto widen = [&](std::size_t i) {
      if (g[i] >= s.length(i)) return false;
      ++g[i];
      const auto next = bottleneck(s, m, g, rest_tokens, rest_cost);
      if (next < best) {
        best = next;
        return true;
      }
      --g[i];
      return false;
    };
    while (used < R) {
      std::size_t top = 0;
      for (std::size_t i = 1; i < m; ++i)
        if (s.ring_cost(i, g[i]) > s.ring_cost(top, g[top])) top = i;
      if (!widen(top) && (top == 0 || !widen(0))) break;
      ++used;
    }
    rank_index next = 0;
    for (std::size_t i = 0; i < m; ++i) {
      std::vector<rank_index> ranks(static_cast<std::size_t>(g[i]));
      std::iota(ranks.begin(), ranks.end(), next);
      next += static_cast<rank_index>(g[i]);
      s.commit(i, std::move(ranks), {});
    }
  }

  //! The node of least load with room for sequence i whole (ties lowest), else -1.
  template <class Solver>
  int pick_node(const Solver& s, std::size_t i, std::span<const token_count> node_tokens,
                std::span<const double> node_load) const {
    const token_count node_cap = s.node_room();
    int best = -1;
    for (int n = 0; n < s.nodes(); ++n)
      if (s.length(i) + node_tokens[static_cast<std::size_t>(n)] <= node_cap &&
          (best < 0 || node_load[static_cast<std::size_t>(n)] < node_load[static_cast<std::size_t>(best)]))
        best = n;
    return best;
  }

  //! tau: the node's load (its GPUs' so far and its whole sequences') per GPU.
  template <class Solver>
  double node_share(const Solver& s, const detail::hierarchical_node& node) const {
    double tau = 0;
    for (const double v : node.load) tau += v;
    for (const std::size_t i : node.seqs) tau += s.cost(i);
    return tau / static_cast<double>(s.gpus_per_node());
  }

  //! z1 ring: the fewest GPUs whose per-rank ring load is <= tau, on the least loaded GPUs
  //! with room for the largest zigzag share; else a fragment group by room.
  template <class Solver>
  void place_ring(Solver& s, detail::hierarchical_node& node, std::size_t i, double tau) const {
    const auto P = static_cast<std::size_t>(s.gpus_per_node());
    const token_count len = s.length(i), L = s.capacity();
    const token_count hi = std::min<token_count>(s.gpus_per_node(), len);
    token_count k = std::min(hi, std::max<token_count>(2, ceil_div(len, L)));
    while (k < hi && s.ring_cost(i, k) > tau) ++k;
    const auto k_first = static_cast<std::size_t>(k);
    std::iota(node.pick.begin(), node.pick.end(), std::size_t{0});
    std::stable_sort(node.pick.begin(), node.pick.end(), [&](std::size_t x, std::size_t y) { return node.load[x] < node.load[y]; });
    for (; k <= hi; ++k) {
      const token_count share = (len + k - 1) / k;  // no zigzag position holds more
      std::vector<rank_index> ranks;
      for (std::size_t j = 0; j < P && ranks.size() < static_cast<std::size_t>(k); ++j)
        if (node.tokens[node.pick[j]] + share <= L) ranks.push_back(static_cast<rank_index>(node.base + node.pick[j]));
      if (ranks.size() < static_cast<std::size_t>(k)) continue;
      std::sort(ranks.begin(), ranks.end());
      s.commit(i, std::move(ranks), {});
      s.sync(node);
      return;
    }
    s.fill_in_node(i, node, k_first);
  }

  //! Says that the metric governed the allocation.
  [[nodiscard]] std::string note(std::string_view metric) const {
    return std::string("allocation by the ") + std::string(metric) +
           " metric: ring sizes, nodes and GPUs balance the metric's load under the capacity";
  }

  friend constexpr bool operator==(const metric_allocation&, const metric_allocation&) = default;

 private:
  // The step's bottleneck when the z2 rings hold g_i ranks each and every other sequence is a
  // fluid of mean load density delta = C' / T' poured over all ranks up to the capacity,
  // lowest load first (the level lambda where the fluid runs out). Returns {tokens that do
  // not fit, max(lambda, largest ring load)}, compared lexicographically.
  template <class Solver>
  static std::pair<double, double> bottleneck(const Solver& s, std::size_t m, const std::vector<token_count>& g,
                                              double rest_tokens, double rest_cost) {
    struct cls {
      double n, tokens, load;
    };
    std::vector<cls> classes;
    classes.reserve(m + 1);
    token_count used = 0;
    double ring_max = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const double load = s.ring_cost(i, g[i]);
      classes.push_back({static_cast<double>(g[i]), static_cast<double>(s.length(i)) / static_cast<double>(g[i]), load});
      ring_max = std::max(ring_max, load);
      used += g[i];
    }
    classes.push_back({static_cast<double>(s.num_ranks() - used), 0.0, 0.0});
    if (rest_tokens <= 0) return {0.0, ring_max};
    const double delta = rest_cost / rest_tokens;
    const double cap = static_cast<double>(s.capacity());
    double room = 0, hi = 0;
    for (const cls& c : classes) {
      room += c.n * std::max(0.0, cap - c.tokens);
      hi = std::max(hi, c.load + delta * std::max(0.0, cap - c.tokens));
    }
    if (room < rest_tokens) return {rest_tokens - room, hi};
    if (delta <= 0) return {0.0, ring_max};
    double lo = 0;
    for (int it = 0; it < 60; ++it) {
      const double mid = (lo + hi) / 2;
      double fill = 0;
      for (const cls& c : classes) fill += c.n * std::clamp((mid - c.load) / delta, 0.0, std::max(0.0, cap - c.tokens));
      (fill >= rest_tokens ? hi : lo) = mid;
    }
    return {0.0, std::max(hi, ring_max)};
  }
};
static_assert(node_allocation<metric_allocation>);

ZEPPELIN_NAMESPACE_END
