// bench/gpu/bench_support.hpp
// What the device benches share: the median of timings, and device buffers of random 16-bit
// floats (bf16 or fp16 bit patterns of magnitude 0.5 .. 1 and random sign, never zero, so
// nothing runs faster on zeros than it would on data).
#pragma once

#include <zeppelin/cuda/error.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zeppelin_bench {

//! The median of x (0 when empty; the upper one of an even count).
inline double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.empty() ? 0 : x[x.size() / 2];
}

//! Fills `elems` 16-bit values at device address dst (synchronously) from seed.
inline void fill_random_16bit(void* dst, std::size_t elems, std::uint32_t seed) {
  std::vector<std::uint16_t> h(elems);
  std::uint32_t s = seed * 2654435761u + 1;
  for (auto& e : h) {
    s = s * 1664525u + 1013904223u;
    e = static_cast<std::uint16_t>(0x3800u | (s >> 22));
    if (s & 0x100u) e |= 0x8000u;
  }
  ZEPPELIN_CUDA_CHECK(cudaMemcpy(dst, h.data(), elems * 2, cudaMemcpyHostToDevice));
}

}  // namespace zeppelin_bench
