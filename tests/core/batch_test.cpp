// tests/core/batch_test.cpp
// zeppelin::batch (core/batch.hpp): CSR offsets and totals over random batches, ids, and
// one invalid_argument, carrying the offending number, for every kind of bad input.
#include <catch2/catch.hpp>

#include "support/expect_error.hpp"
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace zp = zeppelin;
using zp::token_count;

namespace {

std::vector<token_count> random_lengths(zp::random_generator& rng) {
  const auto n = static_cast<std::size_t>(rng.between(1, 200));
  // lengths of every scale: 1 .. 2^k for a random k up to 2^24
  const auto scale = rng.between(0, 24);
  std::vector<token_count> lengths(n);
  for (auto& len : lengths) len = rng.between(1, token_count{1} << rng.between(0, scale));
  return lengths;
}

using zeppelin_test::expect_invalid;

}  // namespace

TEST_CASE("cu_seqlens is the prefix sum of the lengths", "[core][batch]") {
  zp::random_generator rng(101);
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<token_count> lengths = random_lengths(rng);
    const zp::batch b(lengths);
    const auto n = lengths.size();
    REQUIRE(b.size() == static_cast<zp::sequence_index>(n));
    const auto cu = b.cu_seqlens();
    REQUIRE(cu.size() == n + 1);
    REQUIRE(cu.front() == 0);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(cu[i + 1] - cu[i] == lengths[i]);
      REQUIRE(b.offset(static_cast<zp::sequence_index>(i)) == cu[i]);
      REQUIRE(b.length(static_cast<zp::sequence_index>(i)) == lengths[i]);
    }
    REQUIRE(cu.back() == std::accumulate(lengths.begin(), lengths.end(), token_count{0}));
    REQUIRE(b.total_tokens() == cu.back());
    REQUIRE(b.max_length() == *std::max_element(lengths.begin(), lengths.end()));
    REQUIRE(std::equal(b.lengths().begin(), b.lengths().end(), lengths.begin(), lengths.end()));

    // the int32 copy is element-wise equal when the total fits
    const std::vector<std::int32_t> cu32 = b.cu_seqlens_as<std::int32_t>();
    REQUIRE(cu32.size() == n + 1);
    for (std::size_t i = 0; i <= n; ++i) REQUIRE(static_cast<token_count>(cu32[i]) == cu[i]);
  }
}

TEST_CASE("ids default to 0..n-1 and user ids are kept", "[core][batch]") {
  zp::random_generator rng(102);
  for (int trial = 0; trial < 100; ++trial) {
    const std::vector<token_count> lengths = random_lengths(rng);
    const auto n = lengths.size();
    const zp::batch plain(lengths);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(plain.id(static_cast<zp::sequence_index>(i)) == static_cast<zp::sequence_id>(i));
    // an explicitly empty id list means the defaults too
    REQUIRE(zp::batch(lengths, {}) == plain);

    // unique user ids, any sign and order
    std::vector<zp::sequence_id> ids(n);
    const auto base = rng.between(-1'000'000'000'000, 1'000'000'000'000);
    for (std::size_t i = 0; i < n; ++i) ids[i] = base + static_cast<zp::sequence_id>(i) * rng.between(1, 5);
    for (std::size_t i = 1; i < n; ++i) ids[i] = std::max(ids[i], ids[i - 1] + 1);
    rng.shuffle(ids.begin(), ids.end());
    const zp::batch named(lengths, ids);
    REQUIRE(std::equal(named.ids().begin(), named.ids().end(), ids.begin(), ids.end()));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(named.id(static_cast<zp::sequence_index>(i)) == ids[i]);
    REQUIRE(named.total_tokens() == plain.total_tokens());
    REQUIRE((n == 1 && ids[0] == 0) == (named == plain));
  }
}

TEST_CASE("batch equality compares lengths and ids", "[core][batch]") {
  const zp::batch a({3, 1, 2});
  CHECK(a == zp::batch({3, 1, 2}));
  CHECK_FALSE(a == zp::batch({3, 1, 3}));
  CHECK_FALSE(a == zp::batch({3, 1}));
  CHECK_FALSE(a == zp::batch({1, 2, 3}));
  CHECK_FALSE(a == zp::batch({3, 1, 2}, {0, 1, 5}));
}

TEST_CASE("the longest sequence is accepted and its causal pairs are exact", "[core][batch]") {
  constexpr token_count top = zp::max_sequence_length;
  const zp::batch one({top});
  CHECK(one.total_tokens() == top);
  CHECK(one.max_length() == top);
  CHECK(one.total_pairs() == zp::causal_pairs(top));
  CHECK(static_cast<unsigned __int128>(zp::causal_pairs(top)) == static_cast<unsigned __int128>(top) * (top + 1) / 2);
  // two of them still fit 64 bits of pairs
  const zp::batch two({top, top});
  CHECK(two.total_pairs() == 2 * zp::causal_pairs(top));
  CHECK(zp::batch({3, 4}).total_pairs() == 6 + 10);
}

TEST_CASE("a sequence longer than max_sequence_length is rejected with its index and length", "[core][batch]") {
  constexpr token_count top = std::numeric_limits<token_count>::max();
  for (const token_count bad : {zp::max_sequence_length + 1, token_count{1} << 40, top}) {
    const auto e = expect_invalid([&] { (void)zp::batch({5, bad}); });
    CHECK(e.value("sequence") == 1.0);
    CHECK(e.value("length") == static_cast<double>(bad));
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("max_sequence_length"));
  }
}

