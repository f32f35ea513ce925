// zeppelin/cuda/executor/block_waves.hpp
// From the attention blocks of one ring round (schedule/ring_schedule.hpp) to CSR launches of
// the device kernels WITHOUT copying any token row.
//   in : blocks {q_row, q_len, k_row, k_len, q_pos, k_pos, mask}: query rows in the rank's
//        Q buffer, key rows in the KV buffer held this round, sequence positions, mask
//   out: waves, each one CSR launch (cuda/attention_params.hpp) over the ORIGINAL buffers:
//        its blocks have ascending, disjoint query rows AND ascending, disjoint key rows; gaps
//        between consecutive blocks are filled by a `none` block (the forward writes O = 0 and
//        LSE = -inf for its rows, which merge as a no-op; the backward adds nothing), so
//        cu_seqlens_q / cu_seqlens_k are monotone and every block addresses the buffers in
//        place. Disjoint key rows keep the backward's dK/dV accumulation exclusive per launch;
//        disjoint query rows let one lse_merge per wave fold the wave into the accumulator.
// Chains: blocks sorted by (q_row, k_row), each put into the first wave it extends (lowest
// index; deterministic). A round of zigzag chunks needs 2-3 waves; a TE-style global ring of
// many sequences 1-2 (rows of both buffers follow sequence order). Waves are split at the
// grid's 65535-block limit. The descriptor arrays of every wave of a pass are appended to
// one byte buffer (8-byte aligned arrays) that is uploaded once per pass.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/block_mask.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! One attention block over the original buffers.
struct block_desc {
  token_count q_row = 0;  //!< first query row in the rank's Q buffer
  token_count q_len = 0;
  token_count k_row = 0;  //!< first key row in the held KV buffer
  token_count k_len = 0;
  token_count q_pos = 0;  //!< sequence position of the first query
  token_count k_pos = 0;  //!< sequence position of the first key
  block_mask mask = block_mask::none;
};

//! One CSR launch: byte offsets of its arrays in the pass's descriptor buffer.
struct block_wave {
  std::int32_t blocks = 0;        //!< CSR blocks, fillers included
  std::int32_t max_q = 0;         //!< longest block in queries (grid of the forward)
  std::int32_t max_k = 0;         //!< longest block in keys (grid of the backward)
  std::size_t cu_q = 0, cu_k = 0;  //!< int32 [blocks + 1]
  std::size_t q_offset = 0, k_offset = 0;  //!< int64 [blocks]
  std::size_t masks = 0;          //!< block_mask [blocks]
  token_count first_row = 0;      //!< query rows [first_row, end_row) are written by the forward
  token_count end_row = 0;
};

inline constexpr std::int32_t max_wave_blocks = 65535;  // grid.z limit of the kernels

namespace detail {
template <class T>
std::size_t append_array(std::vector<std::byte>& out, const std::vector<T>& a) {
  const std::size_t at = (out.size() + 7) / 8 * 8;
  out.resize(at + a.size() * sizeof(T));
  if (!a.empty()) std::memcpy(out.data() + at, a.data(), a.size() * sizeof(T));
  return at;
}
}  // namespace detail

//! Splits `blocks` into waves (see the file comment), appends their descriptor arrays to
//! `descriptors` and returns them in launch order. Blocks with an empty side are dropped.
[[nodiscard]] inline std::vector<block_wave> make_block_waves(const std::vector<block_desc>& blocks,
                                                              std::vector<std::byte>& descriptors) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (blocks[i].q_len > 0 && blocks[i].k_len > 0 && blocks[i].mask != block_mask::none) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return blocks[a].q_row != blocks[b].q_row ? blocks[a].q_row < blocks[b].q_row : blocks[a].k_row < blocks[b].k_row;
  });
  std::vector<std::vector<std::size_t>> chains;
  for (const std::size_t i : order) {
    const block_desc& b = blocks[i];
    bool placed = false;
    for (auto& chain : chains) {
      const block_desc& last = blocks[chain.back()];
      if (last.q_row + last.q_len <= b.q_row && last.k_row + last.k_len <= b.k_row) {
        chain.push_back(i);
        placed = true;
        break;
      }
    }
    if (!placed) chains.push_back({i});
  }
  std::vector<block_wave> waves;
  for (const auto& chain : chains) {
    std::size_t at = 0;
    while (at < chain.size()) {
      std::vector<std::int32_t> cu_q, cu_k;
      std::vector<std::int64_t> q_off, k_off;
      std::vector<block_mask> masks;
      block_wave w;
      const block_desc& first = blocks[chain[at]];
      cu_q.push_back(static_cast<std::int32_t>(first.q_row));
      cu_k.push_back(static_cast<std::int32_t>(first.k_row));
      w.first_row = first.q_row;
      const auto push = [&](token_count q_len, token_count k_len, token_count q_pos, token_count k_pos, block_mask m) {
        cu_q.push_back(cu_q.back() + static_cast<std::int32_t>(q_len));
        cu_k.push_back(cu_k.back() + static_cast<std::int32_t>(k_len));
        q_off.push_back(q_pos);
        k_off.push_back(k_pos);
        masks.push_back(m);
        w.max_q = std::max(w.max_q, static_cast<std::int32_t>(q_len));
        w.max_k = std::max(w.max_k, static_cast<std::int32_t>(k_len));
      };
      // room for a filler before each block
      while (at < chain.size() && static_cast<std::int32_t>(masks.size()) + 2 <= max_wave_blocks) {
        const block_desc& b = blocks[chain[at]];
        const token_count gap_q = b.q_row - cu_q.back(), gap_k = b.k_row - cu_k.back();
        if (gap_q > 0 || gap_k > 0) push(gap_q, gap_k, 0, 0, block_mask::none);
        push(b.q_len, b.k_len, b.q_pos, b.k_pos, b.mask);
        ++at;
      }
      w.blocks = static_cast<std::int32_t>(masks.size());
      w.end_row = cu_q.back();
      w.cu_q = detail::append_array(descriptors, cu_q);
      w.cu_k = detail::append_array(descriptors, cu_k);
      w.q_offset = detail::append_array(descriptors, q_off);
      w.k_offset = detail::append_array(descriptors, k_off);
      w.masks = detail::append_array(descriptors, masks);
      waves.push_back(w);
    }
  }
  return waves;
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
