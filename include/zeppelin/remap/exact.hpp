// zeppelin/remap/exact.hpp
// The exact remap solver (Zeppelin 3.4) for the three objectives of remap_objective, in
// O(d log P + N^2) for d ranks on N nodes of P GPUs, without any LP solver.
//   in : a remap_problem (A, B, P, b_intra = b, b_inter = c)
//   out: an integral matrix M that is optimal for `objective` among ALL integral feasible
//        matrices (and, for max_send / min_inter_volume, also minimises the largest receive
//        cost among the matrices optimal for the primary objective, see below)
//
// Reduction. Write s_i = surplus, t_j = deficit, x_i = tokens sender i ships to other nodes,
// r_j = tokens receiver j gets from other nodes, and per node u: S_u = sum s, D_u = sum t,
// e_u = S_u - D_u, X_u = sum x, I_u = sum r, S = sum_u S_u. A rank either sends or
// receives, never both. Costs: send_i = b s_i + (c - b) x_i, recv_j = b t_j + (c - b) r_j.
// (1) Node feasibility. Given integers x, r, a feasible M with these inter-node amounts
//     exists iff I_u = X_u - e_u, 0 <= X_u <= S_u, 0 <= I_u <= D_u and X_u + I_u <= F = sum X
//     for every u. Necessity: node u's intra part is S_u - X_u = D_u - I_u, and its
//     inter-node traffic pairs only with other nodes'. Sufficiency: detail/node_transport.hpp
//     builds the node flows; inside a node (and inside a node pair) every sender/receiver
//     split costs the same, so detail/assemble.hpp matches them in rank order.
// (2) Given X, the nodes decouple: node u's best largest send cost f_u(X_u) is a water-fill
//     of X_u (or of its intra part S_u - X_u) over its senders (zeppelin/detail/water_fill.hpp,
//     exact for integers), likewise g_u(I_u) for its receivers; the objective is max_u f_u(X_u)
//     (max_send) or max_u max(f_u(X_u), g_u(I_u)) (max_send_receive).
// (3) c >= b: f_u and g_u are non-decreasing, so the componentwise smallest feasible X wins:
//     X_u = E_u = max(e_u, 0), I_u = max(-e_u, 0) (no node both exports and imports, so
//     X_u + I_u <= F holds). It also carries the least possible inter-node volume sum E_u,
//     hence it solves min_inter_volume too: for c >= b all three objectives share one optimum.
// (4) c < b: f_u, g_u are non-increasing; the componentwise LARGEST feasible X wins. It is
//     X_u = min(S_u, S - D_u) (a node cannot ship more than the deficit of the other nodes):
//     at most one node w has S_w + D_w > S (two would exceed sum_u (S_u + D_u) = 2S); then
//     X_w + I_w = 2S - S_w - D_w = F exactly and every other node has S_v + D_v <= F, so
//     this X is feasible, and every feasible X is below it (X_u <= S_u, and X_u <= S - D_u
//     because node u's exports land on the other nodes' deficits).
// (5) min_inter_volume with c < b: X_u = E_u is forced (inter-node volume >= sum E_u, equal
//     iff X = E); the water-fills then minimise the largest send (and receive) cost.
// Integrality is free: every step above works on integers.
// Degenerate costs (c - b tiny against b times the tokens, or b times the tokens beyond a
// double) still give a feasible matrix: the water fill clamps its levels and repairs its
// rounding (bounded work); it is optimal up to the double rounding of those costs.
// Tests: tests/remap/exact_test.cpp checks the optimum against GLPK (LP lower bound and a
// MILP solve) and a brute-force enumeration on small instances.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/detail/water_fill.hpp>
#include <zeppelin/remap/detail/assemble.hpp>
#include <zeppelin/remap/detail/node_transport.hpp>
#include <zeppelin/remap/problem.hpp>
#include <zeppelin/remap/solver.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Exact min-max remap. `exact_remap{}` solves the paper's objective;
//! `exact_remap{.objective = remap_objective::min_inter_volume}` the others.
struct exact_remap {
  remap_objective objective = remap_objective::max_send;

  [[nodiscard]] remap_matrix solve(const remap_problem& p) const {
    validate_remap_problem(p);
    const rank_index d = p.num_ranks();
    const int P = p.gpus_per_node, nodes = p.num_nodes();
    const double b = p.intra_cost, c = p.inter_cost;
    std::vector<token_count> S(static_cast<std::size_t>(nodes), 0), D(S);
    token_count total = 0;
    for (rank_index i = 0; i < d; ++i) {
      S[static_cast<std::size_t>(p.node_of(i))] += p.surplus(i);
      D[static_cast<std::size_t>(p.node_of(i))] += p.deficit(i);
      total += p.surplus(i);
    }
    // Node exports X (steps 3-5 of the header) and imports I = X - e.
    const bool fewest = c >= b || objective == remap_objective::min_inter_volume;
    std::vector<token_count> X(static_cast<std::size_t>(nodes)), I(X);
    for (std::size_t u = 0; u < S.size(); ++u) {
      X[u] = fewest ? std::max<token_count>(S[u] - D[u], 0) : std::min(S[u], total - D[u]);
      I[u] = X[u] - (S[u] - D[u]);
    }
    // Per node, water-fill the cheaper side: inter-node amounts when c >= b, intra-node ones
    // otherwise (the cost then grows with the intra-node part at slope b - c).
    std::vector<token_count> x(static_cast<std::size_t>(d), 0), r(x);
    std::vector<double> base(static_cast<std::size_t>(P));
    std::vector<token_count> cap(static_cast<std::size_t>(P)), z(cap);
    detail::water_fill_scratch scratch;
    const auto fill = [&](int u, bool sending, token_count inter_amount, std::vector<token_count>& out) {
      token_count side_total = 0;
      for (int k = 0; k < P; ++k) {
        const rank_index i = u * P + k;
        cap[static_cast<std::size_t>(k)] = sending ? p.surplus(i) : p.deficit(i);
        side_total += cap[static_cast<std::size_t>(k)];
      }
      const bool up = c >= b;  // true: fill the inter-node part, false: the intra-node part
      for (int k = 0; k < P; ++k) base[static_cast<std::size_t>(k)] = (up ? b : c) * double(cap[static_cast<std::size_t>(k)]);
      detail::water_fill(base, up ? c - b : b - c, cap, up ? inter_amount : side_total - inter_amount, z, scratch);
      for (int k = 0; k < P; ++k)
        out[static_cast<std::size_t>(u * P + k)] =
            up ? z[static_cast<std::size_t>(k)] : cap[static_cast<std::size_t>(k)] - z[static_cast<std::size_t>(k)];
    };
    for (int u = 0; u < nodes; ++u) {
      fill(u, true, X[static_cast<std::size_t>(u)], x);
      fill(u, false, I[static_cast<std::size_t>(u)], r);
    }
    return detail::assemble_remap(p, x, r, detail::node_transport(std::move(X), std::move(I)));
  }
  friend bool operator==(const exact_remap&, const exact_remap&) = default;
};
static_assert(remap_solver<exact_remap>);

ZEPPELIN_NAMESPACE_END
