// zeppelin/remap/layout.hpp
// From a transfer matrix to token-level remap lists and alltoallv arguments, and back.
//   in : a plan (core/plan.hpp; the shards of one micro-batch, in each rank's storage order)
//        and a transfer matrix M for the rank token counts A of that micro-batch
//   out: a relayout_plan (every exchange of token rows between two layouts is one: this
//        remap, and the dispatch of exec/relayout.hpp): every token range that stays or moves as a segment
//        (seq, range, from, to, offset in the from-rank's buffer, offset in the to-rank's
//        buffer), per rank the segments it sends and receives in buffer order, the layouts
//        before and after, and per rank the alltoallv counts and displacements (in tokens;
//        scale by the bytes per token).
// Buffer layouts (rank r, A_r tokens before, B_r after):
//   source buffer      = r's shards concatenated in storage order;
//   r keeps its first keep_r = A_r - sum_j M_rj tokens, then ships the rest to destinations
//   in ascending rank order (M_rj tokens each);
//   destination buffer = the kept tokens, then the tokens from each source in ascending rank
//   order (M_ir tokens each).
// The kept part is listed as a self-transfer (send_counts[r] = recv_counts[r] = keep_r at
// displacement 0), so one alltoallv(source -> destination) performs the whole remap. Segments
// never cross a shard boundary, so each carries its sequence identity and the inverse
// (inverse()) is the same exchange with the roles of source and destination swapped:
// inverse(inverse(x)) == x and applying x then inverse(x) restores every token. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/remap/problem.hpp>
#include <zeppelin/remap/solver.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A token range of one sequence that goes from one rank's buffer to another's (or stays:
//! from == to).
struct relayout_segment {
  sequence_index seq = 0;
  token_range range{};
  rank_index from = 0;
  rank_index to = 0;
  token_count from_offset = 0;   //!< position of range.begin in the from-rank's source buffer
  token_count to_offset = 0;     //!< position of range.begin in the to-rank's destination buffer
  group_index group = no_group;  //!< the ring group of the shard it came from
  std::int32_t micro_batch = 0;
  friend bool operator==(const relayout_segment&, const relayout_segment&) = default;
};

//! What one rank does in a remap.
struct rank_relayout {
  std::vector<relayout_segment> sends{};     //!< from == this rank, sorted by from_offset
  std::vector<relayout_segment> receives{};  //!< to == this rank, sorted by to_offset
  token_count source_tokens = 0;          //!< A_r
  token_count target_tokens = 0;          //!< B_r
  friend bool operator==(const rank_relayout&, const rank_relayout&) = default;
};

//! A whole remap (one micro-batch): identical on every rank.
struct relayout_plan {
  remap_matrix matrix{};            //!< the off-diagonal transfers
  std::vector<rank_relayout> ranks{};  //!< one per rank
  std::vector<placement> source{};  //!< the layout before (the plan's shards of the micro-batch)
  std::vector<placement> target{};  //!< the layout after (adjacent pieces of a sequence merged)
  friend bool operator==(const relayout_plan&, const relayout_plan&) = default;
};

// The names before 0.2, when the dispatch (exec/relayout.hpp: make_dispatch_plan) returned a
// "remap_plan" too: both are relayouts, the remap being the one between the attention layout
// and the token-balanced layout.
using remap_plan [[deprecated("renamed zeppelin::relayout_plan")]] = relayout_plan;
using remap_segment [[deprecated("renamed zeppelin::relayout_segment")]] = relayout_segment;
using rank_remap [[deprecated("renamed zeppelin::rank_relayout")]] = rank_relayout;

//! MPI_Alltoallv / ncclSend-ncclRecv arguments of one rank, in tokens, indexed by peer.
struct alltoallv_args {
  std::vector<token_count> send_counts{}, send_displs{}, recv_counts{}, recv_displs{};
  friend bool operator==(const alltoallv_args&, const alltoallv_args&) = default;
};

