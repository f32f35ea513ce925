// zeppelin/exec/attention_engine.hpp
// The host attention engine (Zeppelin 3.2): runs a plan's execution program
// (program/program.hpp) forward and backward on every rank of a communicator, with a host
// kernel policy, through the one driver (program/driver.hpp) and the host backend
// (exec/host_backend.hpp).
//   in : the execution program (or a plan, its batch and topology and program_options,
//        from which the engine builds it with the wire format of T), attention_dims; per rank
//        its tensors in the PLAN's layout: the rank's shards concatenated in placement order
//        (rows(rank) tokens), Q/O/dO/dQ [rows][heads][D], K/V/dK/dV [rows][kv_heads][D],
//        LSE [heads][rows] (natural log)
//   out: forward: O and LSE of every query token against every earlier key of its sequence;
//        backward: dQ, dK, dV (overwritten), from the GLOBAL O, dO and LSE; remap(): the
//        rows of one micro-batch moved between the attention layout and the token-balanced
//        layout (when the program remaps, Zeppelin 3.4).
// What runs is exactly the program: per micro-batch its levels (inter-node rings, intra-node
// rings, local sequences), each group with the collective the plan gives it (ring or
// all-gather), every phase as the program routed it. An optional execution_record receives
// what this rank moved and launched (program/record.hpp).
// Plan check: the first pass (forward, backward or remap) the engine runs on a rank first
// exchanges its plan_identity with every rank (exec/plan_agreement.hpp: the fingerprints of
// the program and of the plan and batch it was built from; one group labelled "plan
// fingerprint check") and throws plan_mismatch, naming two ranks that disagree and their
// fingerprints, before any round when the ranks' engines were built from different plans or
// programs. Once per engine and rank; later passes skip it.
// Host executor: kernels run on the calling thread.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/host_backend.hpp>
#include <zeppelin/exec/plan_agreement.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/program/driver.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/record.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class T, class Kernel = host_attention>
  requires attention_kernel<Kernel, T>
class attention_engine {
 public:
  //! Runs `program`, which must have been built for `dims` with elements and accumulators of
  //! sizeof(T) bytes. Throws invalid_argument otherwise or for bad dims.
  attention_engine(execution_program program, attention_dims dims, Kernel kernel = {})
      : program_(std::move(program)),
        dims_(dims),
        kernel_(std::move(kernel)),
        identity_{fingerprint(program_), 0},
        agreement_(program_.num_ranks()) {
    validate(dims_);
    const wire_format& w = program_.wire;
    ZEPPELIN_EXPECTS(w.heads == dims_.heads && w.kv_heads == dims_.kv_heads && w.head_dim == dims_.head_dim &&
                         w.element_bytes == static_cast<std::int32_t>(sizeof(T)) &&
                         w.accumulator_bytes == static_cast<std::int32_t>(sizeof(T)),
                     "attention engine: the program was built for other dims or element sizes",
                     {{"heads", double(w.heads)}, {"kv_heads", double(w.kv_heads)}, {"head_dim", double(w.head_dim)},
                      {"element_bytes", double(w.element_bytes)}, {"accumulator_bytes", double(w.accumulator_bytes)},
                      {"sizeof_T", double(sizeof(T))}});
  }

  //! Builds the program of `p` (make_program with options.wire set to the format of T and
  //! `dims`). Throws what make_program throws.
  attention_engine(const plan& p, const batch& b, const topology& t, attention_dims dims, program_options options = {},
                   Kernel kernel = {})
      : attention_engine(make_program(p, b, t, with_wire(options, dims)), dims, std::move(kernel)) {
    identity_.plan = plan_fingerprint(p, b);
  }

  [[nodiscard]] const execution_program& program() const noexcept { return program_; }
  [[nodiscard]] const attention_dims& dims() const noexcept { return dims_; }
  //! What this engine contributes to the plan check (exec/plan_agreement.hpp).
  [[nodiscard]] const plan_identity& identity() const noexcept { return identity_; }
  //! Tokens (rows) rank r holds: the size of its buffers.
  [[nodiscard]] token_count rows(rank_index r) const { return program_.rows.at(static_cast<std::size_t>(r)); }
  //! First row of shard i of rank r in the rank's buffers.
  [[nodiscard]] token_count shard_row(rank_index r, std::size_t i) const {
    return program_.shard_row.at(static_cast<std::size_t>(r)).at(i);
  }

  //! Forward on the calling rank (every rank of `c` must call it). Sizes: q, o rows * H * D;
  //! k, v rows * KV * D; lse H * rows. Throws invalid_argument on a size mismatch or a
  //! communicator whose size differs from the program's; plan_mismatch (the first pass on
  //! this rank) when the ranks' engines disagree.
  template <communicator C>
  void forward(C& c, std::span<const T> q, std::span<const T> k, std::span<const T> v, std::span<T> o, std::span<T> lse,
               execution_record* record = nullptr) const {
    const token_count n = rows(check_rank(c));
    check_sizes(n, {{"q", q.size(), false}, {"k", k.size(), true}, {"v", v.size(), true}, {"o", o.size(), false}});
    check_size(lse.size(), n * dims_.heads, "lse");
    agree(c);
    std::fill(o.begin(), o.end(), T(0));
    std::fill(lse.begin(), lse.end(), -std::numeric_limits<T>::infinity());
    host_tensors<T> t{};
    t.q = q, t.k = k, t.v = v, t.o = o, t.lse = lse, t.rows = n;
    run(c, pass_kind::forward, t, record);
  }

