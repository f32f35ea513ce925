// zeppelin/route/proxy.hpp
// Zeppelin's three-step routing (section 3.3): inter-node payloads are spread over several
// NICs through proxy GPUs.
//   in : the payloads of one phase (core/transfer.hpp), the topology, the ranks allowed to
//        serve as proxies (default: all; GPUs running local or intra-node work qualify, the
//        payload's own source and destination always do)
//   out: per inter-node payload of n bytes from node u to node v with x proxy pairs, piece k
//        = bytes [offset_k, offset_k + n_k) (n / x bytes, the first n mod x pieces one byte
//        more, consecutive offsets in k order) travels
//          dispatch  src -> send proxy k     (intra-node, skipped when the proxy is src)
//          transfer  send proxy k -> recv proxy k   (inter-node)
//          combine   recv proxy k -> dst     (intra-node, skipped when the proxy is dst)
//        intra-node and local payloads, and inter-node ones with x = 1, as one direct piece.
// Proxy choice.
//   - NIC affinity: the x send proxies sit on x distinct NICs of u and the x receive proxies
//     on x distinct NICs of v (a second proxy behind a shared NIC, cluster A, adds no
//     bandwidth). x <= min(NICs of u with a capable GPU, NICs of v with one): the paper's
//     x1 = min over the two nodes, and x1 = x2 gives the one-to-one pairing.
//   - The source's own NIC comes first with the source as its proxy (that share needs no
//     dispatch), likewise the destination on v; the other NICs are taken least loaded first
//     (bytes already routed through them this round; ties: lowest NIC), and behind a NIC the
//     capable GPU with the least proxy traffic so far (ties: lowest rank).
//   - x itself minimises equation (1) priced by the link model (route/cost.hpp) with
//     latencies, ties to the smaller x; x = 1 is the direct path.
//   - Payloads are routed largest first (ties: input order) so the big ones get the idle NICs.
//   - Guard: when fallback_to_direct is set and the routed phase costs more than the direct
//     one under round_seconds(), the direct pieces are returned: routing never loses.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/route/cost.hpp>
#include <zeppelin/route/direct.hpp>
#include <zeppelin/core/transfer.hpp>
#include <zeppelin/route/router.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Three-step multi-NIC routing. `proxy_router{.proxies = {...}}` restricts the proxy set.
struct proxy_router {
  std::vector<rank_index> proxies{};  //!< ranks that may serve as proxies; empty = every rank
  int max_proxies = 0;                //!< cap on proxy pairs per edge; 0 = as many as NICs allow
  bool fallback_to_direct = true;     //!< return the direct round when routing would cost more
  link_model model{};                 //!< prices equation (1) and the fallback check

  [[nodiscard]] std::vector<transfer> route(std::span<const transfer> edges, const topology& t) const {
    detail::check_payloads(edges, t);
    ZEPPELIN_EXPECTS(max_proxies >= 0, "max_proxies must be non-negative", {{"max_proxies", double(max_proxies)}});
    const auto ranks = static_cast<std::size_t>(t.num_ranks());
    std::vector<char> capable(ranks, proxies.empty() ? 1 : 0);
    for (const rank_index r : proxies) {
      ZEPPELIN_EXPECTS(r >= 0 && r < t.num_ranks(), "proxy rank outside the topology",
                       {{"rank", double(r)}, {"ranks", double(t.num_ranks())}});
      capable[static_cast<std::size_t>(r)] = 1;
    }
    const int P = t.gpus_per_node(), M = t.nics_per_node();
    std::vector<double> nic_send(static_cast<std::size_t>(t.num_nics()), 0), nic_recv(nic_send);
    std::vector<double> gpu_in(ranks, 0), gpu_out(ranks, 0);  // proxy traffic per GPU this round

    std::vector<std::size_t> order(edges.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return edges[a].bytes > edges[b].bytes; });

