// Tests of data/length_distribution.hpp: validation, normalisation, exact moments,
// bin lookup, conditioning, and the statistics of draws.
#include <catch2/catch.hpp>

#include "support/expect_error.hpp"
#include <zeppelin/data/length_distribution.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

using zeppelin::length_bin;
using zeppelin::length_histogram;
using zeppelin::random_generator;
using zeppelin::token_count;

namespace {

using zeppelin_test::expect_invalid;

}  // namespace

TEST_CASE("length_histogram rejects malformed bins and names the bin", "[data]") {
  CHECK_THROWS_AS(length_histogram({}), zeppelin::invalid_argument);
  CHECK(expect_invalid([] { length_histogram({{0, 10, 1.0}}); }).value("lo") == 0.0);
  CHECK(expect_invalid([] { length_histogram({{1, 10, 1.0}, {10, 10, 1.0}}); }).value("bin") == 1.0);
  CHECK(expect_invalid([] { length_histogram({{1, 10, 1.0}, {12, 11, 1.0}}); }).value("hi") == 11.0);
  CHECK(expect_invalid([] { length_histogram({{1, 10, -0.5}}); }).value("weight") == -0.5);
  CHECK_THROWS_AS(length_histogram({{1, 10, std::nan("")}}), zeppelin::invalid_argument);
  CHECK_THROWS_AS(length_histogram({{1, 10, HUGE_VAL}}), zeppelin::invalid_argument);
  // Overlapping and unsorted bins.
  const auto overlap = expect_invalid([] { length_histogram({{1, 10, 1.0}, {9, 20, 1.0}}); });
  CHECK(overlap.value("previous_hi") == 10.0);
  CHECK(overlap.value("lo") == 9.0);
  CHECK_THROWS_AS(length_histogram({{100, 200, 1.0}, {1, 10, 1.0}}), zeppelin::invalid_argument);
  // All-zero weights and a sum that overflows to infinity.
  CHECK_THROWS_AS(length_histogram({{1, 10, 0.0}, {10, 20, 0.0}}), zeppelin::invalid_argument);
  CHECK_THROWS_AS(length_histogram({{1, 10, 1.7e308}, {10, 20, 1.7e308}}), zeppelin::invalid_argument);
  // Adjacent bins, gaps and zero-weight bins are fine.
  CHECK_NOTHROW(length_histogram({{1, 10, 1.0}, {10, 20, 0.0}, {50, 60, 2.0}}));
}

TEST_CASE("length_histogram normalises, keeps the given weights and computes exact moments", "[data]") {
  const length_histogram h({{1, 3, 1.0}, {10, 12, 3.0}, {20, 30, 0.0}});
  CHECK(h.size() == 3);
  CHECK(h.weight_sum() == 4.0);
  CHECK(h.probability(0) == 0.25);
  CHECK(h.probability(1) == 0.75);
  CHECK(h.probability(2) == 0.0);
  CHECK(h.bins()[1] == length_bin{10, 12, 3.0});
  // Mean: (1 * (1 + 2) / 2 + 3 * (10 + 11) / 2) / 4 = (1.5 + 31.5) / 4.
  CHECK(h.mean() == 8.25);
  // The zero-weight last bin is not drawable.
  CHECK(h.min_length() == 1);
  CHECK(h.max_length() == 11);
  CHECK(length_histogram({{5, 6, 0.0}, {7, 9, 1.0}}).min_length() == 7);
  // Equality compares the given weights, not the normalised ones.
  CHECK(h == length_histogram({{1, 3, 1.0}, {10, 12, 3.0}, {20, 30, 0.0}}));
  CHECK_FALSE(h == length_histogram({{1, 3, 2.0}, {10, 12, 6.0}, {20, 30, 0.0}}));
}

TEST_CASE("length_histogram::mean stays finite when the weights times the lengths pass a double", "[data]") {
  // Found by fuzz/length_reader_fuzz.cpp (fuzz/regressions/length_reader/): weights are any
  // finite numbers with a finite sum, but weight * midpoint overflowed, so mean() was inf.
  CHECK(length_histogram({{1, 4097, 1e306}}).mean() == 2048.5);
  CHECK(length_histogram({{1, 3, 1e307}, {10, 12, 3e307}}).mean() == Approx(8.25));
  const token_count top = std::numeric_limits<token_count>::max();
  const double m = length_histogram({{9'000'000'000'000'000'000, top, 1.7e308}}).mean();
  CHECK(std::isfinite(m));
  CHECK(m == Approx((9e18 + static_cast<double>(top - 1)) / 2));
  // below the overflow the result is unchanged (the given weights, then one division)
  CHECK(length_histogram({{1, 3, 1.0}, {10, 12, 3.0}}).mean() == 8.25);
}

