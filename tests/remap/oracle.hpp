// tests/remap/oracle.hpp
// Independent optima for remap problems, to check exact_remap against:
//   glpk_optimum(p, objective, integral): GLPK's LP relaxation (a lower bound) or MILP
//   optimum (the integral optimum) of the model written straight from spec 3.4;
//   brute_force_optimum(p, objective): enumerates every integral feasible matrix (tiny sizes).
#pragma once

#include <zeppelin/remap/problem.hpp>

#include <glpk.h>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <limits>
#include <vector>

namespace remap_oracle {

using zeppelin::rank_index;
using zeppelin::remap_objective;
using zeppelin::remap_problem;
using zeppelin::token_count;

// min lambda (or min inter volume) over M >= 0 with row sums = surplus, column sums = deficit.
// For min_inter_volume: first the least inter-node volume V, then min max-send with volume <= V.
// A MILP that hits time_limit_ms returns NaN.
inline double glpk_optimum(const remap_problem& p, remap_objective objective, bool integral, int time_limit_ms = 1000) {
  std::vector<rank_index> senders, receivers;
  for (rank_index r = 0; r < p.num_ranks(); ++r) {
    if (p.surplus(r) > 0) senders.push_back(r);
    if (p.deficit(r) > 0) receivers.push_back(r);
  }
  if (senders.empty()) return 0;
  const int ns = static_cast<int>(senders.size()), nr = static_cast<int>(receivers.size());
  const int nm = ns * nr, lambda = nm + 1;
  const auto var = [&](int a, int b) { return a * nr + b + 1; };
  auto solve = [&](bool volume_stage, double volume_cap) {
    glp_prob* lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, nm + 1);
    for (int k = 1; k <= nm; ++k) {
      glp_set_col_bnds(lp, k, GLP_LO, 0, 0);
      if (integral) glp_set_col_kind(lp, k, GLP_IV);
    }
    glp_set_col_bnds(lp, lambda, GLP_LO, 0, 0);
    std::vector<int> ia{0}, ja{0};
    std::vector<double> ar{0};
    int row = 0;
    const auto add_row = [&](int type, double lo, double hi) {
      glp_add_rows(lp, 1);
      glp_set_row_bnds(lp, ++row, type, lo, hi);
    };
    const auto put = [&](int col, double v) { ia.push_back(row), ja.push_back(col), ar.push_back(v); };
    for (int a = 0; a < ns; ++a) {
      add_row(GLP_FX, double(p.surplus(senders[a])), double(p.surplus(senders[a])));
      for (int b = 0; b < nr; ++b) put(var(a, b), 1);
    }
    for (int b = 0; b < nr; ++b) {
      add_row(GLP_FX, double(p.deficit(receivers[b])), double(p.deficit(receivers[b])));
      for (int a = 0; a < ns; ++a) put(var(a, b), 1);
    }
    if (volume_stage) {
      for (int a = 0; a < ns; ++a)
        for (int b = 0; b < nr; ++b)
          if (p.node_of(senders[a]) != p.node_of(receivers[b])) glp_set_obj_coef(lp, var(a, b), 1);
    } else {
      glp_set_obj_coef(lp, lambda, 1);
      for (int a = 0; a < ns; ++a) {
        add_row(GLP_UP, 0, 0);
        for (int b = 0; b < nr; ++b) put(var(a, b), p.cost(senders[a], receivers[b]));
        put(lambda, -1);
      }
      if (objective == remap_objective::max_send_receive)
        for (int b = 0; b < nr; ++b) {
          add_row(GLP_UP, 0, 0);
          for (int a = 0; a < ns; ++a) put(var(a, b), p.cost(senders[a], receivers[b]));
          put(lambda, -1);
        }
      if (volume_cap >= 0) {
        add_row(GLP_UP, 0, volume_cap);
        for (int a = 0; a < ns; ++a)
          for (int b = 0; b < nr; ++b)
            if (p.node_of(senders[a]) != p.node_of(receivers[b])) put(var(a, b), 1);
      }
    }
    glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
    glp_smcp sm;
    glp_init_smcp(&sm);
    sm.msg_lev = GLP_MSG_OFF;
    double value = std::numeric_limits<double>::quiet_NaN();
    if (glp_simplex(lp, &sm) == 0 && glp_get_status(lp) == GLP_OPT) {
      value = glp_get_obj_val(lp);
      if (integral) {
        glp_iocp io;
        glp_init_iocp(&io);
        io.msg_lev = GLP_MSG_OFF;
        io.tol_obj = 1e-9;
        io.tm_lim = time_limit_ms;
        value = glp_intopt(lp, &io) == 0 && glp_mip_status(lp) == GLP_OPT ? glp_mip_obj_val(lp)
                                                                           : std::numeric_limits<double>::quiet_NaN();
      }
    }
    glp_delete_prob(lp);
    return value;
  };
  if (objective == remap_objective::min_inter_volume) {
    // Inter volume is integral at an LP vertex (transportation matrix), so no rounding issue.
    const double v = solve(true, -1);
    return solve(false, v + 1e-6);
  }
  return solve(false, -1);
}

// The least max-send (or max-send-receive / volume-then-max-send, given as a pair) over all
// integral matrices; (volume, cost) compared lexicographically for min_inter_volume.
struct brute_result {
  double cost = std::numeric_limits<double>::infinity();
  token_count volume = std::numeric_limits<token_count>::max();
};

inline brute_result brute_force_optimum(const remap_problem& p, remap_objective objective) {
  const rank_index d = p.num_ranks();
  std::vector<token_count> left(static_cast<std::size_t>(d));
  for (rank_index r = 0; r < d; ++r) left[static_cast<std::size_t>(r)] = p.deficit(r);
  std::vector<double> send(static_cast<std::size_t>(d), 0), recv(send);
  brute_result best;
  token_count volume = 0;
  std::function<void(rank_index, rank_index, token_count)> go = [&](rank_index i, rank_index j, token_count give) {
    if (i == d) {
      double cost = 0;
      for (rank_index r = 0; r < d; ++r) {
        cost = std::max(cost, send[static_cast<std::size_t>(r)]);
        if (objective == remap_objective::max_send_receive) cost = std::max(cost, recv[static_cast<std::size_t>(r)]);
      }
      const bool better = objective == remap_objective::min_inter_volume
                              ? (volume < best.volume || (volume == best.volume && cost < best.cost))
                              : cost < best.cost;
      if (better) best = {cost, volume};
      return;
    }
    if (give == 0) {
      const rank_index next = i + 1;
      go(next, 0, next < d ? p.surplus(next) : 0);
      return;
    }
    if (j == d) return;  // could not place all of sender i
    const auto jj = static_cast<std::size_t>(j);
    const token_count most = std::min(give, left[jj]);
    for (token_count q = most; q >= 0; --q) {
      if (q > 0 && j == i) continue;
      const double w = p.cost(i, j) * static_cast<double>(q);
      const token_count inter = p.node_of(i) != p.node_of(j) ? q : 0;
      left[jj] -= q, send[static_cast<std::size_t>(i)] += w, recv[jj] += w, volume += inter;
      go(i, j + 1, give - q);
      left[jj] += q, send[static_cast<std::size_t>(i)] -= w, recv[jj] -= w, volume -= inter;
    }
  };
  go(0, 0, p.surplus(0));
  return best;
}

}  // namespace remap_oracle
