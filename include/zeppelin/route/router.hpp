// zeppelin/route/router.hpp
// The router concept: a small regular value type whose route() cuts the payloads of one
// communication phase into the pieces that carry them (core/transfer.hpp).
//   in : payloads[i] = {src, dst, bytes} (whole transfers), the topology
//   out: pieces, each a transfer with payload = i, its byte offset inside payload i and the
//        route step it runs in; for every payload the pieces with the same offset form a
//        path src -> ... -> dst through ascending stages (stage_of), and the ranges of those
//        paths tile [0, bytes) exactly. Zero-byte payloads give no piece. Pieces are ordered
//        by payload, then step, then offset. Deterministic.
// Models: direct_router (route/direct.hpp), proxy_router (route/proxy.hpp). Host code,
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/transfer.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! route(payloads, t) validates its input (invalid_argument) and returns the pieces that
//! deliver every payload (see the file comment).
template <class Router>
concept router = std::regular<Router> && requires(const Router& r, std::span<const transfer> payloads, const topology& t) {
  { r.route(payloads, t) } -> std::same_as<std::vector<transfer>>;
};

namespace detail {
//! Throws invalid_argument for a payload with a rank outside the topology or negative bytes.
inline void check_payloads(std::span<const transfer> payloads, const topology& t) {
  for (std::size_t e = 0; e < payloads.size(); ++e) {
    const auto& x = payloads[e];
    ZEPPELIN_EXPECTS(x.src >= 0 && x.src < t.num_ranks() && x.dst >= 0 && x.dst < t.num_ranks(),
                     "route: a transfer names a rank outside the topology",
                     {{"transfer", double(e)}, {"src", double(x.src)}, {"dst", double(x.dst)}, {"ranks", double(t.num_ranks())}});
    ZEPPELIN_EXPECTS(x.bytes >= 0, "route: a transfer with negative size", {{"transfer", double(e)}, {"bytes", double(x.bytes)}});
  }
}
}  // namespace detail

ZEPPELIN_NAMESPACE_END
