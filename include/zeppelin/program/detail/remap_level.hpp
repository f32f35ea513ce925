// zeppelin/program/detail/remap_level.hpp
// A remap (remap/layout.hpp: Zeppelin 3.4's remap, its inverse, a dispatch) as one level of
// one round, written into a level_work.
//   in : a relayout_plan y (source layout -> target layout, segments with offsets in each
//        rank's source and target buffers), maps from those offsets to the rows of the
//        remap_source / remap_target tensors, an arena allocator, the row kind moved
//   out: per rank: pack (the segments for other ranks copied into a send arena, peer after
//        peer in ascending order, each peer's in the source order), keep (the segments that
//        stay copied straight from source to target), one phase with a payload per
//        (sender, receiver) pair bound to the two arenas, and unpack (the receive arena,
//        source after source, into the target) once the phase is done.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/detail/members.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/remap/layout.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Offsets of a remap buffer -> rows of the tensor it lives in: runs {from_row = offset,
//! to_row = tensor row, rows}, ascending offsets; empty = the identity.
using offset_map = std::vector<row_run>;

[[nodiscard]] inline token_count map_offset(const offset_map& m, token_count offset) {
  if (m.empty()) return offset;
  const auto it = std::upper_bound(m.begin(), m.end(), offset, [](token_count x, const row_run& r) { return x < r.from_row; });
  ZEPPELIN_EXPECTS(it != m.begin() && offset < std::prev(it)->from_row + std::prev(it)->rows, "remap: an offset outside its layout",
                   {{"offset", double(offset)}});
  return std::prev(it)->to_row + (offset - std::prev(it)->from_row);
}

//! The rows of micro-batch `mb`'s shards of rank r, concatenated in placement order (the
//! remap buffer of that micro-batch), mapped to the rank's rows of all micro-batches.
[[nodiscard]] inline offset_map micro_batch_rows(const plan& p, const execution_program& prog, rank_index r, std::int32_t mb) {
  offset_map out;
  token_count at = 0;
  const auto& shards = p.placements[static_cast<std::size_t>(r)].shards;
  for (std::size_t i = 0; i < shards.size(); ++i)
    if (shards[i].micro_batch == mb) {
      out.push_back({at, prog.shard_row[static_cast<std::size_t>(r)][i], shards[i].range.size()});
      at += shards[i].range.size();
    }
  return out;
}

//! Writes remap `y` into `w` (one round). source_map / target_map: per rank.
inline void build_remap(level_work& w, const relayout_plan& y, const std::vector<offset_map>& source_map,
                        const std::vector<offset_map>& target_map, row_kind rows_of, std::int64_t row_bytes,
                        const arena_allocator& allocate) {
  const auto n = y.ranks.size();
  const auto src = buffer_ref::tensor(tensor_kind::remap_source), dst = buffer_ref::tensor(tensor_kind::remap_target);
  // per rank: rows sent to / received from each peer, packed in ascending peer order
  std::vector<std::vector<token_count>> send_at(n, std::vector<token_count>(n, 0)), recv_at(send_at);
  std::vector<std::int32_t> send_arena(n, -1), recv_arena(n, -1);
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<token_count> send_rows(n, 0), recv_rows(n, 0);
    for (const relayout_segment& s : y.ranks[r].sends)
      if (static_cast<std::size_t>(s.to) != r) send_rows[static_cast<std::size_t>(s.to)] += s.range.size();
    for (const relayout_segment& s : y.ranks[r].receives)
      if (static_cast<std::size_t>(s.from) != r) recv_rows[static_cast<std::size_t>(s.from)] += s.range.size();
    token_count sent = 0, received = 0;
    for (std::size_t q = 0; q < n; ++q) {
      send_at[r][q] = sent, sent += send_rows[q];
      recv_at[r][q] = received, received += recv_rows[q];
    }
    if (sent > 0) send_arena[r] = allocate(static_cast<rank_index>(r), rows_of, sent);
    if (received > 0) recv_arena[r] = allocate(static_cast<rank_index>(r), rows_of, received);
  }
  for (std::size_t r = 0; r < n; ++r) {
    const auto me = static_cast<rank_index>(r);
    const rank_relayout& mine = y.ranks[r];
    std::vector<row_run> pack, keep, unpack;  // the runs of the three copies
    std::vector<token_count> cursor(send_at[r]);
    for (const relayout_segment& s : mine.sends) {
      const token_count from = map_offset(source_map[r], s.from_offset);
      if (s.to == me) {
        append_run(keep, {from, map_offset(target_map[r], s.to_offset), s.range.size()});
      } else {
        auto& at = cursor[static_cast<std::size_t>(s.to)];
        append_run(pack, {from, at, s.range.size()});
        at += s.range.size();
      }
    }
    // received segments: source after source, each source's in its send order
    std::vector<const relayout_segment*> incoming;
    for (const relayout_segment& s : mine.receives)
      if (s.from != me) incoming.push_back(&s);
    std::stable_sort(incoming.begin(), incoming.end(), [](const relayout_segment* a, const relayout_segment* b) {
      return a->from != b->from ? a->from < b->from : a->from_offset < b->from_offset;
    });
    token_count at = 0;
    for (const relayout_segment* s : incoming) {
      append_run(unpack, {at, map_offset(target_map[r], s->to_offset), s->range.size()});
      at += s->range.size();
    }
    round_work& setup = w.at(me, 0);
    if (!pack.empty()) setup.pre.push_back({copy_rows{src, buffer_ref::arena(send_arena[r]), std::move(pack)}, -1});
    if (!keep.empty()) setup.pre.push_back({copy_rows{src, dst, std::move(keep)}, -1});
    if (!unpack.empty()) w.at(me, 1).post.push_back({copy_rows{buffer_ref::arena(recv_arena[r]), dst, std::move(unpack)}, 0});
  }
  // one payload per (sender, receiver), in ascending (sender, receiver) order
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<token_count> rows(n, 0);
    for (const relayout_segment& s : y.ranks[r].sends)
      if (static_cast<std::size_t>(s.to) != r) rows[static_cast<std::size_t>(s.to)] += s.range.size();
    for (std::size_t q = 0; q < n; ++q)
      if (rows[q] > 0)
        w.send(0, static_cast<rank_index>(r), static_cast<rank_index>(q),
               {buffer_ref::arena(send_arena[r]), send_at[r][q], buffer_ref::arena(recv_arena[q]), recv_at[q][r], rows[q], rows_of},
               row_bytes);
  }
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
