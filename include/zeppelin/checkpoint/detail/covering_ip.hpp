// zeppelin/checkpoint/detail/covering_ip.hpp
// An exact solver for small integer covering programs
//     minimise sum_i x_i  subject to  sum_i a_ri x_i >= need_r (every row r),
//                                     x_i integer in [0, upper],  a_ri > 0,
// the shape of stage-aware checkpointing (checkpoint/stage_aware.hpp, where rows are
// memory windows and x the diagonal recompute counts).
//   in : covering_ip (rows in CSR form, positive coefficients), a node limit
//   out: covering_result: a feasible x, its value, a proven lower bound (== value when the
//        search finished: x is optimal; else each component past the node limit
//        contributes the least bound of its open nodes), the branch-and-bound nodes used
// Errors: the caller guarantees x = upper everywhere is feasible (checked,
// invalid_argument if not).
//
// Method: branch and bound over boxes [lo, hi], one connected component of the row/variable
// graph at a time (components share no variable, so their optima add up). Everything the
// search deduces in a box (cuts, tightened bounds) is valid for the integer points of the
// box that beat the incumbent, so pruning a box that holds none of them is exact.
//   feasibility  coefficients are positive, so a box holds a feasible point iff x = hi
//                satisfies every row of the program: an exact test, no LP needed to prune
//                infeasible boxes;
//   bound        a bounded dual simplex on a dense condensed tableau (rows scaled to a
//                largest coefficient of 1; Harris's ratio test keeps pivots large). x = lo
//                with the slack basis is dual feasible (every cost is 1 > 0), so the root
//                starts there and a child starts from its parent's basis after one bound
//                change. The bound is NOT the simplex's objective but the Lagrangian value of
//                the duals it found over the program's rows and the box's cuts:
//                  L(y) = sum_r y_r need_r + sum_i min_{x_i in [lo_i, hi_i]} (1 - sum_r y_r a_ri) x_i,
//                which bounds the box's optimum from below for ANY y >= 0 (weak duality) as
//                long as every row is valid for the integer points, so rounding errors or a
//                pivot cap can weaken the bound but never make it wrong; at an LP optimum it
//                equals the LP value (strong duality). The objective is an integer, so a box
//                is pruned when ceil(L(y)) >= the incumbent; the same inequality value >=
//                L(y) + sum |g_i| (distance from the bound) tightens boxes;
//   propagation  on entering a box: each row bounds each of its variables given the others'
//                bounds, and sum_i x_i <= incumbent - 1 bounds each variable given the others'
//                lower bounds; rounded inward after a float allowance, repeated to a fixed
//                point (see propagate);
//   cuts         each re-derived from the rows in long double and lowered by an a-priori
//                bound on its float error, so the cut stays valid: complemented
//                mixed-integer roundings (c-MIR) of single rows in the box (see
//                complemented_mir) and Gomory mixed-integer cuts of fractional tableau rows
//                (see gomory_cut). The root runs rounds of both until the rounded bound
//                meets the incumbent or stalls; every other node one round of c-MIR cuts in
//                its own box. A cut lives in the LP state of the box that found it and is
//                inherited by its sub-boxes only; cuts with slack above 1 are dropped. No
//                objective row sum_i x_i >= ceil(L): it makes the LP optimum a large
//                degenerate face on which the branching penalties below are all 0;
//   incumbent    monotone rounding: ceil of the LP point (or hi) stays feasible; then each
//                variable, the most rounded-up first, drops as far as its rows' slack allows,
//                then 1-for-2 exchanges; at the root after every cut round and in
//                fractional dives (from the cut LP and from the LP with only c-MIR cuts),
//                then on every 8th node;
//   branching    depth first on the fractional basic variable with the largest product of
//                Driebeck-Tomlin penalties (the bound's rise after one dual pivot down and
//                up), the cheaper child first; a box whose LP point is integral but not yet
//                pruned splits its first free variable, so every branch shrinks a box and
//                the search ends. Depth first keeps one LP state per open node on a stack of
//                depth x 2; once the incumbent is optimal (usually from the root) the order
//                changes no pruning, only how soon a better incumbent appears.
// When the tree is exhausted every pruned box had no point beating the incumbent: the
// incumbent is optimal. Past the node limit the lower bound is the least of the open nodes'
// parent bounds (each at least the root's): an optimum that beats the incumbent lies in an
// open box and meets its cuts. Deterministic: fixed orders and tie-breaks throughout.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! min sum x s.t. for every row r: sum_{e in [row_start[r], row_start[r+1])} coefficient[e]
//! x[column[e]] >= need[r]; x integer in [0, upper].
struct covering_ip {
  int variables = 0;
  int upper = 0;
  std::vector<std::int64_t> row_start{0};
  std::vector<int> column;
  std::vector<double> coefficient;
  std::vector<double> need;
};

struct covering_result {
  std::vector<int> x;
  std::int64_t value = 0;
  std::int64_t lower_bound = 0;
  std::int64_t nodes = 0;
};

