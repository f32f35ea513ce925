// zeppelin/exec/host_backend.hpp
// The host backend of the execution program (program/driver.hpp): runs one rank's
// operations on the calling thread with host buffers and a host attention kernel.
//   in : the program, the pass, the calling rank's communicator, a kernel policy
//        (exec/attention_kernel.hpp), the rank's tensors (host_tensors) and, optionally, an
//        execution record to append to
//   out: the operations applied to the tensors and the pass's arenas (heap vectors, one per
//        program arena, zeroed at first use, alive as long as the backend).
// Operations run in the program's order, which satisfies every stream dependency. A
// launch runs its blocks one after another: forward, each block's O and LSE merged into the
// rank's O and LSE (exec/lse_merge.hpp); backward, the kernel adds dQ into the rank's dQ and
// dK / dV into the launch's accumulators. A phase runs through exchange_pieces
// (exec/transport.hpp). Rows: K, V, dK, dV and the K/V arenas hold kv rows
// (kv_heads x head_dim elements), Q / O / dO / dQ q rows, LSE one element per head
// (head-major in the rank's tensor, row-major in arenas), remap buffers the segment's rows;
// an arena with a share of the heads (the all-to-all collective's lanes) rows that wide. A
// launch with a head lane runs the kernel with the lane's head counts over its own Q, O,
// LSE, dO, dQ buffers.
// Every element, accumulators included, is a T: the program must have been built with
// element_bytes == accumulator_bytes == sizeof(T) (the bytes it lists are the bytes that
// move). Throws invalid_argument when an operation leaves a buffer or writes a read-only
// tensor. nvcc-safe (no range-v3); host code.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/lse_merge.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/record.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The calling rank's tensors (see exec/attention_engine.hpp for their shapes).
template <class T>
struct host_tensors {
  std::span<const T> q, k, v;
  std::span<T> o, lse;                  //!< forward: written
  std::span<const T> go, gdo, glse;     //!< backward: the global O, dO and LSE
  std::span<T> dq, dk, dv;              //!< backward: accumulated
  std::span<const T> remap_source;      //!< remap segments
  std::span<T> remap_target;
  token_count rows = 0;                 //!< the rank's attention rows (LSE stride)
};

template <class T, class Kernel, communicator C>
  requires attention_kernel<Kernel, T>
class host_backend {
 public:
  //! `step`, when given, labels every phase in communicator errors instead of phase_label().
  host_backend(const execution_program& prog, pass_kind pass, C& c, const Kernel& kernel, const attention_dims& dims,
               const host_tensors<T>& t, execution_record* record = nullptr, std::string_view step = {})
      : prog_(prog), pass_(pass), c_(c), kernel_(kernel), dims_(dims), t_(t), record_(record), step_(step), me_(c.rank()) {
    const rank_pass& mine = prog.pass(pass).at(static_cast<std::size_t>(me_));
    arenas_.resize(mine.arenas.size());
    arenas_of_ = mine.arenas;
  }

  [[nodiscard]] std::span<const rank_index> ranks() const noexcept { return {&me_, 1}; }

  void begin_segment(std::size_t seg) {
    segment_ = &prog_.pass(pass_).at(static_cast<std::size_t>(me_)).segments.at(seg);
  }
  void end_segment(std::size_t) {}

  void compute(rank_index, std::size_t, std::int32_t, const program_op& op) {
    std::visit([&](const auto& body) { run(body); }, op.body);
  }

  void exchange(std::int32_t phase, std::span<const rank_index>, std::span<const std::int32_t>) {
    const program_phase& ph = prog_.phases.at(static_cast<std::size_t>(phase));
    std::vector<std::span<const std::byte>> send(ph.payloads.size());
    std::vector<std::span<std::byte>> recv(ph.payloads.size());
    for (std::size_t i = 0; i < ph.payloads.size(); ++i) {
      const transfer& x = ph.payloads[i];
      const payload_binding& b = ph.bindings[i];
      if (x.src == me_) send[i] = std::as_bytes(read(b.from, b.from_row, b.rows));
      if (x.dst == me_) recv[i] = std::as_writable_bytes(write(b.to, b.to_row, b.rows));
    }
    exchange_pieces(c_, std::span<const transfer>(ph.payloads.items()), std::span<const transfer>(ph.pieces.items()),
                    std::span<const std::span<const std::byte>>(send), std::span<const std::span<std::byte>>(recv),
                    step_.empty() ? phase_label(prog_, ph) : std::string(step_), host_memory{});
    if (record_)
      for (const transfer& piece : ph.pieces)
        if (piece.src == me_) record_->add(ph, piece);
  }

