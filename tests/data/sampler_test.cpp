// Tests of data/sampler.hpp: exact budgets, the truncation rule, determinism (with golden
// values), length limits, errors, and Table 2 shares of large samples.
#include <catch2/catch.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/length_stats.hpp>
#include <zeppelin/data/sampler.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

using zeppelin::length_histogram;
using zeppelin::length_limit_rule;
using zeppelin::random_generator;
using zeppelin::sample_batch;
using zeppelin::sample_lengths;
using zeppelin::sampler_options;
using zeppelin::token_count;

namespace {

token_count sum(const std::vector<token_count>& v) { return std::accumulate(v.begin(), v.end(), token_count{0}); }

std::vector<length_histogram> all_datasets() {
  return {zeppelin::datasets::arxiv(), zeppelin::datasets::github(), zeppelin::datasets::prolong64k()};
}

// Upper chi-square quantile for `df` degrees of freedom at standard-normal score z
// (Wilson-Hilferty; accurate to a few percent for df >= 3, and z = 5 is a ~3e-7 tail).
double chi_square_bound(int df, double z) {
  const double k = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - k + z * std::sqrt(k), 3.0);
}

// Checks sampled per-column counts against the distribution's probabilities: every column
// within 5 binomial standard deviations, zero-probability columns empty, and Pearson's
// chi-square below its 5-sigma quantile.
void check_shares(const length_histogram& h, const std::vector<token_count>& lengths) {
  std::vector<double> count(h.size(), 0.0);
  for (const token_count l : lengths) {
    const auto bin = h.bin_of(l);
    REQUIRE(bin.has_value());
    count[*bin] += 1.0;
  }
  const auto n = static_cast<double>(lengths.size());
  double chi2 = 0.0;
  int df = -1;
  for (std::size_t b = 0; b < h.size(); ++b) {
    const double p = h.probability(b);
    INFO("bin " << b << " expected share " << p << " observed " << count[b] / n << " of n = " << n);
    if (p == 0.0) {
      CHECK(count[b] == 0.0);
      continue;
    }
    CHECK(std::abs(count[b] / n - p) <= 5.0 * std::sqrt(p * (1.0 - p) / n));
    chi2 += (count[b] - n * p) * (count[b] - n * p) / (n * p);
    ++df;
  }
  INFO("chi-square " << chi2 << " with " << df << " degrees of freedom");
  CHECK(chi2 <= chi_square_bound(df, 5.0));
}

}  // namespace

TEST_CASE("sample_lengths fills the budget exactly for many seeds and budgets", "[data]") {
  const std::vector<token_count> budgets = {1, 2, 777, 1024, 4096, 65536, 262144, 1'000'003, (1 << 24) + 7};
  for (const auto& h : all_datasets()) {
    for (const token_count total : budgets) {
      for (std::uint64_t seed = 0; seed < 40; ++seed) {
        const auto lengths = sample_lengths(h, total, seed);
        REQUIRE(!lengths.empty());
        REQUIRE(sum(lengths) == total);
        for (std::size_t i = 0; i + 1 < lengths.size(); ++i) REQUIRE(h.bin_of(lengths[i]).has_value());
        REQUIRE(lengths.back() >= 1);
        REQUIRE(lengths.back() <= h.max_length());
      }
    }
  }
}

TEST_CASE("the draw that overflows the budget is truncated to the remainder and ends the batch", "[data]") {
  const length_histogram h({{100, 201, 1.0}});
  // A budget smaller than any sequence: one sequence holding the whole budget.
  CHECK(sample_lengths(h, 1, 5) == std::vector<token_count>{1});
  CHECK(sample_lengths(h, 99, 5) == std::vector<token_count>{99});
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const token_count total = 1000 + static_cast<token_count>(seed);
    const auto lengths = sample_lengths(h, total, seed);
    // The untruncated draws replayed from the same generator: all but the last are kept
    // as drawn; the last is the remainder, no longer than its draw.
    random_generator replay(seed);
    token_count used = 0;
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      const token_count drawn = h.sample(replay);
      if (i + 1 < lengths.size()) {
        REQUIRE(lengths[i] == drawn);
        REQUIRE(used + drawn < total);
      } else {
        REQUIRE(lengths[i] == total - used);
        REQUIRE(lengths[i] <= drawn);
      }
      used += lengths[i];
    }
    REQUIRE(used == total);
  }
}