namespace covering {

inline constexpr double primal_tolerance = 1e-9;
inline constexpr double pivot_tolerance = 1e-7;
inline constexpr double dual_tolerance = 1e-9;
inline constexpr double integral_tolerance = 1e-6;
// L(y) is a sum of a few hundred terms of magnitude <= rows x upper: its rounding error is
// far below this margin, which keeps ceil(L) from rounding a bound of 4 - 1e-13 up to 5.
inline constexpr double bound_margin = 1e-7;

using term = std::pair<int, double>;  // (variable, coefficient)

// One connected component, its rows scaled to a largest coefficient of 1.
struct component {
  int n = 0;
  int upper = 0;
  std::vector<int> variable;                      // component index -> original variable
  std::vector<std::vector<term>> terms;           // per program row
  std::vector<double> need;                       // per program row
  std::vector<std::vector<std::pair<int, double>>> rows_of;  // per variable: (program row, a)
  [[nodiscard]] int rows() const noexcept { return static_cast<int>(need.size()); }
};

// Cut rows in CSR form. A state's cuts are valid for every integer point of its box that
// beats the incumbent, so a child (a sub-box) inherits them with the rest of the state.
struct cut_rows {
  std::vector<std::size_t> start{0};
  std::vector<term> terms;
  std::vector<double> need;
};

// The dual simplex state: basic variable of row r = c0[r] + sum_c t[r n + c] value(nonbasic c).
// Row q < k.rows() is the program's, row k.rows() + c is cut c. Variable ids: 0..n-1
// structural, n + q the slack of row q (bounds [0, inf)).
struct lp_state {
  std::vector<double> t, c0, d;
  std::vector<int> basic, nonbasic;
  std::vector<char> at_upper;
  std::vector<int> lo, hi;
  cut_rows cuts;
};

struct row_view {
  std::span<const term> terms;
  double need = 0;
};

inline row_view row_of(const component& k, const lp_state& s, int q) {
  if (q < k.rows()) return {k.terms[static_cast<std::size_t>(q)], k.need[static_cast<std::size_t>(q)]};
  const auto c = static_cast<std::size_t>(q - k.rows());
  return {std::span<const term>(s.cuts.terms).subspan(s.cuts.start[c], s.cuts.start[c + 1] - s.cuts.start[c]), s.cuts.need[c]};
}

// The tableau row, in the basis of `s`, of the slack of the row `terms` >= need.
inline void tableau_row(const component& k, const lp_state& s, std::span<const term> terms, double need, std::vector<double>& row, double& constant) {
  const std::size_t n = static_cast<std::size_t>(k.n);
  std::vector<double> dense(n, 0.0);
  for (const auto& [i, a] : terms) dense[static_cast<std::size_t>(i)] = a;
  row.assign(n, 0.0);
  constant = -need;
  for (std::size_t c = 0; c < n; ++c)
    if (s.nonbasic[c] < k.n) row[c] = dense[static_cast<std::size_t>(s.nonbasic[c])];
  for (std::size_t b = 0; b < s.basic.size(); ++b) {
    if (s.basic[b] >= k.n) continue;
    const double a = dense[static_cast<std::size_t>(s.basic[b])];
    if (a == 0.0) continue;
    const double* tableau = s.t.data() + b * n;
    for (std::size_t c = 0; c < n; ++c) row[c] += a * tableau[c];
    constant += a * s.c0[b];
  }
}

// Appends row `terms` >= need as a cut of the state, its slack basic.
inline void add_row(const component& k, lp_state& s, std::span<const term> terms, double need) {
  std::vector<double> row;
  double constant = 0;
  tableau_row(k, s, terms, need, row, constant);
  s.cuts.terms.insert(s.cuts.terms.end(), terms.begin(), terms.end());
  s.cuts.start.push_back(s.cuts.terms.size());
  s.cuts.need.push_back(need);
  s.basic.push_back(k.n + static_cast<int>(s.basic.size()));
  s.t.insert(s.t.end(), row.begin(), row.end());
  s.c0.push_back(constant);
}

// The slack basis at x = lo = 0 (dual feasible: every cost is 1 > 0) over the program's rows.
inline lp_state initial_state(const component& k) {
  const std::size_t n = static_cast<std::size_t>(k.n), m = static_cast<std::size_t>(k.rows());
  lp_state s;
  s.t.assign(m * n, 0.0);
  s.c0.resize(m);
  for (std::size_t r = 0; r < m; ++r) {
    for (const auto& [i, a] : k.terms[r]) s.t[r * n + static_cast<std::size_t>(i)] = a;
    s.c0[r] = -k.need[r];
  }
  s.d.assign(n, 1.0);
  s.basic.resize(m);
  std::iota(s.basic.begin(), s.basic.end(), k.n);
  s.nonbasic.resize(n);
  std::iota(s.nonbasic.begin(), s.nonbasic.end(), 0);
  s.at_upper.assign(n, 0);
  s.lo.assign(n, 0);
  s.hi.assign(n, k.upper);
  return s;
}

inline double nonbasic_value(const component& k, const lp_state& s, std::size_t c) {
  const int v = s.nonbasic[c];
  if (v >= k.n) return 0.0;
  return s.at_upper[c] ? s.hi[static_cast<std::size_t>(v)] : s.lo[static_cast<std::size_t>(v)];
}

inline void pivot(const component& k, lp_state& s, std::size_t r, std::size_t c, bool leave_at_upper) {
  const std::size_t n = static_cast<std::size_t>(k.n), m = s.basic.size();
  double* row = s.t.data() + r * n;
  const double p = row[c];
  for (std::size_t j = 0; j < n; ++j) row[j] = -row[j] / p;
  row[c] = 1.0 / p;
  s.c0[r] = -s.c0[r] / p;
  for (std::size_t i = 0; i < m; ++i) {
    if (i == r) continue;
    double* other = s.t.data() + i * n;
    const double f = other[c];
    if (f == 0.0) continue;
    for (std::size_t j = 0; j < n; ++j) other[j] += f * row[j];
    other[c] = f * row[c];
    s.c0[i] += f * s.c0[r];
  }
  const double dc = s.d[c];
  for (std::size_t j = 0; j < n; ++j) s.d[j] += dc * row[j];
  s.d[c] = dc * row[c];
  std::swap(s.basic[r], s.nonbasic[c]);
  s.at_upper[c] = leave_at_upper ? 1 : 0;
}

// |alpha| of column c in the ratio test of a row leaving in `direction`, 0 when c cannot enter
// (a fixed variable, or a step that would break its reduced cost's sign).
inline double eligible_alpha(const component& k, const lp_state& s, const double* row, std::size_t c, double direction) {
  const int v = s.nonbasic[c];
  if (v < k.n && s.lo[static_cast<std::size_t>(v)] == s.hi[static_cast<std::size_t>(v)]) return 0;
  const double alpha = row[c] * direction;
  return (s.at_upper[c] ? alpha < -pivot_tolerance : alpha > pivot_tolerance) ? std::abs(alpha) : 0;
}

// The dual ratio test's smallest step min_c (|d_c| + tolerance) / |alpha_c| over the columns
// that can enter when basic row `row` moves in `direction` (infinite when none can). With
// tolerance 0 it is the Driebeck-Tomlin penalty: the rise of the LP bound per unit the row
// moves after one dual pivot, which guides branching (bounds always come from
// lagrangian_bound).
inline double ratio_bound(const component& k, const lp_state& s, const double* row, double direction, double tolerance) {
  double ratio = std::numeric_limits<double>::infinity();
  for (std::size_t c = 0; c < s.nonbasic.size(); ++c) {
    const double alpha = eligible_alpha(k, s, row, c, direction);
    if (alpha != 0) ratio = std::min(ratio, (std::abs(s.d[c]) + tolerance) / alpha);
  }
  return ratio;
}

// Dual simplex until primal feasible, no entering column (the LP of the box is infeasible, or
// a numerical dead end) or the pivot cap; any of these leaves valid duals for the bound.
inline void dual_simplex(const component& k, lp_state& s, std::vector<double>& value) {
  const std::size_t n = static_cast<std::size_t>(k.n), m = s.basic.size();
  const std::int64_t cap = 50 * static_cast<std::int64_t>(m + n) + 100;
  std::vector<std::pair<std::size_t, double>> nb;  // the nonbasic columns at a nonzero value
  nb.reserve(n);
  value.assign(m, 0.0);
  for (std::int64_t iteration = 0; iteration < cap; ++iteration) {
    nb.clear();
    for (std::size_t c = 0; c < n; ++c)
      if (const double v = nonbasic_value(k, s, c); v != 0) nb.emplace_back(c, v);
    std::size_t leave = m;
    double worst = primal_tolerance, direction = 0;
    for (std::size_t r = 0; r < m; ++r) {
      const double* row = s.t.data() + r * n;
      double v = s.c0[r];
      for (const auto& [c, x] : nb) v += row[c] * x;
      value[r] = v;
      const int b = s.basic[r];
      const double lo = b < k.n ? s.lo[static_cast<std::size_t>(b)] : 0.0;
      const double hi = b < k.n ? s.hi[static_cast<std::size_t>(b)] : std::numeric_limits<double>::infinity();
      if (lo - v > worst) worst = lo - v, leave = r, direction = 1;
      if (v - hi > worst) worst = v - hi, leave = r, direction = -1;
    }
    if (leave == m) return;
    const double* row = s.t.data() + leave * n;
    // Harris's two-pass ratio test: the largest pivot among the columns whose ratio is
    // within dual_tolerance of the smallest, so tiny pivots do not wreck the tableau.
    const double bound_ratio = ratio_bound(k, s, row, direction, dual_tolerance);
    std::size_t enter = n;
    double best_alpha = 0;
    for (std::size_t c = 0; c < n; ++c) {
      const double alpha = eligible_alpha(k, s, row, c, direction);
      if (alpha != 0 && std::abs(s.d[c]) / alpha <= bound_ratio && alpha > best_alpha) best_alpha = alpha, enter = c;
    }
    if (enter == n) return;
    pivot(k, s, leave, enter, direction < 0);
  }
}

// L(y) with y_q = the reduced cost of row q's slack when it is nonbasic (clipped at 0);
// g receives the Lagrangian costs 1 - sum_q y_q a_qi.
inline double lagrangian_bound(const component& k, const lp_state& s, std::vector<double>& g) {
  g.assign(static_cast<std::size_t>(k.n), 1.0);
  double bound = 0;
  for (std::size_t c = 0; c < s.nonbasic.size(); ++c) {
    const int v = s.nonbasic[c];
    if (v < k.n || s.d[c] <= 0) continue;
    const row_view row = row_of(k, s, v - k.n);
    bound += s.d[c] * row.need;
    for (const auto& [i, a] : row.terms) g[static_cast<std::size_t>(i)] -= s.d[c] * a;
  }
  for (std::size_t i = 0; i < g.size(); ++i) bound += g[i] * (g[i] >= 0 ? s.lo[i] : s.hi[i]);
  return bound;
}

inline double lagrangian_bound(const component& k, const lp_state& s) {
  std::vector<double> g;
  return lagrangian_bound(k, s, g);
}

// Reduced-cost tightening: every x in the box has value >= L(y) + sum_i |g_i| (distance of
// x_i from the bound that minimises g_i x_i), so a point that beats `target` (value <=
// target - 1) keeps each x_i within (target - 1 - L) / |g_i| of that bound.
inline void tighten(lp_state& s, const std::vector<double>& g, double bound, std::int64_t target) {
  const double room = static_cast<double>(target - 1) - bound + bound_margin;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (s.lo[i] == s.hi[i] || std::abs(g[i]) < 1e-9) continue;
    const double steps = std::floor(room / std::abs(g[i]) + 1e-9);
    if (steps >= s.hi[i] - s.lo[i]) continue;
    const int reach = static_cast<int>(std::max(0.0, steps));
    if (g[i] > 0) s.hi[i] = s.lo[i] + reach;
    else s.lo[i] = s.hi[i] - reach;
  }
}

