// zeppelin/partition/node_allocation.hpp
// Node allocation: the policy of the hierarchical partitioner (partition/hierarchical.hpp)
// that decides what its load balance counts when it sizes rings and chooses nodes and GPUs.
// The rest of the partitioner (zones, spills by room, the local sequences, the plan) is the
// same for every allocation (partition/detail/hierarchical_solver.hpp).
//   in : the solver's state (lengths and metric costs of the sequences longest first, tokens
//        and metric load per rank and per node so far)
//   out: four decisions, each a hook of the policy:
//     layout_inter(s, m, trace)        the rings of z2, the m sequences no node can hold
//                                      (commit each, or s.stream when they cannot fit)
//     pick_node(s, i, tokens, load)    the node that takes z01 sequence i whole, -1 to split
//                                      it over the nodes with the most room
//     node_share(s, node)              what one GPU's share of the node's work is (c_avg)
//     place_ring(s, node, i, share)    the ring of z1 sequence i (|s| >= L) inside the node
//   and note(metric name): a line for plan.notes ("" for none).
// Models: token_allocation (the paper's Alg. 1 and 2, tokens decide; the default) and
// metric_allocation (the load metric decides everywhere). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/partition/detail/hierarchical_solver.hpp>
#include <zeppelin/partition/hierarchical_trace.hpp>
#include <zeppelin/partition/load_metric.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! A node allocation: a regular value type with a `name` and the four hooks of the file
//! comment, callable on the solver of any load metric (checked with token_metric's).
template <class A>
concept node_allocation =
    std::regular<A> &&
    requires(const A& a, detail::hierarchical_solver<token_metric>& s, const detail::hierarchical_solver<token_metric>& cs,
             detail::hierarchical_node& node, std::size_t i, hierarchical_trace& trace,
             std::span<const token_count> node_tokens, std::span<const double> node_load, std::string_view metric) {
      { A::name } -> std::convertible_to<std::string_view>;
      a.layout_inter(s, i, trace);
      { a.pick_node(cs, i, node_tokens, node_load) } -> std::convertible_to<int>;
      a.place_ring(s, node, i, a.node_share(cs, node));
      { a.note(metric) } -> std::convertible_to<std::string>;
    };

ZEPPELIN_NAMESPACE_END