  //! Backward on the calling rank: dq, dk, dv are overwritten. `o` and `lse` are the outputs
  //! of forward(), `d_o` the gradient of o (rows * H * D).
  template <communicator C>
  void backward(C& c, std::span<const T> q, std::span<const T> k, std::span<const T> v, std::span<const T> o,
                std::span<const T> d_o, std::span<const T> lse, std::span<T> dq, std::span<T> dk, std::span<T> dv,
                execution_record* record = nullptr) const {
    const token_count n = rows(check_rank(c));
    check_sizes(n, {{"q", q.size(), false}, {"k", k.size(), true}, {"v", v.size(), true}, {"o", o.size(), false},
                    {"d_o", d_o.size(), false}, {"dq", dq.size(), false}, {"dk", dk.size(), true}, {"dv", dv.size(), true}});
    check_size(lse.size(), n * dims_.heads, "lse");
    agree(c);
    std::fill(dq.begin(), dq.end(), T(0));
    std::fill(dk.begin(), dk.end(), T(0));
    std::fill(dv.begin(), dv.end(), T(0));
    host_tensors<T> t{};
    t.q = q, t.k = k, t.v = v, t.go = o, t.gdo = d_o, t.glse = lse, t.dq = dq, t.dk = dk, t.dv = dv, t.rows = n;
    run(c, pass_kind::backward, t, record);
  }

  //! The remap segment `kind` (remap_in or remap_out) of micro-batch `micro_batch` in `pass`
  //! on the calling rank: `source` and `target` hold the segment's source_rows and
  //! target_rows (program_segment) rows of its row kind (forward: remap_in moves Q|K|V rows of
  //! (H + 2 KV) * D elements, remap_out O rows; backward: remap_in dO rows, remap_out
  //! dQ|dK|dV rows). Rows of the attention layout outside the micro-batch are left alone.
  //! Throws invalid_argument when the program has no such segment or a size differs.
  template <communicator C>
  void remap(C& c, pass_kind pass, std::int32_t micro_batch, segment_kind kind, std::span<const T> source, std::span<T> target,
             execution_record* record = nullptr) const {
    const rank_index me = check_rank(c);
    const std::size_t segment = remap_segment_index(program_, pass, me, micro_batch, kind);
    const program_segment& seg = program_.pass(pass)[static_cast<std::size_t>(me)].segments[segment];
    const std::int64_t w = row_width(seg.rows_of);
    check_size(source.size(), seg.source_rows * w, "remap source");
    check_size(target.size(), seg.target_rows * w, "remap target");
    agree(c);
    host_tensors<T> t{};
    t.remap_source = source, t.remap_target = target, t.rows = rows(me);
    host_backend<T, Kernel, C> backend(program_, pass, c, kernel_, dims_, t, record);
    run_segment(program_, pass, segment, backend);
  }

  //! Elements of one row of `kind` for this engine's dims.
  [[nodiscard]] std::int64_t row_width(row_kind kind) const noexcept { return program_.wire.row_elements(kind); }

 private:
  struct sized {
    const char* what;
    std::size_t size;
    bool kv;  // rows * kv_row elements, else rows * q_row
  };

  static program_options with_wire(program_options o, const attention_dims& d) {
    o.wire = wire_format::for_shape(d.heads, d.kv_heads, d.head_dim, static_cast<std::int32_t>(sizeof(T)));
    return o;
  }
  rank_index check_rank(const auto& c) const {
    ZEPPELIN_EXPECTS(c.size() == program_.num_ranks(), "attention engine: the communicator and the plan have different rank counts",
                     {{"communicator", double(c.size())}, {"plan", double(program_.num_ranks())}});
    return c.rank();
  }
  static void check_size(std::size_t got, std::int64_t want, const char* what) {
    ZEPPELIN_EXPECTS(static_cast<std::int64_t>(got) == want, std::string("attention engine: buffer ") + what + " has the wrong size",
                     {{"size", double(got)}, {"expected", double(want)}});
  }
  void check_sizes(token_count n, std::initializer_list<sized> buffers) const {
    for (const sized& b : buffers) check_size(b.size, n * (b.kv ? dims_.kv_row() : dims_.q_row()), b.what);
  }
  // the plan check, on this rank's first pass (see the file comment)
  template <class C>
  void agree(C& c) const {
    const rank_index me = c.rank();
    const std::uint64_t world = world_of(c);
    if (agreement_.checked(me, world)) return;
    std::vector<plan_identity> all(static_cast<std::size_t>(c.size()));
    all_gather_bytes(c, std::as_bytes(std::span<const plan_identity>(&identity_, 1)),
                     std::as_writable_bytes(std::span<plan_identity>(all)), host_memory{}, plan_check_step);
    check_plan_agreement("attention engine", std::span<const plan_identity>(all), plan_check_step);
    agreement_.set_checked(me, world);
  }
  template <class C>
  void run(C& c, pass_kind pass, const host_tensors<T>& t, execution_record* record) const {
    host_backend<T, Kernel, C> backend(program_, pass, c, kernel_, dims_, t, record);
    run_pass(program_, pass, backend, [](const program_segment& s) { return s.kind == segment_kind::attention; });
  }

  execution_program program_;
  attention_dims dims_;
  Kernel kernel_;
  plan_identity identity_;
  mutable plan_agreement agreement_;  // per rank: passed the plan check
};

ZEPPELIN_NAMESPACE_END