//! Token counts per rank of one micro-batch of a plan.
[[nodiscard]] inline std::vector<token_count> rank_tokens(const plan& p, std::int32_t micro_batch = 0) {
  std::vector<token_count> a(p.placements.size(), 0);
  for (std::size_t r = 0; r < p.placements.size(); ++r)
    for (const auto& s : p.placements[r].shards)
      if (s.micro_batch == micro_batch) a[r] += s.range.size();
  return a;
}

//! The remap problem of one micro-batch of a plan, towards the balanced target.
[[nodiscard]] inline remap_problem make_remap_problem(const plan& p, double intra_cost, double inter_cost,
                                                      std::int32_t micro_batch = 0) {
  return make_remap_problem(rank_tokens(p, micro_batch), p.gpus_per_node, intra_cost, inter_cost);
}

//! Per-token costs {b_intra, b_inter} (seconds) of a remap on `t` moving `bytes_per_token`
//! (cost/transfer_bytes.hpp: one hidden state per token) by the link model. In an alltoallv
//! every GPU sends at once, so GPUs behind a shared NIC (cluster A: two) split it: b_inter is
//! bytes_per_token * gpus_sharing_nic / NIC bandwidth, using the most shared NIC.
[[nodiscard]] inline std::pair<double, double> remap_token_costs(const topology& t, double bytes_per_token) {
  ZEPPELIN_EXPECTS(std::isfinite(bytes_per_token) && bytes_per_token > 0, "bytes per token must be positive",
                   {{"bytes_per_token", bytes_per_token}});
  int sharing = 1;
  for (int n = 0; n < t.nics_per_node(); ++n) sharing = std::max(sharing, t.gpus_sharing_nic(n));
  return {bytes_per_token * link_model::inverse_bandwidth(link_class::intra_node, t),
          bytes_per_token * sharing * link_model::inverse_bandwidth(link_class::inter_node, t)};
}

//! The remap problem of one micro-batch of a plan on topology `t` (costs by remap_token_costs).
[[nodiscard]] inline remap_problem make_remap_problem(const plan& p, const topology& t, double bytes_per_token,
                                                      std::int32_t micro_batch = 0) {
  ZEPPELIN_EXPECTS(p.gpus_per_node == t.gpus_per_node() && p.num_ranks() == t.num_ranks(),
                   "the plan and the topology disagree on the cluster shape",
                   {{"plan_ranks", double(p.num_ranks())}, {"topology_ranks", double(t.num_ranks())},
                    {"plan_gpus_per_node", double(p.gpus_per_node)}, {"topology_gpus_per_node", double(t.gpus_per_node())}});
  const auto [intra, inter] = remap_token_costs(t, bytes_per_token);
  return make_remap_problem(p, intra, inter, micro_batch);
}

namespace detail {
inline void append_merged(placement& pl, const relayout_segment& s) {
  if (!pl.shards.empty()) {
    auto& last = pl.shards.back();
    if (last.seq == s.seq && last.group == s.group && last.micro_batch == s.micro_batch &&
        last.range.end == s.range.begin) {
      last.range.end = s.range.end;
      return;
    }
  }
  pl.shards.push_back(shard{s.seq, s.range, s.group, s.micro_batch});
}
}  // namespace detail

