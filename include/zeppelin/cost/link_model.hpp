// zeppelin/cost/link_model.hpp
// Time of point-to-point transfers on a topology (core/topology.hpp).
//   in:  bytes, link class (or source/destination ranks), topology, concurrent flows
//   out: seconds
// One message:  t = latency + bytes / (bandwidth / flows_sharing_link)
//   - local (same rank): 0, nothing moves;
//   - intra_node: NVLink / NVSwitch, the per-GPU one-direction figure of the topology;
//   - inter_node: through one NIC, the per-NIC one-direction figure. GPUs mapped to the
//     same NIC (cluster A: two per NIC) share it: a NIC carrying k concurrent flows gives
//     each 1/k of its bandwidth. The GPU -> NIC hop (PCIe / NVLink to the proxy) is not
//     modelled separately.
// The paper's inverse bandwidths b_intra and b_inter (Zeppelin, Table 1) are
// inverse_bandwidth(intra_node) and inverse_bandwidth(inter_node), in s/byte.
// Concurrent flows: flow_sharing() counts, per flow, how many flows share its busiest port
// (source and destination NIC for inter-node, source and destination GPU for intra-node);
// concurrent_seconds() goes further and finishes a set of flows under max-min fair
// bandwidth sharing (flows that finish early hand their share to the others);
// cost/busiest_port.hpp gives the least time of such a set: its busiest port at full rate.
// A zero-byte transfer takes 0 s (no message is sent). Host-only; nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One point-to-point transfer of `bytes` from rank `source` to rank `destination`.
struct link_flow {
  rank_index source = 0;
  rank_index destination = 0;
  double bytes = 0;
  friend constexpr bool operator==(const link_flow&, const link_flow&) = default;
};

namespace detail {
inline void check_bytes(double bytes) {
  ZEPPELIN_EXPECTS(std::isfinite(bytes) && bytes >= 0, "transfer sizes must be finite and non-negative",
                   {{"bytes", bytes}});
}

//! The two ports a flow occupies, as indices into one resource list:
//! [0, R) GPU egress, [R, 2R) GPU ingress, [2R, 2R + M) NIC send, [2R + M, 2R + 2M) NIC receive
//! (R ranks, M NICs in total). Local and empty flows occupy none (first == -1).
struct flow_ports {
  std::ptrdiff_t first = -1;
  std::ptrdiff_t second = -1;
};

//! A rank as the link model sees it: its node and the NIC it sends and receives through,
//! looked up once where one rank has many flows (an exchange's pairs).
struct link_endpoint {
  rank_index rank = 0;
  int node = 0;
  int nic = 0;
};

//! `rank`'s endpoint on `t`; throws invalid_argument for a rank outside it.
[[nodiscard]] inline link_endpoint link_endpoint_of(rank_index rank, const topology& t) {
  return {rank, t.node_of(rank), t.nic_of(rank)};
}

//! topology::between for two endpoints.
[[nodiscard]] constexpr link_class link_between(const link_endpoint& a, const link_endpoint& b) noexcept {
  return a.rank == b.rank ? link_class::local : a.node == b.node ? link_class::intra_node : link_class::inter_node;
}

//! The ports of a flow that moves bytes from `a` to `b`, endpoints of `t`.
[[nodiscard]] inline flow_ports ports_between(const link_endpoint& a, const link_endpoint& b, const topology& t) noexcept {
  const std::ptrdiff_t ranks = t.num_ranks(), nics = t.num_nics();
  switch (link_between(a, b)) {
    case link_class::intra_node: return {a.rank, ranks + b.rank};
    case link_class::inter_node: return {2 * ranks + a.nic, 2 * ranks + nics + b.nic};
    case link_class::local: break;
  }
  return {};
}

inline flow_ports ports_of(const link_flow& f, const topology& t) {
  const link_endpoint a = link_endpoint_of(f.source, t), b = link_endpoint_of(f.destination, t);  // validates both ranks
  if (f.bytes == 0) return {};
  return ports_between(a, b, t);
}

//! The capacity (bytes/s) of every port ports_of() names: the NVLink figure for the GPUs'
//! egress and ingress, the NIC figure for the NICs' send and receive ports.
inline std::vector<double> port_capacities(const topology& t) {
  const auto gpu_ports = 2 * static_cast<std::size_t>(t.num_ranks());
  std::vector<double> capacity(gpu_ports + 2 * static_cast<std::size_t>(t.num_nics()), t.nic_link().bandwidth);
  std::fill_n(capacity.begin(), gpu_ports, t.intra_node_link().bandwidth);
  return capacity;
}
}  // namespace detail

