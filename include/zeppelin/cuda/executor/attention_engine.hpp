// zeppelin/cuda/executor/attention_engine.hpp
// The CUDA attention engine (Zeppelin 3.2 on the device): runs a plan's execution program
// (program/program.hpp), forward and backward, on every rank of a device_communicator,
// through the one driver (program/driver.hpp) and the device backend
// (cuda/executor/device_backend.hpp).
//   in : the execution program (or a plan, batch, topology and program_options, from which
//        the engine builds it with the wire format of its dtype: elements of the dtype, fp32
//        dK/dV accumulators), attention_dims (head_dim 64 or 128), the element type
//        (bf16 | fp16); per rank its device tensors in the PLAN's layout (exec/attention_engine.hpp):
//        Q, O, dO, dQ [rows][heads][D], K, V, dK, dV [rows][kv_heads][D] in `type`, LSE
//        [heads][rows] fp32 (natural log)
//   out: forward: O and LSE of every query against every earlier key of its sequence;
//        backward: dQ, dK, dV (overwritten) from the global O, dO, LSE; remap(): one
//        micro-batch's rows moved between the attention and the token-balanced layout. Work is
//        enqueued on the caller's stream (and the program's streams, joined back into it); a
//        call returns once everything is enqueued.
// What runs is exactly the program: the same phases (routed pieces), launches (one CSR
// attention launch each, fused over the groups of a level when the program says so) and
// dependencies the host engine runs and the simulator prices. At construction every launch's
// CSR arrays are built (cuda/executor/launch_csr.hpp). Plan once, run many: a rank's first pass
// uploads its descriptors (pinned, asynchronous) and allocates its arenas, scratch,
// accumulators, streams and events, which every later pass reuses
// (cuda/executor/device_pass_resources.hpp); prepare() does all of it up front, after which a
// pass can be captured into a CUDA graph and replayed (cuda/graph.hpp).
// Forward: O accumulates in fp32 (lse_merge after every launch) and is cast to `type` at the
// end. Backward: attention_backward_preprocess (delta = rowsum(dO * O)) once, dQ and dK/dV in
// fp32, cast at the end.
// All-to-all (Ulysses, Ulysses x ring) groups run as their program says: Q, K, V (backward also
// O, dO, LSE) packed into head lanes by head operations, launches with the lanes' head counts
// over the lanes' arenas, O and LSE (backward dQ, dK, dV) unpacked into the rank's tensors (see
// cuda/executor/device_backend.hpp for how lanes map onto the kernels).
// Timing: forward() and backward() take an optional device_timeline
// (cuda/executor/device_timeline.hpp) that gets timing events around every attention launch
// and exchange of the pass; exec/overlap.hpp turns them into the exposed wait per rank.
// Plan check, as in the host engine (exec/attention_engine.hpp, exec/plan_agreement.hpp): the
// first pass the engine runs on a rank exchanges its plan_identity (16 bytes, one group
// labelled "plan fingerprint check" on c.stream()) and throws plan_mismatch before any round
// when the ranks' engines were built from different plans or programs. That first pass is the
// one call that blocks the host: it waits for c.stream() (c.synchronize) to read the
// fingerprints back. Once per engine and rank.
// Requires: zeppelin::kernels (attention, lse_merge, cast, row_ops). nvcc-safe; host code.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/attention_params.hpp>
#include <zeppelin/cuda/cast.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/device_backend.hpp>
#include <zeppelin/cuda/executor/device_pass_resources.hpp>
#include <zeppelin/cuda/executor/device_staging.hpp>
#include <zeppelin/cuda/executor/device_timeline.hpp>
#include <zeppelin/cuda/executor/launch_csr.hpp>
#include <zeppelin/cuda/executor/row_ops.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/plan_agreement.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/program/driver.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/record.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Device tensors of a forward pass (rows = engine.rows(rank)).
struct device_forward_io {
  const void* q = nullptr;  //!< [rows][heads][D], `type`
  const void* k = nullptr;  //!< [rows][kv_heads][D], `type`
  const void* v = nullptr;  //!< [rows][kv_heads][D], `type`
  void* o = nullptr;        //!< [rows][heads][D], `type`, written
  float* lse = nullptr;     //!< [heads][rows], written
};

