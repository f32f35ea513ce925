// zeppelin/cuda/memory_pool.hpp
// The stream-ordered memory pool that the library's device memory (device_memory in
// cuda/stream_set.hpp: the engines' arenas and staging) comes from, one per device.
//   library_pool()            the pool of the current device: created on first use, its
//                             release threshold UINT64_MAX (it keeps what it has mapped), in
//                             use until the process ends or destroy_library_pool()
//   trim_library_pool(keep)   returns the current device pool's unused memory to the driver
//                             down to `keep` bytes (cudaMemPoolTrimTo); memory in use stays
//   destroy_library_pool()    destroys the current device's pool (its memory is released once
//                             every allocation from it is freed); the next library_pool()
//                             creates a fresh one. Call it before cudaDeviceReset, which
//                             destroys the pool under the library, and while no other thread
//                             allocates on that device.
// Why a pool of its own: the device's default pool has a release threshold of 0, so every
// stream or device synchronisation gives back what an engine freed at the end of a call, and
// the next call maps it again; raising the default pool's threshold would change every other
// user of cudaMallocAsync in the process. Like PyTorch's caching allocator, the pool holds
// the most the library has used at once; trim_library_pool gives it back.
// Devices 0..63 (a higher ordinal is refused with invalid_argument). Thread-safe. Errors throw
// cuda_error. nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cuda/error.hpp>

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
namespace detail {

inline constexpr int max_pooled_devices = 64;

struct library_pools {
  std::mutex creating;
  std::array<std::atomic<cudaMemPool_t>, max_pooled_devices> of_device{};
};

inline library_pools& pools() {
  static library_pools p;
  return p;
}

//! The current device, checked against max_pooled_devices.
inline int pooled_device() {
  int dev = 0;
  ZEPPELIN_CUDA_CHECK(cudaGetDevice(&dev));
  ZEPPELIN_EXPECTS(dev >= 0 && dev < max_pooled_devices, "the library's memory pools cover CUDA devices 0..63",
                   {{"device", double(dev)}});
  return dev;
}

}  // namespace detail

//! The library's pool on the current device (see the file comment).
[[nodiscard]] inline cudaMemPool_t library_pool() {
  const int dev = detail::pooled_device();
  auto& slot = detail::pools().of_device[static_cast<std::size_t>(dev)];
  if (cudaMemPool_t pool = slot.load(std::memory_order_acquire)) return pool;
  const std::lock_guard lock(detail::pools().creating);
  if (cudaMemPool_t pool = slot.load(std::memory_order_relaxed)) return pool;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool = nullptr;
  ZEPPELIN_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  std::uint64_t keep_all = std::numeric_limits<std::uint64_t>::max();
  if (const cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all); e != cudaSuccess) {
    (void)cudaMemPoolDestroy(pool);
    ZEPPELIN_CUDA_CHECK(e);
  }
  slot.store(pool, std::memory_order_release);
  return pool;
}

//! Gives the current device pool's unused memory back to the driver, down to `keep` bytes.
inline void trim_library_pool(std::size_t keep = 0) { ZEPPELIN_CUDA_CHECK(cudaMemPoolTrimTo(library_pool(), keep)); }

//! Destroys the current device's pool (see the file comment); no-op when there is none.
inline void destroy_library_pool() {
  const int dev = detail::pooled_device();
  const std::lock_guard lock(detail::pools().creating);
  if (cudaMemPool_t pool = detail::pools().of_device[static_cast<std::size_t>(dev)].exchange(nullptr, std::memory_order_acq_rel))
    ZEPPELIN_CUDA_CHECK(cudaMemPoolDestroy(pool));
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
