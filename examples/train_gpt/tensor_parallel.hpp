// examples/train_gpt/tensor_parallel.hpp
// train_gpt's GPT split Megatron-style over the TP ranks of a stage (Shoeybi et al.,
// "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism"):
//   tp_shard        which of `tp` shards a rank holds
//   shard_config    the model as one shard sees it: heads / tp query and K/V heads (of the
//                   same head size), an MLP of width hidden / tp, a vocabulary of vocab / tp;
//                   step.hpp's functions run on it unchanged
//   shard_params    a shard's parameters cut from the whole model's: Wq, Wk, Wv and W1 by
//                   columns (heads t x heads / tp on, the MLP's t-th column block), Wo and W2
//                   by rows, the embedding's rows and the LM head's columns of vocabulary
//                   block t; the norms whole (every shard holds them)
//   add_shard       a shard's tensors added back at their places in the whole model's
//                   (the inverse of shard_params, summed over the shards)
// Between the step program's TP collectives a shard holds partial sums: the output
// projection's, the MLP's, the embedding's (a token outside the shard's vocabulary gives
// zeros) and, in backward, the input gradients of the column-parallel projections and the
// head. The residual stream is added by shard 0 only (tp_shard::holds_residual), so the
// program's all-reduce (step/block.hpp) leaves the whole hidden state on every shard. The
// norms' backward runs on each shard's partial gradient (it is linear in it), so their
// weight gradients are partial too: the program's gradient sync sums them over the TP ranks
// (step_program::stage_replicated_parameters).
#pragma once

#include "gpt.hpp"

#include <zeppelin/core/error.hpp>

#include <cstddef>
#include <vector>

