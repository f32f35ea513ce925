// tests/pack/fixed_chunks_test.cpp
// Fixed-size chunking (pack/fixed_chunks.hpp), the Seq1F1B-like baseline: a valid chunking
// with every chunk at most S tokens, long sequences cut into S-token slices (each its own
// chunk, longest sequence first), short ones whole; errors name the value.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/pack/fixed_chunks.hpp>

#include <algorithm>
#include <limits>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

TEST_CASE("fixed_size_chunks: valid, at most S tokens, long sequences cut into S slices", "[pack][infinipipe]") {
  random_generator g(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 60)));
    for (auto& l : lengths) l = g.below(5) == 0 ? g.between(1, 100000) : g.between(1, 5000);
    const token_count S = g.between(1000, 20000);
    CAPTURE(trial, S);
    const std::vector<chunk> chunks = fixed_size_chunks(lengths, S);
    validate_chunks(chunks, lengths);
    token_count previous_cut = std::numeric_limits<token_count>::max();
    bool batched_seen = false;
    for (const chunk& c : chunks) {
      REQUIRE(c.tokens() <= S);
      const chunk_kind kind = kind_of(c, lengths);
      if (kind == chunk_kind::batched) {
        batched_seen = true;
        for (const chunk_slice& s : c.slices) REQUIRE(lengths[static_cast<std::size_t>(s.sequence)] <= S);
        continue;
      }
      REQUIRE(!batched_seen);  // the cut sequences come first
      REQUIRE(c.slices.size() == 1);
      const chunk_slice& s = c.slices.front();
      REQUIRE(s.begin % S == 0);
      REQUIRE(s.tokens() == std::min(S, lengths[static_cast<std::size_t>(s.sequence)] - s.begin));
      if (s.begin == 0) {
        REQUIRE(lengths[static_cast<std::size_t>(s.sequence)] <= previous_cut);  // longest first
        previous_cut = lengths[static_cast<std::size_t>(s.sequence)];
      }
    }
  }
  REQUIRE(zeppelin_test::expect_invalid([] { (void)fixed_size_chunks(std::vector<token_count>{5}, 0); }).value("chunk_tokens") == 0);
  REQUIRE(zeppelin_test::expect_invalid([] { (void)fixed_size_chunks(std::vector<token_count>{5, 0}, 4); }).value("index") == 1);
  REQUIRE_THROWS_AS(fixed_size_chunks(std::vector<token_count>{}, 4), invalid_argument);
}

TEST_CASE("fixed_size_chunks: the batched chunks are first-fit decreasing, as a scan over the chunks places them", "[pack][infinipipe]") {
  random_generator g(17);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 400)));
    for (auto& l : lengths) l = g.between(1, 64);
    const token_count S = g.between(1, 80);
    CAPTURE(trial, S);
    // the scan: sequences longest first (ties: lower index), each into the first chunk with room
    std::vector<std::int64_t> order(lengths.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return lengths[std::size_t(a)] > lengths[std::size_t(b)]; });
    std::vector<std::vector<std::int64_t>> batched;
    std::vector<token_count> room;
    for (const std::int64_t s : order) {
      const token_count l = lengths[std::size_t(s)];
      if (l > S) continue;
      std::size_t b = 0;
      while (b < room.size() && room[b] < l) ++b;
      if (b == room.size()) batched.emplace_back(), room.push_back(S);
      batched[b].push_back(s);
      room[b] -= l;
    }
    std::vector<std::vector<std::int64_t>> got;
    for (const chunk& c : fixed_size_chunks(lengths, S))
      if (c.slices.front().begin == 0 && lengths[std::size_t(c.slices.front().sequence)] <= S) {
        got.emplace_back();
        for (const chunk_slice& sl : c.slices) got.back().push_back(sl.sequence);
      }
    REQUIRE(got == batched);
  }
}
