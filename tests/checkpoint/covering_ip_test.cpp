// tests/checkpoint/covering_ip_test.cpp
// The pieces of the covering-program solver (checkpoint/detail/covering_ip.hpp) whose
// validity the search's exactness rests on, checked by enumerating every integer point of
// small seeded boxes: a c-MIR cut of a row in a box, a Gomory cut of a node's tableau (its
// box, with cut rows in the aggregation) and bound propagation under an incumbent never cut
// off an integer point that they must keep; each is also seen to cut or tighten often.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint/detail/covering_ip.hpp>
#include <zeppelin/core/random.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

using namespace zeppelin;
using namespace zeppelin::detail::covering;

namespace {

// A covering program of `rows` random rows (2 to min(4, n) distinct variables, coefficients
// in [0.05, 1]) over n variables in [0, upper], every row met at x = upper.
detail::covering_ip random_program(random_generator& g, int n, int rows, int upper) {
  detail::covering_ip ip;
  ip.variables = n;
  ip.upper = upper;
  for (int r = 0; r < rows; ++r) {
    std::vector<int> vars(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) vars[static_cast<std::size_t>(i)] = i;
    g.shuffle(vars.begin(), vars.end());
    const auto size = static_cast<std::size_t>(g.between(2, std::min(4, n)));
    double most = 0;
    for (std::size_t j = 0; j < size; ++j) {
      const double a = 0.05 + 0.95 * g.uniform();
      ip.column.push_back(vars[j]);
      ip.coefficient.push_back(a);
      most += a * upper;
    }
    ip.need.push_back(most * (0.05 + 0.9 * g.uniform()));
    ip.row_start.push_back(static_cast<std::int64_t>(ip.column.size()));
  }
  return ip;
}

// A random box inside [0, upper] per variable.
void random_box(random_generator& g, int upper, std::vector<int>& lo, std::vector<int>& hi) {
  for (std::size_t i = 0; i < lo.size(); ++i) {
    const auto a = static_cast<int>(g.between(0, upper)), b = static_cast<int>(g.between(0, upper));
    lo[i] = std::min(a, b), hi[i] = std::max(a, b);
  }
}

// The first component of a random program (n in [n_lo, 5] variables, [rows_lo, 4] rows,
// upper in [upper_lo, upper_lo + 2]) and its slack-basis LP state in a random box.
struct random_case {
  component k;
  lp_state s;
  int upper = 0;
};
random_case random_case_of(random_generator& g, int n_lo, int rows_lo, int upper_lo) {
  const auto n = static_cast<int>(g.between(n_lo, 5)), rows = static_cast<int>(g.between(rows_lo, 4));
  const auto upper = static_cast<int>(g.between(upper_lo, upper_lo + 2));
  component k = components_of(random_program(g, n, rows, upper)).front();
  lp_state s = initial_state(k);
  random_box(g, upper, s.lo, s.hi);
  return {std::move(k), std::move(s), upper};
}

// Calls visit(x) for every integer x in the box.
template <typename Visit>
void for_each_point(const std::vector<int>& lo, const std::vector<int>& hi, Visit visit) {
  std::vector<int> x = lo;
  while (true) {
    visit(x);
    std::size_t i = 0;
    while (i < x.size() && x[i] == hi[i]) x[i] = lo[i], ++i;
    if (i == x.size()) return;
    ++x[i];
  }
}

long double lhs_of(std::span<const term> terms, const std::vector<int>& x) {
  long double sum = 0;
  for (const auto& [i, a] : terms) sum += static_cast<long double>(a) * x[static_cast<std::size_t>(i)];
  return sum;
}

bool meets_program(const component& k, const std::vector<int>& x) {
  for (std::size_t r = 0; r < k.terms.size(); ++r)
    if (lhs_of(k.terms[r], x) < k.need[r]) return false;
  return true;
}

}  // namespace

