// zeppelin/exec/relayout.hpp
// Moving token rows between two layouts of the same tokens: the dispatch (loader layout ->
// the plan's attention layout), the remap of Zeppelin 3.4 (attention layout <-> the
// token-balanced layout of remap/layout.hpp) and their inverses share one executor.
//   loader_layout(batch, R)          the layout a data loader produces: rank r holds the packed
//                                    stream rows [floor(r T / R), floor((r + 1) T / R)), cut at
//                                    sequence boundaries into shards
//   make_dispatch_plan(from, to)     a relayout_plan (remap/layout.hpp) moving every token of
//                                    layout `from` to its place in layout `to` (per rank: its
//                                    shards concatenated in placement order); every
//                                    micro-batch at once
//   execute_relayout(c, x, src, dst, w) runs ANY relayout_plan (dispatch, a solver's remap, their
//                                    inverse()) on the calling rank: rows of w elements, as
//                                    the execution program of the remap
//                                    (program/remap_program.hpp: segments packed per peer in
//                                    ascending peer order, one phase, kept rows copied locally)
//                                    on the host backend
// No range-v3.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/host_backend.hpp>
#include <zeppelin/program/driver.hpp>
#include <zeppelin/program/remap_program.hpp>
#include <zeppelin/remap/layout.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The contiguous loader layout of `b` over `ranks` ranks (see the file comment).
[[nodiscard]] inline std::vector<placement> loader_layout(const batch& b, rank_index ranks) {
  ZEPPELIN_EXPECTS(ranks >= 1, "loader layout: at least one rank is required", {{"ranks", double(ranks)}});
  std::vector<placement> out(static_cast<std::size_t>(ranks));
  const token_count total = b.total_tokens();
  sequence_index seq = 0;
  for (rank_index r = 0; r < ranks; ++r) {
    // floor(total * r / ranks) without overflow: total = q ranks + s
    const token_count q = total / ranks, s = total % ranks;
    const token_count lo = q * r + s * r / ranks, hi = q * (r + 1) + s * (r + 1) / ranks;
    for (token_count at = lo; at < hi;) {
      while (b.offset(seq) + b.length(seq) <= at) ++seq;
      const token_count end = std::min(hi, b.offset(seq) + b.length(seq));
      out[static_cast<std::size_t>(r)].shards.push_back(shard{seq, {at - b.offset(seq), end - b.offset(seq)}, no_group, 0});
      at = end;
    }
  }
  return out;
}

//! The exchange that turns layout `from` into layout `to` (same rank count, same tokens).
//! Segments carry the target shard's group and micro-batch. Throws invalid_argument when the
//! rank counts differ, a layout holds a token twice, or `to` holds a token `from` lacks (or
//! the totals differ).
[[nodiscard]] inline relayout_plan make_dispatch_plan(const std::vector<placement>& from, const std::vector<placement>& to) {
  ZEPPELIN_EXPECTS(from.size() == to.size() && !from.empty(), "dispatch: both layouts need the same number of ranks",
                   {{"from_ranks", double(from.size())}, {"to_ranks", double(to.size())}});
  const auto n = from.size();
  struct piece {
    token_range range;
    rank_index rank;
    token_count offset;
  };
  std::map<sequence_index, std::vector<piece>> pieces;
  token_count from_total = 0, to_total = 0;
  for (std::size_t r = 0; r < n; ++r) {
    token_count off = 0;
    for (const shard& s : from[r].shards) {
      ZEPPELIN_EXPECTS(!s.range.empty() && s.range.begin >= 0, "dispatch: empty or negative source shard",
                       {{"rank", double(r)}, {"seq", double(s.seq)}, {"begin", double(s.range.begin)}, {"end", double(s.range.end)}});
      pieces[s.seq].push_back({s.range, static_cast<rank_index>(r), off});
      off += s.range.size();
    }
    from_total += off;
  }
  for (auto& [seq, list] : pieces) {
    std::sort(list.begin(), list.end(), [](const piece& a, const piece& b) { return a.range.begin < b.range.begin; });
    for (std::size_t i = 1; i < list.size(); ++i)
      ZEPPELIN_EXPECTS(list[i - 1].range.end <= list[i].range.begin, "dispatch: the source layout holds a token twice",
                       {{"seq", double(seq)}, {"position", double(list[i].range.begin)}});
  }
  relayout_plan out{{static_cast<rank_index>(n), {}}, std::vector<rank_relayout>(n), from, to};
  std::map<std::pair<rank_index, rank_index>, token_count> matrix;
  for (std::size_t r = 0; r < n; ++r) {
    token_count off = 0;
    for (const shard& s : to[r].shards) {
      const auto it = pieces.find(s.seq);
      token_count covered = 0;
      if (it != pieces.end()) {
        const auto& list = it->second;
        auto p = std::upper_bound(list.begin(), list.end(), s.range.begin,
                                  [](token_count x, const piece& q) { return x < q.range.begin; });
        if (p != list.begin()) --p;
        for (; p != list.end() && p->range.begin < s.range.end; ++p) {
          const token_count lo = std::max(p->range.begin, s.range.begin), hi = std::min(p->range.end, s.range.end);
          if (lo >= hi) continue;
          const relayout_segment seg{s.seq, {lo, hi}, p->rank, static_cast<rank_index>(r), p->offset + (lo - p->range.begin),
                                  off + (lo - s.range.begin), s.group, s.micro_batch};
          out.ranks[static_cast<std::size_t>(p->rank)].sends.push_back(seg);
          out.ranks[r].receives.push_back(seg);
          if (seg.from != seg.to) matrix[{seg.from, seg.to}] += hi - lo;
          covered += hi - lo;
        }
      }
      ZEPPELIN_EXPECTS(covered == s.range.size(), "dispatch: the target layout holds tokens the source layout lacks",
                       {{"rank", double(r)}, {"seq", double(s.seq)}, {"begin", double(s.range.begin)},
                        {"end", double(s.range.end)}, {"covered", double(covered)}});
      off += s.range.size();
    }
    out.ranks[r].target_tokens = off;
    to_total += off;
  }
  ZEPPELIN_EXPECTS(from_total == to_total, "dispatch: the layouts hold different numbers of tokens",
                   {{"from_tokens", double(from_total)}, {"to_tokens", double(to_total)}});
  for (std::size_t r = 0; r < n; ++r) {
    auto& rr = out.ranks[r];
    for (const shard& s : from[r].shards) rr.source_tokens += s.range.size();
    std::sort(rr.sends.begin(), rr.sends.end(), [](const relayout_segment& a, const relayout_segment& b) { return a.from_offset < b.from_offset; });
    std::sort(rr.receives.begin(), rr.receives.end(), [](const relayout_segment& a, const relayout_segment& b) { return a.to_offset < b.to_offset; });
  }
  for (const auto& [key, tokens] : matrix) out.matrix.entries.push_back({key.first, key.second, tokens});
  return out;
}

