// zeppelin/cuda/executor/row_ops.cuh
// Definitions of fill and add (row_ops.hpp): grid-stride loops, 16-byte vectors when both
// pointers allow them (the fp32 accumulators come from cudaMallocAsync at row offsets that
// are multiples of head_dim * 4 bytes, so the vector path is the common one), a scalar tail.
// Memory-bound: 4 (fill) or 12 (add) bytes per element.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/executor/row_ops.hpp>

#include <cuda_runtime.h>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
namespace detail {

template <class T>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) fill_kernel(T* dst, T value, std::int64_t n) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = value;
}

template <class T>  // T = float: 16-byte vectors
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) fill4_kernel(float4* dst, float value, std::int64_t n4) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n4; i += stride)
    dst[i] = make_float4(value, value, value, value);
}

template <class T>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) add_kernel(T* dst, const T* src, std::int64_t n) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) dst[i] += src[i];
}

template <class T>  // T = float: 16-byte vectors
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) add4_kernel(float4* dst, const float4* src, std::int64_t n4) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 a = dst[i];
    const float4 b = src[i];
    dst[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
  }
}

inline unsigned row_ops_grid(std::int64_t n) {
  constexpr std::int64_t threads = 256;
  const std::int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);  // grid-stride beyond
}

}  // namespace detail

template <class T>
cudaError_t launch_fill(T* dst, T value, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  std::int64_t done = 0;
  if constexpr (sizeof(T) == 4) {
    if (reinterpret_cast<std::uintptr_t>(dst) % 16 == 0 && n >= 4) {
      const std::int64_t n4 = n / 4;
      detail::fill4_kernel<T><<<detail::row_ops_grid(n4), 256, 0, stream>>>(reinterpret_cast<float4*>(dst), static_cast<float>(value), n4);
      done = n4 * 4;
    }
  }
  if (done < n) detail::fill_kernel<T><<<detail::row_ops_grid(n - done), 256, 0, stream>>>(dst + done, value, n - done);
  return cudaGetLastError();
}

template <class T>
cudaError_t launch_add(T* dst, const T* src, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  std::int64_t done = 0;
  if constexpr (sizeof(T) == 4) {
    if (reinterpret_cast<std::uintptr_t>(dst) % 16 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0 && n >= 4) {
      const std::int64_t n4 = n / 4;
      detail::add4_kernel<T><<<detail::row_ops_grid(n4), 256, 0, stream>>>(reinterpret_cast<float4*>(dst),
                                                                           reinterpret_cast<const float4*>(src), n4);
      done = n4 * 4;
    }
  }
  if (done < n) detail::add_kernel<T><<<detail::row_ops_grid(n - done), 256, 0, stream>>>(dst + done, src + done, n - done);
  return cudaGetLastError();
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
