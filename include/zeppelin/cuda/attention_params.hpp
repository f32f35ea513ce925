// zeppelin/cuda/attention_params.hpp
// Parameters, preconditions and launcher declarations of the varlen attention kernels
// (definitions: attention_forward.cuh, attention_backward.cuh; instantiated for
// {bf16, fp16} x {64, 128} in zeppelin::kernels).
//
// A launch computes `num_blocks` independent attention blocks given in CSR form. Block b:
//   queries  rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] of Q, at sequence positions q_offset[b] + i
//   keys     rows cu_seqlens_k[b] .. cu_seqlens_k[b+1] of K/V, at positions k_offset[b] + j
//   mask     masks[b] (or `mask` for every block when masks == nullptr):
//            causal: key visible iff k_offset + j <= q_offset + i; full: all; none: skipped
// With q_offset = k_offset = nullptr (all zero) this is plain varlen (packed) attention; a
// ring round passes the positions of its local query chunk and of the received KV chunk, so
// zigzag halves and uneven chunks are masked exactly.
// Layouts (flashinfer's, all row-major and contiguous; element offsets):
//   Q, O, dO, dQ  [total_q][heads][head_dim]        K, V, dK, dV [total_k][kv_heads][head_dim]
//   LSE, delta    [heads][lse_stride] fp32, natural log (LSE = ln sum_j exp(scale * q.k_j))
// GQA: query head h reads KV head h / (heads / kv_heads).
// Rows that see no key get O = 0 and LSE = -inf (they merge as a no-op, lse_merge.hpp).
// check(p) returns the first broken precondition without throwing; validate(p) throws
// zeppelin::invalid_argument with the offending numbers. The runtime-dispatching facades are
// in attention.hpp (kept apart so that a kernels/*.cu instantiates only its own templates).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/schedule/block_mask.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! What forward and backward launches share: the inputs and the CSR list of blocks. Block b
//! is queries [cu_seqlens_q[b], cu_seqlens_q[b+1]) against keys [cu_seqlens_k[b],
//! cu_seqlens_k[b+1]), at sequence positions starting at q_offset[b] / k_offset[b], under
//! masks[b]. Rows of Q index [0, total_q); LSE-like outputs use rows of lse_stride elements.
struct attention_blocks {
  const void* q = nullptr;  //!< [total_q][heads][head_dim], `type`
  const void* k = nullptr;  //!< [total_k][kv_heads][head_dim], `type`
  const void* v = nullptr;  //!< [total_k][kv_heads][head_dim], `type`
  const std::int32_t* cu_seqlens_q = nullptr;  //!< [num_blocks + 1], device memory
  const std::int32_t* cu_seqlens_k = nullptr;  //!< [num_blocks + 1], device memory
  const std::int64_t* q_offset = nullptr;      //!< [num_blocks] first query position; nullptr = 0
  const std::int64_t* k_offset = nullptr;      //!< [num_blocks] first key position; nullptr = 0
  const block_mask* masks = nullptr;           //!< [num_blocks]; nullptr = `mask` for all
  block_mask mask = block_mask::causal;
  std::int32_t num_blocks = 0;
  std::int32_t heads = 0;
  std::int32_t kv_heads = 0;
  std::int32_t head_dim = 0;
  std::int64_t total_q = 0;       //!< rows of Q (cu_seqlens_q[num_blocks] <= total_q)
  std::int64_t lse_stride = 0;    //!< elements between two heads' LSE rows; 0 = total_q
  float softmax_scale = 0.0f;     //!< usually 1 / sqrt(head_dim)
  dtype type = dtype::bf16;
};

//! Forward pass of a batch of attention blocks.
struct attention_forward_params : attention_blocks {
  void* o = nullptr;        //!< [total_q][heads][head_dim], `type`; nullptr = do not write
  float* o_f32 = nullptr;   //!< [total_q][heads][head_dim], fp32; nullptr = do not write
  float* lse = nullptr;     //!< [heads][lse_stride], natural log; nullptr = do not write
  std::int32_t max_seqlen_q = 0;  //!< >= every block's query count (sizes the grid)
};

//! delta[h][row] = sum_d dO[row][h][d] * O[row][h][d] (fp32), the backward's row term. O and
//! dO are the GLOBAL output and its gradient (after every LSE merge), so one preprocess
//! serves every block / ring round of the backward.
struct attention_preprocess_params {
  const void* o = nullptr;     //!< [rows][heads][head_dim], `type`
  const void* dout = nullptr;  //!< [rows][heads][head_dim], `type`
  float* delta = nullptr;      //!< [heads][delta_stride]
  std::int64_t rows = 0;
  std::int32_t heads = 0;
  std::int32_t head_dim = 0;       //!< any multiple of 8
  std::int64_t delta_stride = 0;   //!< 0 = rows
  dtype type = dtype::bf16;
};

