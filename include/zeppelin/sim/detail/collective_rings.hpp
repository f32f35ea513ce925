// zeppelin/sim/detail/collective_rings.hpp
// The rings an NCCL-style ring collective (all-gather, reduce-scatter) runs over a set of
// GPUs, as the simulator prices them: one ring per channel, each carrying 1 / channels of
// the data, so that a group spanning nodes leaves every node through each of its NICs.
//   in : a topology, the member ranks (distinct, any order)
//   out: collective_rings: channels x members (source, destination) edges; channel c's edges
//        are rings[c * members + i], i over the members in ring order
// Construction: the members are taken in rank order and grouped by node. A group inside one
// node is one ring (NVLink carries every edge). A group spanning nodes gets k channels, k the
// fewest distinct NICs any node's members use: channel c rotates each node's members so
// that the node's last member on its c-th NIC leaves last (it sends to the next node), as
// NCCL's channels spread the inter-node edges over the NICs. A ring all-gather of B bytes
// moves (n - 1) / n x B through every edge of every ring (n members); one flow per edge
// stands for its n - 1 steps (their latencies are not added).
// Errors: invalid_argument for an empty member list or a repeated rank; what topology
// throws for a rank outside it. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct ring_edge {
  rank_index source = 0;
  rank_index destination = 0;
  friend constexpr bool operator==(const ring_edge&, const ring_edge&) = default;
};

struct collective_rings {
  int channels = 1;
  int members = 1;
  std::vector<ring_edge> edges;  //!< channels x members, channel-major

  //! The share of a collective's bytes one edge of one channel carries for a ring
  //! all-gather or reduce-scatter of `bytes` (the whole gathered size per GPU).
  [[nodiscard]] double edge_bytes(double bytes) const noexcept {
    return bytes * static_cast<double>(members - 1) / static_cast<double>(members) / static_cast<double>(channels);
  }
};

//! The rings over `ranks` (see the file comment).
[[nodiscard]] inline collective_rings make_collective_rings(const topology& topo, std::vector<rank_index> ranks) {
  ZEPPELIN_EXPECTS(!ranks.empty(), "a collective needs at least one GPU", {});
  std::sort(ranks.begin(), ranks.end());
  ZEPPELIN_EXPECTS(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end(), "a collective's GPUs must be distinct", {});
  // members per node, in rank order
  std::vector<std::vector<rank_index>> nodes;
  for (const rank_index r : ranks) {
    if (nodes.empty() || topo.node_of(nodes.back().front()) != topo.node_of(r)) nodes.emplace_back();
    nodes.back().push_back(r);
  }
  // the NICs each node's members leave through, in order of first use
  std::vector<std::vector<int>> nics(nodes.size());
  for (std::size_t n = 0; n < nodes.size(); ++n)
    for (const rank_index r : nodes[n])
      if (std::find(nics[n].begin(), nics[n].end(), topo.nic_of(r)) == nics[n].end()) nics[n].push_back(topo.nic_of(r));
  int channels = 1;
  if (nodes.size() > 1) {
    channels = static_cast<int>(nics.front().size());
    for (const auto& n : nics) channels = std::min(channels, static_cast<int>(n.size()));
  }
  collective_rings out{channels, static_cast<int>(ranks.size()), {}};
  out.edges.reserve(static_cast<std::size_t>(channels) * ranks.size());
  std::vector<rank_index> order;
  order.reserve(ranks.size());
  for (int c = 0; c < channels; ++c) {
    order.clear();
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const std::vector<rank_index>& m = nodes[n];
      std::size_t last = m.size() - 1;  // the member that leaves the node on channel c
      if (nodes.size() > 1)
        for (std::size_t i = 0; i < m.size(); ++i)
          if (topo.nic_of(m[i]) == nics[n][static_cast<std::size_t>(c)]) last = i;
      for (std::size_t i = 1; i <= m.size(); ++i) order.push_back(m[(last + i) % m.size()]);
    }
    for (std::size_t i = 0; i < order.size(); ++i) out.edges.push_back({order[i], order[(i + 1) % order.size()]});
  }
  return out;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
