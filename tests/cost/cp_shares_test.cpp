// tests/cost/cp_shares_test.cpp
// zigzag_cp_shares: every token and every causal pair exactly once; cp = 1 holds everything;
// a brute-force oracle (explicit chunk assignment, pair by pair) on tiny documents; exact
// balance when 2cp divides every length; micro_batch_cp_shares: explicit shares win.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/cp_shares.hpp>

#include <cstdint>
#include <vector>

using namespace zeppelin;

namespace {
// Chunk sizes by dealing the tokens one at a time to chunks 0, 1, ..., then placing chunks in
// order: an independent construction of "as even as possible, the first chunks one more".
std::vector<cp_share> brute_force_shares(const std::vector<token_count>& docs, int cp) {
  std::vector<cp_share> out(static_cast<std::size_t>(cp));
  const int chunks = 2 * cp;
  for (const token_count n : docs) {
    std::vector<token_count> size(static_cast<std::size_t>(chunks), 0);
    for (token_count t = 0; t < n; ++t) ++size[static_cast<std::size_t>(t % chunks)];
    std::vector<int> owner;  // owner rank of each position
    for (int c = 0; c < chunks; ++c)
      for (token_count t = 0; t < size[static_cast<std::size_t>(c)]; ++t) owner.push_back(c < cp ? c : chunks - 1 - c);
    for (token_count q = 0; q < n; ++q) {
      cp_share& s = out[static_cast<std::size_t>(owner[static_cast<std::size_t>(q)])];
      ++s.tokens;
      for (token_count k = 0; k <= q; ++k) ++s.pairs;
    }
  }
  return out;
}
}  // namespace

TEST_CASE("zigzag shares with cp = 1 hold every token and pair", "[cost][cp_shares]") {
  const std::vector<token_count> docs{1, 7, 4096, 100};
  const auto s = zigzag_cp_shares(docs, 1);
  REQUIRE(s.size() == 1);
  REQUIRE(s[0].tokens == 1 + 7 + 4096 + 100);
  REQUIRE(s[0].pairs == causal_pairs(1) + causal_pairs(7) + causal_pairs(4096) + causal_pairs(100));
}

TEST_CASE("zigzag shares match a brute-force chunk assignment on tiny documents", "[cost][cp_shares]") {
  for (int cp = 1; cp <= 5; ++cp)
    for (token_count n = 1; n <= 23; ++n) REQUIRE(zigzag_cp_shares(std::vector<token_count>{n}, cp) == brute_force_shares({n}, cp));
  random_generator rng(7, 1);
  for (int trial = 0; trial < 200; ++trial) {
    const int cp = static_cast<int>(rng.between(1, 6));
    std::vector<token_count> docs(static_cast<std::size_t>(rng.between(1, 5)));
    for (auto& d : docs) d = rng.between(1, 40);
    REQUIRE(zigzag_cp_shares(docs, cp) == brute_force_shares(docs, cp));
  }
}

TEST_CASE("zigzag shares sum to the micro-batch's tokens and causal pairs", "[cost][cp_shares]") {
  random_generator rng(2024, 0);
  for (int trial = 0; trial < 300; ++trial) {
    const int cp = static_cast<int>(rng.between(1, 16));
    std::vector<token_count> docs(static_cast<std::size_t>(rng.between(1, 12)));
    token_count tokens = 0;
    std::int64_t pairs = 0;
    for (auto& d : docs) {
      d = rng.between(1, 200000);
      tokens += d;
      pairs += d * (d + 1) / 2;
    }
    const auto s = zigzag_cp_shares(docs, cp);
    REQUIRE(static_cast<int>(s.size()) == cp);
    token_count t = 0;
    std::int64_t p = 0;
    for (const auto& x : s) {
      t += x.tokens;
      p += x.pairs;
    }
    REQUIRE(t == tokens);
    REQUIRE(p == pairs);
  }
}

TEST_CASE("zigzag balances exactly when 2cp divides every length", "[cost][cp_shares]") {
  for (const int cp : {2, 4, 8}) {
    const std::vector<token_count> docs{2 * cp * 1000, 2 * cp * 17, 2 * cp};
    const auto s = zigzag_cp_shares(docs, cp);
    for (const auto& x : s) REQUIRE(x == s.front());
  }
  // A contiguous split would not: its last rank sees (2cp-1)x the first rank's pairs.
  const auto s = zigzag_cp_shares(std::vector<token_count>{4}, 2);
  REQUIRE(s[0] == cp_share{2, 1 + 4});  // positions 0 and 3: 1 + 4 keys
  REQUIRE(s[1] == cp_share{2, 2 + 3});  // positions 1 and 2: 2 + 3 keys
}

TEST_CASE("micro_batch_cp_shares prefers explicit shares and checks them", "[cost][cp_shares]") {
  micro_batch mb{.documents = {100, 28}, .cp_shares = {}};
  REQUIRE(micro_batch_cp_shares(mb, 2) == zigzag_cp_shares(mb.documents, 2));
  mb.cp_shares = {{100, 5000}, {28, 10}};
  REQUIRE(micro_batch_cp_shares(mb, 2) == mb.cp_shares);
  REQUIRE_THROWS_AS(micro_batch_cp_shares(mb, 4), invalid_argument);
  mb.cp_shares = {{100, 5000}, {27, 10}};  // tokens do not add up
  REQUIRE_THROWS_AS(micro_batch_cp_shares(mb, 2), invalid_argument);
  REQUIRE_THROWS_AS(zigzag_cp_shares(std::vector<token_count>{10}, 0), invalid_argument);
  REQUIRE_THROWS_AS(zigzag_cp_shares(std::vector<token_count>{10, 0}, 2), invalid_argument);
  REQUIRE_THROWS_AS(zigzag_cp_shares(std::vector<token_count>{-3}, 2), invalid_argument);
}
