// zeppelin/cuda/executor/device_backend.hpp
// The device backend of the execution program (program/driver.hpp): enqueues one rank's
// operations on CUDA streams, with events for the program's cross-stream dependencies.
//   in : the program, the pass, the rank's device communicator (its stream() is the
//        communication stream), the caller's stream, the rank's device tensors
//        (device_tensors), the launches' CSR descriptors already on the device, an optional
//        execution record, an optional timeline (cuda/executor/device_timeline.hpp: timing
//        events around every attention launch and exchange)
//   out: everything enqueued; the caller's stream is ordered after all of it when the last
//        segment ends. Nothing blocks the host.
// Streams: program stream s runs on the caller's stream when the program has one compute
// stream, else on a stream created for the pass with priority (device greatest priority + s)
// (program/build.hpp: inter > intra > local). Every segment starts after everything enqueued
// before it on the caller's stream (each stream and the communication stream wait for it) and
// the caller's stream waits for every stream at its end. An operation waits, with
// cudaStreamWaitEvent, for the events recorded after the operations its `after` names.
// Operations (row_ops: cuda/executor/row_ops.hpp):
//   copy_rows    one cudaMemcpyAsync per run (runs are merged where contiguous); between an
//                fp32 buffer and one of the element type, one converting head block per run
//   add_rows     fp32 on both sides: one add_f32 per run; else one add head block per run
//   zero_rows    cudaMemsetAsync; LSE rows: fill_f32 with -inf
//   copy_heads / add_heads   one head block per move and run, in the program's order (an add
//                of several moves into the same heads sums in that order, as on the host)
//   attention    forward: one attention_forward launch (CSR over the held K/V) into the
//                stream's fp32 partial O / LSE, then one lse_merge into the launch's fp32 O
//                and LSE; backward: one attention_backward launch adding dQ into the launch's
//                fp32 dQ and dK/dV into its fp32 dK/dV accumulators
//   exchange     exchange_pieces (exec/transport.hpp) with device_staging on c.stream(),
//                posted once the compute operations after it that do not wait for it are
//                enqueued (the next operation that waits for it, the next exchange or the
//                segment's end posts it), so a round's compute is never queued behind the
//                host work of posting the exchange beside it
// Launches over a head lane (the all-to-all collective): the kernels run with the lane's head
// counts over the launch's own buffers, whose rows must hold exactly those heads. Their LSE is
// a row-major arena ([rows][heads]) while the kernels and lse_merge take head-major LSE, so the
// launch's LSE rows go through a per-stream head-major scratch (a head block each way), and the
// backward's delta = rowsum(dO * O) of the launch's rows is computed per launch
// (attention_backward_preprocess) into a per-stream scratch. Launches over the rank's own
// query-side tensors with every head (ring and all-gather collectives, local sequences) use the
// rank's LSE and the engine's delta in place. The head operations and the launches over lanes
// ran on an H100 against the single-GPU reference (tests/gpu/device_ulysses_test.cpp).
// Rows and types: K, V, Q, dO, the backward's global O and arenas of kv, q and qkv rows hold the
// element type; LSE and dkv rows fp32 (the rank's LSE tensor head-major [heads][rows], LSE
// arenas row-major); the rank's O (forward) and dQ accumulators fp32. A launch's O arena
// (forward) or dQ arena (backward) is kept in fp32 as well, unlike the program's wire format
// (the kernels accumulate in fp32): copies between it and element-type arenas convert, so the
// all-to-all collective rounds O and dQ once, for their way home. The constructor throws
// invalid_argument, before anything is enqueued, when a payload of this rank would move rows
// whose device bytes differ from the wire format's (such an arena, the head-major LSE tensor)
// or a launch's head lane is malformed; operations throw invalid_argument when they leave a
// buffer or its heads, write a read-only tensor, name a tensor the pass was not given, or
// name launch buffers that hold other heads than the launch computes. Arenas, scratch, streams
// and events live in the rank's device_pass_resources (cuda/executor/device_pass_resources.hpp):
// allocated by the rank's first backend of the pass kind, reused by every later one, so a pass
// allocates nothing and creates no stream or event.
// Requires zeppelin::kernels. nvcc-safe; host code.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/attention_params.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/device_pass_resources.hpp>
#include <zeppelin/cuda/executor/device_staging.hpp>
#include <zeppelin/cuda/executor/device_timeline.hpp>
#include <zeppelin/cuda/executor/launch_csr.hpp>
#include <zeppelin/cuda/executor/row_ops.hpp>
#include <zeppelin/cuda/lse_merge.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/record.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The calling rank's device tensors of one pass (rows = the rank's attention rows).
struct device_tensors {
  const void* q = nullptr;                  //!< [rows][heads][D], element type
  const void* k = nullptr;                  //!< [rows][kv_heads][D]
  const void* v = nullptr;
  float* o_acc = nullptr;                   //!< forward: [rows][heads][D] fp32, merged into
  float* lse = nullptr;                     //!< forward: [heads][rows], merged into
  const void* global_o = nullptr;           //!< backward: the forward's O [rows][heads][D], element type
  const void* d_o = nullptr;                //!< backward: gradient of the global O
  const float* global_lse = nullptr;        //!< backward: the forward's LSE
  const float* delta = nullptr;             //!< backward: attention_backward_preprocess of O, dO
  float* dq_acc = nullptr;                  //!< backward: [rows][heads][D] fp32, accumulated
  float* dk_acc = nullptr;                  //!< backward: [rows][kv_heads][D] fp32, accumulated
  float* dv_acc = nullptr;
  const void* remap_source = nullptr;       //!< remap segments
  void* remap_target = nullptr;
  std::int64_t rows = 0;
};