//! Runs relayout plan `x` (a dispatch, a remap or an inverse) on the calling rank: `source` holds x.ranks[me].source_tokens rows of
//! `row_elems` elements, `target` receives x.ranks[me].target_tokens rows. Every rank of `c`
//! must call it; `step` labels the exchange in communicator errors. The rows move through
//! the execution program of the remap (program/remap_program.hpp) and the host backend, as
//! the attention engine moves its own. Throws invalid_argument on a size mismatch.
template <communicator C, class T>
void execute_relayout(C& c, const relayout_plan& x, std::span<const T> source, std::span<T> target, std::int64_t row_elems,
                      std::string_view step) {
  const rank_index me = c.rank();
  ZEPPELIN_EXPECTS(static_cast<rank_index>(x.ranks.size()) == c.size() && row_elems >= 1 && row_elems <= (std::int64_t{1} << 30),
                   "remap: the plan and the communicator have different rank counts, or a bad row width",
                   {{"plan_ranks", double(x.ranks.size())}, {"ranks", double(c.size())}, {"row_elems", double(row_elems)}});
  const rank_relayout& mine = x.ranks[static_cast<std::size_t>(me)];
  ZEPPELIN_EXPECTS(static_cast<std::int64_t>(source.size()) == mine.source_tokens * row_elems &&
                       static_cast<std::int64_t>(target.size()) == mine.target_tokens * row_elems,
                   "remap: buffer sizes do not match the plan",
                   {{"rank", double(me)}, {"source", double(source.size())}, {"source_rows", double(mine.source_tokens)},
                    {"target", double(target.size())}, {"target_rows", double(mine.target_tokens)}});
  // a row of row_elems elements is a `q` row of a row_elems-head, one-dimensional shape
  const auto width = static_cast<std::int32_t>(row_elems);
  const execution_program prog =
      make_remap_program(x, wire_format::for_shape(width, 1, 1, static_cast<std::int32_t>(sizeof(T))), row_kind::q);
  host_tensors<T> t{};
  t.remap_source = source;
  t.remap_target = target;
  const no_attention_kernel kernel{};
  host_backend<T, no_attention_kernel, C> backend(prog, pass_kind::forward, c, kernel, attention_dims{width, 1, 1, 0}, t, nullptr,
                                                  step);
  run_segment(prog, pass_kind::forward, 0, backend);
}

//! The name before 0.2.
template <communicator C, class T>
[[deprecated("renamed zeppelin::execute_relayout")]] void execute_remap(C& c, const relayout_plan& x, std::span<const T> source,
                                                                         std::span<T> target, std::int64_t row_elems,
                                                                         std::string_view step) {
  execute_relayout(c, x, source, target, row_elems, step);
}

ZEPPELIN_NAMESPACE_END