//! Device tensors of a backward pass.
struct device_backward_io {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;    //!< the forward's O
  const void* d_o = nullptr;  //!< gradient of O
  const float* lse = nullptr; //!< the forward's LSE
  void* dq = nullptr;         //!< written
  void* dk = nullptr;         //!< written
  void* dv = nullptr;         //!< written
};

class device_attention_engine {
 public:
  //! Runs `program`, which must have been built for `dims` with elements of `type` and fp32
  //! accumulators. Throws invalid_argument for dims without a kernel (head_dim 64 / 128), a
  //! bad dtype, or a program built for other dims or element sizes.
  device_attention_engine(execution_program program, attention_dims dims, device::dtype type)
      : program_(std::move(program)), dims_(dims), type_(type), identity_{fingerprint(program_), 0}, agreement_(program_.num_ranks()) {
    validate(dims_);
    ZEPPELIN_EXPECTS(device::is_supported_head_dim(dims.head_dim) && dims.heads <= device::detail::max_grid_yz,
                     "device attention engine: no kernel for this head dim (64, 128) or too many heads",
                     {{"head_dim", double(dims.head_dim)}, {"heads", double(dims.heads)}});
    ZEPPELIN_EXPECTS(type == device::dtype::bf16 || type == device::dtype::fp16, "device attention engine: unknown dtype",
                     {{"dtype", double(static_cast<int>(type))}});
    const wire_format& w = program_.wire;
    ZEPPELIN_EXPECTS(w == wire_for(dims, type), "device attention engine: the program was built for other dims or element sizes",
                     {{"heads", double(w.heads)}, {"kv_heads", double(w.kv_heads)}, {"head_dim", double(w.head_dim)},
                      {"element_bytes", double(w.element_bytes)}, {"accumulator_bytes", double(w.accumulator_bytes)}});
    // every launch's CSR arrays, in its rank's descriptor buffer
    descriptors_.resize(static_cast<std::size_t>(program_.num_ranks()));
    resources_ = device_resources_per_rank(static_cast<std::size_t>(program_.num_ranks()));
    csr_.reserve(program_.launches.size());
    for (const program_launch& l : program_.launches)
      csr_.push_back(device::make_launch_csr(l.blocks.items(), descriptors_.at(static_cast<std::size_t>(l.rank))));
  }

  //! Builds the program of `p` (make_program with options.wire set to the format of `type`).
  device_attention_engine(const plan& p, const batch& b, const topology& t, attention_dims dims, device::dtype type,
                          program_options options = {})
      : device_attention_engine(make_program(p, b, t, with_wire(options, dims, type)), dims, type) {
    identity_.plan = plan_fingerprint(p, b);
  }

  [[nodiscard]] const execution_program& program() const noexcept { return program_; }
  [[nodiscard]] const attention_dims& dims() const noexcept { return dims_; }
  [[nodiscard]] device::dtype type() const noexcept { return type_; }
  //! What this engine contributes to the plan check (exec/plan_agreement.hpp).
  [[nodiscard]] const plan_identity& identity() const noexcept { return identity_; }
  [[nodiscard]] token_count rows(rank_index r) const { return program_.rows.at(static_cast<std::size_t>(r)); }
  [[nodiscard]] token_count shard_row(rank_index r, std::size_t i) const {
    return program_.shard_row.at(static_cast<std::size_t>(r)).at(i);
  }
  //! Attention launches rank r makes per pass.
  [[nodiscard]] std::size_t launches(rank_index r, pass_kind pass) const {
    return static_cast<std::size_t>(std::count_if(program_.launches.begin(), program_.launches.end(),
                                                  [&](const program_launch& l) { return l.rank == r && l.pass == pass; }));
  }

