// zeppelin/cuda/detail/block_info.cuh
// One attention block of a CSR launch, read on the device: row ranges in Q and K/V, the mask,
// and delta = q_offset - k_offset (query i sees key j under a causal mask iff j <= i + delta),
// clamped to [-2^30, 2^30] so that i + delta fits in 32 bits for lengths below 2^30.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/schedule/block_mask.hpp>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device::detail {

struct block_info {
  std::int32_t q_begin;
  std::int32_t q_len;
  std::int32_t k_begin;
  std::int32_t k_len;
  std::int32_t delta;
  block_mask mask;
};

#if defined(__CUDACC__)
__device__ __forceinline__ block_info load_block_info(const std::int32_t* cu_q, const std::int32_t* cu_k,
                                                      const std::int64_t* q_offset, const std::int64_t* k_offset,
                                                      const block_mask* masks, block_mask mask, int b) {
  block_info info;
  info.q_begin = cu_q[b];
  info.q_len = cu_q[b + 1] - info.q_begin;
  info.k_begin = cu_k[b];
  info.k_len = cu_k[b + 1] - info.k_begin;
  const std::int64_t limit = std::int64_t{1} << 30;
  std::int64_t d = (q_offset != nullptr ? q_offset[b] : 0) - (k_offset != nullptr ? k_offset[b] : 0);
  d = d < -limit ? -limit : (d > limit ? limit : d);
  info.delta = static_cast<std::int32_t>(d);
  info.mask = masks != nullptr ? masks[b] : mask;
  if (info.q_len <= 0 || info.k_len <= 0) info.mask = block_mask::none;
  return info;
}
#endif

}  // namespace device::detail
ZEPPELIN_NAMESPACE_END
