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
// (lowest index; deterministic), a greedy chain cover, found in O(log B) per block. A ring round of zigzag chunks needs
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
#include <functional>
#include <limits>
#include <optional>
#include <queue>
#include <utility>
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
  // First fit without scanning every wave: a wave can take block b when its last block ends
  // before b's query row (q_end <= b.q_row: once true it stays true, the blocks come in
  // query-row order) and before b's key row (kv_end <= b.kv_row). Waves whose last block
  // passed the query test sit in a min segment tree over wave indices holding their kv_end
  // (others: infinity), and the leftmost index with kv_end <= b.kv_row is the wave a scan
  // would have chosen; the rest wait in a min-heap on q_end. O(B log B) for B blocks.
  constexpr token_count blocked = std::numeric_limits<token_count>::max();
  std::vector<std::vector<attention_block>> waves;
  std::size_t leaves = 1;
  while (leaves < order.size()) leaves *= 2;
  std::vector<token_count> tree(2 * leaves, blocked);
  const auto set = [&](std::size_t w, token_count kv_end) {
    std::size_t i = leaves + w;
    tree[i] = kv_end;
    for (i /= 2; i >= 1; i /= 2) tree[i] = std::min(tree[2 * i], tree[2 * i + 1]);
  };
  const auto leftmost_at_most = [&](token_count kv_row) -> std::optional<std::size_t> {
    if (tree[1] > kv_row) return std::nullopt;
    std::size_t i = 1;
    while (i < leaves) i = tree[2 * i] <= kv_row ? 2 * i : 2 * i + 1;
    return i - leaves;
  };
  using pending = std::pair<token_count, std::size_t>;  // (q_end of the last block, wave)
  std::priority_queue<pending, std::vector<pending>, std::greater<>> waiting;
  for (const std::size_t i : order) {
    const attention_block& b = blocks[i];
    while (!waiting.empty() && waiting.top().first <= b.q_row) {
      const std::size_t w = waiting.top().second;
      waiting.pop();
      set(w, waves[w].back().kv_row + waves[w].back().k.size());
    }
    const std::optional<std::size_t> fit = leftmost_at_most(b.kv_row);
    const std::size_t w = fit ? *fit : waves.size();
    if (fit) waves[w].push_back(b);
    else waves.push_back({b});
    set(w, blocked);
    if (waves[w].size() < static_cast<std::size_t>(max_wave_blocks)) waiting.emplace(b.q_row + b.q.size(), w);
  }
  return waves;
}

ZEPPELIN_NAMESPACE_END
