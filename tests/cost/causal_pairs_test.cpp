// tests/cost/causal_pairs_test.cpp
// causal_pairs / full_pairs against brute-force enumeration: every range pair of a small
// universe, then thousands of seeded random pairs (empty, reversed, disjoint, nested,
// overlapping) against a per-row oracle, and additivity at positions near 2^31.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <algorithm>
#include <cstdint>

using zeppelin::causal_pairs;
using zeppelin::full_pairs;
using zeppelin::token_count;
using zeppelin::token_range;

namespace {
// Enumerates every (q, k) pair: the definition itself.
std::int64_t enumerate_pairs(token_range q, token_range k) {
  std::int64_t n = 0;
  for (token_count i = q.begin; i < q.end; ++i)
    for (token_count j = k.begin; j < k.end; ++j) n += j <= i ? 1 : 0;
  return n;
}
// Per query row: keys in [k.begin, min(k.end, q + 1)). Linear in |q|, for larger ranges.
std::int64_t per_row_pairs(token_range q, token_range k) {
  std::int64_t n = 0;
  for (token_count i = q.begin; i < q.end; ++i) n += std::max<token_count>(0, std::min(k.end, i + 1) - k.begin);
  return n;
}
}  // namespace

static_assert(causal_pairs(token_range{0, 4}, token_range{0, 4}) == 10);
static_assert(causal_pairs(token_range{4, 8}, token_range{0, 4}) == 16);
static_assert(causal_pairs(token_range{0, 4}, token_range{4, 8}) == 0);
static_assert(causal_pairs(token_count{5}) == 15);
static_assert(full_pairs(token_range{2, 5}, token_range{0, 4}) == 12);

TEST_CASE("causal_pairs matches enumeration on every range pair of a small universe", "[cost][causal_pairs]") {
  constexpr token_count n = 11;  // positions 0..10, ranges with begin/end in [0, 11] incl. reversed
  long checked = 0;
  for (token_count qb = 0; qb <= n; ++qb)
    for (token_count qe = 0; qe <= n; ++qe)
      for (token_count kb = 0; kb <= n; ++kb)
        for (token_count ke = 0; ke <= n; ++ke) {
          const token_range q{qb, qe}, k{kb, ke};
          const auto expected = enumerate_pairs(q, k);
          if (causal_pairs(q, k) != expected) {
            INFO("q=[" << qb << "," << qe << ") k=[" << kb << "," << ke << ")");
            REQUIRE(causal_pairs(q, k) == expected);
          }
          REQUIRE(full_pairs(q, k) == (q.empty() || k.empty() ? 0 : q.size() * k.size()));
          ++checked;
        }
  REQUIRE(checked == 12 * 12 * 12 * 12);
}