inline std::vector<double> row_sums(const component& k, const std::vector<int>& x) {
  std::vector<double> lhs(static_cast<std::size_t>(k.rows()), 0.0);
  for (std::size_t r = 0; r < lhs.size(); ++r)
    for (const auto& [i, a] : k.terms[r]) lhs[r] += a * x[static_cast<std::size_t>(i)];
  return lhs;
}

inline bool feasible(const component& k, const std::vector<int>& x) {
  const std::vector<double> lhs = row_sums(k, x);
  for (std::size_t r = 0; r < lhs.size(); ++r)
    if (lhs[r] < k.need[r]) return false;
  return true;
}

// Lowers each variable of `order`, in turn, as far as its rows' slack and its box allow;
// returns the total lowered.
inline std::int64_t descend(const component& k, const lp_state& s, const std::vector<int>& order, std::vector<int>& x, std::vector<double>& lhs) {
  std::int64_t lowered = 0;
  for (const int i : order) {
    const auto ii = static_cast<std::size_t>(i);
    int drop = x[ii] - s.lo[ii];
    for (const auto& [r, a] : k.rows_of[ii]) {
      const double slack = lhs[static_cast<std::size_t>(r)] - k.need[static_cast<std::size_t>(r)];
      drop = std::min(drop, static_cast<int>(std::floor(slack / a)));
    }
    for (; drop > 0; --drop) {
      bool ok = true;
      for (const auto& [r, a] : k.rows_of[ii]) ok = ok && lhs[static_cast<std::size_t>(r)] - a * drop >= k.need[static_cast<std::size_t>(r)];
      if (ok) break;
    }
    if (drop <= 0) continue;
    x[ii] -= drop;
    lowered += drop;
    for (const auto& [r, a] : k.rows_of[ii]) lhs[static_cast<std::size_t>(r)] -= a * drop;
  }
  return lowered;
}

// Monotone rounding of `point` inside the box, greedy descent (the most rounded-up first),
// then 1-for-2 exchanges: raise one variable by 1 and keep the move when its row neighbours
// can drop 2 or more. Returns a feasible x.
inline std::vector<int> round_down_greedily(const component& k, const lp_state& s, const std::vector<double>& point) {
  const std::size_t n = static_cast<std::size_t>(k.n);
  std::vector<int> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = std::clamp(static_cast<int>(std::ceil(point[i] - integral_tolerance)), s.lo[i], s.hi[i]);
  if (!feasible(k, x)) x = s.hi;
  std::vector<double> lhs = row_sums(k, x);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int p, int q) {
    return x[static_cast<std::size_t>(p)] - point[static_cast<std::size_t>(p)] > x[static_cast<std::size_t>(q)] - point[static_cast<std::size_t>(q)];
  });
  descend(k, s, order, x, lhs);
  std::vector<int> neighbours, trial_x;
  std::vector<double> trial_lhs;
  for (bool improved = true; improved;) {
    improved = false;
    for (std::size_t j = 0; j < n; ++j) {
      if (x[j] >= s.hi[j]) continue;
      neighbours.clear();
      for (const auto& [r, a] : k.rows_of[j])
        for (const auto& [i, b] : k.terms[static_cast<std::size_t>(r)])
          if (static_cast<std::size_t>(i) != j) neighbours.push_back(i);
      std::sort(neighbours.begin(), neighbours.end());
      neighbours.erase(std::unique(neighbours.begin(), neighbours.end()), neighbours.end());
      trial_x = x, trial_lhs = lhs;
      ++trial_x[j];
      for (const auto& [r, a] : k.rows_of[j]) trial_lhs[static_cast<std::size_t>(r)] += a;
      if (descend(k, s, neighbours, trial_x, trial_lhs) >= 2) x.swap(trial_x), lhs.swap(trial_lhs), improved = true;
    }
  }
  return x;
}

