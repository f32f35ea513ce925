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
// (kv_heads x head_dim elements), Q / O / dO / dQ q rows, remap buffers the segment's rows.
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
    for (const arena& a : mine.arenas) arena_kinds_.push_back(a.rows_of), arena_rows_.push_back(a.rows);
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
    exchange_pieces(c_, std::span<const transfer>(ph.payloads), std::span<const transfer>(ph.pieces),
                    std::span<const std::span<const std::byte>>(send), std::span<const std::span<std::byte>>(recv),
                    step_.empty() ? phase_label(prog_, ph) : std::string(step_), host_memory{});
    if (record_)
      for (const transfer& piece : ph.pieces)
        if (piece.src == me_) record_->add(ph, piece);
  }

 private:
  [[nodiscard]] std::int64_t width(row_kind k) const noexcept {
    switch (k) {
      case row_kind::kv:
      case row_kind::dkv: return dims_.kv_row();
      case row_kind::q: return dims_.q_row();
      case row_kind::qkv: return dims_.q_row() + 2 * dims_.kv_row();
    }
    return 0;
  }
  [[nodiscard]] row_kind kind_of(const buffer_ref& b) const {
    if (b.where == buffer_ref::space::arena) return arena_kinds_.at(static_cast<std::size_t>(b.index));
    return b.is(tensor_kind::remap_source) || b.is(tensor_kind::remap_target) ? segment_->rows_of : row_kind::kv;
  }
  // the elements of rows [row, row + rows) of a buffer
  template <class Span>
  [[nodiscard]] Span slice(Span whole, const buffer_ref& b, token_count row, token_count rows) const {
    const std::int64_t w = width(kind_of(b));
    ZEPPELIN_EXPECTS(row >= 0 && rows >= 0 && (row + rows) * w <= static_cast<std::int64_t>(whole.size()),
                     "host backend: an operation leaves its buffer",
                     {{"rank", double(me_)}, {"buffer", double(b.index)}, {"row", double(row)}, {"rows", double(rows)},
                      {"buffer_rows", double(static_cast<std::int64_t>(whole.size()) / (w > 0 ? w : 1))}});
    return whole.subspan(static_cast<std::size_t>(row * w), static_cast<std::size_t>(rows * w));
  }
  // an arena's storage, allocated (zeroed) at its first use
  std::vector<T>& storage(std::int32_t a) {
    auto& x = arenas_.at(static_cast<std::size_t>(a));
    const std::int64_t n = arena_rows_[static_cast<std::size_t>(a)] * width(arena_kinds_[static_cast<std::size_t>(a)]);
    if (static_cast<std::int64_t>(x.size()) != n) x.assign(static_cast<std::size_t>(n), T(0));
    return x;
  }
  [[nodiscard]] std::span<const T> whole_read(const buffer_ref& b) {
    if (b.where == buffer_ref::space::arena) return storage(b.index);
    switch (static_cast<tensor_kind>(b.index)) {
      case tensor_kind::k: return t_.k;
      case tensor_kind::v: return t_.v;
      case tensor_kind::dk: return t_.dk;
      case tensor_kind::dv: return t_.dv;
      case tensor_kind::remap_source: return t_.remap_source;
      case tensor_kind::remap_target: return t_.remap_target;
    }
    ZEPPELIN_THROW(invalid_argument, "host backend: unknown tensor", {{"tensor", double(b.index)}});
  }
  [[nodiscard]] std::span<T> whole_write(const buffer_ref& b) {
    if (b.where == buffer_ref::space::arena) return storage(b.index);
    switch (static_cast<tensor_kind>(b.index)) {
      case tensor_kind::dk: return t_.dk;
      case tensor_kind::dv: return t_.dv;
      case tensor_kind::remap_target: return t_.remap_target;
      default: break;
    }
    ZEPPELIN_THROW(invalid_argument, "host backend: an operation writes a read-only tensor", {{"tensor", double(b.index)}});
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
    std::fill(to.begin(), to.end(), T(0));
  }
  void run(const exchange_phase&) {}  // the driver hands exchanges to exchange()

  void run(const run_attention& op) {
    const program_launch& l = prog_.launches.at(static_cast<std::size_t>(op.launch));
    if (record_) record_->add(l);
    const std::int64_t qw = dims_.q_row(), kw = dims_.kv_row();
    const T* key = whole_read(l.k).data();
    const T* value = whole_read(l.v).data();
    const auto keys = static_cast<std::int64_t>(whole_read(l.k).size()) / kw;
    for (const attention_block& blk : l.blocks) {
      const token_count m = blk.q.size();
      ZEPPELIN_EXPECTS(blk.q_row >= 0 && blk.q_row + m <= t_.rows && blk.kv_row >= 0 && blk.kv_row + blk.k.size() <= keys,
                       "host backend: a block leaves its buffers",
                       {{"rank", double(me_)}, {"q_row", double(blk.q_row)}, {"kv_row", double(blk.kv_row)}});
      if (pass_ == pass_kind::forward) {
        std::vector<T> out(static_cast<std::size_t>(m * qw)), lse(static_cast<std::size_t>(m * dims_.heads));
        kernel_.forward(attention_forward_args<T>{dims_, blk.mask, blk.q, blk.k, t_.q.data() + blk.q_row * qw, key + blk.kv_row * kw,
                                                  value + blk.kv_row * kw, out.data(), lse.data(), m});
        merge_block(t_.o.data() + blk.q_row * qw, t_.lse.data() + blk.q_row, t_.rows, out.data(), lse.data(), m, m, dims_.heads,
                    dims_.head_dim);
      } else {
        T* dk = write(l.dk, blk.kv_row, blk.k.size()).data();
        T* dv = write(l.dv, blk.kv_row, blk.k.size()).data();
        kernel_.backward(attention_backward_args<T>{dims_, blk.mask, blk.q, blk.k, t_.q.data() + blk.q_row * qw, key + blk.kv_row * kw,
                                                    value + blk.kv_row * kw, t_.go.data() + blk.q_row * qw,
                                                    t_.gdo.data() + blk.q_row * qw, t_.glse.data() + blk.q_row, t_.rows,
                                                    t_.dq.data() + blk.q_row * qw, dk, dv});
      }
    }
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
  std::vector<row_kind> arena_kinds_;
  std::vector<token_count> arena_rows_;
};

ZEPPELIN_NAMESPACE_END
