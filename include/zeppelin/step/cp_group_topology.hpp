// zeppelin/step/cp_group_topology.hpp
// The topology a micro-batch's CP layout is planned on: the cp ranks of one stage and TP
// index of a replica, as the cluster places them.
//   in : the cluster topology, a replica (step/step_plan.hpp), a stage and a TP index
//   out: a topology of nodes x gpus_per_node ranks, CP rank c being rank c of it: the
//        members are cut, in CP order, into runs that share a node, and every run must hold
//        the same number of members on a node of its own; links and GPU are the cluster's;
//        each member keeps its physical NIC (NICs renumbered densely per node, so members
//        sharing a NIC share it here too).
// Partitioners plan a micro-batch on this topology; the step program prices and runs the
// layout on the members' real ranks. Every stage and TP index of a replica must give the
// same node shape, which validate (step/validate.hpp) checks.
// Errors: invalid_argument naming the stage, TP index and member when the runs differ in
// size or a node holds two runs; a stage or TP index out of range.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The CP ranks of (stage, tp index) of `r` as a topology (see the file comment).
[[nodiscard]] inline topology cp_group_topology(const topology& cluster, const step_replica& r, int stage, int tp_index) {
  ZEPPELIN_EXPECTS(stage >= 0 && stage < r.pp && tp_index >= 0 && tp_index < r.tp, "no such stage or TP index in the replica",
                   {{"stage", double(stage)}, {"pp", double(r.pp)}, {"tp_index", double(tp_index)}, {"tp", double(r.tp)}});
  std::vector<int> run_nodes;   // the node of each run, in order
  std::vector<int> run_sizes;
  for (int c = 0; c < r.cp; ++c) {
    const int node = cluster.node_of(r.rank_of(tp_index, c, stage));
    if (!run_nodes.empty() && run_nodes.back() == node) {
      ++run_sizes.back();
      continue;
    }
    ZEPPELIN_EXPECTS(std::find(run_nodes.begin(), run_nodes.end(), node) == run_nodes.end(),
                     "a CP group's ranks on one node must be consecutive CP ranks",
                     {{"stage", double(stage)}, {"tp_index", double(tp_index)}, {"cp_rank", double(c)}, {"node", double(node)}});
    run_nodes.push_back(node);
    run_sizes.push_back(1);
  }
  const int per_node = run_sizes.front();
  for (std::size_t i = 0; i < run_sizes.size(); ++i)
    ZEPPELIN_EXPECTS(run_sizes[i] == per_node, "a CP group needs the same number of ranks on each of its nodes",
                     {{"stage", double(stage)}, {"tp_index", double(tp_index)}, {"node", double(run_nodes[i])},
                      {"ranks", double(run_sizes[i])}, {"expected", double(per_node)}});
  topology_config c = cluster.config();
  c.name += "-cp";
  c.nodes = static_cast<int>(run_nodes.size());
  c.gpus_per_node = per_node;
  // the members' NICs, renumbered densely within a node; every node must use the same map
  std::vector<int> local_nic(static_cast<std::size_t>(per_node));
  int nics = 0;
  for (std::size_t n = 0; n < run_nodes.size(); ++n) {
    std::vector<int> physical;
    for (int g = 0; g < per_node; ++g)
      physical.push_back(cluster.nic_of(r.rank_of(tp_index, static_cast<int>(n) * per_node + g, stage)));
    std::vector<int> used = physical;
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    for (int g = 0; g < per_node; ++g) {
      const int dense = static_cast<int>(std::lower_bound(used.begin(), used.end(), physical[static_cast<std::size_t>(g)]) - used.begin());
      if (n == 0) local_nic[static_cast<std::size_t>(g)] = dense;
      ZEPPELIN_EXPECTS(local_nic[static_cast<std::size_t>(g)] == dense, "a CP group's nodes must share their NICs alike",
                       {{"stage", double(stage)}, {"tp_index", double(tp_index)}, {"node", double(run_nodes[n])}});
    }
    if (n == 0) nics = static_cast<int>(used.size());
  }
  c.nics_per_node = nics;
  c.gpu_to_nic = local_nic;
  return topology(std::move(c));
}

ZEPPELIN_NAMESPACE_END