  //! The wire format of tensors of `type` with fp32 accumulators.
  [[nodiscard]] static wire_format wire_for(const attention_dims& d, device::dtype type) {
    return wire_format::for_shape(d.heads, d.kv_heads, d.head_dim, static_cast<std::int32_t>(device::size_of(type)));
  }

  //! Makes the calling rank ready to run, and to capture, its passes: the plan check (the one
  //! blocking exchange, see the file comment), its descriptors uploaded, its arenas, scratch,
  //! accumulators, streams and events of both passes allocated (`stream`: the caller's stream
  //! of the passes to come), then `stream` synchronised. The first forward() or backward() does
  //! the part it needs itself; call prepare() before capturing a pass into a CUDA graph
  //! (cuda/graph.hpp), during which nothing may allocate or block.
  template <device_communicator C>
  void prepare(C& c, cudaStream_t stream) const {
    const rank_index me = check_rank(c);
    agree(c);
    device_rank_resources& mine = resources_of(me);
    const std::byte* desc = upload_descriptors(mine, me, stream);
    for (const pass_kind pass : {pass_kind::forward, pass_kind::backward}) {
      device_pass_resources& res = mine.of(pass == pass_kind::forward);
      (void)accumulators(res, pass, rows(me), stream);
      device_tensors t;
      t.rows = rows(me);
      const device_backend<C> allocate(program_, pass, c, stream, dims_, type_, t, csr_, desc, res);
    }
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  //! Forward on the calling rank; every rank of c calls it. Enqueued on `stream`. Throws
  //! plan_mismatch (the first pass on this rank) when the ranks' engines disagree. Inside a
  //! CUDA graph capture of `stream` it needs prepare() first (invalid_argument otherwise).
  template <device_communicator C>
  void forward(C& c, const device_forward_io& io, cudaStream_t stream, execution_record* record = nullptr,
               device_timeline* timeline = nullptr) const {
    const rank_index me = check_rank(c);
    check_capture(c, pass_kind::forward, stream);
    agree(c);
    device_pass_resources& res = resources_of(me).forward;
    res.begin_pass(stream);
    const auto n = static_cast<std::size_t>(rows(me));
    const std::size_t qn = n * static_cast<std::size_t>(dims_.q_row());
    float* o_acc = accumulators(res, pass_kind::forward, rows(me), stream)[0];
    if (qn > 0) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(o_acc, 0, qn * sizeof(float), stream));
    ZEPPELIN_CUDA_CHECK(device::fill_f32(io.lse, -INFINITY, static_cast<std::int64_t>(n) * dims_.heads, stream));
    device_tensors t;
    t.q = io.q, t.k = io.k, t.v = io.v, t.o_acc = o_acc, t.lse = io.lse, t.rows = static_cast<std::int64_t>(n);
    run(c, pass_kind::forward, t, stream, record, timeline);
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.o, o_acc, static_cast<std::int64_t>(qn), type_, stream));
    res.end_pass(stream);
  }

  //! Backward on the calling rank; every rank of c calls it. Enqueued on `stream`. Throws
  //! plan_mismatch (the first pass on this rank) when the ranks' engines disagree. Inside a
  //! CUDA graph capture of `stream` it needs prepare() first (invalid_argument otherwise).
  template <device_communicator C>
  void backward(C& c, const device_backward_io& io, cudaStream_t stream, execution_record* record = nullptr,
                device_timeline* timeline = nullptr) const {
    const rank_index me = check_rank(c);
    check_capture(c, pass_kind::backward, stream);
    agree(c);
    device_pass_resources& res = resources_of(me).backward;
    res.begin_pass(stream);
    const auto n = static_cast<std::size_t>(rows(me));
    const std::size_t qn = n * static_cast<std::size_t>(dims_.q_row());
    const std::size_t kn = n * static_cast<std::size_t>(dims_.kv_row());
    const std::array<float*, 4> acc = accumulators(res, pass_kind::backward, rows(me), stream);
    float *dq = acc[0], *dk = acc[1], *dv = acc[2], *delta = acc[3];
    if (qn > 0) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(dq, 0, qn * sizeof(float), stream));
    for (float* m : {dk, dv})
      if (kn > 0) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(m, 0, kn * sizeof(float), stream));
    if (n > 0) {
      device::attention_preprocess_params pp;
      pp.o = io.o;
      pp.dout = io.d_o;
      pp.delta = delta;
      pp.rows = static_cast<std::int64_t>(n);
      pp.heads = dims_.heads;
      pp.head_dim = dims_.head_dim;
      pp.type = type_;
      device::validate(pp);
      ZEPPELIN_CUDA_CHECK(device::attention_backward_preprocess(pp, stream));
    }
    device_tensors t;
    t.q = io.q, t.k = io.k, t.v = io.v, t.global_o = io.o, t.d_o = io.d_o, t.global_lse = io.lse, t.delta = delta;
    t.dq_acc = dq, t.dk_acc = dk, t.dv_acc = dv, t.rows = static_cast<std::int64_t>(n);
    run(c, pass_kind::backward, t, stream, record, timeline);
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.dq, dq, static_cast<std::int64_t>(qn), type_, stream));
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.dk, dk, static_cast<std::int64_t>(kn), type_, stream));
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.dv, dv, static_cast<std::int64_t>(kn), type_, stream));
    res.end_pass(stream);
  }

  //! The remap segment `kind` of micro-batch `micro_batch` in `pass` on the calling rank,
  //! enqueued on `stream`: `source` and `target` hold the segment's source_rows and
  //! target_rows rows of its row kind in `type` (see exec/attention_engine.hpp remap()).
  //! Throws invalid_argument when the program has no such segment.
  template <device_communicator C>
  void remap(C& c, pass_kind pass, std::int32_t micro_batch, segment_kind kind, const void* source, void* target, cudaStream_t stream,
             execution_record* record = nullptr) const {
    const rank_index me = check_rank(c);
    const std::size_t segment = remap_segment_index(program_, pass, me, micro_batch, kind);
    check_capture(c, pass, stream);
    agree(c);
    device_tensors t;
    t.remap_source = source, t.remap_target = target, t.rows = rows(me);
    device_pass_resources& res = resources_of(me).of(pass == pass_kind::forward);
    res.begin_pass(stream);
    device_backend<C> backend(program_, pass, c, stream, dims_, type_, t, csr_, nullptr, res, record);
    run_segment(program_, pass, segment, backend);
    res.end_pass(stream);
  }

 private:
  static program_options with_wire(program_options o, const attention_dims& d, device::dtype type) {
    o.wire = wire_for(d, type);
    return o;
  }
  [[nodiscard]] device_rank_resources& resources_of(rank_index me) const { return resources_.of(static_cast<std::size_t>(me)); }
  [[nodiscard]] const std::byte* upload_descriptors(device_rank_resources& mine, rank_index me, cudaStream_t stream) const {
    const auto& desc = descriptors_.at(static_cast<std::size_t>(me));
    return mine.descriptors.upload(std::span<const std::byte>(desc.data(), desc.size()), stream);
  }
  // the pass's fp32 accumulators of `rows` rows, allocated on the first pass: forward O;
  // backward dQ, dK, dV and delta
  [[nodiscard]] std::array<float*, 4> accumulators(device_pass_resources& res, pass_kind pass, token_count rows,
                                                   cudaStream_t stream) const {
    const auto n = static_cast<std::size_t>(rows);
    if (res.accumulators.empty()) {
      const std::size_t q = n * static_cast<std::size_t>(dims_.q_row()) * sizeof(float);
      const std::size_t kv = n * static_cast<std::size_t>(dims_.kv_row()) * sizeof(float);
      const std::size_t heads = n * static_cast<std::size_t>(dims_.heads) * sizeof(float);
      for (const std::size_t bytes : pass == pass_kind::forward ? std::vector<std::size_t>{q} : std::vector<std::size_t>{q, kv, kv, heads})
        res.accumulators.emplace_back(bytes, stream);
    }
    std::array<float*, 4> out{};
    for (std::size_t i = 0; i < res.accumulators.size(); ++i) out.at(i) = res.accumulators[i].as<float>();
    return out;
  }
  // a pass captured into a CUDA graph must find everything prepared: the plan check blocks and
  // a first pass allocates, neither of which a capture allows
  template <class C>
  void check_capture(const C& c, pass_kind pass, cudaStream_t stream) const {
    if (!device::is_capturing(stream)) return;
    const device_rank_resources* mine = resources_.find(static_cast<std::size_t>(c.rank()));
    const bool ready = agreement_.checked(c.rank(), world_of(c)) && mine != nullptr && mine->of(pass == pass_kind::forward).built &&
                       !mine->of(pass == pass_kind::forward).accumulators.empty();
    ZEPPELIN_EXPECTS(ready, "device attention engine: a pass captured into a CUDA graph before prepare() on this rank and world",
                     {{"rank", double(c.rank())}, {"pass", double(static_cast<int>(pass))}});
  }
  template <class C>
  rank_index check_rank(const C& c) const {
    ZEPPELIN_EXPECTS(c.size() == program_.num_ranks(),
                     "device attention engine: the communicator and the plan have different rank counts",
                     {{"communicator", double(c.size())}, {"plan", double(program_.num_ranks())}});
    return c.rank();
  }
  // the plan check, on this rank's first pass (see the file comment): the fingerprints travel
  // in device memory on c.stream() and come back to the host once
  template <class C>
  void agree(C& c) const {
    const rank_index me = c.rank();
    const std::uint64_t world = world_of(c);
    if (agreement_.checked(me, world)) return;
    const auto n = static_cast<std::size_t>(c.size());
    constexpr std::size_t k = sizeof(plan_identity);
    device::device_memory buf((n + 1) * k, c.stream());  // [rank] parts, then this rank's own
    std::byte* d = buf.as<std::byte>();
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(d + n * k, &identity_, k, cudaMemcpyHostToDevice, c.stream()));
    all_gather_bytes(c, std::span<const std::byte>(d + n * k, k), std::span<std::byte>(d, n * k), device_staging{}, plan_check_step);
    std::vector<plan_identity> all(n);
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(all.data(), d, n * k, cudaMemcpyDeviceToHost, c.stream()));
    c.synchronize(plan_check_step);
    check_plan_agreement("device attention engine", std::span<const plan_identity>(all), plan_check_step);
    agreement_.set_checked(me, world);
  }
  template <class C>
  void run(C& c, pass_kind pass, const device_tensors& t, cudaStream_t stream, execution_record* record, device_timeline* timeline) const {
    device_rank_resources& mine = resources_of(c.rank());
    const std::byte* desc = upload_descriptors(mine, c.rank(), stream);
    device_backend<C> backend(program_, pass, c, stream, dims_, type_, t, csr_, desc, mine.of(pass == pass_kind::forward), record, {},
                              timeline);
    run_pass(program_, pass, backend, [](const program_segment& s) { return s.kind == segment_kind::attention; });
  }

  execution_program program_;
  attention_dims dims_;
  device::dtype type_;
  std::vector<device::launch_csr> csr_;              //!< [launch]: its arrays in its rank's buffer
  std::vector<std::vector<std::byte>> descriptors_;  //!< [rank]: the CSR arrays of its launches
  mutable device_resources_per_rank resources_;  //!< [rank]: what its passes keep
  plan_identity identity_;
  mutable plan_agreement agreement_;  //!< per rank: passed the plan check
};

ZEPPELIN_NAMESPACE_END