using real = long double;

// Turns the cut sum_i coefficient[i] x_i >= need (long double, over the component's
// variables) into double terms scaled to a largest coefficient of 1, lowering the right-hand
// side by `error` (the caller's a-priori bound on how far its float error can raise it), by
// c_i upper for each dropped coefficient c_i > 0 under 1e-9 of the largest, and by
// 1e-12 (1 + sum_i |c_i| upper) + 1e-15 |need| for rounding the scaled cut to double. False
// when there is no cut or `error`, with the dropped terms, passes 0.1.
inline bool emit_cut(const component& k, const std::vector<real>& coefficient, real need, real error, std::vector<term>& cut, double& cut_need) {
  real largest = 0;
  for (const real c : coefficient) largest = std::max(largest, std::abs(c));
  if (largest == 0) return false;
  cut.clear();
  real reach = 0;
  for (std::size_t i = 0; i < coefficient.size(); ++i) {
    const real c = coefficient[i] / largest;
    if (std::abs(c) < 1e-9L) {
      if (c > 0) error += c * k.upper * largest;
      continue;
    }
    cut.emplace_back(static_cast<int>(i), static_cast<double>(c));
    reach += std::abs(c) * k.upper;
  }
  if (error > 0.1L || cut.empty()) return false;
  need = (need - error) / largest;
  cut_need = static_cast<double>(need - 1e-12L * (reach + 1) - 1e-15L * std::abs(need));
  return true;
}

// The complemented mixed-integer rounding (c-MIR) of row `terms` >= need (positive
// coefficients) in the state's box [lo, hi]. With y_j = x_j - lo_j, or y_j = hi_j - x_j for
// the complemented variables (set C), y_j integer in [0, hi_j - lo_j], the row reads
//     sum_j c_j y_j <= beta,  c_j = -a_j (j not in C) or a_j (j in C),
//     beta = sum_{j not in C} a_j lo_j + sum_{j in C} a_j hi_j - need,
// and for any delta > 0 every such y meets the MIR inequality (Nemhauser and Wolsey)
//     sum_j F(c_j / delta) y_j <= floor(beta / delta),
//     F(c) = floor(c) + max(0, frac(c) - f) / (1 - f),  f = frac(beta / delta),
// a covering row again once y is written in x.
struct mir_row {
  std::span<const term> terms;
  double need = 0;
  std::span<const int> lo, hi;  // the box
};

// F(c_j / delta) of every term into alpha (0 for a fixed variable) for the complement set
// `flip`; returns floor(beta / delta + raise) and sets f (-1 when f is outside [0.01, 0.99]).
template <typename Real>
Real mir_coefficients(const mir_row& row, const std::vector<char>& flip, Real delta, Real raise, std::vector<Real>& alpha, Real& f) {
  Real beta = -Real(row.need);
  alpha.resize(row.terms.size());
  for (std::size_t j = 0; j < row.terms.size(); ++j) {
    const auto i = static_cast<std::size_t>(row.terms[j].first);
    beta += Real(row.terms[j].second) * (flip[j] ? row.hi[i] : row.lo[i]);
  }
  const Real b = beta / delta + raise, floor_b = std::floor(b);
  f = b - floor_b;
  if (f < Real(0.01) || f > Real(0.99)) f = -1;
  for (std::size_t j = 0; j < row.terms.size(); ++j) {
    const auto i = static_cast<std::size_t>(row.terms[j].first);
    const Real c = (flip[j] ? Real(row.terms[j].second) : -Real(row.terms[j].second)) / delta, floor_c = std::floor(c);
    alpha[j] = row.lo[i] == row.hi[i] ? Real(0) : floor_c + std::max(Real(0), c - floor_c - f) / (1 - f);
  }
  return floor_b;
}

// The most effective c-MIR cut of `row` at `point` (Marchand and Wolsey's search, in double):
// delta in {a_j} and 1/2, 1/3, 1/4 (rows are scaled to a largest coefficient of 1), the best
// halved up to three times, then C from "x_j in the upper half of its box" flipping each
// variable strictly inside its box, nearest the middle first, while it raises the efficacy
// (violation over norm). The chosen cut is then recomputed in long double: beta / delta is
// raised by 1e-12 M (M: |need| + sum_j a_j (hi_j + 1), over delta), far above its error, so
// the rounded row is valid exactly; F's error is below 1e-14 (M + 1) per unit of y, and
// emit_cut lowers the right-hand side by 1e-11 (M + 1)(1 + sum_j (hi_j - lo_j)). Valid for
// the integer points of the box (a node's cut is local to its subtree). Returns the
// efficacy, 0 when there is no cut.
inline double complemented_mir(const component& k, const mir_row& row, const std::vector<double>& point, std::vector<term>& cut, double& cut_need) {
  const std::span<const int> lo = row.lo, hi = row.hi;
  const std::size_t t = row.terms.size();
  std::vector<char> flip(t, 0);
  std::vector<double> y(t), alpha;
  std::vector<std::pair<double, std::size_t>> inside;  // (distance from the middle, term)
  real magnitude = std::abs(real(row.need)), widths = 1;
  for (std::size_t j = 0; j < t; ++j) {
    const auto i = static_cast<std::size_t>(row.terms[j].first);
    flip[j] = lo[i] < hi[i] && 2 * point[i] >= lo[i] + hi[i];
    magnitude += real(row.terms[j].second) * (hi[i] + 1);
    widths += hi[i] - lo[i];
    if (point[i] > lo[i] + integral_tolerance && point[i] < hi[i] - integral_tolerance) inside.emplace_back(std::abs(point[i] - (lo[i] + hi[i]) / 2.0), j);
  }
  if (inside.empty()) return 0;
  const auto efficacy = [&](double delta) {
    for (std::size_t j = 0; j < t; ++j) {
      const auto i = static_cast<std::size_t>(row.terms[j].first);
      y[j] = std::max(0.0, flip[j] ? hi[i] - point[i] : point[i] - lo[i]);
    }
    double f = 0;
    const double rhs = mir_coefficients(row, flip, delta, 0.0, alpha, f);
    if (f < 0) return 0.0;
    double lhs = 0, norm = 0;
    for (std::size_t j = 0; j < t; ++j) lhs += alpha[j] * y[j], norm += alpha[j] * alpha[j];
    return norm == 0 ? 0.0 : (lhs - rhs) / std::sqrt(norm);
  };
  std::vector<double> deltas{0.5, 1 / 3.0, 0.25};
  for (const auto& [i, a] : row.terms) deltas.push_back(a);
  std::sort(deltas.begin(), deltas.end());
  deltas.erase(std::unique(deltas.begin(), deltas.end()), deltas.end());
  double best = 0, delta = 0;
  for (const double d : deltas)
    if (const double e = efficacy(d); e > best) best = e, delta = d;
  if (delta == 0) return 0;
  for (const double d : {delta / 2, delta / 4, delta / 8})
    if (const double e = efficacy(d); e > best) best = e, delta = d;
  std::sort(inside.begin(), inside.end());
  for (const auto& [distance, j] : inside) {
    flip[j] = !flip[j];
    if (const double e = efficacy(delta); e > best) best = e;
    else flip[j] = !flip[j];
  }
  std::vector<real> exact;
  real f = 0;
  const real rhs = mir_coefficients(row, flip, real(delta), 1e-12L * magnitude / delta, exact, f);
  if (f < 0) return 0;
  std::vector<real> coefficient(static_cast<std::size_t>(k.n), 0);
  real cut_rhs = -rhs;
  for (std::size_t j = 0; j < t; ++j) {
    const auto i = static_cast<std::size_t>(row.terms[j].first);
    coefficient[i] += flip[j] ? exact[j] : -exact[j];
    cut_rhs += flip[j] ? exact[j] * hi[i] : -exact[j] * lo[i];
  }
  if (!emit_cut(k, coefficient, cut_rhs, 1e-11L * (magnitude / delta + 1) * widths, cut, cut_need)) return 0;
  return best;
}