TEST_CASE("sampling is deterministic: same seed same batch, golden values pinned", "[data]") {
  const auto github = zeppelin::datasets::github();
  CHECK(sample_batch(github, 1 << 20, 42) == sample_batch(github, 1 << 20, 42));
  CHECK_FALSE(sample_lengths(github, 1 << 20, 42) == sample_lengths(github, 1 << 20, 43));
  // Golden values: a change here means batches differ from earlier releases or another
  // platform (generator, cumulative table, bin draw or truncation rule changed).
  CHECK(sample_lengths(github, 200000, 42) == std::vector<token_count>{1412, 15767, 182821});
  CHECK(sample_lengths(zeppelin::datasets::arxiv(), 100000, 1) == std::vector<token_count>{24910, 11397, 9368, 2828, 25423, 26074});
  CHECK(sample_lengths(zeppelin::datasets::prolong64k(), 150000, 7, {.max_length = 32768}) ==
        std::vector<token_count>{32768, 32768, 32768, 107, 32768, 18821});
}

TEST_CASE("the generator overloads continue one stream", "[data]") {
  const auto arxiv = zeppelin::datasets::arxiv();
  random_generator rng(11);
  const auto first = sample_lengths(arxiv, 1 << 18, rng);
  const auto second = sample_lengths(arxiv, 1 << 18, rng);
  CHECK(first == sample_lengths(arxiv, 1 << 18, 11));
  CHECK_FALSE(first == second);
  random_generator again(11);
  CHECK(sample_batch(arxiv, 1 << 18, again) == zeppelin::batch(first));
  const auto b = sample_batch(arxiv, 1 << 18, 11);
  CHECK(b.total_tokens() == 1 << 18);
  CHECK(b.id(b.size() - 1) == b.size() - 1);
}

TEST_CASE("max_length and min_length: clamp truncates draws, condition redistributes", "[data]") {
  const auto prolong = zeppelin::datasets::prolong64k();
  constexpr token_count total = 1 << 26;
  SECTION("clamp: the mass above max_length piles up at max_length") {
    const auto lengths = sample_lengths(prolong, total, 3, {.max_length = 16384});
    CHECK(sum(lengths) == total);
    CHECK(*std::max_element(lengths.begin(), lengths.end()) == 16384);
    const auto at_cap = std::count(lengths.begin(), lengths.end(), token_count{16384});
    // P(draw >= 16384) = 0.008 + 0.673 (the 16K-32K and 32K-64K columns).
    const double p = 0.681;
    const auto n = static_cast<double>(lengths.size());
    CHECK(std::abs(static_cast<double>(at_cap) / n - p) <= 5 * std::sqrt(p * (1 - p) / n) + 1.0 / n);
  }
  SECTION("condition: the shares are those of the restricted distribution") {
    const sampler_options options{.min_length = 2048, .max_length = 16383, .limit_rule = length_limit_rule::condition};
    const auto lengths = sample_lengths(prolong, total, 3, options);
    CHECK(sum(lengths) == total);
    for (std::size_t i = 0; i + 1 < lengths.size(); ++i) {
      REQUIRE(lengths[i] >= 2048);
      REQUIRE(lengths[i] <= 16383);
    }
    const std::vector<token_count> kept(lengths.begin(), lengths.end() - 1);
    check_shares(prolong.restricted(2048, 16383), kept);
  }
  SECTION("clamp with min_length raises short draws; only the last sequence may be shorter") {
    const auto lengths = sample_lengths(prolong, total, 9, {.min_length = 4096, .max_length = 65536});
    CHECK(sum(lengths) == total);
    for (std::size_t i = 0; i + 1 < lengths.size(); ++i) {
      REQUIRE(lengths[i] >= 4096);
      REQUIRE(lengths[i] <= 65536);
    }
  }
  SECTION("a cap above the distribution changes nothing") {
    CHECK(sample_lengths(prolong, total, 5, {.max_length = 1 << 20}) == sample_lengths(prolong, total, 5));
    CHECK(sample_lengths(prolong, total, 5, {.max_length = 1 << 20, .limit_rule = length_limit_rule::condition}) ==
          sample_lengths(prolong, total, 5));
  }
}

