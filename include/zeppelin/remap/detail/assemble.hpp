// zeppelin/remap/detail/assemble.hpp
// Turns per-rank inter-node amounts and node-level flows into a sparse transfer matrix.
//   in : the problem, x_i (inter-node tokens rank i sends, 0 <= x_i <= surplus_i),
//        r_j (inter-node tokens rank j receives, 0 <= r_j <= deficit_j), node flows whose
//        row sums are the node sums of x and column sums the node sums of r
//   out: M with the intra-node part of every node matched north-west-corner in rank order
//        (senders' surplus_i - x_i against receivers' deficit_j - r_j) and each node flow
//        (u, v) drawn, in (u, v) order, from u's senders and v's receivers in rank order.
// The inputs are checked first (bounds of x and r, each node's intra part sending what it
// receives, flow sums equal to the node sums): the cursors below then stay inside their
// node, and an inconsistent solver result throws zeppelin::error instead of reading out of
// bounds.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/remap/detail/node_transport.hpp>
#include <zeppelin/remap/problem.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

inline remap_matrix assemble_remap(const remap_problem& p, const std::vector<token_count>& x,
                                   const std::vector<token_count>& r, const std::vector<node_flow>& flows) {
  const rank_index d = p.num_ranks();
  const int P = p.gpus_per_node, nodes = p.num_nodes();
  {
    const auto fail = [](const char* what, rank_index where, token_count value) {
      ZEPPELIN_THROW(error, std::string("remap assembly: ") + what,
                     {{"at", static_cast<double>(where)}, {"value", static_cast<double>(value)}});
    };
    if (x.size() != static_cast<std::size_t>(d) || r.size() != static_cast<std::size_t>(d))
      fail("x and r need one entry per rank", d, static_cast<token_count>(x.size()));
    // per node: intra-node part sent minus received, x minus flows out, r minus flows in
    std::vector<token_count> intra(static_cast<std::size_t>(nodes), 0), out(intra), in(intra);
    for (rank_index i = 0; i < d; ++i) {
      const auto k = static_cast<std::size_t>(i);
      if (x[k] < 0 || x[k] > p.surplus(i)) fail("an inter-node amount outside [0, surplus]", i, x[k]);
      if (r[k] < 0 || r[k] > p.deficit(i)) fail("an inter-node amount outside [0, deficit]", i, r[k]);
      const auto u = static_cast<std::size_t>(p.node_of(i));
      intra[u] += p.surplus(i) - x[k] - (p.deficit(i) - r[k]);
      out[u] += x[k];
      in[u] += r[k];
    }
    for (const auto& f : flows) {
      if (f.from < 0 || f.from >= nodes || f.to < 0 || f.to >= nodes || f.tokens < 0)
        fail("a node flow outside the nodes", f.from, f.tokens);
      out[static_cast<std::size_t>(f.from)] -= f.tokens;
      in[static_cast<std::size_t>(f.to)] -= f.tokens;
    }
    for (int u = 0; u < nodes; ++u) {
      const auto k = static_cast<std::size_t>(u);
      if (intra[k] != 0) fail("a node's intra-node part does not balance", u, intra[k]);
      if (out[k] != 0 || in[k] != 0) fail("the node flows do not match x and r", u, out[k] != 0 ? out[k] : in[k]);
    }
  }
  remap_matrix m{d, {}};
  // Intra-node: node by node, both sides in rank order.
  for (int u = 0; u < nodes; ++u) {
    rank_index j = u * P;
    token_count need = 0;
    for (rank_index i = u * P; i < (u + 1) * P; ++i) {
      token_count give = p.surplus(i) - x[static_cast<std::size_t>(i)];
      while (give > 0) {
        while (need == 0) {
          need = p.deficit(j) - r[static_cast<std::size_t>(j)];
          if (need == 0) ++j;
        }
        const token_count q = std::min(give, need);
        m.entries.push_back({i, j, q});
        give -= q;
        need -= q;
        if (need == 0) ++j;
      }
    }
  }
  // Inter-node: per node, a cursor over its senders and one over its receivers.
  std::vector<rank_index> send_at(static_cast<std::size_t>(nodes)), recv_at(static_cast<std::size_t>(nodes));
  std::vector<token_count> send_left(static_cast<std::size_t>(nodes), 0), recv_left(static_cast<std::size_t>(nodes), 0);
  for (int u = 0; u < nodes; ++u) send_at[static_cast<std::size_t>(u)] = recv_at[static_cast<std::size_t>(u)] = u * P;
  for (const auto& f : flows) {
    auto& si = send_at[static_cast<std::size_t>(f.from)];
    auto& sl = send_left[static_cast<std::size_t>(f.from)];
    auto& rj = recv_at[static_cast<std::size_t>(f.to)];
    auto& rl = recv_left[static_cast<std::size_t>(f.to)];
    token_count amount = f.tokens;
    while (amount > 0) {
      while (sl == 0) {
        sl = x[static_cast<std::size_t>(si)];
        if (sl == 0) ++si;
      }
      while (rl == 0) {
        rl = r[static_cast<std::size_t>(rj)];
        if (rl == 0) ++rj;
      }
      const token_count q = std::min({amount, sl, rl});
      m.entries.push_back({si, rj, q});
      amount -= q;
      sl -= q;
      rl -= q;
      if (sl == 0) ++si;
      if (rl == 0) ++rj;
    }
  }
  std::sort(m.entries.begin(), m.entries.end(), [](const remap_entry& a, const remap_entry& b) {
    return a.from != b.from ? a.from < b.from : a.to < b.to;
  });
  return m;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
