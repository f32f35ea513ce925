// zeppelin/exec/linear_layout.hpp
// The layout the linear modules (projections, MLP, norms, LM head) see, and moving rows
// between it and the attention layout, for a trainer built on attention_engine.
//   linear_layout(plan, program)   per rank, the shards whose rows its linear modules hold:
//                                  for each micro-batch, in order, the token-balanced layout
//                                  when the program remaps that micro-batch (Zeppelin 3.4),
//                                  else the rank's shards of the plan in that micro-batch
//   to_attention_layout / to_linear_layout
//                                  rows of w elements of the calling rank, from its linear
//                                  layout (rows in linear_layout order) to the attention layout
//                                  (the plan's shards in placement order, attention_engine's
//                                  rows), or back: the program's remap segment of each remapped
//                                  micro-batch, a local copy for the others
// The row kinds follow the engine's remap (attention_engine::remap): forward remap_in Q|K|V
// rows, remap_out O rows; backward remap_in dO rows, remap_out dQ|dK|dV rows. Every rank of the
// communicator must call a move that crosses ranks (a remapped micro-batch). Throws what
// attention_engine::remap throws, and invalid_argument when a buffer's size differs from the
// rows times w. Host code.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/record.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
inline bool remaps_micro_batch(const execution_program& prog, std::int32_t mb) {
  return static_cast<std::size_t>(mb) < prog.linear_layout.size() && !prog.linear_layout[static_cast<std::size_t>(mb)].empty();
}
}  // namespace detail

//! The linear modules' layout of every rank (see the file comment).
[[nodiscard]] inline std::vector<placement> linear_layout(const plan& p, const execution_program& prog) {
  std::vector<placement> out(static_cast<std::size_t>(p.num_ranks()));
  for (std::int32_t mb = 0; mb < prog.micro_batches; ++mb)
    for (std::size_t r = 0; r < out.size(); ++r) {
      if (detail::remaps_micro_batch(prog, mb)) {
        const auto& s = prog.linear_layout[static_cast<std::size_t>(mb)][r].shards;
        out[r].shards.insert(out[r].shards.end(), s.begin(), s.end());
      } else {
        for (const shard& s : p.placements[r].shards)
          if (s.micro_batch == mb) out[r].shards.push_back(s);
      }
    }
  return out;
}

namespace detail {
// Rows of micro-batch `mb` in rank `r`'s linear layout.
inline token_count linear_rows_of(const plan& p, const execution_program& prog, std::size_t r, std::int32_t mb) {
  if (remaps_micro_batch(prog, mb)) return prog.linear_layout[static_cast<std::size_t>(mb)][r].tokens();
  token_count rows = 0;
  for (const shard& s : p.placements[r].shards) rows += s.micro_batch == mb ? s.range.size() : 0;
  return rows;
}

// One piece of moving a rank's rows between its linear and attention layouts: micro-batch
// `micro_batch`'s `rows` rows from linear row `linear_row` on, either through the program's
// remap segment (`remapped`: the segment places them; attention_row unused) or as a local
// copy of one shard to attention row `attention_row`.
struct layout_move {
  std::int32_t micro_batch = 0;
  bool remapped = false;
  token_count linear_row = 0, attention_row = 0, rows = 0;
};

// The pieces of rank `me`'s move in micro-batch order, covering its linear rows one after
// another: the one walk that the host (move_rows) and the device
// (cuda/executor/linear_layout.hpp) apply.
inline std::vector<layout_move> layout_moves(const plan& p, const execution_program& prog, rank_index me) {
  const auto ri = static_cast<std::size_t>(me);
  const auto& shards = p.placements.at(ri).shards;
  std::vector<layout_move> out;
  token_count lin = 0;  // first linear row of the micro-batch
  for (std::int32_t mb = 0; mb < prog.micro_batches; ++mb) {
    if (remaps_micro_batch(prog, mb)) {
      const token_count rows = linear_rows_of(p, prog, ri, mb);
      out.push_back({mb, true, lin, 0, rows});
      lin += rows;
      continue;
    }
    for (std::size_t i = 0; i < shards.size(); ++i)
      if (shards[i].micro_batch == mb) {
        out.push_back({mb, false, lin, prog.shard_row.at(ri).at(i), shards[i].range.size()});
        lin += shards[i].range.size();
      }
  }
  return out;
}

// `kind` remap_in reads linear rows and writes attention rows; remap_out the reverse.
template <class Engine, communicator C, class T>
void move_rows(const Engine& engine, C& c, const plan& p, pass_kind pass, segment_kind kind, std::span<const T> from,
               std::span<T> to, std::int64_t w, execution_record* record) {
  const rank_index me = c.rank();
  const bool into_attention = kind == segment_kind::remap_in;
  const std::vector<layout_move> moves = layout_moves(p, engine.program(), me);
  const token_count linear_rows = moves.empty() ? 0 : moves.back().linear_row + moves.back().rows;
  const std::size_t linear_size = static_cast<std::size_t>(linear_rows * w), attention_size = static_cast<std::size_t>(engine.rows(me) * w);
  ZEPPELIN_EXPECTS((into_attention ? from.size() : to.size()) == linear_size && (into_attention ? to.size() : from.size()) == attention_size,
                   "linear layout: a buffer does not hold the rank's rows times the row width",
                   {{"rank", double(me)}, {"linear_rows", double(linear_rows)}, {"attention_rows", double(engine.rows(me))},
                    {"row_width", double(w)}, {"from", double(from.size())}, {"to", double(to.size())}});
  for (const layout_move& m : moves) {
    const auto l = static_cast<std::size_t>(m.linear_row * w), count = static_cast<std::size_t>(m.rows * w);
    if (m.remapped) {
      if (into_attention) engine.remap(c, pass, m.micro_batch, kind, from.subspan(l, count), to, record);
      else engine.remap(c, pass, m.micro_batch, kind, from, to.subspan(l, count), record);
      continue;
    }
    const auto a = static_cast<std::size_t>(m.attention_row * w);
    if (into_attention) std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(l), count, to.begin() + static_cast<std::ptrdiff_t>(a));
    else std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(a), count, to.begin() + static_cast<std::ptrdiff_t>(l));
  }
}
}  // namespace detail

//! Rows of the calling rank's linear layout -> its attention layout (see the file comment).
template <class Engine, communicator C, class T>
void to_attention_layout(const Engine& engine, C& c, const plan& p, pass_kind pass, std::span<const T> linear_rows,
                         std::span<T> attention_rows, std::int64_t w, execution_record* record = nullptr) {
  detail::move_rows(engine, c, p, pass, segment_kind::remap_in, linear_rows, attention_rows, w, record);
}

//! Rows of the calling rank's attention layout -> its linear layout (see the file comment).
template <class Engine, communicator C, class T>
void to_linear_layout(const Engine& engine, C& c, const plan& p, pass_kind pass, std::span<const T> attention_rows,
                      std::span<T> linear_rows, std::int64_t w, execution_record* record = nullptr) {
  detail::move_rows(engine, c, p, pass, segment_kind::remap_out, attention_rows, linear_rows, w, record);
}

ZEPPELIN_NAMESPACE_END
