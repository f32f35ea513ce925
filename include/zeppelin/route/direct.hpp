// zeppelin/route/direct.hpp
// The baseline router: every payload is one piece on the source GPU's own path.
//   in : the payloads of a phase, the topology
//   out: one `direct` piece (offset 0, all its bytes) per non-empty payload; inter-node
//        payloads leave through the source GPU's own NIC. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/transfer.hpp>
#include <zeppelin/route/router.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! No routing: each payload on its own link.
struct direct_router {
  [[nodiscard]] std::vector<transfer> route(std::span<const transfer> payloads, const topology& t) const {
    detail::check_payloads(payloads, t);
    std::vector<transfer> out;
    out.reserve(payloads.size());
    for (std::size_t e = 0; e < payloads.size(); ++e)
      if (payloads[e].bytes > 0)
        out.push_back({payloads[e].src, payloads[e].dst, payloads[e].bytes, static_cast<std::int32_t>(e), 0, route_step::direct});
    return out;
  }
  friend constexpr bool operator==(const direct_router&, const direct_router&) = default;
};
static_assert(router<direct_router>);

ZEPPELIN_NAMESPACE_END
