// zeppelin/sim/tensor_parallel.hpp
// Tensor parallelism inside context parallelism (Zeppelin section 5: 13B on cluster A and
// 30B on cluster C run TP = 2 inside CP).
//   in : the physical topology (N nodes x P GPUs) and the TP size tp (dividing P)
//   out: the topology the CP planner and the simulator see: N nodes x P / tp "CP ranks", each
//        a TP group of tp consecutive GPUs (GPUs v*tp .. v*tp + tp - 1 of a node):
//        - GPU: peak FLOP/s, memory and HBM bandwidth x tp (each GPU runs 1/tp of the heads
//          and of the GEMM columns, so a CP rank's work takes 1/tp of the time);
//        - NVLink: bandwidth x tp (each TP GPU moves its head share of K/V on its own link);
//        - NICs: when every TP group's GPUs sit on ONE NIC (cluster A, tp = 2: GPUs 2i, 2i+1
//          share NIC i), the CP rank keeps that NIC at its bandwidth (the two ranks of a TP
//          group share it, as the paper notes); when the TP groups own disjoint sets of k NICs
//          (cluster C, tp = 2: k = 2), those k NICs become one NIC of k x the bandwidth.
//          Any other mapping throws invalid_argument.
// The TP collectives (sequence-parallel all-gather / reduce-scatter of the activations, 4 per
// layer per direction) are priced by tensor_parallel_collective_seconds() on ONE GPU's NVLink.
// tp = 1 returns the topology unchanged. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Sequence-parallel TP collectives per layer and direction (Megatron-LM with sequence
//! parallelism: all-gather before and reduce-scatter after both the attention block's and
//! the MLP's column/row-parallel GEMM pairs).
inline constexpr int tensor_parallel_collectives_per_layer = 4;

//! The CP view of `t` with TP groups of `tp` GPUs (see the file comment). Throws
//! invalid_argument when tp < 1, tp does not divide the GPUs per node, or the NIC map does
//! not split into TP groups as described.
[[nodiscard]] inline topology tensor_parallel_view(const topology& t, int tp) {
  ZEPPELIN_EXPECTS(tp >= 1 && t.gpus_per_node() % tp == 0, "the TP size must divide the GPUs per node",
                   {{"tp", double(tp)}, {"gpus_per_node", double(t.gpus_per_node())}});
  if (tp == 1) return t;
  const int P = t.gpus_per_node(), V = P / tp;
  std::vector<std::vector<int>> nics(static_cast<std::size_t>(V));
  for (int v = 0; v < V; ++v) {
    auto& s = nics[static_cast<std::size_t>(v)];
    for (int g = v * tp; g < (v + 1) * tp; ++g) s.push_back(t.local_nic_of_gpu(g));
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  topology_config c = t.config();
  c.name += "-tp" + std::to_string(tp);
  c.gpus_per_node = V;
  c.gpu.peak_flops *= tp;
  c.gpu.memory_bytes *= tp;
  c.gpu.memory_bandwidth *= tp;
  c.intra_node.bandwidth *= tp;
  c.gpu_to_nic.assign(static_cast<std::size_t>(V), 0);
  const bool one_nic_each = std::all_of(nics.begin(), nics.end(), [](const auto& s) { return s.size() == 1; });
  if (one_nic_each) {
    // keep the physical NICs the TP groups use, renumbered densely in NIC order
    std::vector<int> used;
    for (const auto& s : nics) used.push_back(s.front());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    c.nics_per_node = static_cast<int>(used.size());
    for (int v = 0; v < V; ++v)
      c.gpu_to_nic[static_cast<std::size_t>(v)] = static_cast<int>(
          std::lower_bound(used.begin(), used.end(), nics[static_cast<std::size_t>(v)].front()) - used.begin());
  } else {
    const std::size_t k = nics.front().size();
    std::vector<int> owner(static_cast<std::size_t>(t.nics_per_node()), -1);
    for (int v = 0; v < V; ++v) {
      const auto& s = nics[static_cast<std::size_t>(v)];
      ZEPPELIN_EXPECTS(s.size() == k, "TP groups must each use the same number of NICs",
                       {{"tp_group", double(v)}, {"nics", double(s.size())}, {"expected", double(k)}});
      for (const int n : s) {
        ZEPPELIN_EXPECTS(owner[static_cast<std::size_t>(n)] < 0, "a NIC shared between TP groups that use several NICs",
                         {{"nic", double(n)}, {"tp_group", double(v)}});
        owner[static_cast<std::size_t>(n)] = v;
      }
    }
    c.nics_per_node = V;
    c.nic.bandwidth *= static_cast<double>(k);
    for (int v = 0; v < V; ++v) c.gpu_to_nic[static_cast<std::size_t>(v)] = v;
  }
  return topology(std::move(c));
}

//! Seconds of ONE sequence-parallel TP collective (ring all-gather or reduce-scatter) over a
//! TP group of `tp` GPUs of `view` (a tensor_parallel_view) whose CP rank holds `tokens`
//! tokens: every GPU moves (tp - 1) / tp of the tokens' hidden states over its own NVLink
//! (view bandwidth / tp) in tp - 1 latency-bound steps. 0 when tp == 1 or tokens == 0.
[[nodiscard]] inline double tensor_parallel_collective_seconds(token_count tokens, const model_config& m, const topology& view,
                                                               int tp) {
  ZEPPELIN_EXPECTS(tp >= 1 && tokens >= 0, "TP collective needs tp >= 1 and tokens >= 0",
                   {{"tp", double(tp)}, {"tokens", double(tokens)}});
  if (tp == 1 || tokens == 0) return 0.0;
  const double bytes = static_cast<double>(tokens) * m.hidden * m.bytes_per_element * (tp - 1) / tp;
  const double gpu_bandwidth = view.intra_node_link().bandwidth / tp;
  return (tp - 1) * view.intra_node_link().latency + bytes / gpu_bandwidth;
}

ZEPPELIN_NAMESPACE_END
