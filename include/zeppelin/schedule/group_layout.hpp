// zeppelin/schedule/group_layout.hpp
// Where ONE group of a plan keeps its tokens: per ring position, its "group buffer" (the
// concatenation, in placement order, of its shards of the group), for one micro-batch.
//   in : a plan (the partitioner's layout is the source of truth), the batch, a group g and a
//        micro-batch. Position p of the group is rank groups[g].ranks[p].
//   out: plain data: the group's ranks in order, each position's group buffer (its shards and
//        their rows) and rows.
// This is what every collective needs. The ring and all-gather collectives add the attention
// blocks of every (position, origin) pair (schedule/ring_schedule.hpp); the all-to-all
// collective computes on the tokens of a subgroup gathered in sequence order and never needs
// those pairs, whose number grows as the square of a sequence's shards in the group.
// Cost: O(R + S log S) for R ranks in the plan and S shards. Host-only builder (std::vector),
// nvcc-safe.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One shard in a position's group buffer.
struct group_shard {
  sequence_index seq = 0;
  token_range range{};     //!< positions inside the sequence
  std::int32_t shard = 0;  //!< index into plan.placements[rank].shards
  token_count row = 0;     //!< first row of the shard in the group buffer
  friend constexpr bool operator==(const group_shard&, const group_shard&) = default;
};

//! The layout of one group (see the file comment).
struct group_layout {
  group_index group = no_group;
  zone_kind zone = zone_kind::local;
  collective_kind collective = collective_kind::ring;
  std::int32_t micro_batch = 0;
  std::vector<rank_index> ranks;                 //!< ring order (position -> rank)
  std::vector<std::vector<group_shard>> layout;  //!< per position: its group buffer
  std::vector<token_count> buffer_tokens;        //!< per position: rows of its group buffer

  [[nodiscard]] std::int32_t size() const noexcept { return static_cast<std::int32_t>(ranks.size()); }
  //! Shards over every position (S).
  [[nodiscard]] std::size_t shard_count() const noexcept {
    std::size_t n = 0;
    for (const auto& l : layout) n += l.size();
    return n;
  }
  friend bool operator==(const group_layout&, const group_layout&) = default;
};

//! The layout of group `g` of `p` for the shards of micro-batch `micro_batch`.
//! Throws invalid_argument when g is not a group of p, a group rank is out of range or repeated,
//! a shard of g sits on a rank outside g or outside its sequence, or the group's shards of a
//! sequence do not tile [0, length) exactly (every collective's exact cover needs a tiling).
[[nodiscard]] inline group_layout make_group_layout(const plan& p, const batch& b, group_index g, std::int32_t micro_batch = 0) {
  using std::size_t;
  ZEPPELIN_EXPECTS(g >= 0 && g < static_cast<group_index>(p.groups.size()), "group layout: no such group",
                   {{"group", static_cast<double>(g)}, {"groups", static_cast<double>(p.groups.size())}});
  const ring_group& grp = p.groups[static_cast<size_t>(g)];
  const auto G = static_cast<std::int32_t>(grp.ranks.size());
  ZEPPELIN_EXPECTS(G >= 1, "group layout: the group has no ranks", {{"group", static_cast<double>(g)}});

  // position of every rank in the ring (-1: not in the group)
  std::vector<std::int32_t> position_of(static_cast<size_t>(p.num_ranks()), -1);
  for (std::int32_t pos = 0; pos < G; ++pos) {
    const rank_index r = grp.ranks[static_cast<size_t>(pos)];
    ZEPPELIN_EXPECTS(r >= 0 && r < p.num_ranks() && position_of[static_cast<size_t>(r)] < 0,
                     "group layout: group rank out of range or repeated",
                     {{"group", static_cast<double>(g)}, {"rank", static_cast<double>(r)}, {"ranks", static_cast<double>(p.num_ranks())}});
    position_of[static_cast<size_t>(r)] = pos;
  }

  group_layout s;
  s.group = g;
  s.zone = grp.zone;
  s.collective = grp.collective;
  s.micro_batch = micro_batch;
  s.ranks = grp.ranks;
  s.layout.resize(static_cast<size_t>(G));
  s.buffer_tokens.assign(static_cast<size_t>(G), 0);

  struct piece {
    sequence_index seq;
    token_range range;
  };
  std::vector<piece> pieces;
  for (rank_index r = 0; r < p.num_ranks(); ++r) {
    const auto& shards = p.placements[static_cast<size_t>(r)].shards;
    for (size_t i = 0; i < shards.size(); ++i) {
      const shard& sh = shards[i];
      if (sh.group != g || sh.micro_batch != micro_batch) continue;
      const std::int32_t pos = position_of[static_cast<size_t>(r)];
      ZEPPELIN_EXPECTS(pos >= 0, "group layout: a shard of the group sits on a rank outside it",
                       {{"group", static_cast<double>(g)}, {"rank", static_cast<double>(r)}, {"seq", static_cast<double>(sh.seq)}});
      ZEPPELIN_EXPECTS(sh.seq >= 0 && sh.seq < b.size() && sh.range.begin >= 0 && sh.range.begin < sh.range.end &&
                           sh.range.end <= b.length(sh.seq),
                       "group layout: shard outside its sequence",
                       {{"rank", static_cast<double>(r)}, {"seq", static_cast<double>(sh.seq)},
                        {"begin", static_cast<double>(sh.range.begin)}, {"end", static_cast<double>(sh.range.end)}});
      auto& row = s.buffer_tokens[static_cast<size_t>(pos)];
      s.layout[static_cast<size_t>(pos)].push_back({sh.seq, sh.range, static_cast<std::int32_t>(i), row});
      row += sh.range.size();
      pieces.push_back({sh.seq, sh.range});
    }
  }

  // the group's shards of each sequence must tile [0, length)
  std::sort(pieces.begin(), pieces.end(), [](const piece& x, const piece& y) {
    return x.seq != y.seq ? x.seq < y.seq : x.range.begin < y.range.begin;
  });
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool first = i == 0 || pieces[i - 1].seq != pieces[i].seq;
    const token_count expected = first ? 0 : pieces[i - 1].range.end;
    ZEPPELIN_EXPECTS(pieces[i].range.begin == expected, "group layout: the group's shards do not tile the sequence",
                     {{"seq", static_cast<double>(pieces[i].seq)}, {"expected_begin", static_cast<double>(expected)},
                      {"begin", static_cast<double>(pieces[i].range.begin)}});
    const bool last = i + 1 == pieces.size() || pieces[i + 1].seq != pieces[i].seq;
    ZEPPELIN_EXPECTS(!last || pieces[i].range.end == b.length(pieces[i].seq),
                     "group layout: the group's shards do not tile the sequence",
                     {{"seq", static_cast<double>(pieces[i].seq)}, {"covered_end", static_cast<double>(pieces[i].range.end)},
                      {"length", static_cast<double>(b.length(pieces[i].seq))}});
  }
  return s;
}

ZEPPELIN_NAMESPACE_END