// One round of c-MIR cuts at `point`: per program row whose slack there is at most 0.3 (a
// row far from tight seldom yields a violated rounding; rows are scaled to a largest
// coefficient of 1) the most effective, when its efficacy passes `least`.
inline int separate_mir(const component& k, lp_state& s, const std::vector<double>& point, double least) {
  std::vector<term> cut;
  int added = 0;
  for (std::size_t r = 0; r < k.terms.size(); ++r) {
    double lhs = 0, need = 0;
    for (const auto& [i, a] : k.terms[r]) lhs += a * point[static_cast<std::size_t>(i)];
    if (lhs - k.need[r] > 0.3 || complemented_mir(k, {k.terms[r], k.need[r], s.lo, s.hi}, point, cut, need) <= least) continue;
    add_row(k, s, cut, need);
    ++added;
  }
  return added;
}

// Drops the cut rows whose slack is basic and above `slack` in `value`: the basis stays primal
// and dual feasible without them. Slack ids above a dropped row shift down.
inline void drop_slack_cuts(const component& k, lp_state& s, std::vector<double>& value, double slack) {
  const std::size_t n = static_cast<std::size_t>(k.n), program = static_cast<std::size_t>(k.rows());
  const std::size_t rows = s.basic.size();
  std::vector<int> new_id(rows, -1);
  std::vector<char> keep_row(rows, 1);
  for (std::size_t r = 0; r < rows; ++r)
    if (s.basic[r] >= k.n + k.rows() && value[r] > slack) keep_row[static_cast<std::size_t>(s.basic[r] - k.n)] = 0;
  int kept_rows = 0;
  for (std::size_t q = 0; q < rows; ++q)
    if (keep_row[q]) new_id[q] = kept_rows++;
  if (static_cast<std::size_t>(kept_rows) == rows) return;
  std::size_t at = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    if (s.basic[r] >= k.n && !keep_row[static_cast<std::size_t>(s.basic[r] - k.n)]) continue;
    if (at != r) std::copy_n(s.t.begin() + static_cast<std::ptrdiff_t>(r * n), n, s.t.begin() + static_cast<std::ptrdiff_t>(at * n));
    s.c0[at] = s.c0[r], value[at] = value[r];
    s.basic[at] = s.basic[r] < k.n ? s.basic[r] : k.n + new_id[static_cast<std::size_t>(s.basic[r] - k.n)];
    ++at;
  }
  s.t.resize(at * n), s.c0.resize(at), value.resize(at), s.basic.resize(at);
  for (int& v : s.nonbasic)
    if (v >= k.n) v = k.n + new_id[static_cast<std::size_t>(v - k.n)];
  cut_rows kept;
  for (std::size_t q = program; q < rows; ++q) {
    if (!keep_row[q]) continue;
    const std::size_t c = q - program;
    kept.terms.insert(kept.terms.end(), s.cuts.terms.begin() + static_cast<std::ptrdiff_t>(s.cuts.start[c]),
                      s.cuts.terms.begin() + static_cast<std::ptrdiff_t>(s.cuts.start[c + 1]));
    kept.start.push_back(kept.terms.size());
    kept.need.push_back(s.cuts.need[c]);
  }
  s.cuts = std::move(kept);
}

