// zeppelin/route/message.hpp
// What a router reads and writes for one ring round.
//   in : ring_edge {src, dst, bytes}: one ring send of the round (rank src sends `bytes` of
//        KV to rank dst), for every ring group active in the round
//   out: route_message {src, dst, bytes, link, step, edge}: the point-to-point messages that
//        carry them. step says when a message runs: dispatch (0, intra-node, to the send
//        proxies), transfer (1, inter-node, proxy to proxy), combine (2, intra-node, from the
//        receive proxies to the destination) or direct (3, the edge's own path). edge is the
//        index of the ring_edge a message belongs to.
// Host-only (planning).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! One ring send of a round.
struct ring_edge {
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  friend constexpr bool operator==(const ring_edge&, const ring_edge&) = default;
};

//! When a routed message runs (Zeppelin 3.3: dispatch, multi-NIC transfer, combine).
enum class route_step : std::uint8_t {
  dispatch = 0,  //!< source -> send proxy, intra-node
  transfer = 1,  //!< send proxy -> receive proxy, inter-node (one NIC each side)
  combine = 2,   //!< receive proxy -> destination, intra-node
  direct = 3,    //!< the edge unrouted: source -> destination on its own link
};

[[nodiscard]] constexpr std::string_view to_string(route_step s) noexcept {
  switch (s) {
    case route_step::dispatch: return "dispatch";
    case route_step::transfer: return "transfer";
    case route_step::combine: return "combine";
    case route_step::direct: return "direct";
  }
  return "?";
}

//! One point-to-point message of a routed round.
struct route_message {
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  link_class link = link_class::local;
  route_step step = route_step::direct;
  std::int32_t edge = 0;  //!< index of the ring_edge it carries part of
  friend constexpr bool operator==(const route_message&, const route_message&) = default;
};

namespace detail {
//! Throws invalid_argument for an edge with a rank outside the topology or negative bytes.
inline void check_edges(std::span<const ring_edge> edges, const topology& t) {
  for (std::size_t e = 0; e < edges.size(); ++e) {
    const auto& x = edges[e];
    ZEPPELIN_EXPECTS(x.src >= 0 && x.src < t.num_ranks() && x.dst >= 0 && x.dst < t.num_ranks(),
                     "ring edge names a rank outside the topology",
                     {{"edge", double(e)}, {"src", double(x.src)}, {"dst", double(x.dst)}, {"ranks", double(t.num_ranks())}});
    ZEPPELIN_EXPECTS(x.bytes >= 0, "ring edge with negative size", {{"edge", double(e)}, {"bytes", double(x.bytes)}});
  }
}
}  // namespace detail

ZEPPELIN_NAMESPACE_END
