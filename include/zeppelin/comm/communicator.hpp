// zeppelin/comm/communicator.hpp
// The communicator concept every executor is written against: point-to-point sends and
// receives posted in groups with NCCL's semantics, over ONE communicator of all ranks (ring
// groups are peer lists over it; nothing is created per step).
//   rank(), size()      this rank and the number of ranks (node-major, as core/topology.hpp)
//   node_of(r)          node of rank r
//   group_start()       opens a group (groups nest; only the outermost group_end acts)
//   send(bytes, peer)   posts a send of `bytes` to `peer` (self sends are allowed)
//   recv(bytes, peer)   posts a receive of exactly bytes.size() bytes from `peer`
//   group_end(step)     completes the group as a whole; `step` labels it in errors
// Matching: the n-th send from a to b matches the n-th receive b posts from a (per ordered
// pair, in posting order), as ncclSend/ncclRecv do. A group never deadlocks on the order of
// its operations (post a ring round's send and receive in one group; NCCL #479 / #783).
// Buffers must stay valid and unchanged until group_end returns (host communicators) or
// until the work group_end enqueued has completed (device communicators). An operation
// posted outside a group is a group of one, labelled "ungrouped".
// Models: host_loopback_comm (comm/host_loopback.hpp); the NCCL and device-loopback
// communicators model the same concept. nvcc-safe (no range-v3).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

ZEPPELIN_NAMESPACE_BEGIN

template <class C>
concept communicator = requires(C& c, const C& cc, rank_index peer, std::span<const std::byte> out,
                                std::span<std::byte> in, std::string_view step) {
  { cc.rank() } -> std::convertible_to<rank_index>;
  { cc.size() } -> std::convertible_to<rank_index>;
  { cc.node_of(peer) } -> std::convertible_to<int>;
  c.group_start();
  c.send(out, peer);
  c.recv(in, peer);
  c.group_end(step);
};

//! Posts a send of the elements of `data` (trivially copyable) to `peer`.
template <communicator C, class T>
  requires std::is_trivially_copyable_v<T>
void send_elements(C& c, std::span<const T> data, rank_index peer) {
  c.send(std::as_bytes(data), peer);
}

//! Posts a receive of exactly data.size() elements from `peer` into `data`.
template <communicator C, class T>
  requires std::is_trivially_copyable_v<T>
void recv_elements(C& c, std::span<T> data, rank_index peer) {
  c.recv(std::as_writable_bytes(data), peer);
}

ZEPPELIN_NAMESPACE_END