//! For each flow, the number of flows (itself included) that share its busier port: the
//! source and destination NIC of an inter-node flow, the source and destination GPU of an
//! intra-node flow. Local and zero-byte flows move nothing, share nothing and get 1.
//! Throws invalid_argument for a rank outside the topology or a negative/NaN size.
[[nodiscard]] inline std::vector<int> flow_sharing(std::span<const link_flow> flows, const topology& t) {
  const std::size_t resources = 2 * static_cast<std::size_t>(t.num_ranks()) + 2 * static_cast<std::size_t>(t.num_nics());
  std::vector<int> load(resources, 0);
  std::vector<detail::flow_ports> ports(flows.size());
  for (std::size_t i = 0; i < flows.size(); ++i) {
    detail::check_bytes(flows[i].bytes);
    ports[i] = detail::ports_of(flows[i], t);
    if (ports[i].first < 0) continue;
    ++load[static_cast<std::size_t>(ports[i].first)];
    ++load[static_cast<std::size_t>(ports[i].second)];
  }
  std::vector<int> sharing(flows.size(), 1);
  for (std::size_t i = 0; i < flows.size(); ++i)
    if (ports[i].first >= 0)
      sharing[i] = std::max(load[static_cast<std::size_t>(ports[i].first)], load[static_cast<std::size_t>(ports[i].second)]);
  return sharing;
}

struct link_model {
  //! Inverse bandwidth of a link class in s/byte: 0 for local, 1 / NVLink bandwidth per
  //! GPU for intra_node (b_intra), 1 / NIC bandwidth for inter_node (b_inter).
  [[nodiscard]] static double inverse_bandwidth(link_class c, const topology& t) noexcept {
    switch (c) {
      case link_class::intra_node: return 1.0 / t.intra_node_link().bandwidth;
      case link_class::inter_node: return 1.0 / t.nic_link().bandwidth;
      case link_class::local: break;
    }
    return 0.0;
  }

  //! Per-message latency of a link class in seconds (0 for local).
  [[nodiscard]] static double latency(link_class c, const topology& t) noexcept {
    switch (c) {
      case link_class::intra_node: return t.intra_node_link().latency;
      case link_class::inter_node: return t.nic_link().latency;
      case link_class::local: break;
    }
    return 0.0;
  }

  //! Seconds to move `bytes` over link class `c` while `flows_sharing_link` flows (this one
  //! included) split the link evenly: latency + bytes * flows_sharing_link / bandwidth.
  //! 0 for local links and for 0 bytes. Throws invalid_argument for negative or NaN bytes or
  //! flows_sharing_link < 1.
  [[nodiscard]] double seconds(double bytes, link_class c, const topology& t, int flows_sharing_link = 1) const {
    detail::check_bytes(bytes);
    ZEPPELIN_EXPECTS(flows_sharing_link >= 1, "at least one flow uses a link",
                     {{"flows_sharing_link", double(flows_sharing_link)}});
    if (c == link_class::local || bytes == 0) return 0.0;
    return latency(c, t) + bytes * static_cast<double>(flows_sharing_link) * inverse_bandwidth(c, t);
  }

  //! Seconds for one flow between two ranks of `t` (the link class is t.between()).
  [[nodiscard]] double seconds(const link_flow& f, const topology& t, int flows_sharing_link = 1) const {
    return seconds(f.bytes, t.between(f.source, f.destination), t, flows_sharing_link);
  }

