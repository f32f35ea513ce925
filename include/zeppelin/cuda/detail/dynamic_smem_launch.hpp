// zeppelin/cuda/detail/dynamic_smem_launch.hpp
// Launching a kernel that needs more dynamic shared memory than the default 48 KiB: the
// kernel's limit is raised (cudaFuncSetAttribute) once per device, not before every launch.
//   in : the kernel's per-instantiation `raised_devices` (a static of the launching template),
//        the kernel, the bytes it needs, and launch(), which enqueues it (<<<...>>>)
//   out: cudaGetLastError() of the launch, or the error of cudaGetDevice / cudaFuncSetAttribute
//        (nothing is launched then)
// The attribute belongs to the device's context, and each launching template owns the set of
// devices (ordinals 0..63; a higher ordinal raises the limit every time) where it has raised
// it. A context reset (cudaDeviceReset) drops the attribute: a launch that then fails with
// cudaErrorInvalidValue after the raise was skipped raises it again and launches once more (a
// launch refused for its configuration never ran; the retry happens only when no earlier
// error was pending, so the refusal is this launch's own). Thread-safe: two threads may both raise
// the limit the first time, which is harmless. nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <cstddef>

ZEPPELIN_NAMESPACE_BEGIN
namespace device::detail {

//! The devices where one kernel's dynamic shared memory limit has been raised (bit d: device d).
using raised_devices = std::atomic<std::uint64_t>;

template <class Kernel, class Launch>
cudaError_t launch_with_dynamic_smem(raised_devices& raised, Kernel kernel, std::size_t smem_bytes, Launch launch) {
  int dev = 0;
  if (const cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  const std::uint64_t bit = dev >= 0 && dev < 64 ? std::uint64_t{1} << dev : 0;
  const auto raise = [&] {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
    if (e == cudaSuccess && bit != 0) raised.fetch_or(bit, std::memory_order_relaxed);
    return e;
  };
  const bool skipped = bit != 0 && (raised.load(std::memory_order_relaxed) & bit) != 0;
  if (!skipped)
    if (const cudaError_t e = raise(); e != cudaSuccess) return e;
  const cudaError_t earlier = cudaPeekAtLastError();  // an error left by someone else's call
  launch();
  cudaError_t e = cudaGetLastError();
  if (e == cudaErrorInvalidValue && skipped && earlier == cudaSuccess) {  // this launch was refused: a reset dropped the attribute
    if (const cudaError_t r = raise(); r != cudaSuccess) return r;
    launch();
    e = cudaGetLastError();
  }
  return e;
}

}  // namespace device::detail
ZEPPELIN_NAMESPACE_END
