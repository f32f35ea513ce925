// zeppelin/cuda/executor/device_backend.hpp
// The device backend of the execution program (program/driver.hpp): enqueues one rank's
// operations on CUDA streams, with events for the program's cross-stream dependencies.
//   in : the program, the pass, the rank's device communicator (its stream() is the
//        communication stream), the caller's stream, the rank's device tensors
//        (device_tensors), the launches' CSR descriptors already on the device, an optional
//        execution record
//   out: everything enqueued; the caller's stream is ordered after all of it when the last
//        segment ends. Nothing blocks the host.
// Streams: program stream s runs on the caller's stream when the program has one compute
// stream, else on a stream created for the pass with priority (device greatest priority + s)
// (program/build.hpp: inter > intra > local). Every segment starts after everything enqueued
// before it on the caller's stream (each stream and the communication stream wait for it) and
// the caller's stream waits for every stream at its end. An operation waits, with
// cudaStreamWaitEvent, for the events recorded after the operations its `after` names.
// Operations:
//   copy_rows    one cudaMemcpyAsync per run (runs are merged where contiguous)
//   add_rows     fp32 accumulators: one add_f32 per run (row_ops)
//   zero_rows    cudaMemsetAsync
//   attention    forward: one attention_forward launch (CSR over the held K/V) into the
//                stream's fp32 partial O / LSE, then one lse_merge into the rank's fp32 O
//                accumulator and LSE; backward: one attention_backward launch adding dQ into
//                the rank's fp32 dQ accumulator and dK/dV into the launch's fp32 accumulators
//   exchange     exchange_pieces (exec/transport.hpp) with device_staging on c.stream()
// Rows: K, V, the K/V arenas and remap rows in the element type; dK/dV arenas and the rank's
// dK, dV accumulators in fp32. Arenas come from the stream-ordered allocator on the caller's
// stream and are freed there when the backend is destroyed (after the last segment's join).
// Not yet on the device: the all-to-all (Ulysses) collective (head operations and launches
// over head lanes); the constructor throws invalid_argument for a program that has them,
// before anything is enqueued (and so does device_attention_engine's).
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
#include <zeppelin/cuda/executor/device_staging.hpp>
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
#include <memory>
#include <span>
#include <string>
#include <string_view>
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

//! Why the device engine refuses a program with all-to-all groups (see the file comment).
inline constexpr const char* device_lanes_refused =
    "device engine: the program has all-to-all (Ulysses) groups, whose head operations are not built on the device yet; "
    "run it on the host engine or the simulator, or plan ring or all-gather groups";

template <device_communicator C>
class device_backend {
 public:
  //! `csr[l]`: the CSR arrays of launch l (every launch of this rank), at byte offsets of
  //! `descriptors` (this rank's descriptor buffer, already on the device). `step`, when
  //! given, labels every phase in communicator errors instead of phase_label().
  device_backend(const execution_program& prog, pass_kind pass, C& c, cudaStream_t stream, const attention_dims& dims,
                 device::dtype type, const device_tensors& t, const std::vector<device::launch_csr>& csr, const std::byte* descriptors,
                 execution_record* record = nullptr, std::string_view step = {})
      : prog_(prog), pass_(pass), c_(c), caller_(stream), dims_(dims), type_(type), t_(t), csr_(csr), desc_(descriptors),
        record_(record), step_(step), me_(c.rank()) {
    const rank_pass& mine = prog.pass(pass).at(static_cast<std::size_t>(me_));
    ZEPPELIN_EXPECTS(!uses_head_lanes(prog, mine), device_lanes_refused, {{"rank", double(me_)}});
    for (const arena& a : mine.arenas)
      arenas_.emplace_back(static_cast<std::size_t>(a.rows) * row_bytes(a.rows_of), stream), kinds_.push_back(a.rows_of);
    if (prog.streams.size() > 1) {
      const device::priority_range range = device::stream_priorities();
      for (const program_stream& s : prog.streams) owned_.emplace_back(std::min(range.greatest + s.priority, range.least));
    }
    for (std::size_t s = 0; s < prog.streams.size(); ++s) streams_.push_back(owned_.empty() ? caller_ : owned_[s].get());
    if (pass == pass_kind::forward && t.rows > 0) {
      const auto n = static_cast<std::size_t>(t.rows);
      for (std::size_t s = 0; s < streams_.size(); ++s) {
        part_o_.emplace_back(n * static_cast<std::size_t>(dims.q_row()) * sizeof(float), stream);
        part_lse_.emplace_back(n * static_cast<std::size_t>(dims.heads) * sizeof(float), stream);
      }
    }
  }

  [[nodiscard]] std::span<const rank_index> ranks() const noexcept { return {&me_, 1}; }