  //! Completion time of each of a set of flows that start together, under max-min fair
  //! sharing of every port (GPU egress/ingress for intra-node flows, NIC send/receive for
  //! inter-node flows): rates are recomputed by progressive filling each time a flow
  //! finishes, so a flow that ends early hands its bandwidth to the others. A flow's time is
  //! its link latency plus the moment its last byte leaves. Equal flows on one port finish
  //! together at latency + k * bytes / bandwidth, exactly seconds(bytes, c, t, k).
  //! Local and zero-byte flows take 0. Ties are resolved in index order (deterministic).
  //! O(F^2 (F + P)) for F flows and P ports. Throws like flow_sharing().
  [[nodiscard]] std::vector<double> concurrent_seconds(std::span<const link_flow> flows, const topology& t) const {
    const std::size_t ranks = static_cast<std::size_t>(t.num_ranks());
    const std::size_t nics = static_cast<std::size_t>(t.num_nics());
    std::vector<double> capacity(2 * ranks + 2 * nics);
    std::fill_n(capacity.begin(), 2 * ranks, t.intra_node_link().bandwidth);
    std::fill(capacity.begin() + static_cast<std::ptrdiff_t>(2 * ranks), capacity.end(), t.nic_link().bandwidth);

    const std::size_t n = flows.size();
    std::vector<detail::flow_ports> ports(n);
    std::vector<double> remaining(n, 0.0), finish(n, 0.0);
    std::vector<std::size_t> active;
    for (std::size_t i = 0; i < n; ++i) {
      detail::check_bytes(flows[i].bytes);
      ports[i] = detail::ports_of(flows[i], t);
      if (ports[i].first < 0) continue;
      remaining[i] = flows[i].bytes;
      active.push_back(i);
    }

    std::vector<double> rate(n), left(capacity.size());
    std::vector<int> users(capacity.size());
    std::vector<char> frozen(n);
    double now = 0;
    while (!active.empty()) {
      // Max-min fair rates by progressive filling: the port with the smallest fair share
      // saturates first and fixes the rate of every unfrozen flow through it.
      left = capacity;
      std::fill(frozen.begin(), frozen.end(), char{0});
      std::size_t unfrozen = active.size();
      while (unfrozen > 0) {
        std::fill(users.begin(), users.end(), 0);
        for (std::size_t i : active)
          if (!frozen[i]) {
            ++users[static_cast<std::size_t>(ports[i].first)];
            ++users[static_cast<std::size_t>(ports[i].second)];
          }
        std::size_t best = 0;
        double share = std::numeric_limits<double>::infinity();
        for (std::size_t p = 0; p < users.size(); ++p)
          if (users[p] > 0 && left[p] / users[p] < share) share = left[p] / users[p], best = p;
        for (std::size_t i : active) {
          if (frozen[i]) continue;
          const auto a = static_cast<std::size_t>(ports[i].first), b = static_cast<std::size_t>(ports[i].second);
          if (a != best && b != best) continue;
          rate[i] = share;
          frozen[i] = 1;
          --unfrozen;
          left[a] = std::max(0.0, left[a] - share);
          left[b] = std::max(0.0, left[b] - share);
        }
      }
      // Advance to the first completion; every flow finishing at that moment leaves.
      double step = std::numeric_limits<double>::infinity();
      for (std::size_t i : active) step = std::min(step, remaining[i] / rate[i]);
      now += step;
      std::vector<std::size_t> still;
      for (std::size_t i : active) {
        if (remaining[i] / rate[i] <= step * (1 + 1e-12)) {
          finish[i] = now + latency(t.between(flows[i].source, flows[i].destination), t);
        } else {
          remaining[i] -= rate[i] * step;
          still.push_back(i);
        }
      }
      active.swap(still);
    }
    return finish;
  }

  //! The time until the last of a set of concurrent flows completes (0 for none).
  [[nodiscard]] double makespan(std::span<const link_flow> flows, const topology& t) const {
    const auto times = concurrent_seconds(flows, t);
    double last = 0;
    for (double s : times) last = std::max(last, s);
    return last;
  }

  friend constexpr bool operator==(const link_model&, const link_model&) = default;
};

//! A transfer-time model: the time of `bytes` over a link class with `k` flows sharing it.
template <class T>
concept link_cost_model = requires(const T& m, double bytes, link_class c, const topology& t, int k) {
  { m.seconds(bytes, c, t, k) } -> std::convertible_to<double>;
};
static_assert(link_cost_model<link_model>);

ZEPPELIN_NAMESPACE_END
