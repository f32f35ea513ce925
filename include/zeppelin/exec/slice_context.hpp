// zeppelin/exec/slice_context.hpp
// A document sliced across micro-batches (InfiniPipe: Wang et al., "InfiniPipe: Elastic
// Pipeline Parallelism for Efficient Variable-Length Long-Context LLM Training"): what its
// earlier slices leave on a rank for its later slices, and a later slice's attention to it.
//   slice_context<T>          per (document, layer) the K/V rows the rank kept from the
//                             document's earlier slices, in the order they were kept
//                             (keep: a slice's rows, appended), and their dK/dV added up over
//                             the later slices (add_gradient: a later slice's context is a
//                             prefix of them) for the earlier slices' backward (gradient). Rows
//                             are [kv_heads][head_dim] elements.
//   context_attention_forward  a slice's query rows against a context of m K/V rows that all
//                             precede them (every key visible: the full mask), merged into the
//                             slice's own attention output and LSE by LSE (exec/lse_merge.hpp):
//                             the O and LSE of the query rows over the whole document prefix
//   context_attention_backward with the slice's GLOBAL O, dO and LSE (as the kernel's backward
//                             takes them), ADDS the context's share into dQ and into the
//                             context rows' dK/dV
// The step program moves kept rows between CP ranks as step_tensor::context ->
// gathered_context (and the gradient back, added into context_gradient: step/block.hpp); this
// is what a rank computes around those transfers. Layouts are the attention kernel's
// (exec/attention_kernel.hpp): Q, O, dO, dQ [rows][heads][head_dim], K, V, dK, dV
// [rows][kv_heads][head_dim], LSE [heads][stride]. The kernel is a policy (the host kernel by
// default); the block's O and LSE and their merge live in host memory, so a device path needs
// its own merge around a device kernel.
// Errors: invalid_argument for bad dims, spans whose sizes do not match the rows, a kept
// entry that does not exist, or a gradient of more rows than are kept.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/lse_merge.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class T>
class slice_context {
 public:
  explicit slice_context(const attention_dims& dims) : dims_(dims) { validate(dims); }

  //! Appends a slice's K and V rows (`rows` x kv_row elements each) to the kept context of
  //! (document, layer).
  void keep(std::int64_t document, std::int32_t layer, std::span<const T> k, std::span<const T> v) {
    ZEPPELIN_EXPECTS(k.size() == v.size() && k.size() % row() == 0, "slice context: K and V must be whole rows of the same count",
                     {{"k", double(k.size())}, {"v", double(v.size())}, {"kv_row", double(row())}});
    entry& e = kept_[{document, layer}];
    e.k.insert(e.k.end(), k.begin(), k.end());
    e.v.insert(e.v.end(), v.begin(), v.end());
    e.dk.resize(e.k.size(), T(0));
    e.dv.resize(e.v.size(), T(0));
  }

  //! Rows kept for (document, layer); 0 when none.
  [[nodiscard]] std::int64_t rows(std::int64_t document, std::int32_t layer) const {
    const auto it = kept_.find({document, layer});
    return it == kept_.end() ? 0 : static_cast<std::int64_t>(it->second.k.size() / row());
  }
  [[nodiscard]] std::span<const T> keys(std::int64_t document, std::int32_t layer) const { return find(*this, document, layer).k; }
  [[nodiscard]] std::span<const T> values(std::int64_t document, std::int32_t layer) const { return find(*this, document, layer).v; }

  //! Adds a later slice's dK and dV of the first kept rows of (document, layer): a slice's
  //! context is the rows kept before it, a prefix of what is kept by the time it runs backward.
  void add_gradient(std::int64_t document, std::int32_t layer, std::span<const T> dk, std::span<const T> dv) {
    entry& e = find(*this, document, layer);
    ZEPPELIN_EXPECTS(dk.size() == dv.size() && dk.size() % row() == 0 && dk.size() <= e.dk.size(),
                     "slice context: a gradient must be whole rows of at most the kept rows",
                     {{"dk", double(dk.size())}, {"dv", double(dv.size())}, {"kept", double(e.dk.size())}, {"document", double(document)},
                      {"layer", double(layer)}});
    for (std::size_t i = 0; i < dk.size(); ++i) e.dk[i] += dk[i], e.dv[i] += dv[i];
  }
  //! The dK (first) and dV (second) the later slices added for the kept rows of (document, layer).
  [[nodiscard]] std::pair<std::span<const T>, std::span<const T>> gradient(std::int64_t document, std::int32_t layer) const {
    const entry& e = find(*this, document, layer);
    return {e.dk, e.dv};
  }
  //! Forgets (document, layer), once its earliest slice's backward has read the gradient.
  void release(std::int64_t document, std::int32_t layer) { kept_.erase({document, layer}); }