// The Gomory mixed-integer cut of tableau row `r` (basic structural x_B at a fractional
// value), derived from the rows rather than read off the tableau. The tableau row is the
// aggregation sum_q u_q (a_q x - s_q) = sum_q u_q need_q of the rows (u_q: its entry in the
// column of the nonbasic slack s_q, 0 for basic slacks), an equation that holds for ANY
// multipliers; it is recomputed from the rows in long double. Substituting y_i = x_i - lo_i
// (y_i = hi_i - x_i for variables nonbasic at their upper bound) gives sum_i alpha_i y_i -
// sum_q u_q s_q = b with y_i integer >= 0 and s_q >= 0; for f0 = frac(b) in (0, 1) every such
// point satisfies the GMI inequality
//     sum_i phi(alpha_i) y_i + sum_q psi(-u_q) s_q >= 1,
//     phi(a) = min(frac(a) / f0, (1 - frac(a)) / (1 - f0)),  psi(g) = max(g / f0, -g / (1 - f0)),
// and s_q = a_q x - need_q turns it into a row in x. Float error: phi and psi are
// K = max(1 / f0, 1 / (1 - f0))-Lipschitz and the computed equation is off by at most
// eps x M (M: the sum of the magnitudes of its terms over the box); emit_cut lowers the
// right-hand side by 1e-11 K M, which bounds that error with a wide margin even in double
// precision. Valid for the integer points of the state's box (local to a node's subtree).
// Returns false when there is no cut.
inline bool gomory_cut(const component& k, const lp_state& s, std::size_t r, std::vector<term>& cut, double& cut_need) {
  const std::size_t n = static_cast<std::size_t>(k.n);
  std::vector<real> alpha(n, 0), coefficient(n, 0);
  std::vector<std::pair<int, real>> multipliers;  // (row q, u_q)
  real b = 0, magnitude = 0;
  for (std::size_t c = 0; c < n; ++c) {
    const int v = s.nonbasic[c];
    const double u = s.t[r * n + c];
    if (v < k.n || u == 0.0) continue;
    const row_view row = row_of(k, s, v - k.n);
    multipliers.emplace_back(v - k.n, u);
    b += real(u) * row.need;
    magnitude += std::abs(real(u)) * std::abs(row.need);
    for (const auto& [i, a] : row.terms) {
      alpha[static_cast<std::size_t>(i)] += real(u) * a;
      magnitude += std::abs(real(u) * a) * k.upper;
    }
  }
  std::vector<char> flipped(n, 0);
  for (std::size_t c = 0; c < n; ++c)
    if (s.nonbasic[c] < k.n && s.at_upper[c]) flipped[static_cast<std::size_t>(s.nonbasic[c])] = 1;
  for (std::size_t i = 0; i < n; ++i) {
    b -= alpha[i] * (flipped[i] ? s.hi[i] : s.lo[i]);
    magnitude += std::abs(alpha[i]) * k.upper;
  }
  const real f0 = b - std::floor(b);
  if (f0 < 0.01L || f0 > 0.99L) return false;
  const real lipschitz = std::max(1 / f0, 1 / (1 - f0));
  real need = 1;
  for (std::size_t i = 0; i < n; ++i) {
    if (s.lo[i] == s.hi[i]) continue;
    const real a = flipped[i] ? -alpha[i] : alpha[i];
    const real frac = a - std::floor(a);
    const real phi = std::min(frac / f0, (1 - frac) / (1 - f0));
    coefficient[i] += flipped[i] ? -phi : phi;
    need += flipped[i] ? -phi * s.hi[i] : phi * s.lo[i];
  }
  for (const auto& [q, u] : multipliers) {
    const real psi = u < 0 ? -u / f0 : u / (1 - f0);
    const row_view row = row_of(k, s, q);
    for (const auto& [i, a] : row.terms) coefficient[static_cast<std::size_t>(i)] += psi * a;
    need += psi * row.need;
  }
  return emit_cut(k, coefficient, need, 1e-11L * lipschitz * magnitude, cut, cut_need);
}

// One round of Gomory cuts: from the `limit` rows whose basic structural value is most
// fractional (nearest 0.5 first, then the lower row).
inline int separate_gomory(const component& k, lp_state& s, const std::vector<double>& value, int limit) {
  std::vector<std::pair<double, std::size_t>> candidates;
  for (std::size_t r = 0; r < value.size(); ++r) {
    if (s.basic[r] >= k.n) continue;
    const double frac = value[r] - std::floor(value[r]);
    if (frac > 0.01 && frac < 0.99) candidates.emplace_back(std::abs(frac - 0.5), r);
  }
  std::sort(candidates.begin(), candidates.end());
  std::vector<term> cut;
  int added = 0;
  for (const auto& [distance, r] : candidates) {
    if (added == limit) break;
    double need = 0;
    if (!gomory_cut(k, s, r, cut, need)) continue;
    add_row(k, s, cut, need);
    ++added;
  }
  return added;
}

// The LP point: nonbasic variables at their bound, basic ones at their value (clamped).
inline void point_of(const component& k, const lp_state& s, const std::vector<double>& value, std::vector<double>& point) {
  for (std::size_t c = 0; c < s.nonbasic.size(); ++c)
    if (s.nonbasic[c] < k.n) point[static_cast<std::size_t>(s.nonbasic[c])] = nonbasic_value(k, s, c);
  for (std::size_t r = 0; r < value.size(); ++r)
    if (s.basic[r] < k.n) {
      const auto i = static_cast<std::size_t>(s.basic[r]);
      point[i] = std::clamp(value[r], double(s.lo[i]), double(s.hi[i]));
    }
}

// Rounds the LP point of `s` into an incumbent candidate (round_down_greedily), kept when it
// is better and meets every row (propagation may have left hi a float allowance short).
inline void round_point(const component& k, const lp_state& s, const std::vector<double>& value, std::vector<double>& point, std::vector<int>& best,
                        std::int64_t& best_value) {
  point_of(k, s, value, point);
  std::vector<int> x = round_down_greedily(k, s, point);
  const std::int64_t x_value = std::accumulate(x.begin(), x.end(), std::int64_t{0});
  if (x_value < best_value && feasible(k, x)) best_value = x_value, best = std::move(x);
}

// Rounds of root cuts until none is added, the rounded bound meets the incumbent (each round's
// LP point is rounded into a candidate), the bound stalls (`patience` rounds without a rise of
// 1e-3), a round lowers it (numerical trouble: the round is undone) or the cuts reach three
// times the program's rows. A round adds c-MIR cuts and, with `gomory`, Gomory cuts from 10
// rows; it then drops cuts with a slack above 1.
inline void cut_rounds(const component& k, lp_state& s, std::vector<double>& value, std::vector<double>& point, bool gomory, int patience,
                       std::vector<int>& best, std::int64_t& best_value) {
  double bound = lagrangian_bound(k, s);
  round_point(k, s, value, point, best, best_value);
  for (int round = 0, stalled = 0; round < 100 && stalled < patience && s.cuts.need.size() < 3 * k.need.size(); ++round) {
    if (std::ceil(bound - bound_margin) >= static_cast<double>(best_value)) break;
    lp_state saved = s;
    point_of(k, s, value, point);
    const int added = (gomory ? separate_gomory(k, s, value, 10) : 0) + separate_mir(k, s, point, 1e-4);
    if (added == 0) break;
    dual_simplex(k, s, value);
    const double next = lagrangian_bound(k, s);
    if (next < bound - 1e-6) {
      s = std::move(saved);
      dual_simplex(k, s, value);
      break;
    }
    drop_slack_cuts(k, s, value, 1);
    round_point(k, s, value, point, best, best_value);
    stalled = next > bound + 1e-3 ? 0 : stalled + 1;
    bound = std::max(bound, next);
  }
}