    std::vector<std::vector<transfer>> per_edge(edges.size());
    std::vector<int> send_nics, recv_nics;
    for (const std::size_t e : order) {
      const transfer& x = edges[e];
      const auto edge_id = static_cast<std::int32_t>(e);
      auto& out = per_edge[e];
      if (x.bytes == 0) continue;
      const link_class c = t.between(x.src, x.dst);
      if (c != link_class::inter_node) {
        out.push_back({x.src, x.dst, x.bytes, edge_id, 0, route_step::direct});
        continue;
      }
      const int u = t.node_of(x.src), v = t.node_of(x.dst);
      // NICs of a node usable by proxies, own NIC first, then least loaded.
      const auto usable = [&](int node, rank_index own, const std::vector<double>& load, std::vector<int>& nics) {
        nics.clear();
        const int own_nic = t.local_nic_of_gpu(t.local_gpu_of(own));
        std::vector<char> has(static_cast<std::size_t>(M), 0);
        for (int g = 0; g < P; ++g)
          if (capable[static_cast<std::size_t>(t.rank_of(node, g))]) has[static_cast<std::size_t>(t.local_nic_of_gpu(g))] = 1;
        nics.push_back(own_nic);
        for (int n = 0; n < M; ++n)
          if (n != own_nic && has[static_cast<std::size_t>(n)]) nics.push_back(n);
        std::stable_sort(nics.begin() + 1, nics.end(), [&](int a, int b) {
          return load[static_cast<std::size_t>(node * M + a)] < load[static_cast<std::size_t>(node * M + b)];
        });
      };
      usable(u, x.src, nic_send, send_nics);
      usable(v, x.dst, nic_recv, recv_nics);
      int most = static_cast<int>(std::min(send_nics.size(), recv_nics.size()));
      if (max_proxies > 0) most = std::min(most, max_proxies);
      // x minimising equation (1) with latencies (ties: fewer proxies).
      const auto n = static_cast<double>(x.bytes);
      int pairs = 1;
      double best = model.seconds(n, link_class::inter_node, t);
      for (int k = 2; k <= most; ++k) {
        const double spread = n * (k - 1) / k;
        const double cost = 2 * model.seconds(spread, link_class::intra_node, t) +
                            model.seconds(std::ceil(n / k), link_class::inter_node, t);
        if (cost < best) best = cost, pairs = k;
      }
      if (pairs == 1) {
        out.push_back({x.src, x.dst, x.bytes, edge_id, 0, route_step::direct});
        nic_send[static_cast<std::size_t>(t.nic_of(x.src))] += n;
        nic_recv[static_cast<std::size_t>(t.nic_of(x.dst))] += n;
        continue;
      }
      // The GPU behind a NIC: the edge's own end if it sits there, else the capable GPU with
      // the least proxy traffic (ties: lowest rank).
      const auto pick = [&](int node, int nic, rank_index own, const std::vector<double>& traffic) {
        if (t.local_nic_of_gpu(t.local_gpu_of(own)) == nic) return own;
        rank_index chosen = -1;
        for (int g = 0; g < P; ++g) {
          const rank_index r = t.rank_of(node, g);
          if (t.local_nic_of_gpu(g) != nic || !capable[static_cast<std::size_t>(r)]) continue;
          if (chosen < 0 || traffic[static_cast<std::size_t>(r)] < traffic[static_cast<std::size_t>(chosen)]) chosen = r;
        }
        return chosen;
      };
      std::vector<transfer> dispatch, cross, combine;
      const std::int64_t share = x.bytes / pairs, extra = x.bytes % pairs;
      std::int64_t offset = 0;
      for (int k = 0; k < pairs; ++k) {
        const std::int64_t b = share + (k < extra ? 1 : 0);
        if (b == 0) continue;
        const rank_index sp = pick(u, send_nics[static_cast<std::size_t>(k)], x.src, gpu_in);
        const rank_index rp = pick(v, recv_nics[static_cast<std::size_t>(k)], x.dst, gpu_out);
        if (sp != x.src) {
          dispatch.push_back({x.src, sp, b, edge_id, offset, route_step::dispatch});
          gpu_in[static_cast<std::size_t>(sp)] += static_cast<double>(b);
        }
        cross.push_back({sp, rp, b, edge_id, offset, route_step::transfer});
        nic_send[static_cast<std::size_t>(t.nic_of(sp))] += static_cast<double>(b);
        nic_recv[static_cast<std::size_t>(t.nic_of(rp))] += static_cast<double>(b);
        if (rp != x.dst) {
          combine.push_back({rp, x.dst, b, edge_id, offset, route_step::combine});
          gpu_out[static_cast<std::size_t>(rp)] += static_cast<double>(b);
        }
        offset += b;
      }
      out.insert(out.end(), dispatch.begin(), dispatch.end());
      out.insert(out.end(), cross.begin(), cross.end());
      out.insert(out.end(), combine.begin(), combine.end());
    }
    std::vector<transfer> routed;
    for (const auto& v : per_edge) routed.insert(routed.end(), v.begin(), v.end());
    if (fallback_to_direct) {
      auto direct = direct_router{}.route(edges, t);
      if (round_seconds(routed, t, model) > round_seconds(direct, t, model)) return direct;
    }
    return routed;
  }
  friend bool operator==(const proxy_router&, const proxy_router&) = default;
};
static_assert(router<proxy_router>);

ZEPPELIN_NAMESPACE_END
