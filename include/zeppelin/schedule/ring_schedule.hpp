// zeppelin/schedule/ring_schedule.hpp
// What every position of ONE ring group of a plan computes, against the K/V of every origin
// (Zeppelin 3.2, TE CP "P2P", LLaMA-3 CP).
//   in : the group's layout (schedule/group_layout.hpp: position p of the ring is rank
//        groups[g].ranks[p]; its "group buffer" is the concatenation, in placement order, of its
//        shards of group g: one sequence cut into zigzag chunks, or the chunks of several
//        sequences as in TE's global ring), or the plan, batch, group and micro-batch it
//        comes from.
//   out: plain data: the layout, and the attention blocks of position p's
//        queries against the group buffer of origin o, blocks(p, o), stored only for the
//        pairs that compute something; step(k, p) is round k of the ring, o = (p - k) mod G,
//        in which p holds the K/V that started on p - k. The union over (p, o) of the computed (q, k) pairs is exactly the causal
//        pairs of every sequence of the group, each once, for ANY layout that tiles the
//        sequences (zigzag with uneven chunks, contiguous slices, ...). Masks are derived from
//        token positions, never assumed.
// Who sends what to whom is not here: it is the group's collective (program/: the ring passes
// K/V to p + 1 each round and returns dK/dV on the reversed ring; the all-gather gathers every
// origin first), built over these blocks. For zigzag the blocks reproduce TE's table:
// k = 0 causal on the local chunks, 1 <= k <= p "lower" (Q_local x head chunk of the KV,
// full), k > p "upper" (tail chunk of Q x KV, full).
// Blocks: for a query shard Q and a key shard K of the same sequence with overlap
// I = Q n K: full([I.begin, Q.end) x [K.begin, I.begin)), causal(I x I) (square, so any kernel
// alignment - top-left, bottom-right, absolute - is exact), full([I.end, Q.end) x I); without
// overlap full(Q x K) when K precedes Q, nothing otherwise. Empty blocks are left out. Blocks
// of (p, o) are listed query shard by query shard (p's layout order), then key shard (o's
// layout order). Sizes are in tokens.
// Cost: O(G + S log S + B) time and O(G + S + B) memory for S group shards and B
// blocks: only shards of the same sequence are paired, and only pairs that compute are stored.
// Host-only builder (std::vector); no range-v3, so nvcc compiles it in host code.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/block_mask.hpp>
#include <zeppelin/schedule/group_layout.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One attention block: queries q of the rank x keys k of the KV buffer it holds, one sequence.
struct attention_block {
  sequence_index seq = 0;
  token_range q{};                      //!< query positions (on the computing rank)
  token_range k{};                      //!< key positions (in the KV buffer held this round)
  block_mask mask = block_mask::none;   //!< causal (then q == k) or full; never none
  token_count q_row = 0;                //!< first query row in the computing rank's group buffer
  token_count kv_row = 0;               //!< first key row in the held KV buffer (origin's group buffer)
  friend constexpr bool operator==(const attention_block&, const attention_block&) = default;
};

//! What ring position `position` computes in round k: its queries against the K/V of origin
//! (position - k) mod G. A view into its ring_schedule (valid while the schedule lives).
struct forward_step {
  std::int32_t position = 0;
  rank_index rank = 0;
  std::int32_t kv_origin = 0;  //!< position whose K/V is held (and computed with) this round
  std::span<const attention_block> blocks;
};

//! The blocks of one ring group over its layout (schedule/group_layout.hpp). Only the
//! (position, origin) pairs that compute something are stored (blocks of pair i:
//! block_list[pair_begin[i], pair_begin[i + 1]), pairs sorted by position then origin), so a
//! group of G ranks costs O(G + S + B), never G^2: a global ring of 1M one-token sequences has
//! G pairs, not G^2 steps.
struct ring_schedule : group_layout {
  std::vector<std::int64_t> pair_key;            //!< position * G + origin, ascending, one per computing pair
  std::vector<std::size_t> pair_begin;           //!< pair_key.size() + 1 offsets into block_list
  std::vector<attention_block> block_list;       //!< every block, grouped by pair

  [[nodiscard]] std::int32_t rounds() const noexcept { return size(); }
  //! The blocks of position p's queries against the group buffer of origin o (empty when
  //! the pair computes nothing). O(log pairs).
  [[nodiscard]] std::span<const attention_block> blocks(std::int32_t p, std::int32_t o) const {
    const std::int64_t key = static_cast<std::int64_t>(p) * size() + o;
    const auto it = std::lower_bound(pair_key.begin(), pair_key.end(), key);
    if (it == pair_key.end() || *it != key) return {};
    const auto i = static_cast<std::size_t>(it - pair_key.begin());
    return {block_list.data() + pair_begin[i], block_list.data() + pair_begin[i + 1]};
  }
  //! What position p computes in round k (0 <= k < G): its blocks against origin (p - k) mod G.
  [[nodiscard]] forward_step step(std::int32_t k, std::int32_t p) const {
    const std::int32_t G = size();
    const std::int32_t origin = ((p - k) % G + G) % G;
    return {p, ranks[static_cast<std::size_t>(p)], origin, blocks(p, origin)};
  }
  //! Blocks over every pair (B).
  [[nodiscard]] std::size_t block_count() const noexcept { return block_list.size(); }
  friend bool operator==(const ring_schedule&, const ring_schedule&) = default;
};

