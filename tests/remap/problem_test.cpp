// tests/remap/problem_test.cpp
// remap/problem.hpp: the balanced target (floor/ceil of the mean, extra tokens to the fullest
// ranks), validation of bad input with the offending numbers, matrix pricing and checking.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/remap/problem.hpp>

#include <algorithm>
#include <limits>
#include <string>
#include <numeric>
#include <vector>

using namespace zeppelin;

TEST_CASE("balanced_target holds floor or ceil of the mean and conserves tokens", "[remap]") {
  random_generator rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    const auto d = static_cast<std::size_t>(rng.between(1, 40));
    std::vector<token_count> a(d);
    for (auto& x : a) x = rng.between(0, trial % 2 ? 7 : 5000);
    const auto b = balanced_target(a);
    const token_count total = std::accumulate(a.begin(), a.end(), token_count{0});
    const token_count lo = total / static_cast<token_count>(d);
    REQUIRE(std::accumulate(b.begin(), b.end(), token_count{0}) == total);
    for (std::size_t r = 0; r < d; ++r) REQUIRE((b[r] == lo || b[r] == lo + 1));
    // The extra tokens sit on the fullest ranks: a rank with the ceiling holds at least as
    // many tokens as any rank with the floor (ties: the lower rank gets it).
    for (std::size_t r = 0; r < d; ++r)
      for (std::size_t s = 0; s < d; ++s)
        if (b[r] > b[s]) REQUIRE((a[r] > a[s] || (a[r] == a[s] && r < s)));
  }
}

TEST_CASE("balanced_target pins the remainder rule", "[remap]") {
  CHECK(balanced_target({5, 1, 1, 2}) == std::vector<token_count>{3, 2, 2, 2});
  CHECK(balanced_target({1, 1, 1, 2, 5, 0}) == std::vector<token_count>{2, 2, 1, 2, 2, 1});
  CHECK(balanced_target({0, 0, 3}) == std::vector<token_count>{1, 1, 1});
  CHECK(balanced_target({1, 1, 0}) == std::vector<token_count>{1, 1, 0});
}

TEST_CASE("make_remap_problem rejects bad input with the numbers", "[remap]") {
  // the token counts spelled out: a braced list of ints would also fit the plan overload
  // (remap/layout.hpp) wherever both headers are visible
  using counts = std::vector<token_count>;
  CHECK_THROWS_AS(make_remap_problem(counts{}, 1, 1, 1), invalid_argument);
  try {
    (void)make_remap_problem(counts{4, -1, 2, 3}, 2, 1, 10);
    FAIL("negative count accepted");
  } catch (const invalid_argument& e) {
    CHECK(e.value("rank") == 1);
    CHECK(e.value("tokens") == -1);
  }
  try {
    (void)make_remap_problem(counts{1, 2, 3}, 2, 1, 10);
    FAIL("rank count not divisible by P accepted");
  } catch (const invalid_argument& e) {
    CHECK(e.value("ranks") == 3);
    CHECK(e.value("gpus_per_node") == 2);
  }
  CHECK_THROWS_AS(make_remap_problem(counts{1, 2}, 0, 1, 10), invalid_argument);
  CHECK_THROWS_AS(make_remap_problem(counts{1, 2}, 1, 0, 10), invalid_argument);
  CHECK_THROWS_AS(make_remap_problem(counts{1, 2}, 1, 1, -3), invalid_argument);
  CHECK_THROWS_AS(make_remap_problem(counts{1, 2}, 1, 1, std::numeric_limits<double>::quiet_NaN()), invalid_argument);
  remap_problem p{{3, 1}, {2, 1}, 1, 1, 1};
  try {
    validate_remap_problem(p);
    FAIL("unequal totals accepted");
  } catch (const invalid_argument& e) {
    CHECK(e.value("current_total") == 4);
    CHECK(e.value("target_total") == 3);
  }
}

TEST_CASE("evaluate and check_remap_matrix", "[remap]") {
  // Ranks 0,1 on node 0; 2,3 on node 1. A = {6, 0, 2, 0}, B = {2, 2, 2, 2}.
  const auto p = make_remap_problem({6, 0, 2, 0}, 2, 1.0, 10.0);
  REQUIRE(p.target == std::vector<token_count>{2, 2, 2, 2});
  const remap_matrix m{4, {{0, 1, 2}, {0, 3, 2}}};
  REQUIRE_NOTHROW(check_remap_matrix(p, m));
  const auto c = evaluate(p, m);
  CHECK(c.max_send == 22.0);
  CHECK(c.max_receive == 20.0);
  CHECK(c.moved_tokens == 4);
  CHECK(c.inter_node_tokens == 2);
  CHECK(c.value(remap_objective::min_inter_volume) == 2.0);
  CHECK(m.at(0, 3) == 2);
  CHECK(m.at(3, 0) == 0);
  CHECK(m.dense()[0] == std::vector<token_count>{0, 2, 0, 2});
  CHECK_THROWS_AS(check_remap_matrix(p, remap_matrix{4, {{0, 1, 4}}}), invalid_argument);
  CHECK_THROWS_AS(check_remap_matrix(p, remap_matrix{4, {{0, 3, 2}, {0, 1, 2}}}), invalid_argument);
  CHECK_THROWS_AS(check_remap_matrix(p, remap_matrix{4, {{0, 0, 2}, {0, 1, 2}, {0, 3, 2}}}), invalid_argument);
}

TEST_CASE("balanced_target refuses token counts whose total overflows, naming the rank", "[remap]") {
  constexpr token_count top = std::numeric_limits<token_count>::max();
  try {
    (void)balanced_target({top - 1, 1, 1});
    FAIL("an overflowing total was accepted");
  } catch (const zeppelin::invalid_argument& e) {
    CHECK(std::string(e.what()).find("overflow 64 bits") != std::string::npos);
    CHECK(e.value("rank") == 2.0);
  }
  CHECK(balanced_target({top - 1, 1}) == std::vector<token_count>{top / 2 + 1, top / 2});  // the fuller keeps the extra
}

TEST_CASE("validate_remap_problem refuses counts or targets whose total overflows", "[remap]") {
  // Found by fuzz/remap_fuzz.cpp (fuzz/regressions/remap/): the sums of A and B were added
  // unchecked, a signed overflow (UB) that could even make two different totals compare equal.
  constexpr token_count top = std::numeric_limits<token_count>::max();
  const auto refused = [](const remap_problem& p, double rank, const char* what) {
    try {
      validate_remap_problem(p);
      FAIL("an overflowing total was accepted");
    } catch (const zeppelin::invalid_argument& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
      CHECK(e.value("rank") == rank);
    }
  };
  refused(remap_problem{{top, 1}, {1, top}, 1, 1, 1}, 1.0, "token counts together overflow 64 bits");
  refused(remap_problem{{top - 1, 0, 0}, {top - 1, 1, top}, 1, 1, 1}, 2.0, "target token counts together overflow");
  CHECK_NOTHROW(validate_remap_problem(remap_problem{{top - 1, 1}, {1, top - 1}, 1, 1, 1}));
}