 private:
  // where rows and heads of a buffer live: element (row i, head h, e) at
  // base[i * row_stride + h * head_stride + e], e < head_elements
  struct buffer_layout {
    std::int64_t rows = 0, row_stride = 0, head_stride = 0, head_elements = 0;
    std::int32_t heads = 0;
    [[nodiscard]] std::int64_t at(token_count row, std::int32_t head) const noexcept { return row * row_stride + head * head_stride; }
  };
  [[nodiscard]] row_kind kind_of(const buffer_ref& b) const {
    if (b.where == buffer_ref::space::arena) return arenas_of_.at(static_cast<std::size_t>(b.index)).rows_of;
    return b.is(tensor_kind::remap_source) || b.is(tensor_kind::remap_target) ? segment_->rows_of
                                                                               : row_kind_of(static_cast<tensor_kind>(b.index));
  }
  [[nodiscard]] buffer_layout layout_of(const buffer_ref& b, std::size_t elements) const {
    const wire_format& w = prog_.wire;
    const row_kind kind = kind_of(b);
    buffer_layout l;
    l.heads = w.heads_of(kind);
    if (b.where == buffer_ref::space::arena && arenas_of_[static_cast<std::size_t>(b.index)].heads > 0)
      l.heads = arenas_of_[static_cast<std::size_t>(b.index)].heads;
    l.head_elements = w.head_elements(kind);
    const std::int64_t width = l.heads * l.head_elements;
    l.rows = width > 0 ? static_cast<std::int64_t>(elements) / width : 0;
    if (b.is(tensor_kind::lse)) {  // head-major [heads][rows]
      l.rows = t_.rows;
      l.row_stride = 1;
      l.head_stride = t_.rows;
    } else {
      l.row_stride = width;
      l.head_stride = l.head_elements;
    }
    return l;
  }
  // the elements of rows [row, row + rows) of a row-major buffer
  template <class Span>
  [[nodiscard]] Span slice(Span whole, const buffer_ref& b, token_count row, token_count rows) const {
    const buffer_layout l = layout_of(b, whole.size());
    ZEPPELIN_EXPECTS(!b.is(tensor_kind::lse), "host backend: row runs of the head-major LSE tensor", {{"rank", double(me_)}});
    ZEPPELIN_EXPECTS(row >= 0 && rows >= 0 && row + rows <= l.rows, "host backend: an operation leaves its buffer",
                     {{"rank", double(me_)}, {"buffer", double(b.index)}, {"row", double(row)}, {"rows", double(rows)},
                      {"buffer_rows", double(l.rows)}});
    return whole.subspan(static_cast<std::size_t>(row * l.row_stride), static_cast<std::size_t>(rows * l.row_stride));
  }
  // an arena's storage, allocated (zeroed) at its first use
  std::vector<T>& storage(std::int32_t a) {
    auto& x = arenas_.at(static_cast<std::size_t>(a));
    const arena& d = arenas_of_.at(static_cast<std::size_t>(a));
    const std::int64_t n = d.rows * prog_.wire.row_elements(d.rows_of, d.heads);
    if (static_cast<std::int64_t>(x.size()) != n) x.assign(static_cast<std::size_t>(n), T(0));
    return x;
  }
  [[nodiscard]] std::span<const T> whole_read(const buffer_ref& b) {
    if (b.where == buffer_ref::space::arena) return storage(b.index);
    const bool forward = pass_ == pass_kind::forward;
    switch (static_cast<tensor_kind>(b.index)) {
      case tensor_kind::k: return t_.k;
      case tensor_kind::v: return t_.v;
      case tensor_kind::dk: return t_.dk;
      case tensor_kind::dv: return t_.dv;
      case tensor_kind::remap_source: return t_.remap_source;
      case tensor_kind::remap_target: return t_.remap_target;
      case tensor_kind::q: return t_.q;
      case tensor_kind::o: return forward ? std::span<const T>(t_.o) : t_.go;
      case tensor_kind::lse: return forward ? std::span<const T>(t_.lse) : t_.glse;
      case tensor_kind::d_o: return t_.gdo;
      case tensor_kind::dq: return t_.dq;
    }
    ZEPPELIN_THROW(invalid_argument, "host backend: unknown tensor", {{"tensor", double(b.index)}});
  }
  [[nodiscard]] std::span<T> whole_write(const buffer_ref& b) {
    if (b.where == buffer_ref::space::arena) return storage(b.index);
    const bool forward = pass_ == pass_kind::forward;
    switch (static_cast<tensor_kind>(b.index)) {
      case tensor_kind::dk: return t_.dk;
      case tensor_kind::dv: return t_.dv;
      case tensor_kind::remap_target: return t_.remap_target;
      case tensor_kind::dq: return t_.dq;
      case tensor_kind::o:
        if (forward) return t_.o;
        break;
      case tensor_kind::lse:
        if (forward) return t_.lse;
        break;
      default: break;
    }
    ZEPPELIN_THROW(invalid_argument, "host backend: an operation writes a read-only tensor",
                   {{"tensor", double(b.index)}, {"pass", double(static_cast<int>(pass_))}});
  }
  [[nodiscard]] std::span<const T> read(const buffer_ref& b, token_count row, token_count rows) {
    return slice(whole_read(b), b, row, rows);
  }
  [[nodiscard]] std::span<T> write(const buffer_ref& b, token_count row, token_count rows) { return slice(whole_write(b), b, row, rows); }

