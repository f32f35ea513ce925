// zeppelin/cuda/token_copy.cuh
// Definitions of the token-run copies declared in token_copy.hpp.
//   cub_batched: transform iterators turn run i into (src + run.src * row_bytes,
//                dst + run.dst * row_bytes, run.length * row_bytes) for cub::DeviceMemcpy::Batched.
//   vectorized:  grid (num_runs, slices); CTA (r, s) copies tokens [s * tpc, (s + 1) * tpc) of
//                run r, tpc = max(1, 32 KB / row_bytes) raised so that slices <= 65535; each
//                thread keeps 4 independent 16-byte loads in flight before storing.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/token_copy.hpp>

#include <cub/device/device_memcpy.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
namespace detail {

struct run_source {
  const token_run* runs;
  const char* base;
  std::size_t row_bytes;
  __host__ __device__ const char* operator()(std::int64_t i) const {
    return base + static_cast<std::size_t>(runs[i].src) * row_bytes;
  }
};
struct run_destination {
  const token_run* runs;
  char* base;
  std::size_t row_bytes;
  __host__ __device__ char* operator()(std::int64_t i) const { return base + static_cast<std::size_t>(runs[i].dst) * row_bytes; }
};
struct run_bytes {
  const token_run* runs;
  std::size_t row_bytes;
  __host__ __device__ std::size_t operator()(std::int64_t i) const {
    return static_cast<std::size_t>(runs[i].length) * row_bytes;
  }
};

template <class Word>
__device__ __forceinline__ void copy_words(Word* dst, const Word* src, std::int64_t n) {
  constexpr int in_flight = 4;
  const std::int64_t step = blockDim.x;
  std::int64_t i = threadIdx.x;
  for (; i + (in_flight - 1) * step < n; i += in_flight * step) {
    Word w[in_flight];
#pragma unroll
    for (int k = 0; k < in_flight; ++k) w[k] = src[i + k * step];
#pragma unroll
    for (int k = 0; k < in_flight; ++k) dst[i + k * step] = w[k];
  }
  for (; i < n; i += step) dst[i] = src[i];
}

__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) copy_token_runs_kernel(const token_run* runs, char* dst, const char* src,
                                                               std::size_t row_bytes, std::int64_t tokens_per_cta,
                                                               int word_bytes) {
  const token_run run = runs[blockIdx.x];
  const std::int64_t first = std::int64_t{blockIdx.y} * tokens_per_cta;
  if (first >= run.length) return;
  const std::int64_t tokens = run.length - first < tokens_per_cta ? run.length - first : tokens_per_cta;
  const std::size_t bytes = static_cast<std::size_t>(tokens) * row_bytes;
  char* d = dst + static_cast<std::size_t>(run.dst + first) * row_bytes;
  const char* s = src + static_cast<std::size_t>(run.src + first) * row_bytes;
  if (word_bytes == 16) {
    copy_words(reinterpret_cast<uint4*>(d), reinterpret_cast<const uint4*>(s), static_cast<std::int64_t>(bytes / 16));
  } else if (word_bytes == 4) {
    copy_words(reinterpret_cast<std::uint32_t*>(d), reinterpret_cast<const std::uint32_t*>(s), static_cast<std::int64_t>(bytes / 4));
  } else {
    copy_words(d, s, static_cast<std::int64_t>(bytes));
  }
}

}  // namespace detail

template <copy_algorithm A>
cudaError_t launch_copy_token_runs(const token_copy_params& p, std::size_t* temp_query, cudaStream_t stream) {
  if constexpr (A == copy_algorithm::cub_batched) {
    const thrust::counting_iterator<std::int64_t> index(0);
    const auto sources = thrust::make_transform_iterator(index, detail::run_source{p.runs, static_cast<const char*>(p.src), p.row_bytes});
    const auto destinations = thrust::make_transform_iterator(index, detail::run_destination{p.runs, static_cast<char*>(p.dst), p.row_bytes});
    const auto sizes = thrust::make_transform_iterator(index, detail::run_bytes{p.runs, p.row_bytes});
    if (temp_query != nullptr) {
      *temp_query = 0;
      return cub::DeviceMemcpy::Batched(nullptr, *temp_query, sources, destinations, sizes, p.num_runs, stream);
    }
    if (p.num_runs == 0) return cudaSuccess;
    std::size_t temp_bytes = p.temp_bytes;
    return cub::DeviceMemcpy::Batched(p.temp, temp_bytes, sources, destinations, sizes, p.num_runs, stream);
  } else {
    if (temp_query != nullptr) {
      *temp_query = 0;
      return cudaSuccess;
    }
    if (p.num_runs == 0 || p.longest_run <= 0) return cudaSuccess;
    constexpr std::size_t bytes_per_cta = 32 * 1024;
    std::int64_t tokens_per_cta = static_cast<std::int64_t>(bytes_per_cta / p.row_bytes);
    if (tokens_per_cta < 1) tokens_per_cta = 1;
    constexpr std::int64_t max_slices = 65535;
    if ((p.longest_run + tokens_per_cta - 1) / tokens_per_cta > max_slices) tokens_per_cta = (p.longest_run + max_slices - 1) / max_slices;
    const std::int64_t slices = (p.longest_run + tokens_per_cta - 1) / tokens_per_cta;
    if (p.num_runs > 0x7fffffff) return cudaErrorInvalidValue;
    const auto aligned = [&](std::size_t n) {
      return p.row_bytes % n == 0 && reinterpret_cast<std::uintptr_t>(p.src) % n == 0 && reinterpret_cast<std::uintptr_t>(p.dst) % n == 0;
    };
    const int word_bytes = aligned(16) ? 16 : aligned(4) ? 4 : 1;
    const dim3 grid(static_cast<unsigned>(p.num_runs), static_cast<unsigned>(slices));
    detail::copy_token_runs_kernel<<<grid, 256, 0, stream>>>(p.runs, static_cast<char*>(p.dst), static_cast<const char*>(p.src),
                                                             p.row_bytes, tokens_per_cta, word_bytes);
    return cudaGetLastError();
  }
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