//! Token-level remap of micro-batch `micro_batch` of `p` by matrix `m`. Throws
//! invalid_argument when m does not fit the plan (rank count, a rank sending more than it
//! holds, an unsorted, duplicate, diagonal or non-positive entry).
[[nodiscard]] inline relayout_plan make_remap_plan(const plan& p, const remap_matrix& m, std::int32_t micro_batch = 0) {
  const auto d = static_cast<rank_index>(p.placements.size());
  ZEPPELIN_EXPECTS(m.ranks == d, "the matrix and the plan have different rank counts",
                   {{"matrix_ranks", double(m.ranks)}, {"plan_ranks", double(d)}});
  const auto n = static_cast<std::size_t>(d);
  const auto a = rank_tokens(p, micro_batch);
  std::vector<token_count> sent(n, 0), received(n, 0);
  for (std::size_t k = 0; k < m.entries.size(); ++k) {
    const auto& t = m.entries[k];
    ZEPPELIN_EXPECTS(t.from >= 0 && t.from < d && t.to >= 0 && t.to < d && t.from != t.to && t.tokens > 0,
                     "bad matrix entry", {{"from", double(t.from)}, {"to", double(t.to)}, {"tokens", double(t.tokens)}});
    ZEPPELIN_EXPECTS(k == 0 || m.entries[k - 1].from < t.from ||
                         (m.entries[k - 1].from == t.from && m.entries[k - 1].to < t.to),
                     "matrix entries must be sorted and unique", {{"entry", double(k)}});
    sent[static_cast<std::size_t>(t.from)] += t.tokens;
    received[static_cast<std::size_t>(t.to)] += t.tokens;
  }
  relayout_plan out{m, std::vector<rank_relayout>(n), std::vector<placement>(n), std::vector<placement>(n)};
  for (std::size_t r = 0; r < n; ++r) {
    ZEPPELIN_EXPECTS(sent[r] <= a[r], "a rank cannot send more tokens than it holds",
                     {{"rank", double(r)}, {"sends", double(sent[r])}, {"holds", double(a[r])}});
    out.ranks[r].source_tokens = a[r];
    out.ranks[r].target_tokens = a[r] - sent[r] + received[r];
  }
  // Where the tokens from rank i start in rank j's destination buffer: after j's kept part
  // and everything from lower-ranked sources (transfers are sorted by source).
  std::vector<token_count> recv_cursor(n);
  for (std::size_t r = 0; r < n; ++r) recv_cursor[r] = a[r] - sent[r];
  std::vector<token_count> dest_offset(m.entries.size());
  for (std::size_t k = 0; k < m.entries.size(); ++k) {
    auto& c = recv_cursor[static_cast<std::size_t>(m.entries[k].to)];
    dest_offset[k] = c;
    c += m.entries[k].tokens;
  }
  // Walk each source buffer: the kept prefix, then the chunks in ascending destination.
  std::size_t k = 0;
  for (rank_index r = 0; r < d; ++r) {
    const auto ri = static_cast<std::size_t>(r);
    auto& src_pl = out.source[ri];
    for (const auto& s : p.placements[ri].shards)
      if (s.micro_batch == micro_batch) src_pl.shards.push_back(s);
    std::size_t shard_at = 0;
    token_count in_shard = 0, offset = 0;
    const auto emit = [&](rank_index to, token_count to_offset, token_count count) {
      while (count > 0) {
        const auto& s = src_pl.shards[shard_at];
        const token_count q = std::min(count, s.range.size() - in_shard);
        if (q > 0) {
          relayout_segment seg{s.seq, {s.range.begin + in_shard, s.range.begin + in_shard + q}, r, to, offset, to_offset,
                            s.group, s.micro_batch};
          out.ranks[ri].sends.push_back(seg);
          out.ranks[static_cast<std::size_t>(to)].receives.push_back(seg);
          in_shard += q;
          offset += q;
          to_offset += q;
          count -= q;
        }
        if (in_shard == s.range.size()) ++shard_at, in_shard = 0;
      }
    };
    emit(r, 0, a[ri] - sent[ri]);
    for (; k < m.entries.size() && m.entries[k].from == r; ++k)
      emit(m.entries[k].to, dest_offset[k], m.entries[k].tokens);
  }
  for (std::size_t r = 0; r < n; ++r) {
    auto& rec = out.ranks[r].receives;
    std::sort(rec.begin(), rec.end(), [](const relayout_segment& x, const relayout_segment& y) { return x.to_offset < y.to_offset; });
    for (const auto& seg : rec) detail::append_merged(out.target[r], seg);
  }
  return out;
}

