// zeppelin/remap/detail/node_transport.hpp
// Node-level inter-node flows of a remap: a transport plan with no flow from a node to itself.
//   in : out_u >= 0 (tokens node u sends to other nodes) and in_u >= 0 (tokens it receives
//        from other nodes), sum out = sum in = F, and out_u + in_u <= F for every u
//   out: flows (u, v, amount > 0), u != v, sorted by (u, v), one per pair, with row sums out
//        and column sums in
// The condition is necessary (a node's traffic can only pair with other nodes' traffic) and
// sufficient: the greedy below always finds a positive step. It moves
//   q = min(out_src, in_dst, F - m3)
// between u = the node with the largest out + in and v = the other node with the largest
// out + in able to take the opposite side, m3 being the largest out + in outside {u, v}.
// The invariant out_x + in_x <= F survives (x outside {u, v} keeps out + in <= m3 <= F - q;
// u and v lose q like F). q > 0: a third tight node x (m3 == F) would make two tight nodes
// u, x whose traffic sums to 2F, leaving v none. Each step empties a side of u or v or makes
// a node tight; a tight node stays tight and takes part in every later step (else q == 0), so
// there are at most 2N + 2 steps of O(N): O(N^2). When no node both sends and receives
// (the case of the exact solver with b_inter >= b_intra) a north-west-corner pass is used: O(N).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct node_flow {
  int from = 0;
  int to = 0;
  token_count tokens = 0;
};

inline std::vector<node_flow> node_transport(std::vector<token_count> out, std::vector<token_count> in) {
  const int n = static_cast<int>(out.size());
  std::vector<node_flow> flows;
  token_count left = 0;
  bool mixed = false;
  for (int u = 0; u < n; ++u) {
    left += out[static_cast<std::size_t>(u)];
    mixed = mixed || (out[static_cast<std::size_t>(u)] > 0 && in[static_cast<std::size_t>(u)] > 0);
  }
  if (!mixed) {
    int v = 0;
    for (int u = 0; u < n; ++u) {
      auto& o = out[static_cast<std::size_t>(u)];
      while (o > 0) {
        while (in[static_cast<std::size_t>(v)] == 0) ++v;
        auto& i = in[static_cast<std::size_t>(v)];
        const token_count q = std::min(o, i);
        flows.push_back({u, v, q});
        o -= q;
        i -= q;
      }
    }
    return flows;  // already sorted by (from, to), one entry per pair
  }
  const auto load = [&](int x) { return out[static_cast<std::size_t>(x)] + in[static_cast<std::size_t>(x)]; };
  while (left > 0) {
    int u = 0;
    for (int x = 1; x < n; ++x)
      if (load(x) > load(u)) u = x;
    const bool u_sends = out[static_cast<std::size_t>(u)] > 0;
    int v = -1;
    for (int x = 0; x < n; ++x) {
      if (x == u) continue;
      if ((u_sends ? in : out)[static_cast<std::size_t>(x)] == 0) continue;
      if (v < 0 || load(x) > load(v)) v = x;
    }
    token_count third = 0;
    for (int x = 0; x < n; ++x)
      if (x != u && x != v) third = std::max(third, load(x));
    const int src = u_sends ? u : v, dst = u_sends ? v : u;
    const token_count q =
        std::min({out[static_cast<std::size_t>(src)], in[static_cast<std::size_t>(dst)], left - third});
    flows.push_back({src, dst, q});
    out[static_cast<std::size_t>(src)] -= q;
    in[static_cast<std::size_t>(dst)] -= q;
    left -= q;
  }
  std::sort(flows.begin(), flows.end(),
            [](const node_flow& a, const node_flow& b) { return a.from != b.from ? a.from < b.from : a.to < b.to; });
  std::size_t w = 0;
  for (std::size_t k = 0; k < flows.size(); ++k) {
    if (w > 0 && flows[w - 1].from == flows[k].from && flows[w - 1].to == flows[k].to)
      flows[w - 1].tokens += flows[k].tokens;
    else
      flows[w++] = flows[k];
  }
  flows.resize(w);
  return flows;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