//! Backward pass (FlashAttention-2): recomputes P from the global LSE, accumulates
//!   dq_accum += scale * dS K   (fp32 atomicAdd: blocks and ring rounds accumulate in place;
//!                               the summation order, hence the last bits, may vary run to run)
//!   dk_accum += scale * dS^T Q, dv_accum += P^T dO   (fp32 read-modify-write; exclusive: the
//!                               CTA that owns a key tile sums every query tile and every query
//!                               head of the GQA group, so no atomics and a fixed order)
//!   dk, dv  (`type`, overwritten) when non-null, instead of or besides the fp32 accumulators.
//! Key rows of distinct blocks must not overlap (true for any CSR cu_seqlens_k).
struct attention_backward_params : attention_blocks {
  const void* dout = nullptr;    //!< [total_q][heads][head_dim] (gradient of the global O)
  const float* lse = nullptr;    //!< [heads][lse_stride], global LSE (natural log)
  const float* delta = nullptr;  //!< [heads][lse_stride], from attention_backward_preprocess
  float* dq_accum = nullptr;     //!< [total_q][heads][head_dim] fp32, accumulated (+=)
  float* dk_accum = nullptr;     //!< [total_k][kv_heads][head_dim] fp32, accumulated; nullptr = skip
  float* dv_accum = nullptr;     //!< [total_k][kv_heads][head_dim] fp32, accumulated; nullptr = skip
  void* dk = nullptr;            //!< [total_k][kv_heads][head_dim], `type`, overwritten; nullptr = skip
  void* dv = nullptr;            //!< [total_k][kv_heads][head_dim], `type`, overwritten; nullptr = skip
  std::int32_t max_seqlen_k = 0;  //!< >= every block's key count (sizes the grid)
};

namespace detail {

//! The first broken precondition of a parameter set: message == nullptr means none.
struct param_problem {
  const char* message = nullptr;
  const char* name = "";
  double value = 0.0;
  [[nodiscard]] explicit operator bool() const noexcept { return message != nullptr; }
};

// Grid limits: heads go to grid.x and blocks to grid.y (at most 65535 each, as before the
// heads moved to x); tile ranks to grid.z, 65535 per launch (cuda/detail/tile_order.cuh).
inline constexpr std::int32_t max_grid_yz = 65535;
// Positions are compared in 32-bit arithmetic after clamping the offset difference.
inline constexpr std::int64_t max_block_length = std::int64_t{1} << 30;

//! Preconditions shared by forward and backward launches; max_seqlen sizes the grid.
inline param_problem check_blocks(const attention_blocks& b, std::int32_t max_seqlen) noexcept {
  if (!is_supported_head_dim(b.head_dim)) return {"no attention kernel for this head dim (64, 128)", "head_dim", double(b.head_dim)};
  if (b.type != dtype::bf16 && b.type != dtype::fp16) return {"unknown dtype", "dtype", double(static_cast<int>(b.type))};
  if (b.num_blocks < 0 || b.num_blocks > max_grid_yz) return {"block count out of [0, 65535]", "num_blocks", double(b.num_blocks)};
  if (b.heads <= 0 || b.heads > max_grid_yz) return {"head count out of [1, 65535]", "heads", double(b.heads)};
  if (b.kv_heads <= 0 || b.heads % b.kv_heads != 0) return {"kv_heads must divide heads", "kv_heads", double(b.kv_heads)};
  if (max_seqlen < 0 || max_seqlen >= max_block_length) return {"max sequence length out of [0, 2^30)", "max_seqlen", double(max_seqlen)};
  if (b.total_q < 0) return {"negative total_q", "total_q", double(b.total_q)};
  if (!(b.softmax_scale > 0.0f) || b.softmax_scale != b.softmax_scale)
    return {"softmax_scale must be positive and finite", "softmax_scale", double(b.softmax_scale)};
  if (b.num_blocks > 0 && (b.q == nullptr || b.k == nullptr || b.v == nullptr || b.cu_seqlens_q == nullptr || b.cu_seqlens_k == nullptr))
    return {"null q, k, v or cu_seqlens pointer", "num_blocks", double(b.num_blocks)};
  for (const void* ptr : {b.q, b.k, b.v})  // cp.async moves 16-byte chunks
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
      return {"q, k and v must be 16-byte aligned", "address", double(reinterpret_cast<std::uintptr_t>(ptr) % 16)};
  return {};
}

}  // namespace detail