template <device_communicator C>
class device_backend {
 public:
  //! `csr[l]`: the CSR arrays of launch l (every launch of this rank), at byte offsets of
  //! `descriptors` (this rank's descriptor buffer, already on the device). `resources`: the
  //! rank's arenas, scratch, streams and events of this pass kind
  //! (cuda/executor/device_pass_resources.hpp), allocated here on the rank's first pass and
  //! reused after. `step`, when given, labels every phase in communicator errors instead of
  //! phase_label(). `timeline`, when given, gets a span per attention launch and exchange.
  device_backend(const execution_program& prog, pass_kind pass, C& c, cudaStream_t stream, const attention_dims& dims,
                 device::dtype type, const device_tensors& t, const std::vector<device::launch_csr>& csr, const std::byte* descriptors,
                 device_pass_resources& resources, execution_record* record = nullptr, std::string_view step = {},
                 device_timeline* timeline = nullptr)
      : prog_(prog), pass_(pass), c_(c), caller_(stream), dims_(dims), type_(type), t_(t), csr_(csr), desc_(descriptors),
        record_(record), timeline_(timeline), step_(step), me_(c.rank()),
        arenas_of_(prog.pass(pass).at(static_cast<std::size_t>(me_)).arenas), res_(resources) {
    if (!res_.built) prepare(prog.pass(pass).at(static_cast<std::size_t>(me_)), stream);  // checks and allocates once
    for (std::size_t s = 0; s < prog.streams.size(); ++s) streams_.push_back(res_.owned.empty() ? caller_ : res_.owned[s].get());
  }

  [[nodiscard]] std::span<const rank_index> ranks() const noexcept { return {&me_, 1}; }

  void begin_segment(std::size_t seg) {
    segment_ = &prog_.pass(pass_).at(static_cast<std::size_t>(me_)).segments.at(seg);
    res_.start.record(caller_);
    for (cudaStream_t s : streams_)
      if (s != caller_) res_.start.wait_on(s);
    res_.start.wait_on(c_.stream());
    // an event after every operation a later one waits for
    waited_.assign(segment_->ops.size(), 0);
    for (const program_op& op : segment_->ops)
      for (const std::int32_t a : op.after) waited_[static_cast<std::size_t>(a)] = 1;
    res_.reserve_events(segment_->ops.size());
  }

  void end_segment(std::size_t) {
    post_exchange();
    std::size_t j = 0;
    const auto join = [&](cudaStream_t s) {
      if (s == caller_) return;
      res_.joins.at(j).record(s);
      res_.joins.at(j++).wait_on(caller_);
    };
    for (cudaStream_t s : streams_) join(s);
    join(c_.stream());
  }

  void compute(rank_index, std::size_t, std::int32_t index, const program_op& op) {
    const cudaStream_t s = streams_.at(static_cast<std::size_t>(op.stream));
    if (pending_ >= 0 && std::find(op.after.begin(), op.after.end(), pending_) != op.after.end()) post_exchange();
    for (const std::int32_t a : op.after) res_.events[static_cast<std::size_t>(a)].wait_on(s);
    const auto* launch = timeline_ ? std::get_if<run_attention>(&op.body) : nullptr;
    std::size_t span = 0;
    if (launch) {
      const program_launch& l = prog_.launches.at(static_cast<std::size_t>(launch->launch));
      span = timeline_->open(timed_kind::launch, l.level, l.round, op.stream, s);
    }
    std::visit([&](const auto& body) { run(body, s, static_cast<std::size_t>(op.stream)); }, op.body);
    if (launch) timeline_->close(span, s);
    if (waited_[static_cast<std::size_t>(index)]) res_.events[static_cast<std::size_t>(index)].record(s);
  }

