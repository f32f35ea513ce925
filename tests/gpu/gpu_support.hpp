// tests/gpu/gpu_support.hpp
// Helpers of the [gpu] tests: device detection (tests report skipped when there is no
// usable device), an RAII device buffer, 16-bit conversions on the host, error norms.
#pragma once

#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/cuda/error.hpp>

#include <catch2/catch.hpp>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zeppelin_test {

//! True when a CUDA device can be used; prints the reason once otherwise.
inline bool gpu_available() {
  static const bool available = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      (void)cudaGetLastError();
      return false;
    }
    return true;
  }();
  return available;
}

}  // namespace zeppelin_test

//! First statement of every [gpu] test case: without a device it prints the skip line and
//! returns. Catch2 v2 has no skip, so CTest turns the line into "skipped"
//! (SKIP_REGULAR_EXPRESSION in tests/gpu/CMakeLists.txt matches ZEPPELIN_GPU_SKIP_LINE).
#define ZEPPELIN_GPU_SKIP_LINE "ZEPPELIN_SKIPPED: no CUDA device"
#define ZEPPELIN_REQUIRE_GPU()                                                                         \
  do {                                                                                                 \
    if (!::zeppelin_test::gpu_available()) {                                                           \
      WARN(ZEPPELIN_GPU_SKIP_LINE " (cudaGetDeviceCount failed or returned 0)");                       \
      return;                                                                                          \
    }                                                                                                  \
  } while (false)

namespace zeppelin_test {

//! Owning device allocation of `n` elements of T (cudaMalloc; freed on destruction).
template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t n) : size_(n) {
    if (n > 0) ZEPPELIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(T)));
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) { upload(host); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  device_buffer(device_buffer&& other) noexcept : data_(other.data_), size_(other.size_) {
    other.data_ = nullptr;
    other.size_ = 0;
  }
  ~device_buffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
  }
  T* get() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  void upload(const std::vector<T>& host) {
    REQUIRE(host.size() == size_);
    if (size_ > 0) ZEPPELIN_CUDA_CHECK(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(size_);
    if (size_ > 0) ZEPPELIN_CUDA_CHECK(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  //! Fills every byte with `byte` (0xff poisons fp32 / 16-bit floats with NaN).
  void fill_bytes(int byte) {
    if (size_ > 0) ZEPPELIN_CUDA_CHECK(cudaMemset(data_, byte, size_ * sizeof(T)));
  }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

//! 16-bit storage of a dtype on the host (raw bits), with round-to-nearest conversions.
inline std::uint16_t to_bits(float x, zeppelin::device::dtype t) {
  if (t == zeppelin::device::dtype::bf16) return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x;
  return static_cast<__half_raw>(__float2half_rn(x)).x;
}
inline float from_bits(std::uint16_t bits, zeppelin::device::dtype t) {
  if (t == zeppelin::device::dtype::bf16) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
  __half_raw raw;
  raw.x = bits;
  return __half2float(__half(raw));
}

//! ||a - b|| / ||b|| over entries where b is finite (both must agree on non-finite entries).
template <class A, class B>
double relative_l2(const std::vector<A>& a, const std::vector<B>& b) {
  double num = 0.0;
  double den = 0.0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double x = static_cast<double>(a[i]);
    const double y = static_cast<double>(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace zeppelin_test
