// zeppelin/route/router.hpp
// The router concept: a small regular value type whose route() splits the ring edges of one
// round into messages (route/message.hpp). Models: direct_router (route/direct.hpp),
// proxy_router (route/proxy.hpp). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/route/message.hpp>

#include <concepts>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! route(edges, t) validates its input (invalid_argument), returns messages that deliver
//! every edge's bytes from its src to its dst (zero-byte edges give no message), ordered by
//! edge then step, and is deterministic.
template <class Router>
concept router = std::regular<Router> && requires(const Router& r, std::span<const ring_edge> edges, const topology& t) {
  { r.route(edges, t) } -> std::same_as<std::vector<route_message>>;
};

ZEPPELIN_NAMESPACE_END
