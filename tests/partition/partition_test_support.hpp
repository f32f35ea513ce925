// tests/partition/partition_test_support.hpp
// Shared helpers of the partition tests: random batches and topologies, and the balance
// checks every ring group must pass.
#pragma once

#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/partition.hpp>
#include <zeppelin/schedule/zigzag.hpp>

#include <map>
#include <vector>

namespace zeppelin_test {

using namespace zeppelin;

inline topology make_topology(int nodes, int gpus) {
  topology_config c;
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.nics_per_node = 1;
  c.intra_node = {300e9, 3e-6};
  c.nic = {48e9, 10e-6};
  c.gpu = {"test", 1e15, 80e9, 3e12};
  return topology(c);
}

//! A random batch of `total` tokens: dataset draws or uniform lengths, some tiny.
inline batch random_batch(random_generator& rng, token_count total) {
  const auto kind = rng.below(4);
  if (kind < 3) {
    const auto hist = kind == 0 ? datasets::github() : kind == 1 ? datasets::arxiv() : datasets::prolong64k();
    // scale down: draw at most `total` tokens with lengths capped to keep batches varied
    const token_count cap = std::max<token_count>(1, static_cast<token_count>(rng.between(1, total)));
    return sample_batch(hist, total, rng, {.min_length = 1, .max_length = cap});
  }
  std::vector<token_count> lengths;
  token_count left = total;
  const token_count top = rng.between(1, total);
  while (left > 0) {
    const token_count l = std::min(left, rng.between(1, top));
    lengths.push_back(l);
    left -= l;
  }
  return batch(lengths);
}

//! Causal pairs each rank computes for sequence `seq` (only ranks holding some of it).
inline std::map<rank_index, std::int64_t> pairs_of(const plan& p, sequence_index seq, token_count body_end = -1) {
  std::map<rank_index, std::int64_t> out;
  for (rank_index r = 0; r < p.num_ranks(); ++r)
    for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards)
      if (s.seq == seq) {
        token_range q = s.range;
        if (body_end >= 0) q.end = std::min(q.end, body_end);
        out[r] += causal_pairs(q, token_range{0, q.end});
      }
  return out;
}

//! For every grouped sequence: the spread (max - min) of causal pairs over the ranks of its
//! group (ranks holding none count 0) must be <= zigzag_imbalance_bound(length, G).
inline bool zigzag_balanced(const plan& p, const batch& b, std::int64_t* worst_excess = nullptr) {
  std::vector<group_index> group(static_cast<std::size_t>(b.size()), no_group);
  for (const auto& pl : p.placements)
    for (const shard& s : pl.shards) group[static_cast<std::size_t>(s.seq)] = s.group;
  std::vector<std::map<rank_index, std::int64_t>> pairs(static_cast<std::size_t>(b.size()));
  for (rank_index r = 0; r < p.num_ranks(); ++r)
    for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards)
      pairs[static_cast<std::size_t>(s.seq)][r] += causal_pairs(s.range, token_range{0, s.range.end});
  bool ok = true;
  for (sequence_index i = 0; i < b.size(); ++i) {
    const group_index g = group[static_cast<std::size_t>(i)];
    if (g == no_group) continue;
    const auto& ranks = p.groups[static_cast<std::size_t>(g)].ranks;
    std::int64_t lo = -1, hi = 0;
    for (const rank_index r : ranks) {
      const auto it = pairs[static_cast<std::size_t>(i)].find(r);
      const std::int64_t v = it == pairs[static_cast<std::size_t>(i)].end() ? 0 : it->second;
      lo = lo < 0 ? v : std::min(lo, v);
      hi = std::max(hi, v);
    }
    const std::int64_t bound = zigzag_imbalance_bound(b.length(i), static_cast<std::int32_t>(ranks.size()));
    if (hi - lo > bound) {
      ok = false;
      if (worst_excess) *worst_excess = std::max(*worst_excess, hi - lo - bound);
    }
  }
  return ok;
}

//! Per grouped sequence, per rank of its group (ring order): tokens and causal pairs it holds.
struct ring_share {
  rank_index rank;
  token_count tokens = 0;
  std::int64_t pairs = 0;
};
inline std::vector<std::vector<ring_share>> ring_shares(const plan& p, const batch& b) {
  std::vector<group_index> group(static_cast<std::size_t>(b.size()), no_group);
  std::vector<std::map<rank_index, ring_share>> held(static_cast<std::size_t>(b.size()));
  for (rank_index r = 0; r < p.num_ranks(); ++r)
    for (const shard& s : p.placements[static_cast<std::size_t>(r)].shards) {
      group[static_cast<std::size_t>(s.seq)] = s.group;
      auto& h = held[static_cast<std::size_t>(s.seq)][r];
      h.rank = r;
      h.tokens += s.range.size();
      h.pairs += causal_pairs(s.range, token_range{0, s.range.end});
    }
  std::vector<std::vector<ring_share>> out(static_cast<std::size_t>(b.size()));
  for (sequence_index i = 0; i < b.size(); ++i) {
    const group_index g = group[static_cast<std::size_t>(i)];
    if (g == no_group) continue;
    for (const rank_index r : p.groups[static_cast<std::size_t>(g)].ranks) {
      const auto it = held[static_cast<std::size_t>(i)].find(r);
      out[static_cast<std::size_t>(i)].push_back(it == held[static_cast<std::size_t>(i)].end() ? ring_share{r, 0, 0} : it->second);
    }
  }
  return out;
}

//! The balance of the hierarchical partitioner's rings: a ring whose ranks hold the plain
//! zigzag's shares (in ring order) must be within zigzag_imbalance_bound; a fragment group
//! with shares by room (detail/weighted_zigzag.hpp) must give every rank its token share of
//! the sequence's work up to one token's mean work: |2 pairs - w (len + 1)| <= len + 1.
inline bool fragments_balanced(const plan& p, const batch& b, int* weighted_rings = nullptr) {
  const auto shares = ring_shares(p, b);
  bool ok = true;
  for (sequence_index i = 0; i < b.size(); ++i) {
    const auto& ring = shares[static_cast<std::size_t>(i)];
    if (ring.empty()) continue;
    const token_count len = b.length(i);
    const auto G = static_cast<std::int32_t>(ring.size());
    bool plain = true;
    for (std::int32_t q = 0; q < G; ++q) plain = plain && ring[static_cast<std::size_t>(q)].tokens == zigzag_tokens(len, G, q);
    if (plain) {
      std::int64_t lo = ring.front().pairs, hi = lo;
      for (const auto& r : ring) lo = std::min(lo, r.pairs), hi = std::max(hi, r.pairs);
      ok = ok && hi - lo <= zigzag_imbalance_bound(len, G);
      continue;
    }
    if (weighted_rings) ++*weighted_rings;
    for (const auto& r : ring) {
      const std::int64_t off = 2 * r.pairs - static_cast<std::int64_t>(r.tokens) * (len + 1);
      ok = ok && r.tokens > 0 && (off < 0 ? -off : off) <= len + 1;
    }
  }
  return ok;
}

}  // namespace zeppelin_test