  //! Posts the previous exchange, if still pending, and keeps this one pending until an
  //! operation waits for it, the next exchange or the segment's end (see post_exchange).
  void exchange(std::int32_t, std::span<const rank_index>, std::span<const std::int32_t> index) {
    post_exchange();
    pending_ = index.front();
  }

 private:
  // The rank's first pass of this kind: the checks of the program that hold for every pass (the
  // payloads' row bytes), then the arenas (a launch's O or dQ arena in fp32), the streams, the
  // launches' scratch (rows x heads of the largest query buffer) and the join events. Nothing
  // is enqueued before the checks pass.
  void prepare(const rank_pass& mine, cudaStream_t stream) {
    res_.fp32_arena.assign(arenas_of_.size(), 0);
    std::size_t scratch = 0;
    bool launches = false, lanes = false;
    for (const program_segment& seg : mine.segments)
      for (const program_op& op : seg.ops)
        if (const auto* run = std::get_if<run_attention>(&op.body)) {
          const program_launch& l = prog_.launches.at(static_cast<std::size_t>(run->launch));
          const buffer_ref accumulator = pass_ == pass_kind::forward ? l.o : l.dq;
          if (accumulator.where == buffer_ref::space::arena) res_.fp32_arena.at(static_cast<std::size_t>(accumulator.index)) = 1;
          scratch = std::max(scratch, static_cast<std::size_t>(layout_of(l.q, &seg).rows * launch_dims(l).heads));
          launches = true;
          lanes = lanes || !on_rank_tensors(l);
        }
    for (const program_segment& seg : mine.segments)
      for (const program_op& op : seg.ops)
        if (const auto* x = std::get_if<exchange_phase>(&op.body)) check_payloads(prog_.phases.at(static_cast<std::size_t>(x->phase)), seg);
    for (std::size_t a = 0; a < arenas_of_.size(); ++a) {
      const buffer_view v = layout_of(buffer_ref::arena(static_cast<std::int32_t>(a)), nullptr);
      res_.arenas.emplace_back(static_cast<std::size_t>(v.rows * v.row_bytes()), stream);
    }
    if (prog_.streams.size() > 1) {
      const device::priority_range range = device::stream_priorities();
      for (const program_stream& s : prog_.streams) res_.owned.emplace_back(std::min(range.greatest + s.priority, range.least));
    }
    for (std::size_t s = 0; launches && s < prog_.streams.size(); ++s) {
      if (pass_ == pass_kind::forward) {
        res_.part_o.emplace_back(scratch * static_cast<std::size_t>(dims_.head_dim) * sizeof(float), stream);
        res_.part_lse.emplace_back(scratch * sizeof(float), stream);
      }
      if (lanes) {
        res_.lse_rows.emplace_back(scratch * sizeof(float), stream);
        if (pass_ == pass_kind::backward) res_.delta.emplace_back(scratch * sizeof(float), stream);
      }
    }
    while (res_.joins.size() < prog_.streams.size() + 1) res_.joins.emplace_back();
    res_.built = true;
  }

  // Posts the pending exchange on the communication stream. It is posted late, after the
  // compute operations that follow it in the program and do not wait for it have been
  // enqueued: posting a group can block the host (a loopback world waits for its peers to
  // post theirs; NCCL launches its kernel), and the compute of a round must not wait on the
  // host behind the exchange that runs beside it. Its stream order is unchanged: it waits
  // for the events of the operations it names, each recorded once per segment, and the
  // communication stream runs exchanges in program order.
  void post_exchange() {
    if (pending_ < 0) return;
    const auto index = static_cast<std::size_t>(std::exchange(pending_, -1));
    const program_op& op = segment_->ops.at(index);
    const program_phase& ph = prog_.phases.at(static_cast<std::size_t>(std::get<exchange_phase>(op.body).phase));
    for (const std::int32_t a : op.after) res_.events[static_cast<std::size_t>(a)].wait_on(c_.stream());
    const std::size_t span = timeline_ ? timeline_->open(timed_kind::exchange, ph.level, ph.round, -1, c_.stream()) : 0;
    std::vector<std::span<const std::byte>> send(ph.payloads.size());
    std::vector<std::span<std::byte>> recv(ph.payloads.size());
    for (std::size_t i = 0; i < ph.payloads.size(); ++i) {
      const transfer& x = ph.payloads[i];
      const payload_binding& b = ph.bindings[i];
      if (x.src == me_) send[i] = row_span(view(b.from, false), b.from, b.from_row, b.rows);
      if (x.dst == me_) recv[i] = row_span(view(b.to, true), b.to, b.to_row, b.rows);
    }
    exchange_pieces(c_, std::span<const transfer>(ph.payloads.items()), std::span<const transfer>(ph.pieces.items()),
                    std::span<const std::span<const std::byte>>(send), std::span<const std::span<std::byte>>(recv),
                    step_.empty() ? phase_label(prog_, ph) : step_, device_staging{});
    if (timeline_) timeline_->close(span, c_.stream());
    if (waited_[index]) res_.events[index].record(c_.stream());
    if (record_)
      for (const transfer& piece : ph.pieces)
        if (piece.src == me_) record_->add(ph, piece);
  }

