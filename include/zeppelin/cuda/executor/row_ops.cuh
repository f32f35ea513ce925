// zeppelin/cuda/executor/row_ops.cuh
// Definitions of fill, add and the head blocks (row_ops.hpp). fill / add: grid-stride loops,
// 16-byte vectors when both pointers allow them (the fp32 accumulators come from the library's
// pool, cuda/memory_pool.hpp, at row offsets that are multiples of head_dim * 4 bytes, so the
// vector path is the common one), a scalar tail. Memory-bound: 4 (fill) or 12 (add) bytes per element.
// Head blocks: one thread per element and step of a grid-stride loop over rows x heads x
// head_elements, element k at row k / (heads x head_elements), head (k mod that) / head_elements,
// e = k mod head_elements; scalar accesses (the blocks are the all-to-all collective's packing
// and unpacking, and LSE rows: a few bytes per element, no reuse).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/detail/mma.cuh>
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

//! The storage of an element_type and its conversions to and from fp32.
template <element_type T>
struct element_traits {  // bf16, fp16
  static constexpr dtype of = T == element_type::bf16 ? dtype::bf16 : dtype::fp16;
  using type = cuda_type_t<of>;
  __device__ static float load(type x) { return to_float<of>(x); }
  __device__ static type store(float x) { return from_float<of>(x); }
};
template <>
struct element_traits<element_type::fp32> {
  using type = float;
  __device__ static float load(float x) { return x; }
  __device__ static float store(float x) { return x; }
};

template <element_type To, element_type From, bool Add>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) move_heads_kernel(const head_block b) {
  using to_t = element_traits<To>;
  using from_t = element_traits<From>;
  const auto* from = static_cast<const typename from_t::type*>(b.from);
  auto* to = static_cast<typename to_t::type*>(b.to);
  const std::int64_t row_elements = std::int64_t{b.heads} * b.head_elements;
  const std::int64_t n = b.rows * row_elements;
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  for (std::int64_t k = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n; k += stride) {
    const std::int64_t row = k / row_elements, in_row = k % row_elements;
    const std::int64_t head = in_row / b.head_elements, e = in_row % b.head_elements;
    const typename from_t::type x = from[row * b.from_row_stride + head * b.from_head_stride + e];
    typename to_t::type& y = to[row * b.to_row_stride + head * b.to_head_stride + e];
    if constexpr (Add) {
      y = to_t::store(to_t::load(y) + from_t::load(x));
    } else if constexpr (To == From) {
      y = x;
    } else {
      y = to_t::store(from_t::load(x));
    }
  }
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

template <element_type To, element_type From, bool Add>
cudaError_t launch_move_heads(const head_block& b, cudaStream_t stream) {
  const std::int64_t n = b.rows * b.heads * b.head_elements;
  if (n <= 0) return cudaSuccess;
  detail::move_heads_kernel<To, From, Add><<<detail::row_ops_grid(n), 256, 0, stream>>>(b);
  return cudaGetLastError();
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
