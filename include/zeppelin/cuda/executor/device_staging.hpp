// zeppelin/cuda/executor/device_staging.hpp
// The device memory policy of exchange_pieces (exec/transport.hpp): how a rank of a device
// communicator stages the routed pieces it forwards and copies the bytes it moves to itself.
//   allocate(c, bytes)  stream-ordered device memory on c.stream(), freed on c.stream() when
//                       released (after every group that reads it, in stream order)
//   copy(c, dst, src)   cudaMemcpyAsync device to device on c.stream()
// With it a phase of the execution program runs over device buffers exactly as on the host:
// one communicator group per route stage, enqueued on c.stream(). Producers make c.stream()
// wait for the stream that wrote a send buffer; consumers wait on c.stream() before reading a
// receive buffer (cuda/device_communicator.hpp). nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/transport.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

ZEPPELIN_NAMESPACE_BEGIN

struct device_staging {
  using stage = device::device_memory;
  template <device_communicator C>
  [[nodiscard]] stage allocate(C& c, std::size_t bytes) const {
    return device::device_memory(bytes, c.stream());
  }
  [[nodiscard]] static std::span<std::byte> view(const stage& s) noexcept {
    return std::span<std::byte>(static_cast<std::byte*>(s.get()), s.bytes());
  }
  template <device_communicator C>
  void copy(C& c, std::span<std::byte> dst, std::span<const std::byte> src) const {
    if (!src.empty()) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.size(), cudaMemcpyDeviceToDevice, c.stream()));
  }
};

ZEPPELIN_NAMESPACE_END