//! First broken precondition of a forward launch (no throw); see validate().
[[nodiscard]] inline detail::param_problem check(const attention_forward_params& p) noexcept {
  if (auto problem = detail::check_blocks(p, p.max_seqlen_q))
    return problem;
  if (p.lse != nullptr && p.lse_stride != 0 && p.lse_stride < p.total_q)
    return {"lse_stride smaller than total_q", "lse_stride", double(p.lse_stride)};
  if (reinterpret_cast<std::uintptr_t>(p.o) % 16 != 0)  // the epilogue stores 16-byte chunks
    return {"o must be 16-byte aligned", "address", double(reinterpret_cast<std::uintptr_t>(p.o) % 16)};
  if (reinterpret_cast<std::uintptr_t>(p.o_f32) % 8 != 0)  // and float pairs
    return {"o_f32 must be 8-byte aligned", "address", double(reinterpret_cast<std::uintptr_t>(p.o_f32) % 8)};
  return {};
}

//! First broken precondition of a backward launch (no throw); see validate().
[[nodiscard]] inline detail::param_problem check(const attention_backward_params& p) noexcept {
  if (auto problem = detail::check_blocks(p, p.max_seqlen_k))
    return problem;
  if (p.num_blocks > 0 && (p.dout == nullptr || p.lse == nullptr || p.delta == nullptr || p.dq_accum == nullptr))
    return {"null dout, lse, delta or dq_accum pointer", "num_blocks", double(p.num_blocks)};
  if (p.lse_stride != 0 && p.lse_stride < p.total_q) return {"lse_stride smaller than total_q", "lse_stride", double(p.lse_stride)};
  for (const float* ptr : {p.dq_accum, p.dk_accum, p.dv_accum})  // 8-byte reductions and read-modify-writes
    if (reinterpret_cast<std::uintptr_t>(ptr) % 8 != 0)
      return {"dq_accum, dk_accum and dv_accum must be 8-byte aligned", "address", double(reinterpret_cast<std::uintptr_t>(ptr) % 8)};
  return {};
}

//! First broken precondition of a preprocess launch (no throw); see validate().
[[nodiscard]] inline detail::param_problem check(const attention_preprocess_params& p) noexcept {
  if (p.head_dim <= 0 || p.head_dim % 8 != 0) return {"head_dim must be a positive multiple of 8", "head_dim", double(p.head_dim)};
  if (p.heads <= 0) return {"head count must be positive", "heads", double(p.heads)};
  if (p.rows < 0) return {"negative row count", "rows", double(p.rows)};
  if (p.type != dtype::bf16 && p.type != dtype::fp16) return {"unknown dtype", "dtype", double(static_cast<int>(p.type))};
  if (p.delta_stride != 0 && p.delta_stride < p.rows) return {"delta_stride smaller than rows", "delta_stride", double(p.delta_stride)};
  if (p.rows > 0 && (p.o == nullptr || p.dout == nullptr || p.delta == nullptr))
    return {"null o, dout or delta pointer", "rows", double(p.rows)};
  for (const void* ptr : {p.o, p.dout})  // 16-byte loads
    if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
      return {"o and dout must be 16-byte aligned", "address", double(reinterpret_cast<std::uintptr_t>(ptr) % 16)};
  return {};
}

//! Throws zeppelin::invalid_argument naming the first broken precondition of `p`.
template <class Params>
void validate(const Params& p) {
  if (const auto problem = check(p)) ZEPPELIN_THROW(invalid_argument, problem.message, {{problem.name, problem.value}});
}

//! Kernel launchers for one (dtype, head dim): defined in attention_forward.cuh /
//! attention_backward.cuh, explicitly instantiated in zeppelin::kernels. They assume check(p)
//! passed.
template <dtype T, int HeadDim>
cudaError_t launch_attention_forward(const attention_forward_params& p, cudaStream_t stream);
template <dtype T, int HeadDim>
cudaError_t launch_attention_backward(const attention_backward_params& p, cudaStream_t stream);
template <dtype T>
cudaError_t launch_attention_backward_preprocess(const attention_preprocess_params& p, cudaStream_t stream);

}  // namespace device
ZEPPELIN_NAMESPACE_END
