// zeppelin/cuda/lse_merge.cuh
// Definition of the LSE merge kernel declared in lse_merge.hpp (formulas there).
// One warp per (row, head), grid-stride over the rows * heads pairs; lane i handles columns
// 4i, 4i + 1, ... in 16-byte fp32 vectors (8-byte vectors of a 16-bit partial). Every lane
// reads the two LSE values; lane 0 writes the merged LSE after __syncwarp, so no lane reads
// a half-updated pair. Memory-bound: 4 + 4 (or 2) + 4 bytes per element.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/lse_merge.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
namespace detail {

template <partial_type Part>
__device__ __forceinline__ float4 load_partial4(const void* base, std::int64_t index) {
  if constexpr (Part == partial_type::fp32) {
    return *reinterpret_cast<const float4*>(static_cast<const float*>(base) + index);
  } else if constexpr (Part == partial_type::bf16) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(base) + index);
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const __half*>(base) + index);
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
}

template <partial_type Part>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) lse_merge_kernel(const lse_merge_params p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t pairs = p.rows * p.heads;
  const std::int64_t acc_stride = p.lse_acc_stride != 0 ? p.lse_acc_stride : p.rows;
  const std::int64_t part_stride = p.lse_part_stride != 0 ? p.lse_part_stride : p.rows;
  const std::int64_t warps_total = std::int64_t{gridDim.x} * (blockDim.x / 32);
  for (std::int64_t pair = std::int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32; pair < pairs; pair += warps_total) {
    const std::int64_t row = pair / p.heads;
    const std::int64_t h = pair % p.heads;
    float* lse_acc = p.lse_acc + h * acc_stride + row;
    const float a = *lse_acc;
    const float b = p.lse_part[h * part_stride + row];
    if (b == -INFINITY) continue;  // nothing to add (warp-uniform)
    float wa = 0.0f;
    float wb = 1.0f;
    float merged = b;
    if (a != -INFINITY) {
      const float hi = fmaxf(a, b);
      merged = hi + log1pf(expf(fminf(a, b) - hi));
      wa = expf(a - merged);
      wb = expf(b - merged);
    }
    const std::int64_t base = pair * p.head_dim;
    for (int c = lane * 4; c < p.head_dim; c += 32 * 4) {
      float4* acc = reinterpret_cast<float4*>(p.o_acc + base + c);
      const float4 x = *acc;
      const float4 y = load_partial4<Part>(p.o_part, base + c);
      *acc = a == -INFINITY ? y  // an empty accumulator may hold anything
                            : make_float4(wa * x.x + wb * y.x, wa * x.y + wb * y.y, wa * x.z + wb * y.z, wa * x.w + wb * y.w);
    }
    __syncwarp();
    if (lane == 0) *lse_acc = merged;
  }
}

}  // namespace detail

template <partial_type Part>
cudaError_t launch_lse_merge(const lse_merge_params& p, cudaStream_t stream) {
  const std::int64_t pairs = p.rows * p.heads;
  if (pairs == 0) return cudaSuccess;
  constexpr int threads = 256;
  const std::int64_t blocks = (pairs + threads / 32 - 1) / (threads / 32);
  const unsigned grid = static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));
  detail::lse_merge_kernel<Part><<<grid, threads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
