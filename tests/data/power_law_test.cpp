// tests/data/power_law_test.cpp
// The power-law length distribution (data/power_law.hpp): its bins cover [1, max] exactly,
// shares halve per octave, sampled tokens spread evenly over the octaves from 1K up, and a
// clear error for a bad maximum.
#include <catch2/catch.hpp>
#include <zeppelin/data/power_law.hpp>
#include <zeppelin/data/sampler.hpp>

#include <array>
#include <cmath>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;
using zeppelin_test::expect_invalid;

TEST_CASE("power_law_lengths covers [1, max] with shares halving per octave", "[data]") {
  for (const token_count max_length : {token_count{2}, token_count{1000}, token_count{1024}, token_count{1025}, token_count{65536},
                                       token_count{131072}, token_count{200000}}) {
    const length_histogram h = power_law_lengths(max_length);
    INFO("max_length " << max_length);
    REQUIRE(h.bins().front().lo == 1);
    REQUIRE(h.bins().back().hi == max_length + 1);
    REQUIRE(h.max_length() == max_length);
    for (std::size_t i = 1; i < h.bins().size(); ++i) {
      REQUIRE(h.bins()[i].lo == h.bins()[i - 1].hi);
      REQUIRE(h.bins()[i].lo == token_count{1024} << (i - 1));
      REQUIRE(h.bins()[i].weight == h.bins()[i - 1].weight / 2);
    }
  }
  REQUIRE(power_law_lengths(131072).bins().size() == 8);
  REQUIRE(std::abs(power_law_lengths(131072).mean() - 2955) < 10);
}

TEST_CASE("power_law_lengths puts the same tokens in every octave from 1K up", "[data]") {
  const token_count context = 131072;
  const std::vector<token_count> lengths = sample_lengths(power_law_lengths(context), 2000 * context, 7, {.max_length = context});
  std::array<double, 8> tokens{};
  double total = 0;
  for (const token_count d : lengths) {
    int octave = 0;
    while (octave < 7 && d >= (token_count{1024} << octave)) ++octave;
    tokens[static_cast<std::size_t>(octave)] += static_cast<double>(d);
    total += static_cast<double>(d);
  }
  // octave k >= 1 holds share 2^-k x mean length 3/4 x 2^(10+k) = 768 (relative), octave 0
  // [1, 1K) holds 1 x 512
  const double share = 768.0 / (512 + 7 * 768);
  for (std::size_t k = 1; k < 8; ++k) {
    INFO("octave " << k);
    REQUIRE(std::abs(tokens[k] / total - share) < 0.1 * share);
  }
  REQUIRE(std::abs(tokens[0] / total - 512.0 / (512 + 7 * 768)) < 0.1 * share);
}

TEST_CASE("power_law_lengths rejects a maximum outside [2, max_sequence_length]", "[data]") {
  REQUIRE(expect_invalid([] { (void)power_law_lengths(1); }).value("max_length") == 1);
  REQUIRE(expect_invalid([] { (void)power_law_lengths(max_sequence_length + 1); }).value("max_length") ==
          double(max_sequence_length + 1));
}
