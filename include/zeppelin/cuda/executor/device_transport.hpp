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

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A transport policy usable by the CUDA executors with device communicator C.
template <class Tp, class C>
concept device_transport_for = device_communicator<C> && transport_for<Tp, C>;

//! Every transfer as one device send/receive, the phase in one group.
struct device_direct_transport {
  template <device_communicator C>
  void exchange(C& c, std::span<const transfer> all, std::span<const std::span<const std::byte>> send,
                std::span<const std::span<std::byte>> recv, std::string_view step) const {
    const rank_index me = c.rank();
    detail::check_phase(all, send.size(), recv.size(), me, send, recv);
    c.group_start();
    for (std::size_t i = 0; i < all.size(); ++i) {
      const auto& t = all[i];
      if (t.bytes == 0) continue;
      if (t.src == me && t.dst == me) {
        ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(recv[i].data(), send[i].data(), send[i].size(), cudaMemcpyDeviceToDevice, c.stream()));
        continue;
      }
      if (t.src == me) c.send(send[i], t.dst);
      if (t.dst == me) c.recv(recv[i], t.src);
    }
    c.group_end(step);
  }
  friend constexpr bool operator==(const device_direct_transport&, const device_direct_transport&) = default;
};

//! execute_routed (exec/transport.hpp) over device buffers: for every route step (ascending),
//! one group of this rank's messages of that step in list order; pieces that only pass through
//! this rank are staged in device memory allocated and freed on c.stream(). Throws
//! invalid_argument for a message outside its transfer or a piece forwarded before it arrived.
template <device_communicator C>
void execute_routed_device(C& c, std::span<const transfer> all, std::span<const routed_message> messages,
                           std::span<const std::span<const std::byte>> send, std::span<const std::span<std::byte>> recv,
                           std::string_view step) {
  const rank_index me = c.rank();
  const cudaStream_t stream = c.stream();
  detail::check_phase(all, send.size(), recv.size(), me, send, recv);
  std::vector<std::int32_t> steps;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    ZEPPELIN_EXPECTS(m.transfer >= 0 && static_cast<std::size_t>(m.transfer) < all.size() && m.offset >= 0 && m.bytes >= 0 &&
                         m.offset + m.bytes <= all[static_cast<std::size_t>(m.transfer)].bytes,
                     "routed transport: a message leaves its transfer",
                     {{"message", double(i)}, {"transfer", double(m.transfer)}, {"offset", double(m.offset)},
                      {"bytes", double(m.bytes)}});
    steps.push_back(m.step);
  }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  // pieces staged on this rank: (transfer, offset) -> device bytes (freed on `stream` at return,
  // after every group that reads them in stream order)
  std::map<std::pair<std::int32_t, std::int64_t>, device::device_memory> stage;
  const auto bytes_of = [](const device::device_memory& d) {
    return std::span<std::byte>(static_cast<std::byte*>(d.get()), d.bytes());
  };
  for (const std::int32_t s : steps) {
    std::vector<std::pair<std::pair<std::int32_t, std::int64_t>, device::device_memory>> incoming;
    for (const auto& m : messages)
      if (m.step == s && m.dst == me && m.src != me && m.bytes > 0 && all[static_cast<std::size_t>(m.transfer)].dst != me)
        incoming.emplace_back(std::pair{m.transfer, m.offset}, device::device_memory(static_cast<std::size_t>(m.bytes), stream));
    std::size_t next_in = 0;
    const auto source_of = [&](const routed_message& m) -> std::span<const std::byte> {
      const auto& t = all[static_cast<std::size_t>(m.transfer)];
      if (t.src == me)
        return send[static_cast<std::size_t>(m.transfer)].subspan(static_cast<std::size_t>(m.offset), static_cast<std::size_t>(m.bytes));
      const auto it = stage.find({m.transfer, m.offset});
      ZEPPELIN_EXPECTS(it != stage.end() && static_cast<std::int64_t>(it->second.bytes()) == m.bytes,
                       "routed transport: a rank forwards a piece it does not hold",
                       {{"rank", double(me)}, {"transfer", double(m.transfer)}, {"offset", double(m.offset)}, {"step", double(s)}});
      return bytes_of(it->second);
    };
    c.group_start();
    for (const auto& m : messages) {
      if (m.step != s || m.bytes == 0) continue;
      const auto& t = all[static_cast<std::size_t>(m.transfer)];
      if (m.src == me && m.dst == me) {  // a hop to oneself: move the piece along
        if (t.dst == me && t.src != me && !stage.contains({m.transfer, m.offset})) continue;  // already delivered
        const auto from = source_of(m);
        if (t.dst == me) {
          ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(recv[static_cast<std::size_t>(m.transfer)].data() + m.offset, from.data(),
                                              from.size(), cudaMemcpyDeviceToDevice, stream));
        } else {
          device::device_memory copy(from.size(), stream);
          ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(copy.get(), from.data(), from.size(), cudaMemcpyDeviceToDevice, stream));
          stage[{m.transfer, m.offset}] = std::move(copy);
        }
        continue;
      }
      if (m.src == me) c.send(source_of(m), m.dst);
      if (m.dst == me) {
        if (t.dst == me)
          c.recv(recv[static_cast<std::size_t>(m.transfer)].subspan(static_cast<std::size_t>(m.offset), static_cast<std::size_t>(m.bytes)),
                 m.src);
        else
          c.recv(bytes_of(incoming[next_in++].second), m.src);
      }
    }
    c.group_end(std::string(step) + " (route step " + std::to_string(s) + ")");
    for (auto& [key, bytes] : incoming) stage[key] = std::move(bytes);
  }
}

//! A device transport that routes each phase with `Router` over `topo` (exec/routed_transport.hpp
//! computes the hops) and executes them with execute_routed_device.
template <router Router = proxy_router>
struct device_routed_transport {
  Router router_policy{};
  topology topo{topology_config{}};

  template <device_communicator C>
  void exchange(C& c, std::span<const transfer> all, std::span<const std::span<const std::byte>> send,
                std::span<const std::span<std::byte>> recv, std::string_view step) const {
    std::vector<ring_edge> edges;
    edges.reserve(all.size());
    for (const transfer& t : all) edges.push_back({t.src, t.dst, t.bytes});
    const std::vector<route_message> route = router_policy.route(std::span<const ring_edge>(edges), topo);
    const std::vector<routed_message> hops = to_routed_messages(edges, route);
    execute_routed_device(c, all, std::span<const routed_message>(hops), send, recv, step);
  }
  friend bool operator==(const device_routed_transport&, const device_routed_transport&) = default;
};

ZEPPELIN_NAMESPACE_END