TEST_CASE("length_histogram::bin_of finds the half-open bin or nothing", "[data]") {
  const length_histogram h({{1, 10, 1.0}, {10, 20, 1.0}, {50, 60, 1.0}});
  CHECK_FALSE(h.bin_of(0).has_value());
  CHECK(h.bin_of(1) == 0u);
  CHECK(h.bin_of(9) == 0u);
  CHECK(h.bin_of(10) == 1u);
  CHECK(h.bin_of(19) == 1u);
  CHECK_FALSE(h.bin_of(20).has_value());  // in the gap
  CHECK_FALSE(h.bin_of(49).has_value());
  CHECK(h.bin_of(59) == 2u);
  CHECK_FALSE(h.bin_of(60).has_value());
}

TEST_CASE("length_histogram::restricted conditions exactly on a length range", "[data]") {
  const length_histogram h({{1, 11, 1.0}, {11, 21, 2.0}, {40, 50, 0.0}});
  const auto r = h.restricted(6, 15);
  REQUIRE(r.size() == 2);
  // [6, 11) keeps half of bin 0's weight, [11, 16) half of bin 1's.
  CHECK(r.bins()[0] == length_bin{6, 11, 0.5});
  CHECK(r.bins()[1] == length_bin{11, 16, 1.0});
  CHECK(r.probability(0) == Approx(1.0 / 3.0));
  CHECK(h.restricted(1, 1000) == length_histogram({{1, 11, 1.0}, {11, 21, 2.0}, {40, 50, 0.0}}));
  CHECK(h.restricted(1, std::numeric_limits<token_count>::max()) == h);
  // No mass in the range (a gap or a zero-weight bin), or a bad range.
  CHECK_THROWS_AS(h.restricted(25, 45), zeppelin::invalid_argument);
  CHECK_THROWS_AS(h.restricted(0, 10), zeppelin::invalid_argument);
  CHECK_THROWS_AS(h.restricted(10, 9), zeppelin::invalid_argument);
}

TEST_CASE("length_histogram::sample_bin consumes one draw and follows the cumulative table", "[data]") {
  const length_histogram h({{1, 2, 1.0}, {2, 3, 0.0}, {3, 4, 3.0}});
  random_generator rng(7), copy(7);
  for (int i = 0; i < 1000; ++i) {
    const std::size_t bin = h.sample_bin(rng);
    const double u = copy.uniform();
    // Bin 0 covers [0, 0.25), bin 2 covers [0.25, 1): zero-weight bin 1 is never drawn.
    CHECK(bin == (u < 0.25 ? 0u : 2u));
  }
  CHECK(rng() == copy());
}

TEST_CASE("length_histogram draws: bin shares within a 5-sigma bound, uniform inside bins", "[data]") {
  const length_histogram h({{1, 11, 1.0}, {11, 101, 0.0}, {101, 111, 2.5}, {200, 201, 0.5}});
  constexpr int n = 200000;
  random_generator rng(2024);
  std::map<token_count, int> counts;
  std::vector<int> per_bin(h.size(), 0);
  for (int i = 0; i < n; ++i) {
    const token_count l = h.sample(rng);
    const auto bin = h.bin_of(l);
    REQUIRE(bin.has_value());
    ++per_bin[*bin];
    ++counts[l];
  }
  CHECK(per_bin[1] == 0);
  for (std::size_t b = 0; b < h.size(); ++b) {
    const double p = h.probability(b);
    const double sigma = std::sqrt(p * (1 - p) / n);
    CHECK(std::abs(per_bin[b] / double{n} - p) <= 5 * sigma + 1e-12);
  }
  // Every integer of a drawn bin appears, none outside, each with its share p_bin / width.
  CHECK(counts.size() == 10 + 10 + 1);
  CHECK(counts.begin()->first == 1);
  CHECK(counts.rbegin()->first == 200);
  for (const auto& [length, c] : counts) {
    const std::size_t b = *h.bin_of(length);
    const double p = h.probability(b) / static_cast<double>(h.bins()[b].width());
    CHECK(std::abs(c / double{n} - p) <= 5 * std::sqrt(p * (1 - p) / n));
  }
}