// Fractional diving from `s`: fix the LP's least fractional variable at its nearest integer
// (up when down leaves the box infeasible), re-solve, repeat; each LP point is rounded into
// an incumbent candidate. Stops at an integral point, a bound no better than the incumbent
// or n fixings.
inline void dive(const component& k, lp_state s, std::vector<double>& value, std::vector<double>& point, std::vector<int>& best,
                 std::int64_t& best_value) {
  const std::size_t n = static_cast<std::size_t>(k.n);
  for (std::size_t step = 0; step <= n; ++step) {
    dual_simplex(k, s, value);
    if (std::ceil(lagrangian_bound(k, s) - bound_margin) >= static_cast<double>(best_value)) return;
    round_point(k, s, value, point, best, best_value);
    std::size_t pick = n;
    double closest = 0.5;
    for (std::size_t i = 0; i < n; ++i) {
      const double distance = std::abs(point[i] - std::round(point[i]));
      if (distance > integral_tolerance && distance < closest) closest = distance, pick = i;
    }
    if (pick == n) return;
    const int down = static_cast<int>(std::floor(point[pick])), rounded = static_cast<int>(std::round(point[pick]));
    s.lo[pick] = s.hi[pick] = rounded;
    if (rounded == down && !feasible(k, s.hi)) s.lo[pick] = s.hi[pick] = down + 1;
  }
}

// Bound propagation over the box of `s` for the points that beat `target` (value <= target -
// 1): each row sum_j a_j x_j >= need of the state (the program's and its cuts) gives x_j >=
// (need - the most the other terms reach) / a_j for a_j > 0 (x_j <= that quotient for
// a_j < 0), rounded inward after an allowance of 1e-9 (1 + M / |a_j|) for float error (M:
// |need| + sum_j |a_j| upper; the computed quotient is within 1e-12 (1 + M / |a_j|) of the
// exact one), and sum_i x_i <= target - 1 gives x_i <= target - 1 - sum_{j != i} lo_j.
// Repeats until nothing changes. Returns false when the box holds no such point.
inline bool propagate(const component& k, lp_state& s, std::int64_t target) {
  const std::size_t n = static_cast<std::size_t>(k.n);
  for (bool changed = true; changed;) {
    changed = false;
    const std::int64_t low = std::accumulate(s.lo.begin(), s.lo.end(), std::int64_t{0});
    if (low > target - 1) return false;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t cap = target - 1 - (low - s.lo[i]);
      if (cap < s.hi[i]) s.hi[i] = static_cast<int>(cap), changed = true;
    }
    for (int q = 0; q < static_cast<int>(s.basic.size()); ++q) {
      const row_view row = row_of(k, s, q);
      double most = 0, magnitude = std::abs(row.need);
      for (const auto& [i, a] : row.terms) {
        most += a * (a > 0 ? s.hi[static_cast<std::size_t>(i)] : s.lo[static_cast<std::size_t>(i)]);
        magnitude += std::abs(a) * k.upper;
      }
      for (const auto& [i, a] : row.terms) {
        const auto j = static_cast<std::size_t>(i);
        const double reach = (row.need - (most - a * (a > 0 ? s.hi[j] : s.lo[j]))) / a, allowance = 1e-9 * (1 + magnitude / std::abs(a));
        if (a > 0) {
          const double least = std::ceil(reach - allowance);
          if (least > s.hi[j]) return false;
          if (least > s.lo[j]) s.lo[j] = static_cast<int>(least), changed = true;
        } else {
          const double most_x = std::floor(reach + allowance);
          if (most_x < s.lo[j]) return false;
          if (most_x < s.hi[j]) s.hi[j] = static_cast<int>(most_x), changed = true;
        }
      }
    }
  }
  return true;
}

struct node {
  lp_state state;
  int variable = -1;  // the bound this node changes (-1: the root)
  int lo = 0, hi = 0;
  double bound = 0;   // the parent's rounded bound: a lower bound on the node's optimum
};

// Branch and bound on one component (see the file comment); `nodes` counts over components.
// Past the node limit the search stops (the root is always solved) and returns its incumbent
// with the least bound of the open nodes.
struct component_result {
  std::vector<int> x;
  std::int64_t lower_bound = 0;
};
inline component_result solve_component(const component& k, std::int64_t& nodes, std::int64_t max_nodes) {
  const std::size_t n = static_cast<std::size_t>(k.n);
  std::vector<int> best(n, k.upper);
  std::int64_t best_value = static_cast<std::int64_t>(k.upper) * k.n;
  std::vector<double> value, point(n), costs;
  std::vector<node> stack;
  lp_state root = initial_state(k);
  dual_simplex(k, root, value);
  lp_state rounding_root = root;
  cut_rounds(k, root, value, point, true, 5, best, best_value);
  drop_slack_cuts(k, root, value, 1e-6);
  const double root_bound = std::ceil(lagrangian_bound(k, root) - bound_margin);
  if (root_bound < static_cast<double>(best_value)) dive(k, root, value, point, best, best_value);
  if (root_bound < static_cast<double>(best_value)) {
    dual_simplex(k, rounding_root, value);
    cut_rounds(k, rounding_root, value, point, false, 3, best, best_value);
    dive(k, std::move(rounding_root), value, point, best, best_value);
  }
  stack.push_back({std::move(root), -1, 0, 0});
  while (!stack.empty()) {
    node current = std::move(stack.back());
    stack.pop_back();
    if (++nodes > max_nodes && current.variable >= 0) {
      double open = current.bound;
      for (const node& waiting : stack) open = std::min(open, waiting.bound);
      return {std::move(best), static_cast<std::int64_t>(std::min(open, static_cast<double>(best_value)))};
    }
    lp_state& s = current.state;
    const bool child = current.variable >= 0;
    if (child) {
      s.lo[static_cast<std::size_t>(current.variable)] = current.lo;
      s.hi[static_cast<std::size_t>(current.variable)] = current.hi;
      if (!feasible(k, s.hi) || !propagate(k, s, best_value)) continue;
      if (std::ceil(lagrangian_bound(k, s) - bound_margin) >= static_cast<double>(best_value)) continue;
    }
    dual_simplex(k, s, value);
    double lagrangian = lagrangian_bound(k, s, costs), strongest = lagrangian;
    if (child && std::ceil(lagrangian - bound_margin) < static_cast<double>(best_value)) {
      // one round of c-MIR cuts in the node's box, valid in its subtree
      point_of(k, s, value, point);
      if (separate_mir(k, s, point, 1e-3) > 0) {
        dual_simplex(k, s, value);
        drop_slack_cuts(k, s, value, 1);
        lagrangian = lagrangian_bound(k, s, costs);
        strongest = std::max(strongest, lagrangian);
      }
    }
    const double bound = std::ceil(strongest - bound_margin);
    if (bound >= static_cast<double>(best_value)) continue;
    point_of(k, s, value, point);
    // the rounding heuristic on every 8th node: the root's dives find most incumbents
    if (nodes % 8 == 0) round_point(k, s, value, point, best, best_value);
    if (bound >= static_cast<double>(best_value)) continue;
    tighten(s, costs, lagrangian, best_value);
    int branch = -1;
    double branch_score = -1, down_penalty = 0, up_penalty = 0;
    for (std::size_t r = 0; r < value.size(); ++r) {
      if (s.basic[r] >= k.n) continue;
      const auto i = static_cast<std::size_t>(s.basic[r]);
      const double frac = point[i] - std::floor(point[i]);
      if (frac < integral_tolerance || frac > 1 - integral_tolerance || s.lo[i] == s.hi[i]) continue;
      const double* row = s.t.data() + r * n;
      const double down = ratio_bound(k, s, row, -1, 0) * frac, up = ratio_bound(k, s, row, 1, 0) * (1 - frac);
      const double score = (std::min(down, 1e3) + 1e-6) * (std::min(up, 1e3) + 1e-6) + 1e-9 * std::min(frac, 1 - frac);
      if (score > branch_score) branch_score = score, branch = static_cast<int>(i), down_penalty = down, up_penalty = up;
    }
    int split;  // children: [lo, split] and [split + 1, hi]
    bool down_first;
    if (branch >= 0) {
      const auto b = static_cast<std::size_t>(branch);
      split = std::clamp(static_cast<int>(std::floor(point[b])), s.lo[b], s.hi[b] - 1);
      down_first = down_penalty <= up_penalty;
    } else {
      // an integral LP point (or a single point left): a candidate whatever the node count,
      // so that dropping a box with no free variable loses no better point
      round_point(k, s, value, point, best, best_value);
      for (std::size_t i = 0; i < n && branch < 0; ++i)
        if (s.lo[i] < s.hi[i]) branch = static_cast<int>(i);
      if (branch < 0 || bound >= static_cast<double>(best_value)) continue;
      const auto b = static_cast<std::size_t>(branch);
      split = (s.lo[b] + s.hi[b]) / 2;
      down_first = true;
    }
    const auto b = static_cast<std::size_t>(branch);
    const int lo = s.lo[b], hi = s.hi[b];
    node down{s, branch, lo, split, std::max(bound, 0.0)};
    node up{std::move(s), branch, split + 1, hi, std::max(bound, 0.0)};
    if (down_first) {
      stack.push_back(std::move(up));
      stack.push_back(std::move(down));
    } else {
      stack.push_back(std::move(down));
      stack.push_back(std::move(up));
    }
  }
  return {best, best_value};
}

