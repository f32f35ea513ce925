// zeppelin/partition/hierarchical.hpp
// Zeppelin's two-level, three-zone sequence partitioner (EuroSys '26, section 3.1): Alg. 1
// places sequences on nodes, Alg. 2 on the GPUs of each node.
//   in : batch, topology (N nodes x P GPUs), capacity L (tokens per GPU), a load metric
//        (partition/load_metric.hpp) and a node allocation (partition/node_allocation.hpp)
//   out: a plan whose groups are inter-node rings (zone inter), intra-node rings (zone intra)
//        and whose local sequences sit whole on one GPU (no group); every rank's shards are
//        ordered inter -> intra -> local (the attention engine's queue order). solve() also
//        returns the decisions (partition/hierarchical_trace.hpp).
// Zones: z2 = sequences no node holds (|s| >= P L) ring over nodes; z1 = the rest with
// |s| >= L ring inside their node; z0 = the rest sit whole on the GPU of least metric load.
// Why it is balanced: rings are zigzag splits (schedule/zigzag.hpp), so each rank of a ring
// does its share of the sequence's causal work; whole sequences go where the load is least.
// Why it never fails for sum |s| <= N P L: a sequence that fits no node (or no GPU) whole is
// split over the fewest nodes (GPUs) whose room covers it, by water filling, instead of the
// paper's restart with a lower threshold; a contiguous layout remains as an unreachable
// last resort (plan.notes says so).
// The allocation policy decides what the balance counts: token_allocation (default, the
// paper's: tokens size the rings and pick nodes and GPUs, the metric places z0) or
// metric_allocation (the metric decides everywhere, L still a hard limit).
// The algorithm step by step, where it departs from the paper and why, and measurements:
// docs/partitioning.md.
// Throws infeasible for sum|S| > N P L, invalid_argument for L <= 0. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/detail/hierarchical_solver.hpp>
#include <zeppelin/partition/detail/plan_builder.hpp>
#include <zeppelin/partition/hierarchical_trace.hpp>
#include <zeppelin/partition/load_metric.hpp>
#include <zeppelin/partition/metric_allocation.hpp>
#include <zeppelin/partition/node_allocation.hpp>
#include <zeppelin/partition/partitioner.hpp>
#include <zeppelin/partition/token_allocation.hpp>

#include <string_view>
#include <utility>

ZEPPELIN_NAMESPACE_BEGIN

//! `hierarchical<>{.capacity = 4096}` is the paper's partitioner;
//! `hierarchical<attention_cost_metric>{.capacity = 4096}` places local sequences by causal
//! pairs; `hierarchical<attention_cost_metric, metric_allocation>{.capacity = 4096}` lets the
//! pairs size the rings and choose nodes and GPUs too.
template <load_metric Metric = token_metric, node_allocation Allocation = token_allocation>
struct hierarchical {
  static constexpr std::string_view name = "hierarchical";
  //! Tokens a GPU may hold (L).
  token_count capacity = 4096;
  //! How a GPU's load is measured (partition/load_metric.hpp).
  Metric metric{};
  //! What the node and GPU choices balance (partition/node_allocation.hpp).
  Allocation allocation{};

  [[nodiscard]] plan partition(const batch& b, const topology& t) const { return solve(b, t).first; }

  //! The plan and the decisions behind it.
  [[nodiscard]] std::pair<plan, hierarchical_trace> solve(const batch& b, const topology& t) const {
    detail::check_input(b, t, capacity, name);
    return detail::hierarchical_solver<Metric>(b, t, capacity, metric).run(allocation, name);
  }

  friend bool operator==(const hierarchical&, const hierarchical&) = default;
};
static_assert(partitioner<hierarchical<>>);
static_assert(partitioner<hierarchical<attention_cost_metric>>);
static_assert(partitioner<hierarchical<cost_model_metric<>>>);
static_assert(partitioner<hierarchical<attention_cost_metric, metric_allocation>>);

ZEPPELIN_NAMESPACE_END
