// zeppelin/partition/token_allocation.hpp
// The hierarchical partitioner's default node allocation: tokens decide, as in the Zeppelin
// paper's Alg. 1 (inter-node) and Alg. 2 (intra-node); the load metric only places the local
// sequences (z0). Rules, with s_avg = T / N and the sequences longest first:
//   z2 rings: sequence s takes k_s = ceil(|s| / s_avg) EMPTY nodes (the next unused ones) and
//     is zigzag-split over all their k_s P ranks as one ring. When sum k_s > N: every z2
//     sequence gets g_s >= 1 consecutive ranks by the D'Hondt rule (one more rank to the
//     largest |s| / g_s, ties lowest) until max |s| / g_s <= ceil(T / R) or the ranks run
//     out; when a ring would then need more than L on a rank, the z2 sequences are streamed.
//   z01 node: the node with the fewest tokens (ties lowest) when the sequence fits it whole.
//   z1 ring: k = ceil(|s|^2 / c_avg), c_avg = sum |s'|^2 / P over the node's whole sequences,
//     clamped to [2, P] (and |s|), equal zigzag shares on the k GPUs with the fewest tokens
//     (ties lowest; ring in GPU order); k grows while a GPU would exceed L; no k fits: a
//     fragment group by room over at least the paper's k GPUs.
// Why these, where they differ from the paper, and measurements: docs/partitioning.md.
// Host-only.
#pragma once

#include <zeppelin/core/checked_math.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/partition/detail/hierarchical_solver.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/hierarchical_trace.hpp>
#include <zeppelin/partition/node_allocation.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Node allocation by tokens (the paper's; hierarchical's default).
struct token_allocation {
  static constexpr std::string_view name = "tokens";

  //! z2 rings: k_s empty nodes each, or the proportional (D'Hondt) rank split, or streamed.
  template <class Solver>
  void layout_inter(Solver& s, std::size_t m, hierarchical_trace& trace) const {
    using detail::int128;
    const int N = s.nodes(), P = s.gpus_per_node();
    const token_count T = s.total_tokens(), R = s.num_ranks(), L = s.capacity();
    // k_s = ceil(|s| / s_avg) = ceil(|s| N / T)
    int128 nodes_needed = 0;
    for (std::size_t i = 0; i < m; ++i) nodes_needed += (static_cast<int128>(s.length(i)) * N + T - 1) / T;
    trace.proportional = nodes_needed > N;
    std::vector<std::vector<rank_index>> rings(m);
    if (!trace.proportional) {
      // paper rule: k_s empty nodes each; |s| / (k_s P) <= s_avg / P <= L, so it always fits
      int next = 0;
      for (std::size_t i = 0; i < m; ++i) {
        const int k = static_cast<int>((static_cast<int128>(s.length(i)) * N + T - 1) / T);
        for (rank_index r = next * P; r < (next + k) * P; ++r) rings[i].push_back(r);
        next += k;
      }
    } else {
      // D'Hondt: g_i ranks, next rank to the largest len_i / g_i (ties: lowest i); m <= N
      // since every z2 sequence holds more than P L tokens and T <= N P L.
      std::vector<token_count> g(m, 1);
      auto before = [&](std::size_t x, std::size_t y) {  // priority of y above x
        const int128 lhs = static_cast<int128>(s.length(x)) * g[y], rhs = static_cast<int128>(s.length(y)) * g[x];
        return lhs != rhs ? lhs < rhs : x > y;
      };
      std::priority_queue<std::size_t, std::vector<std::size_t>, decltype(before)> heap(before);
      for (std::size_t i = 0; i < m; ++i) heap.push(i);
      const token_count target = (T + R - 1) / R;
      token_count spare = R - static_cast<token_count>(m);
      while (spare > 0 && !heap.empty()) {
        const std::size_t i = heap.top();
        if ((s.length(i) + g[i] - 1) / g[i] <= target) break;  // every z2 share is at most the rank average
        heap.pop();
        if (g[i] >= s.length(i)) continue;
        ++g[i];
        --spare;
        heap.push(i);
      }
      rank_index next = 0;
      bool fits = true;
      for (std::size_t i = 0; i < m; ++i) {
        const auto G = static_cast<std::int32_t>(g[i]);
        for (token_count j = 0; j < g[i]; ++j) rings[i].push_back(next++);
        fits = fits && zigzag_tokens(s.length(i), G, 0) <= L && (G < 2 || zigzag_tokens(s.length(i), G, G - 1) <= L);
      }
      if (!fits) {
        s.stream(m, trace);
        return;
      }
    }
    for (std::size_t i = 0; i < m; ++i) s.commit(i, std::move(rings[i]), {});
  }

  //! The node with the fewest tokens (ties lowest) if sequence i fits it whole, else -1.
  template <class Solver>
  int pick_node(const Solver& s, std::size_t i, std::span<const token_count> node_tokens,
                std::span<const double> /*node_load*/) const {
    int best = 0;
    for (int n = 1; n < s.nodes(); ++n)
      if (node_tokens[static_cast<std::size_t>(n)] < node_tokens[static_cast<std::size_t>(best)]) best = n;
    return s.length(i) + node_tokens[static_cast<std::size_t>(best)] <= s.node_room() ? best : -1;
  }

  //! P c_avg: the sum of squared lengths of the node's whole sequences.
  template <class Solver>
  detail::int128 node_share(const Solver& s, const detail::hierarchical_node& node) const {
    detail::int128 sum_sq = 0;
    for (const std::size_t i : node.seqs) sum_sq += static_cast<detail::int128>(s.length(i)) * s.length(i);
    return sum_sq;
  }

  //! z1 ring: k = ceil(|s|^2 P / sum_sq) clamped to [2, min(P, |s|)], equal zigzag shares on
  //! the k GPUs with the fewest tokens, k growing while a GPU would exceed L; else by room.
  template <class Solver>
  void place_ring(Solver& s, detail::hierarchical_node& node, std::size_t i, detail::int128 sum_sq) const {
    using detail::int128;
    const int P = s.gpus_per_node();
    const token_count len = s.length(i), L = s.capacity();
    const int128 want = (static_cast<int128>(len) * len * P + sum_sq - 1) / sum_sq;
    const token_count hi = std::min<token_count>(P, len);
    token_count k = want < 2 ? 2 : want > hi ? hi : static_cast<token_count>(want);
    if (k > hi) k = hi;
    const token_count k_paper = k;
    for (; k <= hi; ++k) {
      Solver::sort_by_tokens(node.pick, node.tokens);
      std::sort(node.pick.begin(), node.pick.begin() + k);
      bool fits = true;
      for (token_count p = 0; p < k && fits; ++p)
        fits = node.tokens[node.pick[static_cast<std::size_t>(p)]] +
                   zigzag_tokens(len, static_cast<std::int32_t>(k), static_cast<std::int32_t>(p)) <= L;
      if (!fits) continue;
      std::vector<rank_index> ranks(static_cast<std::size_t>(k));
      for (token_count p = 0; p < k; ++p)
        ranks[static_cast<std::size_t>(p)] = static_cast<rank_index>(node.base + node.pick[static_cast<std::size_t>(p)]);
      s.commit(i, std::move(ranks), {});
      s.sync(node);
      return;
    }
    s.fill_in_node(i, node, static_cast<std::size_t>(k_paper));
  }

  //! Nothing to add: this is the documented behaviour.
  [[nodiscard]] std::string note(std::string_view /*metric*/) const { return {}; }

  friend constexpr bool operator==(const token_allocation&, const token_allocation&) = default;
};
static_assert(node_allocation<token_allocation>);

ZEPPELIN_NAMESPACE_END