// Splits the program into connected components (union-find over the rows), each scaled so
// its largest coefficient per row is 1.
inline std::vector<component> components_of(const covering_ip& p) {
  std::vector<int> parent(static_cast<std::size_t>(p.variables));
  std::iota(parent.begin(), parent.end(), 0);
  const auto find = [&](int v) {
    while (parent[static_cast<std::size_t>(v)] != v) v = parent[static_cast<std::size_t>(v)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(v)])];
    return v;
  };
  const std::size_t rows = p.need.size();
  for (std::size_t r = 0; r < rows; ++r)
    for (std::int64_t e = p.row_start[r] + 1; e < p.row_start[r + 1]; ++e) {
      const int x = find(p.column[static_cast<std::size_t>(p.row_start[r])]), y = find(p.column[static_cast<std::size_t>(e)]);
      if (x != y) parent[static_cast<std::size_t>(std::max(x, y))] = std::min(x, y);
    }
  std::vector<int> component_of_root(static_cast<std::size_t>(p.variables), -1), local(static_cast<std::size_t>(p.variables), -1);
  std::vector<component> out;
  const auto component_of = [&](int v) -> component& {
    int& id = component_of_root[static_cast<std::size_t>(find(v))];
    if (id < 0) id = static_cast<int>(out.size()), out.emplace_back().upper = p.upper;
    return out[static_cast<std::size_t>(id)];
  };
  for (std::size_t r = 0; r < rows; ++r) {
    if (p.row_start[r] == p.row_start[r + 1]) continue;
    component& k = component_of(p.column[static_cast<std::size_t>(p.row_start[r])]);
    double largest = 0;
    for (std::int64_t e = p.row_start[r]; e < p.row_start[r + 1]; ++e) largest = std::max(largest, p.coefficient[static_cast<std::size_t>(e)]);
    std::vector<term> terms;
    for (std::int64_t e = p.row_start[r]; e < p.row_start[r + 1]; ++e) {
      const int v = p.column[static_cast<std::size_t>(e)];
      int& at = local[static_cast<std::size_t>(v)];
      if (at < 0) at = k.n++, k.variable.push_back(v);
      const double a = p.coefficient[static_cast<std::size_t>(e)] / largest;
      const auto same = std::find_if(terms.begin(), terms.end(), [&](const auto& t) { return t.first == at; });
      if (same == terms.end()) terms.emplace_back(at, a);
      else same->second += a;
    }
    k.terms.push_back(std::move(terms));
    k.need.push_back(p.need[r] / largest);
  }
  for (component& k : out) {
    k.rows_of.resize(static_cast<std::size_t>(k.n));
    for (std::size_t r = 0; r < k.terms.size(); ++r)
      for (const auto& [i, a] : k.terms[r]) k.rows_of[static_cast<std::size_t>(i)].emplace_back(static_cast<int>(r), a);
  }
  return out;
}

}  // namespace covering

//! The optimum of `p`, or past the node limit the best point found and a lower bound (see
//! the file comment). Rows with need <= 0 may be left out by the caller or kept; variables
//! in no row end at 0.
[[nodiscard]] inline covering_result solve_covering(const covering_ip& p, std::int64_t max_nodes) {
  covering_result out;
  out.x.assign(static_cast<std::size_t>(p.variables), 0);
  for (std::size_t r = 0; r < p.need.size(); ++r) {
    double most = 0;
    for (std::int64_t e = p.row_start[r]; e < p.row_start[r + 1]; ++e) most += p.coefficient[static_cast<std::size_t>(e)] * p.upper;
    ZEPPELIN_EXPECTS(most >= p.need[r], "a covering row cannot be met even at the upper bounds",
                     {{"row", double(r)}, {"need", p.need[r]}, {"most", most}});
  }
  std::vector<covering::component> parts = covering::components_of(p);
  for (covering::component& k : parts) {
    const covering::component_result r = covering::solve_component(k, out.nodes, max_nodes);
    for (std::size_t i = 0; i < r.x.size(); ++i) {
      out.x[static_cast<std::size_t>(k.variable[i])] = r.x[i];
      out.value += r.x[i];
    }
    out.lower_bound += r.lower_bound;
  }
  return out;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