 private:
  struct entry {
    std::vector<T> k, v, dk, dv;
  };
  [[nodiscard]] std::size_t row() const noexcept { return static_cast<std::size_t>(dims_.kv_row()); }
  // The kept entry of (document, layer), of a const or mutable context.
  template <class Self>
  static auto& find(Self& self, std::int64_t document, std::int32_t layer) {
    const auto it = self.kept_.find({document, layer});
    ZEPPELIN_EXPECTS(it != self.kept_.end(), "slice context: nothing kept for this document and layer",
                     {{"document", double(document)}, {"layer", double(layer)}});
    return it->second;
  }

  attention_dims dims_;
  std::map<std::pair<std::int64_t, std::int32_t>, entry> kept_;
};

namespace detail {
inline void check_context_spans(const attention_dims& dims, std::size_t q, std::size_t k, std::size_t v, std::size_t o, std::size_t lse,
                                std::int64_t lse_stride) {
  validate(dims);
  const auto rows = static_cast<std::int64_t>(q) / dims.q_row(), m = static_cast<std::int64_t>(k) / dims.kv_row();
  ZEPPELIN_EXPECTS(static_cast<std::int64_t>(q) == rows * dims.q_row() && o == q && static_cast<std::int64_t>(k) == m * dims.kv_row() &&
                       v == k && lse_stride >= rows && static_cast<std::int64_t>(lse) >= (dims.heads - 1) * lse_stride + rows,
                   "context attention: Q and O must be whole query rows, K and V whole context rows, LSE heads x stride",
                   {{"q", double(q)}, {"o", double(o)}, {"k", double(k)}, {"v", double(v)}, {"lse", double(lse)},
                    {"lse_stride", double(lse_stride)}});
}
}  // namespace detail

//! Merges the attention of the query rows `q` over the context (`k`, `v`: rows that all
//! precede them) into `o` and `lse` (the rows' attention over their own slice so far).
template <class T, class Kernel = host_attention>
void context_attention_forward(const attention_dims& dims, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                               std::span<T> o, std::span<T> lse, std::int64_t lse_stride, const Kernel& kernel = {}) {
  detail::check_context_spans(dims, q.size(), k.size(), v.size(), o.size(), lse.size(), lse_stride);
  const std::int64_t rows = static_cast<std::int64_t>(q.size()) / dims.q_row(), m = static_cast<std::int64_t>(k.size()) / dims.kv_row();
  if (rows == 0 || m == 0) return;
  std::vector<T> block_o(q.size()), block_lse(static_cast<std::size_t>(dims.heads * rows));
  kernel.forward(attention_forward_args<T>{dims, block_mask::full, {m, m + rows}, {0, m}, q.data(), k.data(), v.data(), block_o.data(),
                                           block_lse.data(), rows});
  merge_block(o.data(), lse.data(), lse_stride, block_o.data(), block_lse.data(), rows, rows, dims.heads, dims.head_dim);
}

//! Adds the context's share of the gradient: into `dq` (the query rows') and into `dk`, `dv`
//! (the context rows'), from the rows' global `o`, `d_o` and `lse`.
template <class T, class Kernel = host_attention>
void context_attention_backward(const attention_dims& dims, std::span<const T> q, std::span<const T> k, std::span<const T> v,
                                std::span<const T> o, std::span<const T> d_o, std::span<const T> lse, std::int64_t lse_stride,
                                std::span<T> dq, std::span<T> dk, std::span<T> dv, const Kernel& kernel = {}) {
  detail::check_context_spans(dims, q.size(), k.size(), v.size(), o.size(), lse.size(), lse_stride);
  ZEPPELIN_EXPECTS(d_o.size() == q.size() && dq.size() == q.size() && dk.size() == k.size() && dv.size() == v.size(),
                   "context attention: dO and dQ must match Q, dK and dV the context",
                   {{"d_o", double(d_o.size())}, {"dq", double(dq.size())}, {"dk", double(dk.size())}, {"dv", double(dv.size())}});
  const std::int64_t rows = static_cast<std::int64_t>(q.size()) / dims.q_row(), m = static_cast<std::int64_t>(k.size()) / dims.kv_row();
  if (rows == 0 || m == 0) return;
  kernel.backward(attention_backward_args<T>{dims, block_mask::full, {m, m + rows}, {0, m}, q.data(), k.data(), v.data(), o.data(),
                                             d_o.data(), lse.data(), lse_stride, dq.data(), dk.data(), dv.data()});
}

ZEPPELIN_NAMESPACE_END
