// zeppelin/program/launch_waves.hpp
// Which blocks can share one attention kernel launch.
//   in : attention blocks (schedule/ring_schedule.hpp) with query rows in the rank's rows and
//        key rows in one held K/V buffer
//   out: waves: the blocks split into lists that each one CSR launch of the varlen kernels
//        (cuda/attention_params.hpp) can take over the ORIGINAL buffers, without copying a
//        row: query rows ascending and disjoint (one LSE merge per launch folds the launch's
//        rows into the accumulator) AND key rows ascending and disjoint (cu_seqlens_k is
//        monotone, and the backward's dK/dV accumulation stays exclusive per launch).
//        The device fills the gaps between consecutive blocks with `none` blocks.
// Rule: blocks sorted by (query row, key row), each put into the first wave it extends
// (lowest index; deterministic), a greedy chain cover. A ring round of zigzag chunks needs
// 2-3 waves (the head and the tail chunk of the queries both read the head chunk of the
// keys); a TE-style global ring of many sequences 1-2. A wave holds at most
// max_wave_blocks blocks, so that with a filler before every block it stays within the
// kernels' 65535-block grid.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Real blocks per launch: with a filler before each, 2 * 32767 + 1 <= 65535 CSR blocks.
inline constexpr std::int32_t max_wave_blocks = 32767;

//! Splits `blocks` into launch waves (see the file comment), in launch order. Blocks with
//! an empty side or a `none` mask are dropped.
[[nodiscard]] inline std::vector<std::vector<attention_block>> make_launch_waves(const std::vector<attention_block>& blocks) {
  std::vector<std::size_t> order;
  order.reserve(blocks.size());
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (!blocks[i].q.empty() && !blocks[i].k.empty() && blocks[i].mask != block_mask::none) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return blocks[a].q_row != blocks[b].q_row ? blocks[a].q_row < blocks[b].q_row : blocks[a].kv_row < blocks[b].kv_row;
  });
  std::vector<std::vector<attention_block>> waves;
  std::vector<std::size_t> open;  // waves that may still grow (below max_wave_blocks)
  for (const std::size_t i : order) {
    const attention_block& b = blocks[i];
    bool placed = false;
    for (const std::size_t w : open) {
      const attention_block& last = waves[w].back();
      if (waves[w].size() < static_cast<std::size_t>(max_wave_blocks) && last.q_row + last.q.size() <= b.q_row &&
          last.kv_row + last.k.size() <= b.kv_row) {
        waves[w].push_back(b);
        placed = true;
        break;
      }
    }
    if (!placed) {
      open.push_back(waves.size());
      waves.push_back({b});
    }
  }
  return waves;
}

ZEPPELIN_NAMESPACE_END