  void begin_segment(std::size_t seg) {
    segment_ = &prog_.pass(pass_).at(static_cast<std::size_t>(me_)).segments.at(seg);
    const device::cuda_event start;
    start.record(caller_);
    for (cudaStream_t s : streams_)
      if (s != caller_) start.wait_on(s);
    start.wait_on(c_.stream());
    // an event after every operation a later one waits for
    waited_.assign(segment_->ops.size(), 0);
    for (const program_op& op : segment_->ops)
      for (const std::int32_t a : op.after) waited_[static_cast<std::size_t>(a)] = 1;
    while (events_.size() < segment_->ops.size()) events_.emplace_back();
  }

  void end_segment(std::size_t) {
    for (cudaStream_t s : streams_)
      if (s != caller_) device::stream_wait(caller_, s);
    device::stream_wait(caller_, c_.stream());
  }

  void compute(rank_index, std::size_t, std::int32_t index, const program_op& op) {
    const cudaStream_t s = streams_.at(static_cast<std::size_t>(op.stream));
    for (const std::int32_t a : op.after) events_[static_cast<std::size_t>(a)].wait_on(s);
    std::visit([&](const auto& body) { run(body, s, static_cast<std::size_t>(op.stream)); }, op.body);
    if (waited_[static_cast<std::size_t>(index)]) events_[static_cast<std::size_t>(index)].record(s);
  }

  void exchange(std::int32_t phase, std::span<const rank_index>, std::span<const std::int32_t> index) {
    const program_phase& ph = prog_.phases.at(static_cast<std::size_t>(phase));
    const program_op& op = segment_->ops.at(static_cast<std::size_t>(index.front()));
    for (const std::int32_t a : op.after) events_[static_cast<std::size_t>(a)].wait_on(c_.stream());
    std::vector<std::span<const std::byte>> send(ph.payloads.size());
    std::vector<std::span<std::byte>> recv(ph.payloads.size());
    for (std::size_t i = 0; i < ph.payloads.size(); ++i) {
      const transfer& x = ph.payloads[i];
      const payload_binding& b = ph.bindings[i];
      if (x.src == me_) send[i] = rows_of(b.from, b.from_row, b.rows);
      if (x.dst == me_) recv[i] = rows_of(b.to, b.to_row, b.rows);
    }
    exchange_pieces(c_, std::span<const transfer>(ph.payloads.items()), std::span<const transfer>(ph.pieces.items()),
                    std::span<const std::span<const std::byte>>(send), std::span<const std::span<std::byte>>(recv),
                    step_.empty() ? phase_label(prog_, ph) : step_, device_staging{});
    if (waited_[static_cast<std::size_t>(index.front())]) events_[static_cast<std::size_t>(index.front())].record(c_.stream());
    if (record_)
      for (const transfer& piece : ph.pieces)
        if (piece.src == me_) record_->add(ph, piece);
  }

 private:
  // the program's wire format is the device's: elements of `type`, fp32 accumulators
  [[nodiscard]] std::size_t row_bytes(row_kind k) const noexcept { return static_cast<std::size_t>(prog_.wire.row_bytes(k)); }
  [[nodiscard]] row_kind kind_of(const buffer_ref& b) const {
    if (b.where == buffer_ref::space::arena) return kinds_.at(static_cast<std::size_t>(b.index));
    if (b.is(tensor_kind::dk) || b.is(tensor_kind::dv)) return row_kind::dkv;
    if (b.is(tensor_kind::remap_source) || b.is(tensor_kind::remap_target)) return segment_->rows_of;
    return row_kind::kv;
  }
  [[nodiscard]] std::byte* base_of(const buffer_ref& b) const {
    if (b.where == buffer_ref::space::arena) return arenas_.at(static_cast<std::size_t>(b.index)).template as<std::byte>();
    switch (static_cast<tensor_kind>(b.index)) {
      case tensor_kind::k: return static_cast<std::byte*>(const_cast<void*>(t_.k));
      case tensor_kind::v: return static_cast<std::byte*>(const_cast<void*>(t_.v));
      case tensor_kind::dk: return reinterpret_cast<std::byte*>(t_.dk_acc);
      case tensor_kind::dv: return reinterpret_cast<std::byte*>(t_.dv_acc);
      case tensor_kind::remap_source: return static_cast<std::byte*>(const_cast<void*>(t_.remap_source));
      case tensor_kind::remap_target: return static_cast<std::byte*>(t_.remap_target);
      // the query side is read and written by the launches themselves (device_tensors); only
      // the all-to-all collective, refused by the constructor, names it in operations
      case tensor_kind::q:
      case tensor_kind::o:
      case tensor_kind::lse:
      case tensor_kind::d_o:
      case tensor_kind::dq: break;
    }
    ZEPPELIN_THROW(invalid_argument, "device backend: unknown tensor", {{"tensor", double(b.index)}});
  }
  [[nodiscard]] std::span<std::byte> rows_of(const buffer_ref& b, token_count row, token_count rows) const {
    const std::size_t w = row_bytes(kind_of(b));
    return {base_of(b) + static_cast<std::size_t>(row) * w, static_cast<std::size_t>(rows) * w};
  }