  void run(const copy_rows& op) {
    for (const row_run& r : op.runs) {
      const auto from = read(op.from, r.from_row, r.rows);
      std::copy(from.begin(), from.end(), write(op.to, r.to_row, r.rows).begin());
    }
  }
  void run(const add_rows& op) {
    for (const row_run& r : op.runs) {
      const auto from = read(op.from, r.from_row, r.rows);
      const auto to = write(op.to, r.to_row, r.rows);
      for (std::size_t i = 0; i < from.size(); ++i) to[i] += from[i];
    }
  }
  void run(const zero_rows& op) {
    const auto to = write(op.to, op.row, op.rows);
    std::fill(to.begin(), to.end(), kind_of(op.to) == row_kind::lse ? -std::numeric_limits<T>::infinity() : T(0));
  }
  void run(const exchange_phase&) {}  // the driver hands exchanges to exchange()

  // blocks of heads of rows of `op.from` into heads of rows of `op.to`, combined by
  // `combine(to, from)`, move after move
  template <class Combine>
  void move_heads(const head_runs& op, Combine&& combine) {
    const std::span<const T> from = whole_read(op.from);
    const std::span<T> to = whole_write(op.to);
    const buffer_layout lf = layout_of(op.from, from.size()), lt = layout_of(op.to, to.size());
    for (const head_move& mv : op.moves) {
      ZEPPELIN_EXPECTS(op.heads >= 0 && mv.from_head >= 0 && mv.to_head >= 0 && mv.from_head + op.heads <= lf.heads &&
                           mv.to_head + op.heads <= lt.heads && lf.head_elements == lt.head_elements,
                       "host backend: a head operation leaves the heads of its buffers",
                       {{"rank", double(me_)}, {"from_head", double(mv.from_head)}, {"to_head", double(mv.to_head)},
                        {"heads", double(op.heads)}, {"from_heads", double(lf.heads)}, {"to_heads", double(lt.heads)}});
      for (const row_run& r : op.runs) {
        const token_count from_row = r.from_row + mv.from_shift, to_row = r.to_row + mv.to_shift;
        ZEPPELIN_EXPECTS(r.rows >= 0 && from_row >= 0 && to_row >= 0 && from_row + r.rows <= lf.rows && to_row + r.rows <= lt.rows,
                         "host backend: a head operation leaves its buffer",
                         {{"rank", double(me_)}, {"from_row", double(from_row)}, {"to_row", double(to_row)}, {"rows", double(r.rows)}});
        for (token_count i = 0; i < r.rows; ++i)
          for (std::int32_t h = 0; h < op.heads; ++h) {
            const T* src = from.data() + lf.at(from_row + i, mv.from_head + h);
            T* dst = to.data() + lt.at(to_row + i, mv.to_head + h);
            for (std::int64_t e = 0; e < lf.head_elements; ++e) combine(dst[e], src[e]);
          }
      }
    }
  }
  void run(const copy_heads& op) {
    move_heads(op, [](T& to, T from) { to = from; });
  }
  void run(const add_heads& op) {
    move_heads(op, [](T& to, T from) { to += from; });
  }

