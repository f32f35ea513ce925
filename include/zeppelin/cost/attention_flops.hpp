// zeppelin/cost/attention_flops.hpp
// FLOPs of attention from a count of (query, key) pairs, forward and backward.
//   in:  pairs (from cost/causal_pairs.hpp: causal_pairs / full_pairs), query heads, head dim
//   out: FLOPs (double)
// Conventions (those of FlashAttention's benchmarks, `flops()` in benchmarks/benchmark_flash_attention.py):
//   - 2 FLOPs per multiply-accumulate; only the matmuls count (softmax, masking, scaling
//     and the LSE are element-wise and left out);
//   - forward = S = Q K^T and O = P V: 2 matmuls of pairs x head_dim MACs per head
//     -> 4 * pairs * heads * head_dim;
//   - backward = 5 matmuls (recompute S, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q)
//     -> 2.5 x forward;
//   - `pairs` counts only the unmasked pairs the kernel has to compute: a causal mask
//     halves the work, it is not "full work with half thrown away" (tile padding is
//     modelled separately, in cost/attention_time_model.hpp);
//   - `heads` are QUERY heads: grouped-query attention shares K/V between heads but
//     every query head still does its own matmuls, so kv_heads does not enter.
// nvcc-safe: the scalar forms are constexpr ZEPPELIN_HOST_DEVICE.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

//! Backward-to-forward FLOP ratio of attention (5 matmuls vs 2).
inline constexpr double attention_backward_ratio = 2.5;

//! Forward FLOPs of attention over `pairs` (query, key) pairs: 4 * pairs * heads * head_dim.
ZEPPELIN_HOST_DEVICE constexpr double attention_forward_flops(std::int64_t pairs, int heads, int head_dim) noexcept {
  return 4.0 * static_cast<double>(pairs) * static_cast<double>(heads) * static_cast<double>(head_dim);
}

//! Backward FLOPs of attention over `pairs` pairs: 2.5 x forward (10 * pairs * heads * head_dim).
ZEPPELIN_HOST_DEVICE constexpr double attention_backward_flops(std::int64_t pairs, int heads, int head_dim) noexcept {
  return attention_backward_ratio * attention_forward_flops(pairs, heads, head_dim);
}

//! Forward attention FLOPs of ONE layer of `m` over `pairs` pairs (query heads x head_dim).
inline double attention_forward_flops(std::int64_t pairs, const model_config& m) noexcept {
  return attention_forward_flops(pairs, m.heads, m.head_dim);
}

//! Backward attention FLOPs of ONE layer of `m` over `pairs` pairs.
inline double attention_backward_flops(std::int64_t pairs, const model_config& m) noexcept {
  return attention_backward_flops(pairs, m.heads, m.head_dim);
}

ZEPPELIN_NAMESPACE_END
