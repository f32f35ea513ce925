// zeppelin/sim/link_sharing.hpp
// How a simulated step's transfers share the links: a policy that makes the task engine.
//   shared_links:    event_engine (sim/event_engine.hpp): every port shared max-min fairly
//                    among the flows in flight, recomputed at every start and end; accurate
//                    where transfers contend;
//   dedicated_links: dedicated_link_engine (sim/dedicated_link_engine.hpp): every transfer
//                    alone on its link, timed in one pass; exact when no two transfers
//                    overlap on a port, and an order of magnitude faster (a planner's inner
//                    loop).
//   in : topology, link model       out: an engine with compute / flow / join / run
// Both engines take the same calls, so a simulator builds its tasks once for either.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/sim/dedicated_link_engine.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <concepts>
#include <span>

ZEPPELIN_NAMESPACE_BEGIN

//! What a step simulator needs from a task engine.
template <class E>
concept task_engine = requires(E& e, rank_index r, double x, task_tag tag, std::span<const task_id> deps) {
  { e.compute(r, x, tag, std::int64_t{0}, deps) } -> std::same_as<task_id>;
  { e.flow(r, r, x, tag, deps) } -> std::same_as<task_id>;
  { e.join(deps) } -> std::same_as<task_id>;
  { e.run() } -> std::same_as<engine_run>;
};

template <class L>
concept link_sharing = std::regular<L> && requires(const L& l, const topology& t, link_model m) {
  { l.make_engine(t, m) } -> task_engine;
};

struct shared_links {
  [[nodiscard]] event_engine make_engine(const topology& t, link_model m) const { return event_engine(t, stream_policy::in_order, m); }
  friend bool operator==(const shared_links&, const shared_links&) = default;
};
static_assert(link_sharing<shared_links>);

struct dedicated_links {
  [[nodiscard]] dedicated_link_engine make_engine(const topology& t, link_model m) const { return dedicated_link_engine(t, m); }
  friend bool operator==(const dedicated_links&, const dedicated_links&) = default;
};
static_assert(link_sharing<dedicated_links>);

ZEPPELIN_NAMESPACE_END