TEST_CASE("causal_pairs matches the per-row oracle on seeded random range pairs", "[cost][causal_pairs]") {
  zeppelin::random_generator rng(0xC05A1, 0);
  enum kind { empty_q, empty_k, reversed, disjoint_before, disjoint_after, nested_q_in_k, nested_k_in_q, overlap, any };
  int seen[any + 1] = {};
  for (int trial = 0; trial < 6000; ++trial) {
    const auto which = static_cast<kind>(rng.below(any + 1));
    const token_count base = rng.between(0, 5000);
    auto range = [&](token_count lo, token_count max_len) {
      const token_count b = lo + rng.between(0, 400);
      return token_range{b, b + rng.between(1, max_len)};
    };
    token_range q = range(base, 600), k = range(base, 600);
    switch (which) {
      case empty_q: q.end = q.begin; break;
      case empty_k: k.end = k.begin; break;
      case reversed:  // end < begin in one of the two ranges: counts as empty
        if (rng.below(2)) std::swap(q.begin, q.end); else std::swap(k.begin, k.end);
        break;
      case disjoint_before: q = range(base, 300); k = range(q.end, 300); break;   // all keys after the queries
      case disjoint_after: k = range(base, 300); q = range(k.end, 300); break;    // all keys before
      case nested_q_in_k: k = range(base, 900); q.begin = rng.between(k.begin, k.end); q.end = rng.between(q.begin, k.end); break;
      case nested_k_in_q: q = range(base, 900); k.begin = rng.between(q.begin, q.end); k.end = rng.between(k.begin, q.end); break;
      case overlap: q = range(base, 500); k.begin = rng.between(q.begin, q.end); k.end = k.begin + rng.between(q.end - k.begin, 700); break;
      case any: break;
    }
    ++seen[which];
    const auto expected = per_row_pairs(q, k);
    if (causal_pairs(q, k) != expected) {
      INFO("kind " << which << " q=[" << q.begin << "," << q.end << ") k=[" << k.begin << "," << k.end << ")");
      REQUIRE(causal_pairs(q, k) == expected);
    }
    if (which == empty_q || which == empty_k || which == reversed) REQUIRE(causal_pairs(q, k) == 0);
    if (which == disjoint_before) REQUIRE(causal_pairs(q, k) == 0);
    if (which == disjoint_after) REQUIRE(causal_pairs(q, k) == full_pairs(q, k));
  }
  for (int s : seen) REQUIRE(s > 400);
}

TEST_CASE("causal_pairs is additive and exact near 2^31 positions", "[cost][causal_pairs]") {
  zeppelin::random_generator rng(7, 1);
  constexpr token_count top = (token_count{1} << 31) - 1;
  for (int trial = 0; trial < 2000; ++trial) {
    token_count p[4];
    for (auto& v : p) v = rng.between(top - (token_count{1} << 20), top);
    std::sort(p, p + 4);
    const token_count split = rng.between(p[0], p[1]);
    const token_range k{p[2] - rng.between(0, 5000), p[3]};
    // Splitting the query range (or the key range) splits the count.
    REQUIRE(causal_pairs({p[0], p[1]}, k) == causal_pairs({p[0], split}, k) + causal_pairs({split, p[1]}, k));
    const token_count ks = rng.between(k.begin, k.end);
    const token_range q{p[0], p[3]};
    REQUIRE(causal_pairs(q, k) == causal_pairs(q, {k.begin, ks}) + causal_pairs(q, {ks, k.end}));
    // The diagonal block of a range is its triangle, whatever its offset.
    const token_range d{p[1], p[2]};
    REQUIRE(causal_pairs(d, d) == causal_pairs(d.size()));
  }
  // The largest documented case: a whole 2^31 - 1 token sequence.
  REQUIRE(causal_pairs(token_range{0, top}, token_range{0, top}) == top * (top + 1) / 2);
  REQUIRE(causal_pairs(token_count{0}) == 0);
  REQUIRE(causal_pairs(token_count{-3}) == 0);
}

TEST_CASE("causal_pairs_from_start equals the pairs against keys from the sequence's start", "[cost][causal_pairs]") {
  zeppelin::random_generator rng(0x5AA7, 2);
  constexpr token_count top = (token_count{1} << 31) - 1;
  for (int trial = 0; trial < 4000; ++trial) {
    // small ranges (the per-row oracle), then ranges near 2^31 (no overflow), empty and reversed ones
    const bool large = trial % 2 == 1;
    const token_count begin = large ? rng.between(top - (token_count{1} << 20), top) : rng.between(0, 3000);
    const token_count end = trial % 7 == 0 ? begin - rng.between(0, 5) : begin + rng.between(0, large ? top - begin : 3000);
    const token_range q{begin, end};
    INFO("q=[" << q.begin << "," << q.end << ")");
    REQUIRE(causal_pairs_from_start(q) == causal_pairs(q, token_range{0, q.end}));
    if (!large) REQUIRE(causal_pairs_from_start(q) == per_row_pairs(q, token_range{0, q.end}));
    if (q.end <= q.begin) REQUIRE(causal_pairs_from_start(q) == 0);
  }
}