  void run(const copy_rows& op, cudaStream_t s, std::size_t) {
    for (const row_run& r : op.runs) {
      const auto from = rows_of(op.from, r.from_row, r.rows);
      if (!from.empty())
        ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(rows_of(op.to, r.to_row, r.rows).data(), from.data(), from.size(), cudaMemcpyDeviceToDevice, s));
    }
  }
  void run(const add_rows& op, cudaStream_t s, std::size_t) {
    for (const row_run& r : op.runs) {
      const auto from = rows_of(op.from, r.from_row, r.rows);
      const auto to = rows_of(op.to, r.to_row, r.rows);
      if (!from.empty())
        ZEPPELIN_CUDA_CHECK(device::add_f32(reinterpret_cast<float*>(to.data()), reinterpret_cast<const float*>(from.data()),
                                            static_cast<std::int64_t>(from.size() / sizeof(float)), s));
    }
  }
  void run(const zero_rows& op, cudaStream_t s, std::size_t) {
    const auto to = rows_of(op.to, op.row, op.rows);
    if (!to.empty()) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(to.data(), 0, to.size(), s));
  }
  void run(const exchange_phase&, cudaStream_t, std::size_t) {}  // the driver hands exchanges to exchange()
  void run(const head_runs&, cudaStream_t, std::size_t) {}       // refused by the constructor

  void run(const run_attention& op, cudaStream_t s, std::size_t stream) {
    const program_launch& l = prog_.launches.at(static_cast<std::size_t>(op.launch));
    if (record_) record_->add(l);
    const device::launch_csr& w = csr_.at(static_cast<std::size_t>(op.launch));
    const auto csr = [&](device::attention_blocks& p) {
      p.q = t_.q, p.k = base_of(l.k), p.v = base_of(l.v);
      p.cu_seqlens_q = reinterpret_cast<const std::int32_t*>(desc_ + w.cu_q);
      p.cu_seqlens_k = reinterpret_cast<const std::int32_t*>(desc_ + w.cu_k);
      p.q_offset = reinterpret_cast<const std::int64_t*>(desc_ + w.q_offset);
      p.k_offset = reinterpret_cast<const std::int64_t*>(desc_ + w.k_offset);
      p.masks = reinterpret_cast<const block_mask*>(desc_ + w.masks);
      p.num_blocks = w.blocks, p.heads = dims_.heads, p.kv_heads = dims_.kv_heads, p.head_dim = dims_.head_dim;
      p.total_q = t_.rows;
      p.lse_stride = t_.rows;
      p.softmax_scale = static_cast<float>(dims_.softmax_scale());
      p.type = type_;
    };
    if (pass_ == pass_kind::forward) {
      device::attention_forward_params p;
      csr(p);
      p.o_f32 = part_o_.at(stream).template as<float>();
      p.lse = part_lse_.at(stream).template as<float>();
      p.max_seqlen_q = w.max_q;
      device::validate(p);
      ZEPPELIN_CUDA_CHECK(device::attention_forward(p, s));
      const std::int64_t qw = dims_.q_row();
      device::lse_merge_params m;
      m.o_acc = t_.o_acc + w.first_row * qw;
      m.lse_acc = t_.lse + w.first_row;
      m.o_part = part_o_.at(stream).template as<float>() + w.first_row * qw;
      m.lse_part = part_lse_.at(stream).template as<float>() + w.first_row;
      m.rows = w.end_row - w.first_row;
      m.heads = dims_.heads;
      m.head_dim = dims_.head_dim;
      m.lse_acc_stride = t_.rows;
      m.lse_part_stride = t_.rows;
      m.part_type = device::partial_type::fp32;
      device::validate(m);
      ZEPPELIN_CUDA_CHECK(device::lse_merge(m, s));
    } else {
      device::attention_backward_params p;
      csr(p);
      p.dout = t_.d_o;
      p.lse = t_.global_lse;
      p.delta = t_.delta;
      p.dq_accum = t_.dq_acc;
      p.dk_accum = reinterpret_cast<float*>(base_of(l.dk));
      p.dv_accum = reinterpret_cast<float*>(base_of(l.dv));
      p.max_seqlen_k = w.max_k;
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
  std::string step_;
  rank_index me_;
  const program_segment* segment_ = nullptr;
  std::vector<device::device_memory> arenas_;
  std::vector<row_kind> kinds_;
  std::vector<device::cuda_stream> owned_;
  std::vector<cudaStream_t> streams_;
  std::vector<device::device_memory> part_o_, part_lse_;  //!< forward: per stream
  std::vector<device::cuda_event> events_;
  std::vector<char> waited_;
};

ZEPPELIN_NAMESPACE_END
