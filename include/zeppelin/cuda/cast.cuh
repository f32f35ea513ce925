// zeppelin/cuda/cast.cuh
// Definition of launch_cast_from_f32 (cast.hpp): grid-stride loop; when src is 16-byte and dst
// 8-byte aligned, each step converts 4 elements with one float4 load and one 8-byte store.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/cast.hpp>
#include <zeppelin/cuda/detail/mma.cuh>

#include <cuda_runtime.h>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
namespace detail {

template <dtype T>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) cast_from_f32_kernel(cuda_type_t<T>* dst, const float* src, std::int64_t n, bool vector) {
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (vector) {
    for (; i * 4 + 3 < n; i += stride) {
      const float4 x = reinterpret_cast<const float4*>(src)[i];
      uint2 packed;
      packed.x = pack2<T>(x.x, x.y);
      packed.y = pack2<T>(x.z, x.w);
      reinterpret_cast<uint2*>(dst)[i] = packed;
    }
    // The tail (n % 4 elements) goes to the first threads.
    const std::int64_t tail = (n / 4) * 4 + std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
    if (tail < n) dst[tail] = from_float<T>(src[tail]);
  } else {
    for (; i < n; i += stride) dst[i] = from_float<T>(src[i]);
  }
}

}  // namespace detail

template <dtype T>
cudaError_t launch_cast_from_f32(void* dst, const float* src, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const bool vector = reinterpret_cast<std::uintptr_t>(src) % 16 == 0 && reinterpret_cast<std::uintptr_t>(dst) % 8 == 0;
  constexpr int threads = 256;
  const std::int64_t work = vector ? (n + 3) / 4 : n;
  const std::int64_t blocks = (work + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
  detail::cast_from_f32_kernel<T><<<grid, threads, 0, stream>>>(static_cast<detail::cuda_type_t<T>*>(dst), src, n, vector);
  return cudaGetLastError();
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