TEST_CASE("a c-MIR cut keeps every integer point of its row in its box", "[checkpoint][covering]") {
  int cuts = 0, violated = 0;
  for (std::uint64_t seed = 1; seed <= 400; ++seed) {
    random_generator g(seed, 21);
    const int n = static_cast<int>(g.between(2, 5)), upper = static_cast<int>(g.between(1, 5));
    const component k = components_of(random_program(g, n, 1, upper)).front();
    std::vector<int> lo(static_cast<std::size_t>(k.n)), hi(lo.size());
    random_box(g, upper, lo, hi);
    std::vector<double> point(lo.size());
    for (std::size_t i = 0; i < point.size(); ++i) point[i] = lo[i] + (hi[i] - lo[i]) * g.uniform();
    std::vector<term> cut;
    double need = 0;
    const double efficacy = complemented_mir(k, {k.terms[0], k.need[0], lo, hi}, point, cut, need);
    INFO("seed " << seed);
    if (efficacy <= 1e-4) continue;
    ++cuts;
    long double at_point = 0;
    for (const auto& [i, c] : cut) at_point += c * point[static_cast<std::size_t>(i)];
    violated += at_point < need;
    for_each_point(lo, hi, [&](const std::vector<int>& x) {
      if (lhs_of(k.terms[0], x) >= k.need[0]) CHECK(lhs_of(cut, x) >= need - 1e-9);
    });
  }
  CHECK(cuts > 100);
  CHECK(violated == cuts);  // a cut is only returned when the point violates it
}

TEST_CASE("a Gomory cut of a node keeps every integer point of its box", "[checkpoint][covering]") {
  int cuts = 0, with_cut_rows = 0;
  for (std::uint64_t seed = 1; seed <= 1000; ++seed) {
    random_generator g(seed, 22);
    auto [k, s, upper] = random_case_of(g, 3, 2, 2);
    if (!feasible(k, s.hi)) continue;
    std::vector<double> value, point(static_cast<std::size_t>(k.n));
    dual_simplex(k, s, value);
    // cut rows in the state, so the aggregation reads them too
    point_of(k, s, value, point);
    if (separate_mir(k, s, point, 1e-6) > 0) ++with_cut_rows, dual_simplex(k, s, value);
    INFO("seed " << seed);
    for (std::size_t r = 0; r < value.size(); ++r) {
      std::vector<term> cut;
      double need = 0;
      if (s.basic[r] >= k.n || !gomory_cut(k, s, r, cut, need)) continue;
      ++cuts;
      for_each_point(s.lo, s.hi, [&](const std::vector<int>& x) {
        if (!meets_program(k, x)) return;
        for (std::size_t c = 0; c + 1 < s.cuts.start.size(); ++c) {
          const row_view row = row_of(k, s, k.rows() + static_cast<int>(c));
          CHECK(lhs_of(row.terms, x) >= row.need - 1e-9);  // the c-MIR rows too
        }
        CHECK(lhs_of(cut, x) >= need - 1e-9);
      });
    }
  }
  CHECK(cuts > 30);
  CHECK(with_cut_rows > 150);
}

TEST_CASE("bound propagation keeps every integer point that beats the incumbent", "[checkpoint][covering]") {
  int tightened = 0, emptied = 0, kept_some = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    random_generator g(seed, 23);
    auto [k, s, upper] = random_case_of(g, 2, 1, 1);
    const std::vector<int> lo = s.lo, hi = s.hi;
    const std::int64_t target = g.between(1, static_cast<std::int64_t>(k.n) * upper + 1);
    const bool open = propagate(k, s, target);
    INFO("seed " << seed);
    int survivors = 0;
    for_each_point(lo, hi, [&](const std::vector<int>& x) {
      std::int64_t sum = 0;
      for (const int v : x) sum += v;
      if (sum > target - 1 || !meets_program(k, x)) return;
      ++survivors;
      REQUIRE(open);
      for (std::size_t i = 0; i < x.size(); ++i) {
        CHECK(x[i] >= s.lo[i]);
        CHECK(x[i] <= s.hi[i]);
      }
    });
    if (!open) ++emptied;
    else if (s.lo != lo || s.hi != hi) ++tightened;
    kept_some += survivors > 0;
  }
  CHECK(tightened > 20);
  CHECK(emptied > 100);
  CHECK(kept_some > 30);
}
