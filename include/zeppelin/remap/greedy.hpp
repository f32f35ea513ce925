// zeppelin/remap/greedy.hpp
// The greedy remap baseline: what a hand-written alltoallv planner does.
//   in : a remap_problem
//   out: a feasible integral matrix built sender by sender in rank order; each sender fills
//        the open deficits on its own node first (lowest rank first), then the open
//        deficits anywhere (lowest rank first). O(d + nnz).
// It ignores the costs: a sender may take a remote deficit that the remote node's own
// senders could have filled (extra inter-node volume), and a node's inter-node share lands
// on its first senders instead of being spread (larger max cost). bench/remap_bench.cpp
// reports its cost relative to exact_remap. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/remap/problem.hpp>
#include <zeppelin/remap/solver.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Greedy baseline: local deficits first, then the lowest open rank.
struct greedy_remap {
  [[nodiscard]] remap_matrix solve(const remap_problem& p) const {
    validate_remap_problem(p);
    const rank_index d = p.num_ranks();
    const int P = p.gpus_per_node;
    std::vector<token_count> open(static_cast<std::size_t>(d));
    for (rank_index j = 0; j < d; ++j) open[static_cast<std::size_t>(j)] = p.deficit(j);
    remap_matrix m{d, {}};
    rank_index global = 0;  // every rank below it has no open deficit
    for (rank_index i = 0; i < d; ++i) {
      token_count give = p.surplus(i);
      const auto first = m.entries.size();
      const rank_index lo = p.node_of(i) * P, hi = lo + P;
      for (rank_index j = lo; j < hi && give > 0; ++j) {
        const token_count q = std::min(give, open[static_cast<std::size_t>(j)]);
        if (q == 0) continue;
        m.entries.push_back({i, j, q});
        open[static_cast<std::size_t>(j)] -= q;
        give -= q;
      }
      for (rank_index j = global; j < d && give > 0; ++j) {
        const token_count q = std::min(give, open[static_cast<std::size_t>(j)]);
        if (q == 0) {
          if (j == global) ++global;
          continue;
        }
        m.entries.push_back({i, j, q});
        open[static_cast<std::size_t>(j)] -= q;
        give -= q;
        if (open[static_cast<std::size_t>(j)] == 0 && j == global) ++global;
      }
      std::sort(m.entries.begin() + static_cast<std::ptrdiff_t>(first), m.entries.end(),
                [](const remap_entry& a, const remap_entry& b) { return a.to < b.to; });
    }
    return m;
  }
  friend bool operator==(const greedy_remap&, const greedy_remap&) = default;
};
static_assert(remap_solver<greedy_remap>);

ZEPPELIN_NAMESPACE_END
