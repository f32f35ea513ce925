// program/launch_waves.hpp: the waves are launchable (query and key rows ascending and
// disjoint, at most max_wave_blocks), hold every non-empty block once, and are exactly those of
// a plain first-fit scan over the waves (the definition), on seeded random block lists.
#include <zeppelin/core/random.hpp>
#include <zeppelin/program/launch_waves.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

using namespace zeppelin;

namespace {

// The definition: blocks in (query row, key row) order, each into the lowest-index wave whose
// last block ends before it in both rows and that is not full.
std::vector<std::vector<attention_block>> first_fit_scan(const std::vector<attention_block>& blocks) {
  std::vector<attention_block> sorted;
  for (const attention_block& b : blocks)
    if (!b.q.empty() && !b.k.empty() && b.mask != block_mask::none) sorted.push_back(b);
  std::stable_sort(sorted.begin(), sorted.end(), [](const attention_block& a, const attention_block& b) {
    return a.q_row != b.q_row ? a.q_row < b.q_row : a.kv_row < b.kv_row;
  });
  std::vector<std::vector<attention_block>> waves;
  for (const attention_block& b : sorted) {
    bool placed = false;
    for (auto& w : waves) {
      const attention_block& last = w.back();
      if (w.size() < static_cast<std::size_t>(max_wave_blocks) && last.q_row + last.q.size() <= b.q_row &&
          last.kv_row + last.k.size() <= b.kv_row) {
        w.push_back(b);
        placed = true;
        break;
      }
    }
    if (!placed) waves.push_back({b});
  }
  return waves;
}

std::vector<attention_block> random_blocks(random_generator& rng, std::size_t n) {
  std::vector<attention_block> blocks;
  const token_count rows = 1 + static_cast<token_count>(rng.below(400));
  for (std::size_t i = 0; i < n; ++i) {
    attention_block b;
    const token_count q = static_cast<token_count>(rng.below(8)), k = static_cast<token_count>(rng.below(8));
    b.q = {0, q};
    b.k = {0, k};
    b.q_row = static_cast<token_count>(rng.below(static_cast<std::uint64_t>(rows)));
    b.kv_row = static_cast<token_count>(rng.below(static_cast<std::uint64_t>(rows)));
    b.mask = rng.below(10) == 0 ? block_mask::none : (rng.below(2) ? block_mask::causal : block_mask::full);
    b.seq = static_cast<sequence_index>(i);  // tells equal-looking blocks apart
    blocks.push_back(b);
  }
  return blocks;
}

}  // namespace

TEST_CASE("launch waves: launchable, complete, and the first-fit scan's", "[program][launch_waves]") {
  random_generator rng(17, 3);
  for (int trial = 0; trial < 400; ++trial) {
    const std::vector<attention_block> blocks = random_blocks(rng, rng.below(300));
    const auto waves = make_launch_waves(blocks);
    CHECK(waves == first_fit_scan(blocks));
    std::size_t kept = 0, expected = 0;
    for (const attention_block& b : blocks) expected += !b.q.empty() && !b.k.empty() && b.mask != block_mask::none;
    for (const auto& w : waves) {
      REQUIRE_FALSE(w.empty());
      CHECK(w.size() <= static_cast<std::size_t>(max_wave_blocks));
      for (std::size_t i = 1; i < w.size(); ++i) {
        CHECK(w[i - 1].q_row + w[i - 1].q.size() <= w[i].q_row);
        CHECK(w[i - 1].kv_row + w[i - 1].k.size() <= w[i].kv_row);
      }
      kept += w.size();
    }
    CHECK(kept == expected);
  }
  CHECK(make_launch_waves({}).empty());
}

TEST_CASE("launch waves: a full wave takes no more blocks", "[program][launch_waves]") {
  std::vector<attention_block> diagonal;
  for (token_count i = 0; i < 70000; ++i)
    diagonal.push_back({static_cast<sequence_index>(i % 7), {0, 1}, {0, 1}, block_mask::full, i, i});
  const auto waves = make_launch_waves(diagonal);
  REQUIRE(waves.size() == 3);
  CHECK(waves[0].size() == static_cast<std::size_t>(max_wave_blocks));
  CHECK(waves[1].size() == static_cast<std::size_t>(max_wave_blocks));
  CHECK(waves[2].size() == 70000 - 2 * static_cast<std::size_t>(max_wave_blocks));
  CHECK(waves == first_fit_scan(diagonal));
}
