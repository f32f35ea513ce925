// zeppelin/sim/detail/proxy_legs.hpp
// Zeppelin's three-step proxy routing of ONE inter-node transfer (section 3.3), as legs.
//   in : source rank (node u), destination rank (node v != u), bytes, topology
//   out: x = nics_per_node parallel chains, one per local NIC j:
//          dispatch  source -> send proxy s_j       (NVLink; absent when s_j == source)
//          transfer  s_j    -> receive proxy d_j    (NIC j of u -> NIC j of v)
//          combine   d_j    -> destination          (NVLink; absent when d_j == destination)
//        each carrying bytes / x.
// Proxies cover distinct NICs (GPUs sharing a NIC add no bandwidth): s_j is the source
// itself for its own NIC, else the lowest GPU of node u on NIC j; d_j likewise with the
// destination. x1 = x2 = nics_per_node because every node has the same NICs, so sender and
// receiver proxies pair one to one. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>

#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct proxy_chain {
  rank_index send_proxy = 0;
  rank_index receive_proxy = 0;
  double bytes = 0;
};

//! The proxy of `rank`'s node on local NIC `nic`: the rank itself when it sits on that NIC.
inline rank_index proxy_on_nic(const topology& t, rank_index rank, int nic) {
  const int node = t.node_of(rank);
  if (t.local_nic_of_gpu(t.local_gpu_of(rank)) == nic) return rank;
  for (int g = 0; g < t.gpus_per_node(); ++g)
    if (t.local_nic_of_gpu(g) == nic) return t.rank_of(node, g);
  return rank;  // unreachable: topology guarantees every NIC serves a GPU
}

inline std::vector<proxy_chain> proxy_chains(const topology& t, rank_index source, rank_index destination, double bytes) {
  const int x = t.nics_per_node();
  std::vector<proxy_chain> out(static_cast<std::size_t>(x));
  for (int j = 0; j < x; ++j)
    out[static_cast<std::size_t>(j)] = {proxy_on_nic(t, source, j), proxy_on_nic(t, destination, j), bytes / x};
  return out;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
