// zeppelin/cuda/executor/launch_csr.hpp
// The CSR arrays of one attention launch of the execution program (program/program.hpp),
// over the ORIGINAL buffers, without copying any token row.
//   in : a launch's blocks (program/launch_waves.hpp made them: query rows ascending and
//        disjoint, key rows ascending and disjoint), each {q_row, q rows, kv_row, k rows,
//        positions, mask}
//   out: launch_csr: byte offsets of the launch's cu_seqlens_q / cu_seqlens_k (int32,
//        blocks + 1), q_offset / k_offset (int64) and masks arrays in a descriptor buffer
//        (8-byte aligned arrays, appended), the grid sizes, and the query rows
//        [first_row, end_row) the forward writes. Gaps between consecutive blocks are filled
//        by a `none` block (the forward writes O = 0 and LSE = -inf for its rows, which merge
//        as a no-op; the backward adds nothing), so the cu_seqlens are monotone and every
//        block addresses the buffers in place.
// The descriptors of every launch of a pass are appended to one byte buffer that is uploaded
// once per pass. Throws invalid_argument for blocks that are not ascending and disjoint or a
// launch beyond the kernels' 65535-block grid. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! One CSR launch: byte offsets of its arrays in the pass's descriptor buffer.
struct launch_csr {
  std::int32_t blocks = 0;                 //!< CSR blocks, fillers included
  std::int32_t max_q = 0;                  //!< longest block in queries (grid of the forward)
  std::int32_t max_k = 0;                  //!< longest block in keys (grid of the backward)
  std::size_t cu_q = 0, cu_k = 0;          //!< int32 [blocks + 1]
  std::size_t q_offset = 0, k_offset = 0;  //!< int64 [blocks]
  std::size_t masks = 0;                   //!< block_mask [blocks]
  token_count first_row = 0;               //!< query rows [first_row, end_row) are written by the forward
  token_count end_row = 0;
};

//! CSR blocks a launch may hold (grid.z of the kernels).
inline constexpr std::int32_t max_csr_blocks = 65535;

namespace detail {
template <class T>
std::size_t append_array(std::vector<std::byte>& out, const std::vector<T>& a) {
  const std::size_t at = (out.size() + 7) / 8 * 8;
  out.resize(at + a.size() * sizeof(T));
  if (!a.empty()) std::memcpy(out.data() + at, a.data(), a.size() * sizeof(T));
  return at;
}
}  // namespace detail

//! The CSR arrays of `blocks` appended to `descriptors` (see the file comment).
[[nodiscard]] inline launch_csr make_launch_csr(const std::vector<attention_block>& blocks, std::vector<std::byte>& descriptors) {
  ZEPPELIN_EXPECTS(!blocks.empty(), "launch CSR: a launch without blocks", {});
  std::vector<std::int32_t> cu_q{static_cast<std::int32_t>(blocks.front().q_row)}, cu_k{static_cast<std::int32_t>(blocks.front().kv_row)};
  std::vector<std::int64_t> q_off, k_off;
  std::vector<block_mask> masks;
  launch_csr w;
  w.first_row = blocks.front().q_row;
  const auto push = [&](token_count q_len, token_count k_len, token_count q_pos, token_count k_pos, block_mask m) {
    cu_q.push_back(cu_q.back() + static_cast<std::int32_t>(q_len));
    cu_k.push_back(cu_k.back() + static_cast<std::int32_t>(k_len));
    q_off.push_back(q_pos);
    k_off.push_back(k_pos);
    masks.push_back(m);
    w.max_q = std::max(w.max_q, static_cast<std::int32_t>(q_len));
    w.max_k = std::max(w.max_k, static_cast<std::int32_t>(k_len));
  };
  for (const attention_block& b : blocks) {
    const token_count gap_q = b.q_row - cu_q.back(), gap_k = b.kv_row - cu_k.back();
    ZEPPELIN_EXPECTS(gap_q >= 0 && gap_k >= 0, "launch CSR: blocks must have ascending, disjoint query and key rows",
                     {{"q_row", double(b.q_row)}, {"kv_row", double(b.kv_row)}});
    if (gap_q > 0 || gap_k > 0) push(gap_q, gap_k, 0, 0, block_mask::none);
    push(b.q.size(), b.k.size(), b.q.begin, b.k.begin, b.mask);
  }
  ZEPPELIN_EXPECTS(static_cast<std::int64_t>(masks.size()) <= max_csr_blocks, "launch CSR: more blocks than the kernels' grid holds",
                   {{"blocks", double(masks.size())}, {"limit", double(max_csr_blocks)}});
  w.blocks = static_cast<std::int32_t>(masks.size());
  w.end_row = cu_q.back();
  w.cu_q = detail::append_array(descriptors, cu_q);
  w.cu_k = detail::append_array(descriptors, cu_k);
  w.q_offset = detail::append_array(descriptors, q_off);
  w.k_offset = detail::append_array(descriptors, k_off);
  w.masks = detail::append_array(descriptors, masks);
  return w;
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