  // where the rows and heads of a device buffer live: element (row i, head h, e), e <
  // head_elements, at base + (i * row_stride + h * head_stride + e) elements of element_bytes
  // bytes, of `type` when `typed()` (a remap program's rows may be rows of bytes)
  struct buffer_view {
    std::byte* base = nullptr;
    std::int64_t element_bytes = 0;
    device::element_type type = device::element_type::fp32;
    row_kind kind = row_kind::kv;
    bool head_major = false;  //!< the rank's LSE tensor: [heads][rows]
    std::int32_t heads = 0;
    std::int64_t rows = 0, row_stride = 0, head_stride = 0, head_elements = 0;
    [[nodiscard]] bool typed() const noexcept { return element_bytes == static_cast<std::int64_t>(device::size_of(type)); }
    [[nodiscard]] std::int64_t row_bytes() const noexcept { return row_stride * element_bytes; }
    [[nodiscard]] std::byte* at(token_count row, std::int32_t head) const noexcept {
      return base + (row * row_stride + head * head_stride) * element_bytes;
    }
  };

  // buffers hold the wire format's elements (the engine's: its dtype, fp32 accumulators and
  // LSE), except the fp32 accumulators of the launches (`fp32`)
  void set_elements(buffer_view& v, bool fp32) const noexcept {
    v.element_bytes = fp32 ? 4 : prog_.wire.row_bytes(v.kind, 1) / prog_.wire.head_elements(v.kind);
    v.type = v.element_bytes == 4 ? device::element_type::fp32 : device::element_of(type_);
  }
  // the layout of buffer b (no pointer); a remap tensor's rows are those of segment `seg`
  [[nodiscard]] buffer_view layout_of(const buffer_ref& b, const program_segment* seg) const {
    const wire_format& w = prog_.wire;
    buffer_view v;
    if (b.where == buffer_ref::space::arena) {
      const auto a = static_cast<std::size_t>(b.index);
      const arena& d = arenas_of_.at(a);
      v.kind = d.rows_of, v.rows = d.rows;
      v.heads = d.heads > 0 ? d.heads : w.heads_of(d.rows_of);
      set_elements(v, res_.fp32_arena.at(a) != 0);
    } else {
      const auto t = static_cast<tensor_kind>(b.index);
      const bool remap = t == tensor_kind::remap_source || t == tensor_kind::remap_target;
      ZEPPELIN_EXPECTS(!remap || seg != nullptr, "device backend: a remap tensor outside a segment", {{"rank", double(me_)}});
      v.kind = remap ? seg->rows_of : row_kind_of(t);
      v.rows = !remap ? t_.rows : t == tensor_kind::remap_source ? seg->source_rows : seg->target_rows;
      v.heads = w.heads_of(v.kind);
      set_elements(v, t == tensor_kind::dq || (t == tensor_kind::o && pass_ == pass_kind::forward));
      v.head_major = t == tensor_kind::lse;
    }
    v.head_elements = w.head_elements(v.kind);
    v.row_stride = v.head_major ? 1 : v.heads * v.head_elements;
    v.head_stride = v.head_major ? v.rows : v.head_elements;
    return v;
  }
  // buffer b of the current segment, to read or to write
  [[nodiscard]] buffer_view view(const buffer_ref& b, bool write) const {
    buffer_view v = layout_of(b, segment_);
    if (b.where == buffer_ref::space::arena) {
      v.base = res_.arenas.at(static_cast<std::size_t>(b.index)).template as<std::byte>();
      return v;
    }
    const bool forward = pass_ == pass_kind::forward;
    const void* p = nullptr;
    bool writable = true;
    switch (static_cast<tensor_kind>(b.index)) {
      case tensor_kind::k: p = t_.k, writable = false; break;
      case tensor_kind::v: p = t_.v, writable = false; break;
      case tensor_kind::dk: p = t_.dk_acc; break;
      case tensor_kind::dv: p = t_.dv_acc; break;
      case tensor_kind::remap_source: p = t_.remap_source, writable = false; break;
      case tensor_kind::remap_target: p = t_.remap_target; break;
      case tensor_kind::q: p = t_.q, writable = false; break;
      case tensor_kind::o:
        p = forward ? static_cast<const void*>(t_.o_acc) : t_.global_o;
        writable = forward;
        break;
      case tensor_kind::lse:
        p = forward ? static_cast<const void*>(t_.lse) : t_.global_lse;
        writable = forward;
        break;
      case tensor_kind::d_o: p = t_.d_o, writable = false; break;
      case tensor_kind::dq: p = t_.dq_acc; break;
      default: ZEPPELIN_THROW(invalid_argument, "device backend: unknown tensor", {{"tensor", double(b.index)}});
    }
    ZEPPELIN_EXPECTS(!write || writable, "device backend: an operation writes a read-only tensor",
                     {{"rank", double(me_)}, {"tensor", double(b.index)}, {"pass", double(static_cast<int>(pass_))}});
    ZEPPELIN_EXPECTS(p != nullptr || v.rows == 0, "device backend: an operation names a tensor the pass was not given",
                     {{"rank", double(me_)}, {"tensor", double(b.index)}, {"pass", double(static_cast<int>(pass_))}});
    v.base = static_cast<std::byte*>(const_cast<void*>(p));
    return v;
  }
  void check_rows(const buffer_view& v, const buffer_ref& b, token_count row, token_count rows) const {
    ZEPPELIN_EXPECTS(row >= 0 && rows >= 0 && row + rows <= v.rows, "device backend: an operation leaves its buffer",
                     {{"rank", double(me_)}, {"buffer", double(b.index)}, {"row", double(row)}, {"rows", double(rows)},
                      {"buffer_rows", double(v.rows)}});
  }
  // the bytes of rows [row, row + rows) of a row-major buffer
  [[nodiscard]] std::span<std::byte> row_span(const buffer_view& v, const buffer_ref& b, token_count row, token_count rows) const {
    ZEPPELIN_EXPECTS(!v.head_major, "device backend: row runs of the head-major LSE tensor", {{"rank", double(me_)}});
    check_rows(v, b, row, rows);
    return {v.at(row, 0), static_cast<std::size_t>(rows * v.row_bytes())};
  }
  // every payload end on this rank holds rows of the wire format's bytes
  void check_payloads(const program_phase& ph, const program_segment& seg) const {
    for (std::size_t i = 0; i < ph.payloads.size(); ++i) {
      const payload_binding& b = ph.bindings.at(i);
      const std::int64_t wire = prog_.wire.row_bytes(b.rows_of, b.heads);
      for (const auto& [end, here] : {std::pair{b.from, ph.payloads[i].src == me_}, std::pair{b.to, ph.payloads[i].dst == me_}}) {
        if (!here) continue;
        const buffer_view v = layout_of(end, &seg);
        ZEPPELIN_EXPECTS(!v.head_major && v.row_bytes() == wire,
                         "device backend: a payload moves rows whose bytes on the device differ from the wire format's "
                         "(a launch's fp32 O or dQ arena, or the head-major LSE tensor)",
                         {{"rank", double(me_)}, {"buffer", double(end.index)}, {"arena", double(end.where == buffer_ref::space::arena)},
                          {"device_row_bytes", double(v.row_bytes())}, {"wire_row_bytes", double(wire)}});
      }
    }
  }
  // heads [from_head, from_head + heads) of rows from_row.. of `from` -> heads to_head.. of rows to_row.. of `to`
  [[nodiscard]] device::head_block head_block_of(const buffer_view& from, token_count from_row, std::int32_t from_head,
                                                 const buffer_view& to, token_count to_row, std::int32_t to_head, token_count rows,
                                                 std::int32_t heads) const {
    ZEPPELIN_EXPECTS(from.typed() && to.typed(), "device backend: a head block over elements that are neither fp32 nor the dtype",
                     {{"rank", double(me_)}, {"from_element_bytes", double(from.element_bytes)}, {"to_element_bytes", double(to.element_bytes)}});
    device::head_block b;
    b.from = from.at(from_row, from_head), b.from_type = from.type;
    b.from_row_stride = from.row_stride, b.from_head_stride = from.head_stride;
    b.to = to.at(to_row, to_head), b.to_type = to.type;
    b.to_row_stride = to.row_stride, b.to_head_stride = to.head_stride;
    b.rows = rows, b.heads = heads, b.head_elements = from.head_elements;
    return b;
  }
  // the views of a row operation: rows of the same heads on both sides
  [[nodiscard]] std::pair<buffer_view, buffer_view> row_views(const buffer_ref& from, const buffer_ref& to) const {
    std::pair<buffer_view, buffer_view> v{view(from, false), view(to, true)};
    ZEPPELIN_EXPECTS(v.first.heads == v.second.heads && v.first.head_elements == v.second.head_elements,
                     "device backend: a row operation between rows of different widths",
                     {{"rank", double(me_)}, {"from_heads", double(v.first.heads)}, {"to_heads", double(v.second.heads)}});
    return v;
  }

