// tests/schedule/block_mask_test.cpp
// block_pairs / classify_block (schedule/block_mask.hpp) against brute-force enumeration of
// (query, key) positions for every small pair of ranges.
#include <catch2/catch.hpp>
#include <zeppelin/schedule/block_mask.hpp>

#include <cstdint>

using namespace zeppelin;

static_assert(block_pairs({0, 4}, {0, 4}, block_mask::causal) == 10);
static_assert(block_pairs({4, 8}, {0, 4}, block_mask::full) == 16);
static_assert(block_pairs({0, 4}, {0, 4}, block_mask::none) == 0);
static_assert(classify_block({4, 8}, {0, 4}) == block_mask::full);
static_assert(classify_block({0, 4}, {4, 8}) == block_mask::none);
static_assert(classify_block({0, 4}, {0, 4}) == block_mask::causal);

TEST_CASE("classify_block and block_pairs agree with brute force", "[schedule][block_mask]") {
  int checked = 0;
  for (token_count qb = 0; qb <= 7; ++qb)
    for (token_count qe = qb; qe <= 8; ++qe)
      for (token_count kb = 0; kb <= 7; ++kb)
        for (token_count ke = kb; ke <= 8; ++ke) {
          const token_range q{qb, qe}, k{kb, ke};
          std::int64_t visible = 0, total = 0;
          for (token_count x = qb; x < qe; ++x)
            for (token_count y = kb; y < ke; ++y) {
              ++total;
              visible += y <= x ? 1 : 0;
            }
          const block_mask m = classify_block(q, k);
          INFO("q=[" << qb << "," << qe << ") k=[" << kb << "," << ke << ")");
          if (visible == 0) REQUIRE(m == block_mask::none);
          else if (visible == total) REQUIRE(m == block_mask::full);
          else REQUIRE(m == block_mask::causal);
          // the classified mask computes exactly the visible pairs
          REQUIRE(block_pairs(q, k, m) == visible);
          REQUIRE(block_pairs(q, k, block_mask::causal) == visible);
          REQUIRE(block_pairs(q, k, block_mask::full) == total);
          REQUIRE(block_pairs(q, k, block_mask::none) == 0);
          ++checked;
        }
  CHECK(checked > 1000);
  CHECK(to_string(block_mask::causal) == "causal");
}