TEST_CASE("sampler errors: bad budget or limits, no mass in the range and the generator is untouched", "[data]") {
  const auto arxiv = zeppelin::datasets::arxiv();
  CHECK_THROWS_AS(sample_lengths(arxiv, 0, 1), zeppelin::invalid_argument);
  CHECK_THROWS_AS(sample_lengths(arxiv, -5, 1), zeppelin::invalid_argument);
  CHECK_THROWS_AS(sample_batch(arxiv, 0, 1), zeppelin::invalid_argument);
  CHECK_THROWS_AS(sample_lengths(arxiv, 100, 1, {.min_length = 0}), zeppelin::invalid_argument);
  CHECK_THROWS_AS(sample_lengths(arxiv, 100, 1, {.max_length = -1}), zeppelin::invalid_argument);
  try {
    (void)sample_lengths(arxiv, 100, 1, {.min_length = 4096, .max_length = 2048});
    FAIL("expected invalid_argument");
  } catch (const zeppelin::invalid_argument& e) {
    CHECK(e.value("min_length") == 4096.0);
    CHECK(e.value("max_length") == 2048.0);
  }
  // ArXiv has no sequences of 64K or more: conditioning on [100000, 200000] is impossible.
  random_generator rng(3), untouched(3);
  CHECK_THROWS_AS(sample_lengths(arxiv, 100, rng,
                                 {.min_length = 100000, .max_length = 200000, .limit_rule = length_limit_rule::condition}),
                  zeppelin::invalid_argument);
  CHECK(rng() == untouched());
}

TEST_CASE("large samples match Table 2's normalised shares", "[data]") {
  std::uint64_t seed = 100;
  for (const auto& h : all_datasets()) {
    // ~130k-280k sequences per dataset; the last (truncated) one is left out of the counts.
    const auto lengths = sample_lengths(h, token_count{1} << 32, seed++);
    const std::vector<token_count> kept(lengths.begin(), lengths.end() - 1);
    REQUIRE(kept.size() > 10000);
    check_shares(h, kept);
    // The same comparison through length_stats' Table 2 columns.
    const auto stats = zeppelin::summarize(kept);
    for (std::size_t c = 0; c < zeppelin::table2_columns; ++c) {
      const double p = h.probability(c);
      CHECK(std::abs(stats.table2_share[c] - p) <= 5 * std::sqrt(p * (1 - p) / static_cast<double>(kept.size())));
    }
    CHECK(stats.beyond_table2_share == 0.0);
    // The sample mean is close to the distribution's exact mean.
    CHECK(stats.mean == Approx(h.mean()).epsilon(0.03));
  }
}

TEST_CASE("check_shares detects GitHub's unnormalised row", "[data]") {
  // The statistical bound must be able to fail: treating GitHub's printed 0.945 row as if
  // column 0 held the missing 0.055 is detected on a sample of the normalised row.
  const auto github = zeppelin::datasets::github();
  const length_histogram wrong({{1, 1024, 0.055},        {1024, 2048, 0.34},     {2048, 4096, 0.095},
                                {4096, 8192, 0.104},     {8192, 16384, 0.107},   {16384, 32768, 0.102},
                                {32768, 65536, 0.088},   {65536, 131072, 0.064}, {131072, 262144, 0.045}});
  const auto lengths = sample_lengths(github, token_count{1} << 30, 5);
  const std::vector<token_count> kept(lengths.begin(), lengths.end() - 1);
  std::size_t in_column_0 = 0, in_column_1 = 0;
  for (const token_count l : kept) {
    in_column_0 += wrong.bin_of(l) == 0u;
    in_column_1 += wrong.bin_of(l) == 1u;
  }
  const auto n = static_cast<double>(kept.size());
  const double p0 = wrong.probability(0), p1 = wrong.probability(1);
  CHECK(std::abs(static_cast<double>(in_column_0) / n - p0) > 5 * std::sqrt(p0 * (1 - p0) / n));
  CHECK(std::abs(static_cast<double>(in_column_1) / n - p1) > 5 * std::sqrt(p1 * (1 - p1) / n));
}