//! Calls visit(query range, key range, mask) for each non-empty block of the causal attention
//! of queries `q` against keys `k` of one sequence, in the order full-before, diagonal,
//! full-after (see the file comment). No allocation: the pricing of launch sets walks
//! millions of shard pairs with it.
template <class Visit>
constexpr void for_each_block(token_range q, token_range k, Visit&& visit) {
  if (q.empty() || k.empty()) return;
  const auto emit = [&](token_range qr, token_range kr, block_mask m) {
    if (!qr.empty() && !kr.empty()) visit(qr, kr, m);
  };
  const token_range i{std::max(q.begin, k.begin), std::min(q.end, k.end)};
  if (i.empty()) {
    if (k.end <= q.begin) emit(q, k, block_mask::full);
    return;
  }
  emit({i.begin, q.end}, {k.begin, i.begin}, block_mask::full);
  emit(i, i, classify_block(i, i));
  emit({i.end, q.end}, i, block_mask::full);
}

//! Blocks of the causal attention of query shard `q` against key shard `k` of one sequence,
//! appended to `out` (for_each_block's order), with their rows in the two group buffers.
//! Returns the causal pairs the appended blocks cover (== causal_pairs(q.range, k.range)).
inline std::int64_t append_blocks(const group_shard& q, const group_shard& k, std::vector<attention_block>& out) {
  if (q.seq != k.seq) return 0;
  std::int64_t pairs = 0;
  for_each_block(q.range, k.range, [&](token_range qr, token_range kr, block_mask m) {
    out.push_back({q.seq, qr, kr, m, q.row + (qr.begin - q.range.begin), k.row + (kr.begin - k.range.begin)});
    pairs += block_pairs(qr, kr, m);
  });
  return pairs;
}

//! The blocks of every computing (position, origin) pair of `layout` (see the file comment).
//! Cost: O(S log S + B) for S group shards and B emitted blocks.
[[nodiscard]] inline ring_schedule make_ring_schedule(group_layout layout) {
  using std::size_t;
  ring_schedule s;
  static_cast<group_layout&>(s) = std::move(layout);
  const std::int32_t G = s.size();
  // every shard of the group by sequence, in (position, layout index) order: a query shard
  // pairs only with the shards of its own sequence, so the blocks cost O(S log S + B) and no
  // (position, origin) pair is visited unless it computes something
  struct occurrence {
    sequence_index seq;
    std::int32_t position;
    std::int32_t index;  // into layout[position]
  };
  std::vector<occurrence> occurrences;
  occurrences.reserve(s.shard_count());
  for (std::int32_t pos = 0; pos < G; ++pos)
    for (size_t i = 0; i < s.layout[static_cast<size_t>(pos)].size(); ++i)
      occurrences.push_back({s.layout[static_cast<size_t>(pos)][i].seq, pos, static_cast<std::int32_t>(i)});
  std::stable_sort(occurrences.begin(), occurrences.end(), [](const occurrence& x, const occurrence& y) { return x.seq < y.seq; });

  // per position: its blocks tagged with their origin, emitted query shard by query shard and,
  // per query shard, key shard by key shard in (origin, layout) order; a stable counting sort
  // by origin (over the origins present) then gives each pair's blocks in the documented order
  std::vector<std::pair<std::int32_t, attention_block>> row;
  std::vector<attention_block> scratch;
  std::vector<std::size_t> slot_of(static_cast<size_t>(G), 0);  // per origin: next free index in the pair's run
  std::vector<std::int32_t> origins;
  s.pair_begin.push_back(0);
  for (std::int32_t pos = 0; pos < G; ++pos) {
    row.clear();
    for (const group_shard& q : s.layout[static_cast<size_t>(pos)]) {
      auto it = std::lower_bound(occurrences.begin(), occurrences.end(), q.seq,
                                 [](const occurrence& x, sequence_index seq) { return x.seq < seq; });
      for (; it != occurrences.end() && it->seq == q.seq; ++it) {
        scratch.clear();
        append_blocks(q, s.layout[static_cast<size_t>(it->position)][static_cast<size_t>(it->index)], scratch);
        for (const attention_block& blk : scratch) row.emplace_back(it->position, blk);
      }
    }
    if (row.empty()) continue;
    origins.clear();
    for (const auto& [origin, blk] : row)
      if (slot_of[static_cast<size_t>(origin)]++ == 0) origins.push_back(origin);
    std::sort(origins.begin(), origins.end());
    const std::size_t base = s.block_list.size();
    std::size_t at = base;
    for (const std::int32_t o : origins) {
      const std::size_t count = slot_of[static_cast<size_t>(o)];
      slot_of[static_cast<size_t>(o)] = at;
      s.pair_key.push_back(static_cast<std::int64_t>(pos) * G + o);
      at += count;
      s.pair_begin.push_back(at);
    }
    s.block_list.resize(at);
    for (const auto& [origin, blk] : row) s.block_list[slot_of[static_cast<size_t>(origin)]++] = blk;
    for (const std::int32_t o : origins) slot_of[static_cast<size_t>(o)] = 0;
  }
  return s;
}

//! The schedule of ring group `g` of `p` for the shards of micro-batch `micro_batch`:
//! make_group_layout (which validates the group and its tiling), then its blocks.
//! Cost: O(G + S log S + B) for S group shards and B emitted blocks.
[[nodiscard]] inline ring_schedule make_ring_schedule(const plan& p, const batch& b, group_index g, std::int32_t micro_batch = 0) {
  return make_ring_schedule(make_group_layout(p, b, g, micro_batch));
}

//! Causal pairs one step computes (sum of block_pairs over its blocks).
template <class Step>
[[nodiscard]] std::int64_t step_pairs(const Step& step) noexcept {
  std::int64_t n = 0;
  for (const attention_block& blk : step.blocks) n += block_pairs(blk.q, blk.k, blk.mask);
  return n;
}

ZEPPELIN_NAMESPACE_END
