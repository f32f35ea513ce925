// zeppelin/program/detail/members.hpp
// Where the groups of one level live on their ranks' buffers.
//   in : the schedules of the level's groups that run one collective, the program's shard
//        rows, and a function that declares an arena of a rank
//   out: per group and position: the member's rank, its region in the rank's arenas (the
//        groups a rank belongs to take consecutive regions, in group order), the runs that
//        copy its shards between the rank's rows and its group buffer, and helpers that
//        move a block's query rows into the rank's rows and its key rows into a region.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/schedule/group_layout.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Declares an arena on a rank and returns its index: allocate(rank, kind, rows) for rows
//! of every head of `kind`, allocate(rank, kind, rows, heads) for rows of a share of them.
struct arena_allocator {
  std::function<std::int32_t(rank_index, const arena&)> declare;
  std::int32_t operator()(rank_index r, row_kind kind, token_count rows, std::int32_t heads = 0) const {
    return declare(r, arena{kind, rows, heads});
  }
};

//! One position of one group.
struct member {
  rank_index rank = 0;
  token_count region = 0;     //!< first row of its region in the rank's arenas of the collective
  std::vector<row_run> runs;  //!< from_row: the rank's row of a shard; to_row: its group buffer row; rows
};

//! The members of every group of a collective in a level, and each rank's region total.
struct level_members {
  std::vector<std::vector<member>> of;   //!< [group][position]
  std::vector<token_count> region_rows;  //!< [rank]: rows its regions take
};

//! Lays out the members: each takes `region_size(group)` rows, in group order per rank.
//! Group: group_layout or a type built on it (ring_schedule).
template <class Group, class RegionSize>
[[nodiscard]] level_members lay_out_members(const std::vector<const Group*>& groups,
                                            const std::vector<std::vector<token_count>>& shard_row, rank_index ranks,
                                            RegionSize&& region_size) {
  level_members out;
  out.region_rows.assign(static_cast<std::size_t>(ranks), 0);
  for (const Group* s : groups) {
    auto& ms = out.of.emplace_back();
    const token_count size = region_size(*s);
    for (std::int32_t p = 0; p < s->size(); ++p) {
      member m;
      m.rank = s->ranks[static_cast<std::size_t>(p)];
      auto& used = out.region_rows[static_cast<std::size_t>(m.rank)];
      m.region = used;
      used += size;
      for (const group_shard& gs : s->layout[static_cast<std::size_t>(p)])
        m.runs.push_back({shard_row[static_cast<std::size_t>(m.rank)][static_cast<std::size_t>(gs.shard)], gs.row, gs.range.size()});
      ms.push_back(std::move(m));
    }
  }
  return out;
}

//! The index of the run of a member holding group-buffer row `row`.
[[nodiscard]] inline std::size_t run_of(const member& m, token_count row) {
  const auto it = std::upper_bound(m.runs.begin(), m.runs.end(), row, [](token_count x, const row_run& r) { return x < r.to_row; });
  ZEPPELIN_EXPECTS(it != m.runs.begin() && row < std::prev(it)->to_row + std::prev(it)->rows,
                   "program: a block row outside its group buffer", {{"row", double(row)}});
  return static_cast<std::size_t>(std::prev(it) - m.runs.begin());
}

//! `blocks` with query rows moved into the rank's rows of member `m` and key rows shifted
//! by `key_base` (the row of the key buffer's first row in the held arena).
inline void append_launch_blocks(const member& m, std::span<const attention_block> blocks, token_count key_base,
                                 std::vector<attention_block>& out) {
  // a pair's blocks come query shard by query shard in layout order: try the run of the
  // previous block and the next one before searching
  std::size_t hint = 0;
  const auto in_run = [&](std::size_t i, token_count row) {
    return i < m.runs.size() && m.runs[i].to_row <= row && row < m.runs[i].to_row + m.runs[i].rows;
  };
  out.reserve(out.size() + blocks.size());
  for (attention_block b : blocks) {
    if (!in_run(hint, b.q_row)) hint = in_run(hint + 1, b.q_row) ? hint + 1 : run_of(m, b.q_row);
    const row_run& r = m.runs[hint];
    b.q_row = r.from_row + (b.q_row - r.to_row);
    b.kv_row += key_base;
    out.push_back(b);
  }
}

//! Appends `r` to `runs`, extending the last run when both sides continue it.
inline void append_run(std::vector<row_run>& runs, row_run r) {
  if (r.rows <= 0) return;
  if (!runs.empty()) {
    row_run& last = runs.back();
    if (last.from_row + last.rows == r.from_row && last.to_row + last.rows == r.to_row) {
      last.rows += r.rows;
      return;
    }
  }
  runs.push_back(r);
}

//! The runs that copy member m's shards from the rank's rows into its group buffer placed at
//! row `base` of an arena (contiguous shards merged into one run).
[[nodiscard]] inline std::vector<row_run> gather_runs(const member& m, token_count base) {
  std::vector<row_run> out;
  for (const row_run& r : m.runs) append_run(out, {r.from_row, base + r.to_row, r.rows});
  return out;
}

//! The runs that bring member m's group buffer placed at row `base` back to the rank's rows.
[[nodiscard]] inline std::vector<row_run> scatter_runs(const member& m, token_count base) {
  std::vector<row_run> out;
  for (const row_run& r : m.runs) append_run(out, {base + r.to_row, r.from_row, r.rows});
  return out;
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
