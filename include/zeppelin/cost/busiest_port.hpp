// zeppelin/cost/busiest_port.hpp
// The least time a set of transfers started together can take on a topology: over every port
// (a GPU's NVLink egress and ingress, a NIC's send and receive port: cost/link_model.hpp's
// ports_of), the bytes through it at its full capacity plus its link's latency (a flow
// completes its latency after its last byte), the largest. Every port busy throughout, as a
// perfect schedule would keep it; max-min fair sharing (link_model::concurrent_seconds, the
// event engine) is slower when ports go idle while others drain.
//   in : the transfers as flows, or as each rank's bytes sent and received per link class
//        (rank_traffic: what a caller that never lists the transfers can still count)
//   out: seconds (0 when nothing crosses a port)
// O(flows + ports), or O(ranks + ports). Errors: invalid_argument for a rank outside the
// topology, negative or non-finite bytes, or a traffic list not one entry per rank.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/link_model.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What one rank sends and receives in a set of transfers, by link class.
struct rank_traffic {
  double sent_intra = 0, received_intra = 0;  //!< to and from ranks of its node (NVLink)
  double sent_inter = 0, received_inter = 0;  //!< to and from other nodes (its NIC)
  rank_traffic& operator+=(const rank_traffic& o) noexcept {
    sent_intra += o.sent_intra, received_intra += o.received_intra, sent_inter += o.sent_inter, received_inter += o.received_inter;
    return *this;
  }
  friend constexpr bool operator==(const rank_traffic&, const rank_traffic&) = default;
};

//! Adds `bytes` sent from rank `src` to rank `dst` of `t` to `traffic` (one entry per rank), by
//! the link between them; nothing for a rank to itself or no bytes.
inline void add_traffic(std::vector<rank_traffic>& traffic, rank_index src, rank_index dst, double bytes, const topology& t) {
  if (src == dst || bytes == 0) return;
  rank_traffic& from = traffic[static_cast<std::size_t>(src)];
  rank_traffic& to = traffic[static_cast<std::size_t>(dst)];
  if (t.node_of(src) == t.node_of(dst)) {
    from.sent_intra += bytes, to.received_intra += bytes;
  } else {
    from.sent_inter += bytes, to.received_inter += bytes;
  }
}

namespace detail {

// The busiest port of `load` (bytes per port, indexed as ports_of names them).
[[nodiscard]] inline double busiest_port_of(std::span<const double> load, const topology& t) {
  const std::vector<double> capacity = port_capacities(t);
  const auto gpu_ports = 2 * static_cast<std::size_t>(t.num_ranks());  // NVLink egress and ingress, then the NICs'
  double slowest = 0;
  for (std::size_t i = 0; i < load.size(); ++i)
    if (load[i] > 0)
      slowest = std::max(slowest, load[i] / capacity[i] + link_model::latency(i < gpu_ports ? link_class::intra_node : link_class::inter_node, t));
  return slowest;
}

}  // namespace detail

//! The least time `flows` started together can take on `t` (see the file comment).
[[nodiscard]] inline double busiest_port_seconds(std::span<const link_flow> flows, const topology& t) {
  std::vector<double> load(detail::port_capacities(t).size(), 0.0);
  for (const link_flow& f : flows) {
    detail::check_bytes(f.bytes);
    const detail::flow_ports p = detail::ports_of(f, t);
    if (p.first < 0) continue;
    load[static_cast<std::size_t>(p.first)] += f.bytes;
    load[static_cast<std::size_t>(p.second)] += f.bytes;
  }
  return detail::busiest_port_of(load, t);
}

//! The same from each rank's traffic (one entry per rank of `t`): a GPU's NVLink ports carry
//! its same-node bytes, a NIC's ports the cross-node bytes of every GPU behind it.
[[nodiscard]] inline double busiest_port_seconds(std::span<const rank_traffic> traffic, const topology& t) {
  const auto R = static_cast<std::size_t>(t.num_ranks());
  ZEPPELIN_EXPECTS(traffic.size() == R, "busiest port: one traffic entry per rank of the topology",
                   {{"entries", double(traffic.size())}, {"ranks", double(R)}});
  const auto nics = static_cast<std::size_t>(t.num_nics());
  std::vector<double> load(2 * R + 2 * nics, 0.0);
  for (std::size_t r = 0; r < R; ++r) {
    const rank_traffic& x = traffic[r];
    for (const double b : {x.sent_intra, x.received_intra, x.sent_inter, x.received_inter}) detail::check_bytes(b);
    const auto nic = static_cast<std::size_t>(t.nic_of(static_cast<rank_index>(r)));
    load[r] += x.sent_intra;
    load[R + r] += x.received_intra;
    load[2 * R + nic] += x.sent_inter;
    load[2 * R + nics + nic] += x.received_inter;
  }
  return detail::busiest_port_of(load, t);
}

ZEPPELIN_NAMESPACE_END
