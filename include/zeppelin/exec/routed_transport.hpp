// zeppelin/exec/routed_transport.hpp
// The router executor: a transport policy that routes every communication phase with a
// route/ router (route/router.hpp: direct_router, proxy_router) and runs the hops.
//   in : the phase's transfers (exec/transport.hpp), a router and the topology
//   out: ring_edge{src, dst, bytes} per transfer -> router.route(edges, topology) ->
//        route_message{src, dst, bytes, link, step, edge} -> to_routed_messages() gives each
//        piece its byte offset -> execute_routed(): dispatch, transfer and combine each as one
//        group (direct messages run with the dispatch step), pieces staged at the proxies.
// Piece offsets: route/proxy.hpp cuts an edge into x pieces, each with exactly one transfer
// message (send proxy k -> receive proxy k, distinct ranks per k); pieces take consecutive
// byte ranges in the order of their transfer messages; a dispatch message belongs to the
// piece whose send proxy it reaches, a combine message to the piece whose receive proxy it
// leaves. Host-only (includes route/).
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/route/message.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/route/router.hpp>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Byte offsets for the messages of a route (see the file comment). Throws invalid_argument
//! when a dispatch or combine message matches no transfer piece, or an edge's direct message
//! and pieces do not cover its bytes.
[[nodiscard]] inline std::vector<routed_message> to_routed_messages(std::span<const ring_edge> edges,
                                                                    std::span<const route_message> route) {
  std::vector<routed_message> out;
  out.reserve(route.size());
  std::vector<std::int64_t> next(edges.size(), 0);
  struct piece {
    std::int32_t edge;
    rank_index send_proxy, recv_proxy;
    std::int64_t offset, bytes;
  };
  std::vector<piece> pieces;
  for (const route_message& m : route) {
    ZEPPELIN_EXPECTS(m.edge >= 0 && static_cast<std::size_t>(m.edge) < edges.size(), "route: a message names no edge",
                     {{"edge", double(m.edge)}, {"edges", double(edges.size())}});
    auto& at = next[static_cast<std::size_t>(m.edge)];
    if (m.step == route_step::transfer) pieces.push_back({m.edge, m.src, m.dst, at, m.bytes}), at += m.bytes;
    if (m.step == route_step::direct) at += m.bytes;
  }
  for (std::size_t e = 0; e < edges.size(); ++e)
    ZEPPELIN_EXPECTS(next[e] == edges[e].bytes, "route: the messages of an edge do not cover its bytes",
                     {{"edge", double(e)}, {"bytes", double(edges[e].bytes)}, {"covered", double(next[e])}});
  const auto find = [&](std::int32_t edge, rank_index proxy, bool send_side) -> const piece& {
    for (const piece& p : pieces)
      if (p.edge == edge && (send_side ? p.send_proxy : p.recv_proxy) == proxy) return p;
    ZEPPELIN_THROW(invalid_argument, "route: a dispatch or combine message matches no proxy transfer",
                   {{"edge", double(edge)}, {"proxy", double(proxy)}});
  };
  for (const route_message& m : route) {
    switch (m.step) {
      case route_step::direct: out.push_back({m.edge, 0, m.bytes, m.src, m.dst, 0}); break;
      case route_step::dispatch: {
        const piece& p = find(m.edge, m.dst, true);
        out.push_back({m.edge, p.offset, m.bytes, m.src, m.dst, 0});
        break;
      }
      case route_step::transfer: {
        const piece& p = find(m.edge, m.src, true);
        out.push_back({m.edge, p.offset, m.bytes, m.src, m.dst, 1});
        break;
      }
      case route_step::combine: {
        const piece& p = find(m.edge, m.src, false);
        out.push_back({m.edge, p.offset, m.bytes, m.src, m.dst, 2});
        break;
      }
    }
  }
  return out;
}

//! The hops of one phase: its transfers as ring edges, routed by `r` over `topo`, with byte
//! offsets (to_routed_messages). Used by every routed transport (host and device).
template <router Router>
[[nodiscard]] std::vector<routed_message> route_phase(const Router& r, const topology& topo, std::span<const transfer> all) {
  std::vector<ring_edge> edges;
  edges.reserve(all.size());
  for (const transfer& t : all) edges.push_back({t.src, t.dst, t.bytes});
  const std::vector<route_message> route = r.route(std::span<const ring_edge>(edges), topo);
  return to_routed_messages(edges, route);
}

//! A transport that routes each phase with `Router` over `topo` and executes the hops
//! (detail::exchange_routed), pieces staged in Memory (host: routed_transport; device:
//! device_routed_transport).
template <router Router, class Memory>
struct basic_routed_transport {
  Router router_policy{};
  topology topo{topology_config{}};

  template <communicator C>
    requires transport_memory<Memory, C>
  void exchange(C& c, std::span<const transfer> all, std::span<const std::span<const std::byte>> send,
                std::span<const std::span<std::byte>> recv, std::string_view step) const {
    const std::vector<routed_message> hops = route_phase(router_policy, topo, all);
    detail::exchange_routed(c, all, std::span<const routed_message>(hops), send, recv, step, Memory{});
  }
  friend bool operator==(const basic_routed_transport&, const basic_routed_transport&) = default;
};

//! A transport that routes each phase with `Router` over `topo` and executes the hops.
template <router Router = proxy_router>
using routed_transport = basic_routed_transport<Router, detail::host_memory>;

ZEPPELIN_NAMESPACE_END