TEST_CASE("an empty batch is rejected", "[core][batch]") {
  const auto e = expect_invalid([] { (void)zp::batch(std::vector<token_count>{}); });
  CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("at least one sequence"));
  // even with ids
  CHECK_THROWS_AS(zp::batch({}, {1, 2}), zp::invalid_argument);
}

TEST_CASE("zero and negative lengths are rejected with the offending sequence and length", "[core][batch]") {
  zp::random_generator rng(103);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<token_count> lengths = random_lengths(rng);
    const auto bad = static_cast<std::size_t>(rng.below(lengths.size()));
    const token_count value = trial % 3 == 0 ? 0 : trial % 3 == 1 ? -1 : -rng.between(2, 1'000'000'000);
    lengths[bad] = value;
    const auto e = expect_invalid([&] { (void)zp::batch(lengths); });
    REQUIRE(e.value("length") == static_cast<double>(value));
    REQUIRE(e.value("sequence") == static_cast<double>(bad));
  }
  CHECK(expect_invalid([] { (void)zp::batch({0}); }).value("length") == 0.0);
  CHECK(expect_invalid([] { (void)zp::batch({5, 7, -3}); }).value("length") == -3.0);
  CHECK(expect_invalid([] { (void)zp::batch({std::numeric_limits<token_count>::min()}); }).value("length") ==
        static_cast<double>(std::numeric_limits<token_count>::min()));
}

TEST_CASE("duplicate ids are rejected with the duplicated id", "[core][batch]") {
  zp::random_generator rng(104);
  for (int trial = 0; trial < 200; ++trial) {
    const auto n = static_cast<std::size_t>(rng.between(2, 100));
    std::vector<zp::sequence_id> ids(n);
    std::iota(ids.begin(), ids.end(), rng.between(-50, 50));
    rng.shuffle(ids.begin(), ids.end());
    const auto from = static_cast<std::size_t>(rng.below(n));
    auto to = static_cast<std::size_t>(rng.below(n - 1));
    if (to >= from) ++to;
    ids[to] = ids[from];
    const auto e = expect_invalid([&] { (void)zp::batch(std::vector<token_count>(n, 4), ids); });
    REQUIRE(e.value("id") == static_cast<double>(ids[from]));
  }
}

TEST_CASE("an id list of the wrong size is rejected with both sizes", "[core][batch]") {
  auto e = expect_invalid([] { (void)zp::batch({1, 2, 3}, {7, 8}); });
  CHECK(e.value("lengths") == 3.0);
  CHECK(e.value("ids") == 2.0);
  e = expect_invalid([] { (void)zp::batch({1}, {7, 8, 9}); });
  CHECK(e.value("lengths") == 1.0);
  CHECK(e.value("ids") == 3.0);
}

TEST_CASE("a batch whose causal pairs overflow int64 is rejected at the sequence that overflows", "[core][batch]") {
  constexpr token_count top = zp::max_sequence_length;
  auto e = expect_invalid([] { (void)zp::batch({top, top, top}); });
  CHECK(e.value("sequence") == 2.0);
  CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("causal pairs"));
  e = expect_invalid([] { (void)zp::batch({1, top, 2, top, 3'000'000'000}); });
  CHECK(e.value("sequence") == 4.0);
}

TEST_CASE("cu_seqlens_as rejects a total the narrow type cannot hold", "[core][batch]") {
  constexpr token_count int32_max = std::numeric_limits<std::int32_t>::max();
  // exactly INT32_MAX fits
  const zp::batch fits({int32_max - 1, 1});
  const auto cu = fits.cu_seqlens_as<std::int32_t>();
  CHECK(cu.back() == std::numeric_limits<std::int32_t>::max());
  // one more does not
  const zp::batch over({int32_max, 1});
  const auto e = expect_invalid([&] { (void)over.cu_seqlens_as<std::int32_t>(); });
  CHECK(e.value("total_tokens") == static_cast<double>(int32_max + 1));
  // but a wider type is fine
  CHECK(over.cu_seqlens_as<std::int64_t>().back() == int32_max + 1);
  CHECK(over.cu_seqlens_as<std::uint32_t>().back() == static_cast<std::uint32_t>(int32_max + 1));
  CHECK_THROWS_AS(zp::batch({40000}).cu_seqlens_as<std::int16_t>(), zp::invalid_argument);
  CHECK(zp::batch({40000}).cu_seqlens_as<std::uint16_t>().back() == 40000);
  // an unsigned offset type holds every total
  constexpr token_count top = zp::max_sequence_length;
  const auto cu64 = zp::batch({top - 1, 1}).cu_seqlens_as<std::uint64_t>();
  CHECK(cu64 == std::vector<std::uint64_t>{0, static_cast<std::uint64_t>(top - 1), static_cast<std::uint64_t>(top)});
}

TEST_CASE("accessors reject out-of-range indices", "[core][batch]") {
  const zp::batch b({4, 5});
  CHECK_THROWS((void)b.length(2));
  CHECK_THROWS((void)b.length(-1));
  CHECK_THROWS((void)b.id(2));
  CHECK(b.offset(2) == 9);  // offset(n) is the total
  CHECK_THROWS((void)b.offset(3));
}
