// zeppelin/route/cost.hpp
// The time of a routed phase under a link model (cost/link_model.hpp), and equation (1) of
// Zeppelin 3.3 as a closed-form check.
//   in : the pieces of one phase (core/transfer.hpp, route/router.hpp), the topology, a link
//        model
//   out: seconds. The three stages run one after the other (a transfer needs its dispatched
//        bytes, a combine its transferred ones); direct pieces run with the transfers.
//        Inside a step every port works in parallel: each GPU's NVLink egress and ingress,
//        each NIC's send and receive side (GPUs on one NIC share it, cluster A). A step
//        lasts as long as its busiest port: model.seconds(bytes through the port, its link
//        class) = latency + bytes / bandwidth. This is the bottleneck bound of
//        link_model::makespan (equal when the busiest port's flows start and end together,
//        as an edge's even split does) and costs O(messages + ports).
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/core/transfer.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Seconds of each stage of a phase: {dispatch, transfer (with direct), combine}.
template <link_cost_model Model = link_model>
[[nodiscard]] std::array<double, 3> step_seconds(std::span<const transfer> messages, const topology& t,
                                                 const Model& model = {}) {
  const auto ranks = static_cast<std::size_t>(t.num_ranks()), nics = static_cast<std::size_t>(t.num_nics());
  std::array<double, 3> out{0, 0, 0};
  std::vector<double> port(2 * ranks + 2 * nics);
  for (int phase = 0; phase < 3; ++phase) {
    std::fill(port.begin(), port.end(), 0.0);
    for (const auto& m : messages) {
      if (stage_of(m.step) != phase || m.bytes == 0) continue;
      const link_class c = t.between(m.src, m.dst);
      const auto b = static_cast<double>(m.bytes);
      if (c == link_class::intra_node) {
        port[static_cast<std::size_t>(m.src)] += b;
        port[ranks + static_cast<std::size_t>(m.dst)] += b;
      } else if (c == link_class::inter_node) {
        port[2 * ranks + static_cast<std::size_t>(t.nic_of(m.src))] += b;
        port[2 * ranks + nics + static_cast<std::size_t>(t.nic_of(m.dst))] += b;
      }
    }
    double worst = 0;
    for (std::size_t k = 0; k < port.size(); ++k)
      if (port[k] > 0)
        worst = std::max(worst, static_cast<double>(model.seconds(
                                    port[k], k < 2 * ranks ? link_class::intra_node : link_class::inter_node, t, 1)));
    out[static_cast<std::size_t>(phase)] = worst;
  }
  return out;
}

//! Seconds of a whole phase: dispatch + transfer + combine (see the file comment).
template <link_cost_model Model = link_model>
[[nodiscard]] double round_seconds(std::span<const transfer> messages, const topology& t, const Model& model = {}) {
  const auto s = step_seconds(messages, t, model);
  return s[0] + s[1] + s[2];
}

//! Equation (1) of Zeppelin 3.3 for one transfer of n bytes with x1 send and x2 receive
//! proxies: b_intra n (x1 - 1) / x1 + b_inter max(n / x1, n / x2) + b_intra n (x2 - 1) / x2
//! (b_* in s/byte; no latency). x1 = x2 = 1 gives the direct cost b_inter n.
[[nodiscard]] inline double three_step_seconds(double n, int x1, int x2, double b_intra, double b_inter) {
  ZEPPELIN_EXPECTS(x1 >= 1 && x2 >= 1, "proxy counts must be positive", {{"x1", double(x1)}, {"x2", double(x2)}});
  ZEPPELIN_EXPECTS(n >= 0, "transfer size must be non-negative", {{"n", n}});
  return b_intra * n * (x1 - 1) / x1 + b_inter * std::max(n / x1, n / x2) + b_intra * n * (x2 - 1) / x2;
}

ZEPPELIN_NAMESPACE_END
