// zeppelin/partition/plan_stats.hpp
// Per-rank figures of a plan, for tools, tests and comparisons of partitioners.
//   in : plan, batch, topology
//   out: per rank: tokens, causal pairs (each shard's queries against every earlier key of
//        its sequence: the attention work of that rank), tokens per zone, and the
//        cross-node KV volume it sends; plus max / mean summaries.
// Cross-node volume (DEFINITION): the KV tokens a rank sends over a link that crosses nodes
// in one forward attention pass of one layer. In a group of G ranks in ring order whose
// ranks hold t_0..t_{G-1} tokens of the group's sequences (S = sum t_j), rank i sends every
// block except its successor's own to the successor in G - 1 steps: S - t_{i+1}. The same
// holds for a ring all-gather (allgather, per_document), which NCCL runs over the same ring.
// The volume counts only edges whose successor is on another node; shards without a group
// send nothing. Per micro-batch volumes add up. (Proxy routing, route/, spreads these bytes
// over NICs but does not change the count.)
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct rank_stats {
  token_count tokens = 0;
  std::int64_t causal_pairs = 0;
  //! Tokens held per zone: [local, intra, inter] (indexed by zone_kind).
  std::array<token_count, 3> zone_tokens{};
  //! KV tokens this rank sends across nodes per forward pass (see the file comment).
  token_count cross_node_tokens = 0;
  friend bool operator==(const rank_stats&, const rank_stats&) = default;
};

struct plan_stats {
  std::vector<rank_stats> ranks;
  [[nodiscard]] std::int64_t max_pairs() const noexcept {
    std::int64_t m = 0;
    for (const auto& r : ranks) m = std::max(m, r.causal_pairs);
    return m;
  }
  [[nodiscard]] double mean_pairs() const noexcept {
    double s = 0;
    for (const auto& r : ranks) s += static_cast<double>(r.causal_pairs);
    return ranks.empty() ? 0.0 : s / static_cast<double>(ranks.size());
  }
  //! max / mean causal pairs (1 = perfectly balanced attention; 1 for an empty plan).
  [[nodiscard]] double pair_imbalance() const noexcept {
    const double mean = mean_pairs();
    return mean > 0 ? static_cast<double>(max_pairs()) / mean : 1.0;
  }
  [[nodiscard]] token_count max_cross_node_tokens() const noexcept {
    token_count m = 0;
    for (const auto& r : ranks) m = std::max(m, r.cross_node_tokens);
    return m;
  }
  [[nodiscard]] token_count total_cross_node_tokens() const noexcept {
    token_count s = 0;
    for (const auto& r : ranks) s += r.cross_node_tokens;
    return s;
  }
  [[nodiscard]] token_count max_tokens() const noexcept {
    token_count m = 0;
    for (const auto& r : ranks) m = std::max(m, r.tokens);
    return m;
  }
};

//! Per-rank statistics of `p` (which should pass validate(p, b, t)).
[[nodiscard]] inline plan_stats compute_stats(const plan& p, const batch& b, const topology& t) {
  (void)b;
  plan_stats out;
  out.ranks.resize(p.placements.size());
  // tokens of each (group, micro-batch) on each rank
  std::map<std::pair<group_index, std::int32_t>, std::map<rank_index, token_count>> held;
  for (rank_index r = 0; r < p.num_ranks(); ++r) {
    auto& st = out.ranks[static_cast<std::size_t>(r)];
    for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards) {
      st.tokens += s.range.size();
      st.causal_pairs += causal_pairs_from_start(s.range);
      const zone_kind z = s.group == no_group ? zone_kind::local : p.groups[static_cast<std::size_t>(s.group)].zone;
      st.zone_tokens[static_cast<std::size_t>(z)] += s.range.size();
      if (s.group != no_group) held[{s.group, s.micro_batch}][r] += s.range.size();
    }
  }
  for (const auto& [key, per_rank] : held) {
    const auto& ring = p.groups[static_cast<std::size_t>(key.first)].ranks;
    token_count total = 0;
    for (const auto& [r, n] : per_rank) total += n;
    const std::size_t G = ring.size();
    for (std::size_t i = 0; i < G; ++i) {
      const rank_index from = ring[i], to = ring[(i + 1) % G];
      if (t.node_of(from) == t.node_of(to)) continue;
      const auto it = per_rank.find(to);
      out.ranks[static_cast<std::size_t>(from)].cross_node_tokens += total - (it == per_rank.end() ? 0 : it->second);
    }
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
