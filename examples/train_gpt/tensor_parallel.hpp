// examples/train_gpt/tensor_parallel.hpp
// train_gpt's GPT split Megatron-style over the TP ranks of a stage (Shoeybi et al.,
// "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism"):
//   tp_shard        which of `tp` shards a rank holds
//   shard_config    the model as one shard sees it: heads / tp query and K/V heads (of the
//                   same head size), an MLP of width hidden / tp, a vocabulary of vocab / tp;
//                   step.hpp's functions run on it unchanged
//   cuts_of         per tensor its cut (tensor_cut): whole, or the shard's row or column block
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
#include <cstdint>
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

//! How TP cuts one tensor of the whole model: whole (the norms), or the shard's block of
//! `count` rows or columns of a [rows][width] matrix, block `index` of them.
struct tensor_cut {
  enum class kind : std::uint8_t { whole, rows, columns };
  kind cut = kind::whole;
  std::size_t width = 0, count = 0, index = 0;
  //! The whole tensor's element of the shard's element `i`.
  [[nodiscard]] std::size_t whole_index(std::size_t i) const noexcept {
    switch (cut) {
      case kind::rows: return index * count * width + i;
      case kind::columns: return i / count * width + index * count + i % count;
      case kind::whole: break;
    }
    return i;
  }
};

//! The cut of every tensor of the model for shard `s`, in gpt_params::for_each order (see
//! the file comment).
inline std::vector<tensor_cut> cuts_of(const gpt_config& c, const tp_shard& s) {
  const gpt_config sc = shard_config(c, s);
  const auto t = static_cast<std::size_t>(s.index);
  using kind = tensor_cut::kind;
  const auto whole = tensor_cut{};
  const auto rows = [&](int width, int count) { return tensor_cut{kind::rows, std::size_t(width), std::size_t(count), t}; };
  const auto columns = [&](int width, int count) { return tensor_cut{kind::columns, std::size_t(width), std::size_t(count), t}; };
  std::vector<tensor_cut> out{rows(c.dim, sc.vocab)};  // the embedding: vocabulary block t
  for (int l = 0; l < c.layers; ++l)
    out.insert(out.end(), {whole, columns(c.q_width(), sc.q_width()), columns(c.kv_width(), sc.kv_width()),
                           columns(c.kv_width(), sc.kv_width()), rows(c.dim, sc.q_width()), whole, columns(c.hidden, sc.hidden),
                           rows(c.dim, sc.hidden)});
  out.insert(out.end(), {whole, columns(c.vocab, sc.vocab)});  // the final norm, the LM head
  return out;
}

//! Shard `s`'s parameters of the whole model's `w` (see the file comment); shaped as
//! zero_params(shard_config(c, s)).
template <class T>
gpt_params<T> shard_params(const gpt_config& c, const gpt_params<T>& w, const tp_shard& s) {
  const std::vector<tensor_cut> cuts = cuts_of(c, s);
  std::vector<const std::vector<T>*> whole;
  w.for_each([&](const std::vector<T>& x) { whole.push_back(&x); });
  gpt_params<T> out = zero_params<T>(shard_config(c, s));
  std::size_t k = 0;
  out.for_each([&](std::vector<T>& x) {
    const tensor_cut& cut = cuts[k];
    const std::vector<T>& from = *whole[k++];
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = from[cut.whole_index(i)];
  });
  return out;
}

//! Adds shard `s`'s tensors `part` (shaped as shard_params gives them) into the whole model's
//! `w` at their places, so that adding every shard's inverts shard_params. The norms, which
//! every shard holds whole, are added from shard 0 only.
template <class T>
void add_shard(const gpt_config& c, const gpt_params<T>& part, const tp_shard& s, gpt_params<T>& w) {
  const std::vector<tensor_cut> cuts = cuts_of(c, s);
  std::vector<const std::vector<T>*> parts;
  part.for_each([&](const std::vector<T>& x) { parts.push_back(&x); });
  std::size_t k = 0;
  w.for_each([&](std::vector<T>& x) {
    const tensor_cut& cut = cuts[k];
    const std::vector<T>& from = *parts[k++];
    if (cut.cut == tensor_cut::kind::whole && !s.holds_residual()) return;
    for (std::size_t i = 0; i < from.size(); ++i) x[cut.whole_index(i)] += from[i];
  });
}

}  // namespace train_gpt
