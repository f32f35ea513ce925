// zeppelin/route/direct.hpp
// The baseline router: every ring edge is one message on the source GPU's own path.
//   in : the ring edges of a round, the topology
//   out: one `direct` message per non-empty edge; its link class is the topology's
//        (inter-node edges leave through the source GPU's own NIC). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/route/message.hpp>
#include <zeppelin/route/router.hpp>

#include <cstddef>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! No routing: each edge on its own link.
struct direct_router {
  [[nodiscard]] std::vector<route_message> route(std::span<const ring_edge> edges, const topology& t) const {
    detail::check_edges(edges, t);
    std::vector<route_message> out;
    out.reserve(edges.size());
    for (std::size_t e = 0; e < edges.size(); ++e)
      if (edges[e].bytes > 0)
        out.push_back({edges[e].src, edges[e].dst, edges[e].bytes, t.between(edges[e].src, edges[e].dst),
                       route_step::direct, static_cast<std::int32_t>(e)});
    return out;
  }
  friend constexpr bool operator==(const direct_router&, const direct_router&) = default;
};
static_assert(router<direct_router>);

ZEPPELIN_NAMESPACE_END
