// Tests of data/length_stats.hpp: a hand-computed example, nearest-rank percentiles
// against a brute-force oracle, and errors.
#include <catch2/catch.hpp>
#include <zeppelin/data/length_stats.hpp>

#include <algorithm>
#include <array>
#include <vector>

using zeppelin::token_count;

TEST_CASE("summarize: hand-computed example", "[data]") {
  const std::vector<token_count> lengths = {300000, 1, 4096, 1023, 70000, 2, 20000, 1024, 5000, 3};
  // sorted: 1 2 3 1023 1024 4096 5000 20000 70000 300000
  const auto s = zeppelin::summarize(lengths);
  CHECK(s.count == 10);
  CHECK(s.total_tokens == 401149);
  CHECK(s.min_length == 1);
  CHECK(s.max_length == 300000);
  CHECK(s.mean == 40114.9);
  CHECK(s.median == 1024);    // rank ceil(0.50 * 10) = 5
  CHECK(s.p90 == 70000);      // rank ceil(0.90 * 10) = 9
  CHECK(s.p99 == 300000);     // rank ceil(0.99 * 10) = 10
  CHECK(s.sum_of_squares == 95343872335.0);
  CHECK(s.token_share_4k == 399096.0 / 401149.0);   // 4096 + 5000 + 20000 + 70000 + 300000
  CHECK(s.token_share_16k == 390000.0 / 401149.0);  // 20000 + 70000 + 300000
  CHECK(s.token_share_64k == 370000.0 / 401149.0);  // 70000 + 300000
  CHECK(s.table2_share == std::array<double, 9>{0.4, 0.1, 0.0, 0.2, 0.0, 0.1, 0.0, 0.1, 0.0});
  CHECK(s.beyond_table2_share == 0.1);
  CHECK(zeppelin::summarize(zeppelin::batch(lengths)).sum_of_squares == s.sum_of_squares);
}

TEST_CASE("summarize: one sequence, and exact sums of squares beyond 2^64", "[data]") {
  const auto one = zeppelin::summarize(std::vector<token_count>{65536});
  CHECK(one.median == 65536);
  CHECK(one.p99 == 65536);
  CHECK(one.mean == 65536.0);
  CHECK(one.token_share_64k == 1.0);
  CHECK(one.table2_share[7] == 1.0);
  // (2^33)^2 * 4 = 2^68 would wrap in 64-bit arithmetic.
  const auto big = zeppelin::summarize(std::vector<token_count>(4, token_count{1} << 33));
  CHECK(big.sum_of_squares == 0x1p68);
}

TEST_CASE("nearest_rank matches the 'smallest value covering p percent' oracle", "[data]") {
  zeppelin::random_generator rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<token_count> v(1 + rng.below(40));
    for (auto& x : v) x = rng.between(1, 20);
    std::sort(v.begin(), v.end());
    for (int p = 0; p <= 100; ++p) {
      // Oracle: the smallest observed x with #(values <= x) * 100 >= p * n.
      token_count expected = v.back();
      for (const token_count x : v) {
        const auto covered = std::upper_bound(v.begin(), v.end(), x) - v.begin();
        if (covered * 100 >= p * static_cast<long>(v.size())) {
          expected = x;
          break;
        }
      }
      REQUIRE(zeppelin::nearest_rank(v, p) == expected);
    }
  }
  CHECK(zeppelin::nearest_rank(std::vector<token_count>{1, 2}, 50) == 1);  // lower median
}

TEST_CASE("summarize and nearest_rank reject bad input", "[data]") {
  CHECK_THROWS_AS(zeppelin::summarize(std::vector<token_count>{}), zeppelin::invalid_argument);
  CHECK_THROWS_AS(zeppelin::summarize(std::vector<token_count>{5, 0}), zeppelin::invalid_argument);
  CHECK_THROWS_AS(zeppelin::summarize(std::vector<token_count>{5, -3}), zeppelin::invalid_argument);
  CHECK_THROWS_AS(zeppelin::summarize(std::vector<token_count>{std::numeric_limits<token_count>::max(), 1}),
                  zeppelin::invalid_argument);
  CHECK_THROWS_AS(zeppelin::nearest_rank(std::vector<token_count>{}, 50), zeppelin::invalid_argument);
  CHECK_THROWS_AS(zeppelin::nearest_rank(std::vector<token_count>{1}, 101), zeppelin::invalid_argument);
  CHECK_THROWS_AS(zeppelin::nearest_rank(std::vector<token_count>{1}, -1), zeppelin::invalid_argument);
}