namespace train_gpt {

struct tp_shard {
  int tp = 1;
  int index = 0;
  //! The one shard that adds the residual stream into its partial sums.
  [[nodiscard]] bool holds_residual() const noexcept { return index == 0; }
};

//! Throws invalid_argument unless `tp` >= 1 divides the heads, the K/V heads, the MLP width
//! and the vocabulary of `c`.
inline void check_tensor_parallel(const gpt_config& c, int tp) {
  ZEPPELIN_EXPECTS(tp >= 1 && c.heads % tp == 0 && c.kv_heads % tp == 0 && c.hidden % tp == 0 && c.vocab % tp == 0,
                   "tensor parallelism splits the heads, the K/V heads, the MLP width and the vocabulary: --tp must divide each",
                   {{"tp", double(tp)}, {"heads", double(c.heads)}, {"kv_heads", double(c.kv_heads)}, {"hidden", double(c.hidden)},
                    {"vocab", double(c.vocab)}});
}

//! The model as shard `s` sees it (see the file comment).
inline gpt_config shard_config(const gpt_config& c, const tp_shard& s) {
  check_tensor_parallel(c, s.tp);
  gpt_config out = c;
  out.head_size = c.head_dim();
  out.heads = c.heads / s.tp;
  out.kv_heads = c.kv_heads / s.tp;
  out.hidden = c.hidden / s.tp;
  out.vocab = c.vocab / s.tp;
  return out;
}

namespace detail {
// Rows [first, first + count) of a [rows][width] matrix.
template <class T>
std::vector<T> row_block(const std::vector<T>& m, std::size_t width, std::size_t first, std::size_t count) {
  return {m.begin() + static_cast<std::ptrdiff_t>(first * width), m.begin() + static_cast<std::ptrdiff_t>((first + count) * width)};
}
// Columns [first, first + count) of a [rows][width] matrix.
template <class T>
std::vector<T> column_block(const std::vector<T>& m, std::size_t width, std::size_t first, std::size_t count) {
  std::vector<T> out;
  out.reserve(m.size() / width * count);
  for (std::size_t r = 0; r < m.size() / width; ++r)
    out.insert(out.end(), m.begin() + static_cast<std::ptrdiff_t>(r * width + first),
               m.begin() + static_cast<std::ptrdiff_t>(r * width + first + count));
  return out;
}
}  // namespace detail

//! Shard `s`'s parameters of the whole model's `w` (see the file comment); shaped as
//! zero_params(shard_config(c, s)).
template <class T>
gpt_params<T> shard_params(const gpt_config& c, const gpt_params<T>& w, const tp_shard& s) {
  const gpt_config sc = shard_config(c, s);
  const auto t = static_cast<std::size_t>(s.index);
  const auto D = static_cast<std::size_t>(c.dim), Q = static_cast<std::size_t>(c.q_width()), KV = static_cast<std::size_t>(c.kv_width());
  const auto q = static_cast<std::size_t>(sc.q_width()), kv = static_cast<std::size_t>(sc.kv_width());
  const auto F = static_cast<std::size_t>(c.hidden), f = static_cast<std::size_t>(sc.hidden);
  const auto V = static_cast<std::size_t>(c.vocab), v = static_cast<std::size_t>(sc.vocab);
  gpt_params<T> out;
  out.embed = detail::row_block(w.embed, D, t * v, v);
  for (const layer_params<T>& l : w.layers)
    out.layers.push_back({l.norm1, detail::column_block(l.wq, Q, t * q, q), detail::column_block(l.wk, KV, t * kv, kv),
                          detail::column_block(l.wv, KV, t * kv, kv), detail::row_block(l.wo, D, t * q, q), l.norm2,
                          detail::column_block(l.w1, F, t * f, f), detail::row_block(l.w2, D, t * f, f)});
  out.norm_final = w.norm_final;
  out.lm_head = detail::column_block(w.lm_head, V, t * v, v);
  return out;
}

namespace detail {
// Adds `block` (rows [first, first + count) of a [rows][width] matrix) into `m`.
template <class T>
void add_row_block(std::vector<T>& m, std::size_t width, std::size_t first, const std::vector<T>& block) {
  for (std::size_t i = 0; i < block.size(); ++i) m[first * width + i] += block[i];
}
// Adds `block` (columns [first, first + count) of a [rows][width] matrix) into `m`.
template <class T>
void add_column_block(std::vector<T>& m, std::size_t width, std::size_t first, std::size_t count, const std::vector<T>& block) {
  for (std::size_t r = 0; r < block.size() / count; ++r)
    for (std::size_t j = 0; j < count; ++j) m[r * width + first + j] += block[r * count + j];
}
}  // namespace detail

//! Adds shard `s`'s tensors `part` (shaped as shard_params gives them) into the whole model's
//! `w` at their places, so that adding every shard's inverts shard_params. The norms, which
//! every shard holds whole, are added from shard 0 only.
template <class T>
void add_shard(const gpt_config& c, const gpt_params<T>& part, const tp_shard& s, gpt_params<T>& w) {
  const gpt_config sc = shard_config(c, s);
  const auto t = static_cast<std::size_t>(s.index);
  const auto D = static_cast<std::size_t>(c.dim), Q = static_cast<std::size_t>(c.q_width()), KV = static_cast<std::size_t>(c.kv_width());
  const auto q = static_cast<std::size_t>(sc.q_width()), kv = static_cast<std::size_t>(sc.kv_width());
  const auto F = static_cast<std::size_t>(c.hidden), f = static_cast<std::size_t>(sc.hidden);
  const auto V = static_cast<std::size_t>(c.vocab), v = static_cast<std::size_t>(sc.vocab);
  const auto add_whole = [&](std::vector<T>& into, const std::vector<T>& from) {
    if (!s.holds_residual()) return;
    for (std::size_t i = 0; i < into.size(); ++i) into[i] += from[i];
  };
  detail::add_row_block(w.embed, D, t * v, part.embed);
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    layer_params<T>& x = w.layers[l];
    const layer_params<T>& y = part.layers[l];
    add_whole(x.norm1, y.norm1);
    add_whole(x.norm2, y.norm2);
    detail::add_column_block(x.wq, Q, t * q, q, y.wq);
    detail::add_column_block(x.wk, KV, t * kv, kv, y.wk);
    detail::add_column_block(x.wv, KV, t * kv, kv, y.wv);
    detail::add_row_block(x.wo, D, t * q, y.wo);
    detail::add_column_block(x.w1, F, t * f, f, y.w1);
    detail::add_row_block(x.w2, D, t * f, y.w2);
  }
  add_whole(w.norm_final, part.norm_final);
  detail::add_column_block(w.lm_head, V, t * v, v, part.lm_head);
}

}  // namespace train_gpt