//! Solves the remap problem of a plan's micro-batch on topology `t`, moving `bytes_per_token`
//! per token (cost/transfer_bytes.hpp), with `solver`, and builds its lists. The costs are the
//! physical ones of remap_token_costs (seconds per token over NVLink and over the NICs), so
//! the solver's objective is the remap's predicted time. Throws invalid_argument when the plan
//! and the topology disagree on the cluster shape or bytes_per_token is not positive.
template <remap_solver Solver>
[[nodiscard]] relayout_plan plan_remap(const plan& p, const topology& t, double bytes_per_token, const Solver& solver,
                                       std::int32_t micro_batch = 0) {
  return make_remap_plan(p, solver.solve(make_remap_problem(p, t, bytes_per_token, micro_batch)), micro_batch);
}

//! The same with relative per-token weights (intra_cost for a token moved inside a node,
//! inter_cost across nodes; only their ratio matters to the plan), for a cluster the library
//! has no topology for.
template <remap_solver Solver>
[[nodiscard]] relayout_plan plan_remap(const plan& p, double intra_cost, double inter_cost, const Solver& solver,
                                       std::int32_t micro_batch = 0) {
  return make_remap_plan(p, solver.solve(make_remap_problem(p, intra_cost, inter_cost, micro_batch)), micro_batch);
}

//! The exact inverse: moves every token back (source and destination swapped).
[[nodiscard]] inline relayout_plan inverse(const relayout_plan& x) {
  relayout_plan y{};
  y.matrix.ranks = x.matrix.ranks;
  y.matrix.entries.reserve(x.matrix.entries.size());
  for (const auto& t : x.matrix.entries) y.matrix.entries.push_back({t.to, t.from, t.tokens});
  std::sort(y.matrix.entries.begin(), y.matrix.entries.end(), [](const remap_entry& a, const remap_entry& b) {
    return a.from != b.from ? a.from < b.from : a.to < b.to;
  });
  const auto flip = [](relayout_segment s) {
    std::swap(s.from, s.to);
    std::swap(s.from_offset, s.to_offset);
    return s;
  };
  y.ranks.resize(x.ranks.size());
  for (std::size_t r = 0; r < x.ranks.size(); ++r) {
    const auto& xr = x.ranks[r];
    auto& yr = y.ranks[r];
    yr.source_tokens = xr.target_tokens;
    yr.target_tokens = xr.source_tokens;
    yr.sends.reserve(xr.receives.size());
    yr.receives.reserve(xr.sends.size());
    for (const auto& s : xr.receives) yr.sends.push_back(flip(s));
    for (const auto& s : xr.sends) yr.receives.push_back(flip(s));
  }
  y.source = x.target;
  y.target = x.source;
  return y;
}

//! alltoallv arguments of rank r (dense over the d peers; O(d + segments of r)). A peer
//! with nothing to exchange has count 0 and displacement 0.
[[nodiscard]] inline alltoallv_args alltoallv(const relayout_plan& x, rank_index r) {
  ZEPPELIN_EXPECTS(r >= 0 && static_cast<std::size_t>(r) < x.ranks.size(), "rank out of range",
                   {{"rank", double(r)}, {"ranks", double(x.ranks.size())}});
  const auto n = x.ranks.size();
  alltoallv_args args{std::vector<token_count>(n, 0), std::vector<token_count>(n, 0),
                      std::vector<token_count>(n, 0), std::vector<token_count>(n, 0)};
  std::vector<bool> seen_send(n, false), seen_recv(n, false);
  for (const auto& s : x.ranks[static_cast<std::size_t>(r)].sends) {
    const auto peer = static_cast<std::size_t>(s.to);
    if (!seen_send[peer]) args.send_displs[peer] = s.from_offset, seen_send[peer] = true;
    args.send_counts[peer] += s.range.size();
  }
  for (const auto& s : x.ranks[static_cast<std::size_t>(r)].receives) {
    const auto peer = static_cast<std::size_t>(s.from);
    if (!seen_recv[peer]) args.recv_displs[peer] = s.to_offset, seen_recv[peer] = true;
    args.recv_counts[peer] += s.range.size();
  }
  return args;
}

ZEPPELIN_NAMESPACE_END