  void run(const run_attention& op) {
    const program_launch& l = prog_.launches.at(static_cast<std::size_t>(op.launch));
    if (record_) record_->add(l);
    attention_dims d = dims_;
    if (!l.lane.whole()) d.heads = l.lane.heads, d.kv_heads = l.lane.kv_heads;
    ZEPPELIN_EXPECTS(d.heads >= 1 && d.kv_heads >= 1 && d.heads % d.kv_heads == 0, "host backend: a launch's head lane is malformed",
                     {{"rank", double(me_)}, {"heads", double(d.heads)}, {"kv_heads", double(d.kv_heads)}});
    const std::int64_t qw = d.q_row(), kw = d.kv_row();
    const std::span<const T> queries = whole_read(l.q), keys_all = whole_read(l.k);
    const T* key = keys_all.data();
    const T* value = whole_read(l.v).data();
    const std::int64_t q_rows = static_cast<std::int64_t>(queries.size()) / qw;
    const auto keys = static_cast<std::int64_t>(keys_all.size()) / kw;
    std::vector<T> out, lse;
    for (const attention_block& blk : l.blocks) {
      const token_count m = blk.q.size();
      ZEPPELIN_EXPECTS(blk.q_row >= 0 && blk.q_row + m <= q_rows && blk.kv_row >= 0 && blk.kv_row + blk.k.size() <= keys,
                       "host backend: a block leaves its buffers",
                       {{"rank", double(me_)}, {"q_row", double(blk.q_row)}, {"kv_row", double(blk.kv_row)}});
      const T* query = queries.data() + blk.q_row * qw;
      lse.assign(static_cast<std::size_t>(m * d.heads), T(0));  // [heads][m]
      if (pass_ == pass_kind::forward) {
        out.assign(static_cast<std::size_t>(m * qw), T(0));
        kernel_.forward(attention_forward_args<T>{d, blk.mask, blk.q, blk.k, query, key + blk.kv_row * kw, value + blk.kv_row * kw,
                                                  out.data(), lse.data(), m});
        // merge into the launch's O and LSE
        const std::span<T> o_all = whole_write(l.o), lse_all = whole_write(l.lse);
        const buffer_layout lo = layout_of(l.o, o_all.size()), ll = layout_of(l.lse, lse_all.size());
        check_rows(lo, ll, blk.q_row, m, d.heads);
        for (token_count i = 0; i < m; ++i)
          for (std::int32_t h = 0; h < d.heads; ++h)
            merge_row(o_all.data() + lo.at(blk.q_row + i, h), lse_all[static_cast<std::size_t>(ll.at(blk.q_row + i, h))],
                      out.data() + (i * d.heads + h) * d.head_dim, lse[static_cast<std::size_t>(h * m + i)], d.head_dim);
      } else {
        // the global LSE of the block's rows, head-major with stride m as the kernel reads it
        const std::span<const T> lse_all = whole_read(l.lse);
        const buffer_layout ll = layout_of(l.lse, lse_all.size());
        const std::span<const T> o_all = whole_read(l.o), do_all = whole_read(l.d_o);
        const std::span<T> dq_all = whole_write(l.dq);
        for (const auto& [span_size, what] : {std::pair{o_all.size(), "O"}, std::pair{do_all.size(), "dO"}, std::pair{dq_all.size(), "dQ"}})
          ZEPPELIN_EXPECTS((blk.q_row + m) * qw <= static_cast<std::int64_t>(span_size), std::string("host backend: a block leaves its ") + what,
                           {{"rank", double(me_)}, {"q_row", double(blk.q_row)}, {"rows", double(m)}});
        check_rows(ll, ll, blk.q_row, m, d.heads);
        for (token_count i = 0; i < m; ++i)
          for (std::int32_t h = 0; h < d.heads; ++h)
            lse[static_cast<std::size_t>(h * m + i)] = lse_all[static_cast<std::size_t>(ll.at(blk.q_row + i, h))];
        T* dk = write(l.dk, blk.kv_row, blk.k.size()).data();
        T* dv = write(l.dv, blk.kv_row, blk.k.size()).data();
        kernel_.backward(attention_backward_args<T>{d, blk.mask, blk.q, blk.k, query, key + blk.kv_row * kw, value + blk.kv_row * kw,
                                                    o_all.data() + blk.q_row * qw, do_all.data() + blk.q_row * qw, lse.data(), m,
                                                    dq_all.data() + blk.q_row * qw, dk, dv});
      }
    }
  }
  // rows [row, row + m) with `heads` heads inside both layouts
  void check_rows(const buffer_layout& a, const buffer_layout& b, token_count row, token_count m, std::int32_t heads) const {
    ZEPPELIN_EXPECTS(row >= 0 && row + m <= a.rows && row + m <= b.rows && heads <= a.heads && heads <= b.heads,
                     "host backend: a block leaves its output buffers",
                     {{"rank", double(me_)}, {"q_row", double(row)}, {"rows", double(m)}, {"heads", double(heads)}});
  }

  const execution_program& prog_;
  pass_kind pass_;
  C& c_;
  const Kernel& kernel_;
  attention_dims dims_;
  host_tensors<T> t_;
  execution_record* record_;
  std::string step_;
  rank_index me_;
  const program_segment* segment_ = nullptr;
  std::vector<std::vector<T>> arenas_;
  std::vector<arena> arenas_of_;
};

ZEPPELIN_NAMESPACE_END
