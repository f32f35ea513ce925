// tests/schedule/zigzag_test.cpp
// zigzag split (schedule/zigzag.hpp): tiling and near-equal sizes over thousands of random
// (L, G) including L < 2G and L = 1; exact causal balance when 2G | L; the proven imbalance
// bound (tight to one pair) otherwise; optimality against every near-equal split for G <= 4;
// never worse than the plain floor(c L / n) rule; TE's THD index map as an oracle for
// divisible lengths; the checked wrapper's errors; the per-position tokens and pairs, the
// runs of extra tokens and the dealer that rotates them over a ring.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

using namespace zeppelin;

namespace {

// causal pairs of the queries in `chunk` against every key of the sequence
std::int64_t chunk_pairs(token_range chunk) { return causal_pairs(chunk, token_range{0, chunk.end}); }

// max - min over positions of the causal pairs position i owns, for chunk boundaries `b` (2G + 1 entries)
std::int64_t spread_of(const std::vector<token_count>& b, std::int32_t G) {
  std::int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (std::int32_t i = 0; i < G; ++i) {
    const auto h = static_cast<std::size_t>(i), t = static_cast<std::size_t>(2 * G - 1 - i);
    const std::int64_t v = chunk_pairs({b[h], b[h + 1]}) + chunk_pairs({b[t], b[t + 1]});
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  return hi - lo;
}

std::vector<token_count> library_boundaries(token_count L, std::int32_t G) {
  std::vector<token_count> b;
  for (std::int32_t c = 0; c < 2 * G; ++c) b.push_back(chunk_range(L, 2 * G, c).begin);
  b.push_back(L);
  return b;
}

std::int64_t library_spread(token_count L, std::int32_t G) { return spread_of(library_boundaries(L, G), G); }

std::int64_t floor_rule_spread(token_count L, std::int32_t G) {
  std::vector<token_count> b;
  for (std::int32_t c = 0; c <= 2 * G; ++c) b.push_back(c * L / (2 * G));
  return spread_of(b, G);
}

// smallest spread over every split of L into 2G chunks of q or q + 1 tokens
std::int64_t best_spread(token_count L, std::int32_t G) {
  const std::int32_t n = 2 * G;
  const token_count q = L / n, s = L % n;
  std::int64_t best = INT64_MAX;
  for (std::uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (std::popcount(mask) != s) continue;
    std::vector<token_count> b{0};
    for (std::int32_t c = 0; c < n; ++c) b.push_back(b.back() + q + ((mask >> c) & 1u));
    best = std::min(best, spread_of(b, G));
  }
  return best;
}

}  // namespace

static_assert(chunk_range(10, 4, 0) == token_range{0, 3});  // s = 2 <= n/2: long chunks first
static_assert(chunk_range(10, 4, 3) == token_range{8, 10});
static_assert(chunk_range(11, 4, 0) == token_range{0, 2});  // s = 3 > n/2: long chunks last
static_assert(chunk_range(11, 4, 3) == token_range{8, 11});
static_assert(chunk_range(1, 4, 0) == token_range{0, 1} && chunk_range(1, 4, 1).empty());
static_assert(zigzag_chunks(16, 2, 0) == zigzag_pair{{0, 4}, {12, 16}});
static_assert(zigzag_chunks(16, 2, 1) == zigzag_pair{{4, 8}, {8, 12}});
static_assert(zigzag_imbalance_bound(16, 2) == 0);
static_assert(zigzag_tokens(9, 2, 0) == 5 && zigzag_tokens(9, 2, 1) == 4);  // chunks 3, 2, 2, 2 (s = 1)
static_assert(zigzag_pairs(16, 2, 0) == zigzag_pairs(16, 2, 1));
static_assert(zigzag_extras(10, 4) == zigzag_extra_run{0, 2});  // s = 2 <= G
static_assert(zigzag_extras(13, 4) == zigzag_extra_run{3, 1});  // s = 5 > G: position 2G - s = 3
static_assert(zigzag_extras(16, 4) == zigzag_extra_run{} && zigzag_extras(12, 4) == zigzag_extra_run{});
static_assert([] {
  zigzag_dealer d(4);
  return d.next(10) == 0 && d.next(13) == 3 && d.next(16) == 0 && d.next(3) == 3;
}());

TEST_CASE("zigzag chunks tile the sequence with near-equal sizes", "[schedule][zigzag]") {
  random_generator rng(0x2a2a, 1);
  int cases = 0;
  auto check = [&](token_count L, std::int32_t G) {
    ++cases;
    const std::int32_t n = 2 * G;
    const token_count q = L / n;
    token_count expected_begin = 0;
    token_count small = 0, large = 0;
    for (std::int32_t c = 0; c < n; ++c) {
      const token_range r = chunk_range(L, n, c);
      REQUIRE(r.begin == expected_begin);
      REQUIRE((r.size() == q || r.size() == q + 1));
      (r.size() == q ? small : large) += 1;
      expected_begin = r.end;
    }
    REQUIRE(expected_begin == L);
    REQUIRE(large == L % n);
    for (std::int32_t i = 0; i < G; ++i) {
      const zigzag_pair z = zigzag_chunks(L, G, i);
      REQUIRE(z.head == chunk_range(L, n, i));
      REQUIRE(z.tail == chunk_range(L, n, n - 1 - i));
      REQUIRE(z.head.end <= z.tail.begin);
    }
  };
  for (token_count L = 1; L <= 40; ++L)
    for (std::int32_t G = 1; G <= 24; ++G) check(L, G);  // includes L = 1 and L < 2G
  for (int t = 0; t < 3000; ++t)
    check(rng.between(1, 2'000'000), static_cast<std::int32_t>(rng.between(1, 512)));
  // huge lengths and groups: no overflow in the boundary arithmetic
  for (int t = 0; t < 200; ++t)
    check(rng.between(std::int64_t{1} << 40, std::int64_t{1} << 50), static_cast<std::int32_t>(rng.between(1, 2048)));
  CHECK(cases > 4000);
  // a group of 2^20 ranks over a 2^50-token sequence: spot-check boundaries (c * q <= L, so the oracle cannot overflow)
  const token_count L = (std::int64_t{1} << 50) + 12345;
  const std::int32_t n = 1 << 21;
  for (std::int32_t c : {0, 1, 12345, n / 2, n - 1, n}) {
    const token_count q = L / n, s = L % n;
    const token_count extra = 2 * s <= n ? std::min<token_count>(c, s) : std::max<token_count>(0, c - (n - s));
    CHECK(chunk_boundary(L, n, c) == c * q + extra);
  }
}

TEST_CASE("zigzag balances causal pairs exactly when 2G divides L and within the proven bound otherwise",
          "[schedule][zigzag]") {
  random_generator rng(7, 2);
  for (int t = 0; t < 4000; ++t) {
    const auto G = static_cast<std::int32_t>(rng.between(1, 64));
    const token_count L = t % 2 == 0 ? rng.between(1, 6 * G) : rng.between(1, 1'000'000);
    const std::int64_t spread = library_spread(L, G);
    const std::int64_t bound = zigzag_imbalance_bound(L, G);
    INFO("L=" << L << " G=" << G << " spread=" << spread << " bound=" << bound);
    if (L % (2 * G) == 0) REQUIRE(spread == 0);
    REQUIRE(spread <= bound);
    REQUIRE(bound - spread <= 1);                       // the bound is tight
    REQUIRE(spread <= floor_rule_spread(L, G));         // never worse than floor(c L / n)
  }
  // the case that motivated the rule: one extra token. floor puts it at the very end (~L pairs on one rank)
  CHECK(library_spread(8 * 1000 + 1, 4) == 1);
  CHECK(floor_rule_spread(8 * 1000 + 1, 4) == 8 * 1000 + 1);
}

TEST_CASE("zigzag remainder rule is optimal among all near-equal splits (G <= 4)", "[schedule][zigzag]") {
  random_generator rng(11, 3);
  for (std::int32_t G = 1; G <= 4; ++G) {
    for (token_count L = 1; L <= 10 * G; ++L) {
      INFO("L=" << L << " G=" << G);
      REQUIRE(library_spread(L, G) == best_spread(L, G));
    }
    for (int t = 0; t < 40; ++t) {
      const token_count L = rng.between(1, 100'000);
      INFO("L=" << L << " G=" << G);
      REQUIRE(library_spread(L, G) == best_spread(L, G));
    }
  }
}

TEST_CASE("zigzag matches TransformerEngine's THD index map for divisible lengths", "[schedule][zigzag]") {
  // TE (TransformerEngine's THD CP index map): per-rank cu_s = cu / P, local length s = L / P, local index i:
  //   src = cu_s[seq] * P + i + (s / 2) * (i < s / 2 ? r : 2P - 2 - r)
  random_generator rng(5, 4);
  for (int t = 0; t < 200; ++t) {
    const auto P = static_cast<std::int32_t>(rng.between(1, 16));
    const auto nseq = static_cast<int>(rng.between(1, 6));
    std::vector<token_count> lengths, cu{0};
    for (int j = 0; j < nseq; ++j) {
      lengths.push_back(2 * P * rng.between(1, 50));
      cu.push_back(cu.back() + lengths.back());
    }
    for (std::int32_t r = 0; r < P; ++r) {
      std::vector<token_count> ours, te;
      for (int j = 0; j < nseq; ++j) {
        const zigzag_pair z = zigzag_chunks(lengths[static_cast<std::size_t>(j)], P, r);
        for (token_count x = z.head.begin; x < z.head.end; ++x) ours.push_back(cu[static_cast<std::size_t>(j)] + x);
        for (token_count x = z.tail.begin; x < z.tail.end; ++x) ours.push_back(cu[static_cast<std::size_t>(j)] + x);
        const token_count s = lengths[static_cast<std::size_t>(j)] / P, cu_s = cu[static_cast<std::size_t>(j)] / P;
        for (token_count i = 0; i < s; ++i) te.push_back(cu_s * P + i + (s / 2) * (i < s / 2 ? r : 2 * P - 2 - r));
      }
      REQUIRE(ours == te);
    }
  }
}

TEST_CASE("zigzag_chunks_checked rejects bad input with the offending numbers", "[schedule][zigzag]") {
  CHECK(zigzag_chunks_checked(10, 2, 1) == zigzag_chunks(10, 2, 1));
  try {
    (void)zigzag_chunks_checked(0, 2, 0);
    FAIL("no throw");
  } catch (const invalid_argument& e) {
    CHECK(e.value("length") == 0.0);
  }
  CHECK_THROWS_AS(zigzag_chunks_checked(10, 0, 0), invalid_argument);
  try {
    (void)zigzag_chunks_checked(10, 3, 3);
    FAIL("no throw");
  } catch (const invalid_argument& e) {
    CHECK(e.value("position") == 3.0);
    CHECK(e.value("group_size") == 3.0);
  }
  CHECK_THROWS_AS(zigzag_chunks_checked(10, 3, -1), invalid_argument);
}

TEST_CASE("zigzag_tokens and zigzag_pairs: what each position holds and computes", "[schedule][zigzag]") {
  random_generator rng(13, 5);
  for (int t = 0; t < 3000; ++t) {
    const auto G = static_cast<std::int32_t>(rng.between(1, 64));
    const token_count L = t % 2 == 0 ? rng.between(1, 6 * G) : rng.between(1, 1'000'000);
    token_count tokens = 0;
    std::int64_t pairs = 0;
    for (std::int32_t i = 0; i < G; ++i) {
      const zigzag_pair z = zigzag_chunks(L, G, i);
      REQUIRE(zigzag_tokens(L, G, i) == z.head.size() + z.tail.size());
      REQUIRE(zigzag_pairs(L, G, i) == chunk_pairs(z.head) + chunk_pairs(z.tail));
      tokens += zigzag_tokens(L, G, i);
      pairs += zigzag_pairs(L, G, i);
    }
    REQUIRE(tokens == L);
    REQUIRE(pairs == causal_pairs(L));
  }
}

TEST_CASE("zigzag_extras: the cyclic run of positions holding one token more", "[schedule][zigzag]") {
  for (std::int32_t G = 1; G <= 9; ++G)
    for (token_count len = 1; len <= 6 * G + 3; ++len) {
      const auto run = zigzag_extras(len, G);
      token_count lo = zigzag_tokens(len, G, 0);
      for (std::int32_t p = 0; p < G; ++p) lo = std::min(lo, zigzag_tokens(len, G, p));
      for (std::int32_t p = 0; p < G; ++p) {
        const bool in_run = ((p - run.first) % G + G) % G < run.count;
        CHECK(zigzag_tokens(len, G, p) == lo + (in_run ? 1 : 0));
      }
    }
}

TEST_CASE("zigzag_dealer: ring ranks within one token over a batch, divisible lengths not rotated",
          "[schedule][zigzag]") {
  random_generator rng(17, 6);
  for (int t = 0; t < 500; ++t) {
    const auto G = static_cast<std::int32_t>(rng.between(1, 16));
    zigzag_dealer dealer(G);
    std::vector<token_count> held(static_cast<std::size_t>(G), 0);
    const auto n = static_cast<int>(rng.between(1, 40));
    for (int j = 0; j < n; ++j) {
      const token_count L = rng.below(4) == 0 ? 2 * G * rng.between(1, 50) : rng.between(1, 5000);
      const std::int32_t offset = dealer.next(L);
      REQUIRE(offset >= 0);
      REQUIRE(offset < G);
      if (L % (2 * G) == 0) REQUIRE(offset == 0);
      for (std::int32_t p = 0; p < G; ++p) held[static_cast<std::size_t>((p + offset) % G)] += zigzag_tokens(L, G, p);
      const auto [lo, hi] = std::minmax_element(held.begin(), held.end());
      REQUIRE(*hi - *lo <= 1);
    }
  }
}