  void run(const copy_rows& op, cudaStream_t s, std::size_t) {
    const auto [from, to] = row_views(op.from, op.to);
    for (const row_run& r : op.runs) {
      const auto src = row_span(from, op.from, r.from_row, r.rows);
      const auto dst = row_span(to, op.to, r.to_row, r.rows);
      if (src.empty()) continue;
      if (from.element_bytes == to.element_bytes && from.type == to.type)
        ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.size(), cudaMemcpyDeviceToDevice, s));
      else
        ZEPPELIN_CUDA_CHECK(device::copy_head_block(head_block_of(from, r.from_row, 0, to, r.to_row, 0, r.rows, from.heads), s));
    }
  }
  void run(const add_rows& op, cudaStream_t s, std::size_t) {
    const auto [from, to] = row_views(op.from, op.to);
    const bool fp32 = from.typed() && to.typed() && from.type == device::element_type::fp32 && to.type == device::element_type::fp32;
    for (const row_run& r : op.runs) {
      const auto src = row_span(from, op.from, r.from_row, r.rows);
      const auto dst = row_span(to, op.to, r.to_row, r.rows);
      if (src.empty()) continue;
      if (fp32)
        ZEPPELIN_CUDA_CHECK(device::add_f32(reinterpret_cast<float*>(dst.data()), reinterpret_cast<const float*>(src.data()),
                                            static_cast<std::int64_t>(src.size() / sizeof(float)), s));
      else
        ZEPPELIN_CUDA_CHECK(device::add_head_block(head_block_of(from, r.from_row, 0, to, r.to_row, 0, r.rows, from.heads), s));
    }
  }
  void run(const zero_rows& op, cudaStream_t s, std::size_t) {
    const buffer_view to = view(op.to, true);
    const auto dst = row_span(to, op.to, op.row, op.rows);
    if (dst.empty()) return;
    if (to.kind == row_kind::lse) {  // the identity of the LSE merge
      ZEPPELIN_EXPECTS(to.typed() && to.type == device::element_type::fp32, "device backend: LSE rows that are not fp32",
                       {{"rank", double(me_)}, {"element_bytes", double(to.element_bytes)}});
      ZEPPELIN_CUDA_CHECK(device::fill_f32(reinterpret_cast<float*>(dst.data()), -std::numeric_limits<float>::infinity(),
                                           static_cast<std::int64_t>(dst.size() / sizeof(float)), s));
    } else {
      ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(dst.data(), 0, dst.size(), s));
    }
  }
  void run(const exchange_phase&, cudaStream_t, std::size_t) {}  // the driver hands exchanges to exchange()

  // blocks of heads of rows of `op.from` into heads of rows of `op.to` (`apply`: copy or add),
  // move after move, run after run
  void move_heads(const head_runs& op, cudaStream_t s, cudaError_t (*apply)(const device::head_block&, cudaStream_t)) {
    const buffer_view from = view(op.from, false), to = view(op.to, true);
    for (const head_move& mv : op.moves) {
      ZEPPELIN_EXPECTS(op.heads >= 0 && mv.from_head >= 0 && mv.to_head >= 0 && mv.from_head + op.heads <= from.heads &&
                           mv.to_head + op.heads <= to.heads && from.head_elements == to.head_elements,
                       "device backend: a head operation leaves the heads of its buffers",
                       {{"rank", double(me_)}, {"from_head", double(mv.from_head)}, {"to_head", double(mv.to_head)},
                        {"heads", double(op.heads)}, {"from_heads", double(from.heads)}, {"to_heads", double(to.heads)}});
      for (const row_run& r : op.runs) {
        const token_count from_row = r.from_row + mv.from_shift, to_row = r.to_row + mv.to_shift;
        check_rows(from, op.from, from_row, r.rows);
        check_rows(to, op.to, to_row, r.rows);
        ZEPPELIN_CUDA_CHECK(apply(head_block_of(from, from_row, mv.from_head, to, to_row, mv.to_head, r.rows, op.heads), s));
      }
    }
  }
  void run(const copy_heads& op, cudaStream_t s, std::size_t) { move_heads(op, s, &device::copy_head_block); }
  void run(const add_heads& op, cudaStream_t s, std::size_t) { move_heads(op, s, &device::add_head_block); }

  // the heads launch l computes (its lane, or every head)
  [[nodiscard]] attention_dims launch_dims(const program_launch& l) const {
    attention_dims d = dims_;
    if (!l.lane.whole()) d.heads = l.lane.heads, d.kv_heads = l.lane.kv_heads;
    ZEPPELIN_EXPECTS(d.heads >= 1 && d.kv_heads >= 1 && d.heads % d.kv_heads == 0, "device backend: a launch's head lane is malformed",
                     {{"rank", double(me_)}, {"heads", double(d.heads)}, {"kv_heads", double(d.kv_heads)}});
    return d;
  }
  // whether launch l computes every head over the rank's own query-side tensors (ring and
  // all-gather collectives, local sequences): the rank's LSE and the engine's delta serve it
  [[nodiscard]] static bool on_rank_tensors(const program_launch& l) noexcept {
    return l.lane.whole() && l.q.is(tensor_kind::q) && l.o.is(tensor_kind::o) && l.lse.is(tensor_kind::lse) && l.d_o.is(tensor_kind::d_o);
  }
  // a launch's buffer: rows of `heads` heads of `head_elements` elements of `type`
  [[nodiscard]] buffer_view operand(const buffer_ref& b, bool write, std::int32_t heads, std::int64_t head_elements,
                                    device::element_type type, const char* what) const {
    const buffer_view v = view(b, write);
    ZEPPELIN_EXPECTS(v.heads == heads && v.head_elements == head_elements && v.typed() && v.type == type,
                     std::string("device backend: a launch's ") + what + " buffer holds other heads or elements than the launch computes",
                     {{"rank", double(me_)}, {"buffer", double(b.index)}, {"heads", double(v.heads)}, {"launch_heads", double(heads)},
                      {"head_elements", double(v.head_elements)}, {"element_bytes", double(v.element_bytes)}});
    return v;
  }
  // stream's head-major LSE scratch ([heads][rows])
  [[nodiscard]] buffer_view lse_scratch(std::size_t stream, token_count rows, std::int32_t heads) const {
    buffer_view v;
    v.base = res_.lse_rows.at(stream).template as<std::byte>();
    v.element_bytes = 4, v.type = device::element_type::fp32;
    v.kind = row_kind::lse, v.head_major = true, v.heads = heads, v.rows = rows;
    v.row_stride = 1, v.head_stride = rows, v.head_elements = 1;
    return v;
  }

  void run(const run_attention& op, cudaStream_t s, std::size_t stream) {
    const program_launch& l = prog_.launches.at(static_cast<std::size_t>(op.launch));
    if (record_) record_->add(l);
    const device::launch_csr& w = csr_.at(static_cast<std::size_t>(op.launch));
    const attention_dims d = launch_dims(l);
    const std::int64_t D = d.head_dim;
    const device::element_type element = device::element_of(type_), fp32 = device::element_type::fp32;
    const bool own = on_rank_tensors(l);
    const buffer_view q = operand(l.q, false, d.heads, D, element, "Q");
    const buffer_view k = operand(l.k, false, d.kv_heads, D, element, "K"), v = operand(l.v, false, d.kv_heads, D, element, "V");
    // query rows [first, first + rows) (the CSR's, gap fillers included), key rows [kv_first, kv_end)
    const token_count first = w.first_row, rows = w.end_row - w.first_row;
    const token_count kv_first = l.blocks.empty() ? 0 : l.blocks.front().kv_row;
    token_count kv_end = kv_first;
    for (const attention_block& b : l.blocks) kv_end = std::max(kv_end, b.kv_row + b.k.size());
    check_rows(q, l.q, first, rows);
    check_rows(k, l.k, kv_first, kv_end - kv_first);
    check_rows(v, l.v, kv_first, kv_end - kv_first);
    const auto csr = [&](device::attention_blocks& p) {
      p.q = q.base, p.k = k.base, p.v = v.base;
      p.cu_seqlens_q = reinterpret_cast<const std::int32_t*>(desc_ + w.cu_q);
      p.cu_seqlens_k = reinterpret_cast<const std::int32_t*>(desc_ + w.cu_k);
      p.q_offset = reinterpret_cast<const std::int64_t*>(desc_ + w.q_offset);
      p.k_offset = reinterpret_cast<const std::int64_t*>(desc_ + w.k_offset);
      p.masks = reinterpret_cast<const block_mask*>(desc_ + w.masks);
      p.num_blocks = w.blocks, p.heads = d.heads, p.kv_heads = d.kv_heads, p.head_dim = d.head_dim;
      p.total_q = q.rows;
      p.lse_stride = q.rows;
      p.softmax_scale = static_cast<float>(d.softmax_scale());
      p.type = type_;
    };
    if (pass_ == pass_kind::forward) {
      const buffer_view o = operand(l.o, true, d.heads, D, fp32, "O"), lse = operand(l.lse, true, d.heads, 1, fp32, "LSE");
      check_rows(o, l.o, first, rows);
      check_rows(lse, l.lse, first, rows);
      device::attention_forward_params p;
      csr(p);
      p.o_f32 = res_.part_o.at(stream).template as<float>();
      p.lse = res_.part_lse.at(stream).template as<float>();
      p.max_seqlen_q = w.max_q;
      device::validate(p);
      ZEPPELIN_CUDA_CHECK(device::attention_forward(p, s));
      // merge into the launch's O and LSE; a row-major LSE through the head-major scratch
      const buffer_view acc = own ? lse : lse_scratch(stream, q.rows, d.heads);
      if (!own) ZEPPELIN_CUDA_CHECK(device::copy_head_block(head_block_of(lse, first, 0, acc, first, 0, rows, d.heads), s));
      device::lse_merge_params m;
      m.o_acc = reinterpret_cast<float*>(o.at(first, 0));
      m.lse_acc = reinterpret_cast<float*>(acc.at(first, 0));
      m.o_part = p.o_f32 + first * d.q_row();
      m.lse_part = p.lse + first;
      m.rows = rows;
      m.heads = d.heads;
      m.head_dim = d.head_dim;
      m.lse_acc_stride = acc.head_stride;
      m.lse_part_stride = q.rows;
      m.part_type = device::partial_type::fp32;
      device::validate(m);
      ZEPPELIN_CUDA_CHECK(device::lse_merge(m, s));
      if (!own) ZEPPELIN_CUDA_CHECK(device::copy_head_block(head_block_of(acc, first, 0, lse, first, 0, rows, d.heads), s));
    } else {
      const buffer_view d_o = operand(l.d_o, false, d.heads, D, element, "dO"), dq = operand(l.dq, true, d.heads, D, fp32, "dQ");
      const buffer_view dk = operand(l.dk, true, d.kv_heads, D, fp32, "dK"), dv = operand(l.dv, true, d.kv_heads, D, fp32, "dV");
      check_rows(d_o, l.d_o, first, rows);
      check_rows(dq, l.dq, first, rows);
      check_rows(dk, l.dk, kv_first, kv_end - kv_first);
      check_rows(dv, l.dv, kv_first, kv_end - kv_first);
      device::attention_backward_params p;
      csr(p);
      p.dout = d_o.base;
      p.dq_accum = reinterpret_cast<float*>(dq.base);
      p.dk_accum = reinterpret_cast<float*>(dk.base);
      p.dv_accum = reinterpret_cast<float*>(dv.base);
      p.max_seqlen_k = w.max_k;
      if (own) {
        p.lse = t_.global_lse;
        p.delta = t_.delta;
      } else {
        // the launch's LSE rows head-major, and delta = rowsum(dO * O) of its rows, in scratch
        const buffer_view lse = operand(l.lse, false, d.heads, 1, fp32, "LSE"), o = operand(l.o, false, d.heads, D, element, "O");
        check_rows(lse, l.lse, first, rows);
        check_rows(o, l.o, first, rows);
        const buffer_view acc = lse_scratch(stream, q.rows, d.heads);
        ZEPPELIN_CUDA_CHECK(device::copy_head_block(head_block_of(lse, first, 0, acc, first, 0, rows, d.heads), s));
        float* delta = res_.delta.at(stream).template as<float>();
        if (rows > 0) {
          device::attention_preprocess_params pp;
          pp.o = o.at(first, 0);
          pp.dout = d_o.at(first, 0);
          pp.delta = delta + first;
          pp.rows = rows;
          pp.heads = d.heads;
          pp.head_dim = d.head_dim;
          pp.delta_stride = q.rows;
          pp.type = type_;
          device::validate(pp);
          ZEPPELIN_CUDA_CHECK(device::attention_backward_preprocess(pp, s));
        }
        p.lse = reinterpret_cast<const float*>(acc.base);
        p.delta = delta;
      }
      device::validate(p);
      ZEPPELIN_CUDA_CHECK(device::attention_backward(p, s));
    }
  }

  const execution_program& prog_;
  pass_kind pass_;
  C& c_;
  cudaStream_t caller_;
  attention_dims dims_;
  device::dtype type_;
  device_tensors t_;
  const std::vector<device::launch_csr>& csr_;
  const std::byte* desc_;
  execution_record* record_;
  device_timeline* timeline_;
  std::string step_;
  rank_index me_;
  const std::vector<arena>& arenas_of_;  //!< this rank's arenas in the program (read there, not copied)
  device_pass_resources& res_;  //!< arenas, scratch, streams and events, kept across passes
  const program_segment* segment_ = nullptr;
  std::vector<cudaStream_t> streams_;
  std::vector<char> waited_;
  std::int32_t pending_ = -1;  //!< the operation index of the exchange not yet posted (-1: none)
};

ZEPPELIN_NAMESPACE_END
