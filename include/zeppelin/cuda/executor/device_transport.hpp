// zeppelin/cuda/executor/device_transport.hpp
// Transport policies of the CUDA executors: one communication phase (a ring round of every
// group of a queue, a dK/dV return, a remap) as in exec/transport.hpp - the same transfer list
// {src, dst, bytes} on every rank, send[i] / recv[i] the payloads of this rank - but over
// DEVICE buffers and a device_communicator, enqueued on c.stream():
//   device_direct_transport      every transfer one send/receive, the phase ONE group; a
//                                self-transfer is a cudaMemcpyAsync on c.stream()
//   device_routed_transport<R>   the phase routed by a route/ router (proxy_router: dispatch to
//                                send proxies, transfer over every NIC, combine) and run by
//                                execute_routed_device: one group per route step, pieces staged
//                                at intermediate ranks in stream-ordered device memory
// Producers make c.stream() wait for the stream that wrote the send buffers; consumers wait
// on c.stream() before reading receive buffers (cuda/device_communicator.hpp).
// nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/routed_transport.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/route/router.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A transport policy usable by the CUDA executors with device communicator C.
template <class Tp, class C>
concept device_transport_for = device_communicator<C> && transport_for<Tp, C>;

namespace detail {
//! The device memory policy of the transports (exec/transport.hpp's detail::host_memory on
//! the device): copies are cudaMemcpyAsync on c.stream(), pieces are staged in device memory
//! allocated and freed on c.stream() (freed after every group that reads them, in stream order).
struct device_memory_policy {
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
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.size(), cudaMemcpyDeviceToDevice, c.stream()));
  }
};
}  // namespace detail

//! Every transfer as one device send/receive, the phase in one group.
using device_direct_transport = basic_direct_transport<detail::device_memory_policy>;

//! execute_routed (exec/transport.hpp) over device buffers: for every route step (ascending),
//! one group of this rank's messages of that step in list order; pieces that only pass through
//! this rank are staged in device memory allocated and freed on c.stream(). Throws
//! invalid_argument for a message outside its transfer or a piece forwarded before it arrived.
template <device_communicator C>
void execute_routed_device(C& c, std::span<const transfer> all, std::span<const routed_message> messages,
                           std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv,
                           std::string_view step) {
  detail::exchange_routed(c, all, messages, send, recv, step, detail::device_memory_policy{});
}

//! A device transport that routes each phase with `Router` over `topo` (exec/routed_transport.hpp
//! computes the hops) and executes them over device buffers.
template <router Router = proxy_router>
using device_routed_transport = basic_routed_transport<Router, detail::device_memory_policy>;

ZEPPELIN_NAMESPACE_END
