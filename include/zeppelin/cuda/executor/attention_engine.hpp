// zeppelin/cuda/executor/attention_engine.hpp
// The CUDA attention engine (Zeppelin 3.2 on the device): the ring schedules of a plan,
// forward and backward, on every rank of a device_communicator, ring rounds overlapped with
// their communication on separate streams; inter-node queue -> intra-node queue -> local queue.
//   in : plan and batch (host data, the same on every rank), attention_dims (head_dim 64 or
//        128), the element type (bf16 | fp16); per rank its device tensors in the PLAN's layout
//        (exec/attention_engine.hpp): Q, O, dO, dQ [rows][heads][D], K, V, dK, dV
//        [rows][kv_heads][D] in `type`, LSE [heads][rows] fp32 (natural log)
//   out: forward: O and LSE of every query against every earlier key of its sequence;
//        backward: dQ, dK, dV (overwritten) from the global O, dO, LSE. Work is enqueued on the
//        caller's compute stream; the call returns once everything is enqueued.
// Schedule: the host executor's own round program (exec/round_program.hpp: levels ordered
// (micro-batch, inter before intra, group), their phases, every rank's members and blocks,
// the local queues), executed here with device buffers. At construction every rank's
// per-round blocks become CSR waves over the original buffers (block_waves.hpp); a pass
// uploads its rank's descriptors once.
// Forward round k (per level, every group of the level at once, one communicator group per
// round through the transport):
//   comm stream   waits for the compute stream (round k-1 done with the buffer it overwrites),
//                 sends the held KV, receives the next one
//   compute       the waves of round k on the held KV, concurrently: attention_forward into
//                 an fp32 partial, lse_merge into the fp32 O accumulator and the LSE
//   then the compute stream waits for the comm stream and the KV buffers swap.
// Backward round k: the comm stream moves KV and the dK/dV accumulators (ring_schedule's
// reversed ring) while the compute stream adds round k's block gradients into a FRESH fp32
// partial (dQ accumulates in fp32 with the kernel's atomics); after both, the received
// accumulator is added to the partial (row_ops add), which becomes the accumulator that
// travels next round. After the last round the accumulators go home and are added to the
// rank's fp32 dK/dV. Results are cast to `type` at the end.
// KV travels as [rows][kv_heads][D] keys then values in `type`; dK/dV as the same layout in
// fp32 (no rounding between ring steps).
// Requires: zeppelin::kernels (attention, lse_merge, cast, row_ops). nvcc-safe; host code.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/attention_params.hpp>
#include <zeppelin/cuda/cast.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/block_waves.hpp>
#include <zeppelin/cuda/executor/device_transport.hpp>
#include <zeppelin/cuda/executor/row_ops.hpp>
#include <zeppelin/cuda/lse_merge.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/round_program.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
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

template <class Transport = device_direct_transport>
class device_attention_engine {
 public:
  //! Builds the round program (exec/round_program.hpp, ring exchange) and every rank's CSR
  //! waves. Throws invalid_argument for dims without a kernel (head_dim 64 / 128), a bad dtype,
  //! or a plan the ring schedules reject.
  device_attention_engine(plan p, const batch& b, attention_dims dims, device::dtype type, Transport transport = {})
      : plan_(std::move(p)), dims_(dims), type_(type), transport_(std::move(transport)) {
    validate(dims_);
    ZEPPELIN_EXPECTS(device::is_supported_head_dim(dims.head_dim) && dims.heads <= device::detail::max_grid_yz,
                     "device attention engine: no kernel for this head dim (64, 128) or too many heads",
                     {{"head_dim", double(dims.head_dim)}, {"heads", double(dims.heads)}});
    ZEPPELIN_EXPECTS(type == device::dtype::bf16 || type == device::dtype::fp16, "device attention engine: unknown dtype",
                     {{"dtype", double(static_cast<int>(type))}});
    program_ = make_round_program(plan_, b, kv_exchange::ring);
    programs_.resize(static_cast<std::size_t>(plan_.num_ranks()));
    for (rank_index r = 0; r < plan_.num_ranks(); ++r) build_waves(r);
  }

  [[nodiscard]] const plan& layout() const noexcept { return plan_; }
  [[nodiscard]] const attention_dims& dims() const noexcept { return dims_; }
  [[nodiscard]] device::dtype type() const noexcept { return type_; }
  [[nodiscard]] token_count rows(rank_index r) const { return program_.rows.at(static_cast<std::size_t>(r)); }
  [[nodiscard]] token_count shard_row(rank_index r, std::size_t i) const {
    return program_.shard_row.at(static_cast<std::size_t>(r)).at(i);
  }
  [[nodiscard]] const std::vector<ring_schedule>& schedules() const noexcept { return program_.schedules; }
  //! The phases and per-rank work the engine executes (shared with exec/'s attention_engine).
  [[nodiscard]] const round_program& program() const noexcept { return program_; }
  //! CSR launches rank r runs per pass (waves of every round and of the local queue).
  [[nodiscard]] std::size_t launches(rank_index r, bool backward) const {
    const auto& pr = programs_.at(static_cast<std::size_t>(r));
    std::size_t n = 0;
    for (const auto& lv : backward ? pr.bwd : pr.fwd)
      for (const auto& m : lv)
        for (const auto& round : m) n += round.size();
    for (const auto& w : backward ? pr.local_bwd : pr.local_fwd) n += w.size();
    return n;
  }

  //! Forward on the calling rank; every rank of c calls it. Enqueued on `stream`.
  template <device_communicator C>
    requires device_transport_for<Transport, C>
  void forward(C& c, const device_forward_io& io, cudaStream_t stream) const {
    pass_state st = begin(c, stream, false);
    const std::size_t qn = st.n * static_cast<std::size_t>(dims().q_row());
    st.o_acc = device::device_memory(qn * sizeof(float), stream);
    st.part_o = device::device_memory(qn * sizeof(float), stream);
    st.part_lse = device::device_memory(st.n * static_cast<std::size_t>(dims().heads) * sizeof(float), stream);
    st.lse = io.lse;
    if (qn > 0) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(st.o_acc.get(), 0, qn * sizeof(float), stream));
    ZEPPELIN_CUDA_CHECK(device::fill_f32(io.lse, -INFINITY, static_cast<std::int64_t>(st.n) * dims().heads, stream));
    st.q = io.q;
    run(c, st, io.k, io.v);
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.o, st.o_acc.template as<float>(), static_cast<std::int64_t>(qn), type_, stream));
  }

  //! Backward on the calling rank; every rank of c calls it. Enqueued on `stream`.
  template <device_communicator C>
    requires device_transport_for<Transport, C>
  void backward(C& c, const device_backward_io& io, cudaStream_t stream) const {
    pass_state st = begin(c, stream, true);
    const std::size_t qn = st.n * static_cast<std::size_t>(dims().q_row());
    const std::size_t kn = st.n * static_cast<std::size_t>(dims().kv_row());
    st.dq_acc = device::device_memory(qn * sizeof(float), stream);
    st.dk_acc = device::device_memory(kn * sizeof(float), stream);
    st.dv_acc = device::device_memory(kn * sizeof(float), stream);
    st.delta = device::device_memory(st.n * static_cast<std::size_t>(dims().heads) * sizeof(float), stream);
    for (const auto* m : {&st.dq_acc, &st.dk_acc, &st.dv_acc})
      if (m->bytes() > 0) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(m->get(), 0, m->bytes(), stream));
    st.q = io.q;
    st.d_o = io.d_o;
    st.global_lse = io.lse;
    if (st.n > 0) {
      device::attention_preprocess_params pp;
      pp.o = io.o;
      pp.dout = io.d_o;
      pp.delta = st.delta.template as<float>();
      pp.rows = static_cast<std::int64_t>(st.n);
      pp.heads = dims().heads;
      pp.head_dim = dims().head_dim;
      pp.type = type_;
      device::validate(pp);
      ZEPPELIN_CUDA_CHECK(device::attention_backward_preprocess(pp, stream));
    }
    run(c, st, io.k, io.v);
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.dq, st.dq_acc.template as<float>(), static_cast<std::int64_t>(qn), type_, stream));
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.dk, st.dk_acc.template as<float>(), static_cast<std::int64_t>(kn), type_, stream));
    ZEPPELIN_CUDA_CHECK(device::cast_from_f32(io.dv, st.dv_acc.template as<float>(), static_cast<std::int64_t>(kn), type_, stream));
  }

 private:
  // every CSR launch of one rank, and the descriptor bytes they point into
  struct rank_program {
    std::vector<std::vector<std::vector<std::vector<device::block_wave>>>> fwd, bwd;  // [level][member][round]
    std::vector<std::vector<device::block_wave>> local_fwd, local_bwd;  // [micro-batch]
    std::vector<std::byte> fwd_desc, bwd_desc;
  };
  // one pass on one rank
  struct pass_state {
    bool backward = false;
    rank_index me = 0;
    std::size_t n = 0;
    cudaStream_t stream = nullptr;
    const rank_program* prog = nullptr;
    device::device_memory desc;
    const void* q = nullptr;
    const void* d_o = nullptr;
    const float* global_lse = nullptr;
    float* lse = nullptr;
    device::device_memory o_acc, part_o, part_lse;        // forward
    device::device_memory dq_acc, dk_acc, dv_acc, delta;  // backward
  };
  // what a wave reads as keys / values and accumulates dK / dV into
  struct held_kv {
    const void* k;
    const void* v;
    float* dk;
    float* dv;
  };

  [[nodiscard]] std::size_t esize() const noexcept { return device::size_of(type_); }
  [[nodiscard]] std::size_t kv_bytes(token_count rows) const noexcept {
    return 2 * static_cast<std::size_t>(rows) * static_cast<std::size_t>(dims().kv_row()) * esize();
  }
  [[nodiscard]] std::size_t dkv_floats(token_count rows) const noexcept {
    return 2 * static_cast<std::size_t>(rows) * static_cast<std::size_t>(dims().kv_row());
  }
  // the CSR waves of every round of rank me's members and of its local queues
  void build_waves(rank_index me) {
    rank_program& pr = programs_[static_cast<std::size_t>(me)];
    const auto waves = [](const std::vector<attention_block>& blocks, std::vector<std::byte>& desc) {
      std::vector<device::block_desc> out;
      out.reserve(blocks.size());
      for (const attention_block& blk : blocks)
        out.push_back({blk.q_row, blk.q.size(), blk.kv_row, blk.k.size(), blk.q.begin, blk.k.begin, blk.mask});
      return device::make_block_waves(out, desc);
    };
    for (const round_level& lv : program_.levels) {
      auto& fwd = pr.fwd.emplace_back();
      auto& bwd = pr.bwd.emplace_back();
      for (const level_member& m : lv.members[static_cast<std::size_t>(me)]) {
        auto& f = fwd.emplace_back();
        auto& bw = bwd.emplace_back();
        for (std::size_t k = 0; k < m.forward.size(); ++k) {
          f.push_back(waves(m.forward[k].blocks, pr.fwd_desc));
          bw.push_back(waves(m.backward[k].blocks, pr.bwd_desc));
        }
      }
    }
    for (const auto& blocks : program_.local[static_cast<std::size_t>(me)]) {
      pr.local_fwd.push_back(waves(blocks, pr.fwd_desc));
      pr.local_bwd.push_back(waves(blocks, pr.bwd_desc));
    }
  }

  template <class C>
  pass_state begin(C& c, cudaStream_t stream, bool backward) const {
    ZEPPELIN_EXPECTS(c.size() == layout().num_ranks(), "device attention engine: the communicator and the plan have different rank counts",
                     {{"communicator", double(c.size())}, {"plan", double(layout().num_ranks())}});
    pass_state st;
    st.backward = backward;
    st.me = c.rank();
    st.n = static_cast<std::size_t>(rows(st.me));
    st.stream = stream;
    st.prog = &programs_[static_cast<std::size_t>(st.me)];
    const auto& desc = backward ? st.prog->bwd_desc : st.prog->fwd_desc;
    st.desc = device::device_memory(desc.size(), stream);
    if (!desc.empty()) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(st.desc.get(), desc.data(), desc.size(), cudaMemcpyHostToDevice, stream));
    return st;
  }

  template <class C>
  void run(C& c, pass_state& st, const void* k, const void* v) const {
    for (std::int32_t mb = 0; mb < program_.micro_batches; ++mb) {
      for (std::size_t li = 0; li < program_.levels.size(); ++li)
        if (program_.levels[li].micro_batch == mb) run_ring(c, st, li, k, v, level_label(program_.levels[li], st.backward));
      held_kv local{k, v, st.dk_acc.template as<float>(), st.dv_acc.template as<float>()};
      compute(st, (st.backward ? st.prog->local_bwd : st.prog->local_fwd)[static_cast<std::size_t>(mb)], local);
    }
  }

  // the waves of one round on the held KV (compute stream)
  void compute(pass_state& st, const std::vector<device::block_wave>& waves, const held_kv& kv) const {
    const attention_dims& d = dims();
    const auto* base = st.desc.template as<std::byte>();
    for (const device::block_wave& w : waves) {
      // the fields both kernels share: the wave's CSR descriptors, shapes, the held KV
      const auto csr = [&](device::attention_blocks& p) {
        p.q = st.q, p.k = kv.k, p.v = kv.v;
        p.cu_seqlens_q = reinterpret_cast<const std::int32_t*>(base + w.cu_q);
        p.cu_seqlens_k = reinterpret_cast<const std::int32_t*>(base + w.cu_k);
        p.q_offset = reinterpret_cast<const std::int64_t*>(base + w.q_offset);
        p.k_offset = reinterpret_cast<const std::int64_t*>(base + w.k_offset);
        p.masks = reinterpret_cast<const block_mask*>(base + w.masks);
        p.num_blocks = w.blocks, p.heads = d.heads, p.kv_heads = d.kv_heads, p.head_dim = d.head_dim;
        p.total_q = static_cast<std::int64_t>(st.n);
        p.lse_stride = static_cast<std::int64_t>(st.n);
        p.softmax_scale = static_cast<float>(d.softmax_scale());
        p.type = type_;
      };
      if (!st.backward) {
        device::attention_forward_params p;
        csr(p);
        p.o_f32 = st.part_o.template as<float>();
        p.lse = st.part_lse.template as<float>();
        p.max_seqlen_q = w.max_q;
        device::validate(p);
        ZEPPELIN_CUDA_CHECK(device::attention_forward(p, st.stream));
        const std::int64_t qw = d.q_row();
        device::lse_merge_params m;
        m.o_acc = st.o_acc.template as<float>() + w.first_row * qw;
        m.lse_acc = st.lse + w.first_row;
        m.o_part = st.part_o.template as<float>() + w.first_row * qw;
        m.lse_part = st.part_lse.template as<float>() + w.first_row;
        m.rows = w.end_row - w.first_row;
        m.heads = d.heads;
        m.head_dim = d.head_dim;
        m.lse_acc_stride = static_cast<std::int64_t>(st.n);
        m.lse_part_stride = static_cast<std::int64_t>(st.n);
        m.part_type = device::partial_type::fp32;
        device::validate(m);
        ZEPPELIN_CUDA_CHECK(device::lse_merge(m, st.stream));
      } else {
        device::attention_backward_params p;
        csr(p);
        p.dout = st.d_o;
        p.lse = st.global_lse;
        p.delta = st.delta.template as<float>();
        p.dq_accum = st.dq_acc.template as<float>();
        p.dk_accum = kv.dk, p.dv_accum = kv.dv;
        p.max_seqlen_k = w.max_k;
        device::validate(p);
        ZEPPELIN_CUDA_CHECK(device::attention_backward(p, st.stream));
      }
    }
  }

  // the per-member device buffers of one level
  struct member_buffers {
    const level_member* m = nullptr;
    device::device_memory cur, next;           // KV in `type`
    device::device_memory part, acc, done;     // dK/dV in fp32 (backward)
  };

  // binds `phase` to the members' buffers and enqueues it on c.stream() after the compute
  // stream's work so far; `done` is recorded once it is enqueued (nothing when it is empty)
  template <class C>
  bool exchange(C& c, pass_state& st, const round_level& lv, std::vector<member_buffers>& mine,
                const std::vector<round_transfer>& phase, const std::string& label, device::cuda_event& done) const {
    if (phase.empty()) return false;
    // KV: send the held buffer, receive the next; dK/dV: send the finished one, receive the partial
    const auto buffer = [&](const level_member& m, const round_transfer& x, bool sending) {
      member_buffers* b = nullptr;
      for (member_buffers& y : mine)
        if (y.m == &m) b = &y;
      const device::device_memory& d = x.payload == round_payload::kv ? (sending ? b->cur : b->next) : (sending ? b->done : b->acc);
      const std::size_t bytes = x.payload == round_payload::kv ? kv_bytes(x.tokens) : dkv_floats(x.tokens) * sizeof(float);
      return std::span<std::byte>(static_cast<std::byte*>(d.get()), bytes);
    };
    bound_phase bp;
    bind_phase(
        bp, lv, st.me, std::span<const round_transfer>(phase), static_cast<std::int64_t>(kv_bytes(1)),
        static_cast<std::int64_t>(dkv_floats(1) * sizeof(float)),
        [&](const level_member& m, const round_transfer& x) { return std::span<const std::byte>(buffer(m, x, true)); },
        [&](const level_member& m, const round_transfer& x) { return buffer(m, x, false); });
    device::stream_wait(c.stream(), st.stream);
    transport_.exchange(c, std::span<const transfer>(bp.all), std::span<const std::span<const std::byte>>(bp.send),
                        std::span<const std::span<std::byte>>(bp.recv), label);
    done.record(c.stream());
    return true;
  }

  template <class C>
  void run_ring(C& c, pass_state& st, std::size_t li, const void* k, const void* v, const std::string& label) const {
    const round_level& lv = program_.levels[li];
    const rank_program& pr = *st.prog;
    const std::size_t kw_bytes = static_cast<std::size_t>(dims().kv_row()) * esize();
    const auto kw = static_cast<std::size_t>(dims().kv_row());
    const auto& members = lv.members[static_cast<std::size_t>(st.me)];
    std::vector<member_buffers> mine;
    mine.reserve(members.size());
    for (const level_member& lm : members) {
      member_buffers& m = mine.emplace_back();
      m.m = &lm;
      m.cur = device::device_memory(kv_bytes(lm.max_rows), st.stream);
      m.next = device::device_memory(kv_bytes(lm.max_rows), st.stream);
      if (st.backward) {
        m.part = device::device_memory(dkv_floats(lm.max_rows) * sizeof(float), st.stream);
        m.acc = device::device_memory(dkv_floats(lm.max_rows) * sizeof(float), st.stream);
        m.done = device::device_memory(dkv_floats(lm.max_rows) * sizeof(float), st.stream);
      }
      // gather the rank's shards of the group: keys then values (group buffer layout)
      auto* buf = m.cur.template as<std::byte>();
      for (const row_run& g : lm.shards) {
        const auto from = static_cast<std::size_t>(g.rank_row) * kw_bytes;
        const auto bytes = static_cast<std::size_t>(g.rows) * kw_bytes;
        ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(buf + static_cast<std::size_t>(g.buffer_row) * kw_bytes,
                                            static_cast<const std::byte*>(k) + from, bytes, cudaMemcpyDeviceToDevice, st.stream));
        ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(buf + static_cast<std::size_t>(lm.own_rows + g.buffer_row) * kw_bytes,
                                            static_cast<const std::byte*>(v) + from, bytes, cudaMemcpyDeviceToDevice, st.stream));
      }
    }
    const auto& rounds = st.backward ? lv.backward_rounds : lv.forward_rounds;
    for (std::int32_t r = 0; r < lv.rounds; ++r) {
      device::cuda_event arrived;
      const bool posted = exchange(c, st, lv, mine, rounds[static_cast<std::size_t>(r)], label + " round " + std::to_string(r), arrived);
      // compute round r on the held KV while the phase is in flight
      for (std::size_t mi = 0; mi < mine.size(); ++mi) {
        member_buffers& m = mine[mi];
        const auto& steps = st.backward ? m.m->backward : m.m->forward;
        if (r >= static_cast<std::int32_t>(steps.size())) continue;
        const member_round& step = steps[static_cast<std::size_t>(r)];
        const auto* kv = m.cur.template as<std::byte>();
        held_kv held{kv, kv + static_cast<std::size_t>(step.kv_rows) * kw_bytes, nullptr, nullptr};
        if (st.backward) {
          auto* part = m.part.template as<float>();
          if (step.kv_rows > 0) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(part, 0, dkv_floats(step.kv_rows) * sizeof(float), st.stream));
          held.dk = part;
          held.dv = part + static_cast<std::size_t>(step.kv_rows) * kw;
        }
        const auto& waves = st.backward ? pr.bwd[li][mi][static_cast<std::size_t>(r)] : pr.fwd[li][mi][static_cast<std::size_t>(r)];
        compute(st, waves, held);
      }
      if (posted) arrived.wait_on(st.stream);
      for (member_buffers& m : mine) {
        const auto& steps = st.backward ? m.m->backward : m.m->forward;
        if (r >= static_cast<std::int32_t>(steps.size())) continue;
        if (st.backward) {
          // the accumulator of this origin arrived during the compute: fold it in
          const member_round& step = steps[static_cast<std::size_t>(r)];
          if (r >= 1 && step.receives_dkv)
            ZEPPELIN_CUDA_CHECK(device::add_f32(m.part.template as<float>(), m.acc.template as<float>(),
                                                static_cast<std::int64_t>(dkv_floats(step.kv_rows)), st.stream));
          std::swap(m.done, m.part);
        }
        if (r + 1 < static_cast<std::int32_t>(steps.size())) std::swap(m.cur, m.next);
      }
    }
    if (st.backward) {
      // the last accumulators go home
      device::cuda_event home;
      if (exchange(c, st, lv, mine, lv.dkv_return, label + " dK/dV return", home)) home.wait_on(st.stream);
      for (member_buffers& m : mine) {
        const float* dkv = (m.m->size > 1 ? m.acc : m.done).template as<float>();
        for (const row_run& g : m.m->shards) {
          const auto to = static_cast<std::size_t>(g.rank_row) * kw;
          const auto count = static_cast<std::int64_t>(static_cast<std::size_t>(g.rows) * kw);
          ZEPPELIN_CUDA_CHECK(device::add_f32(st.dk_acc.template as<float>() + to, dkv + static_cast<std::size_t>(g.buffer_row) * kw,
                                              count, st.stream));
          ZEPPELIN_CUDA_CHECK(device::add_f32(st.dv_acc.template as<float>() + to,
                                              dkv + static_cast<std::size_t>(m.m->own_rows + g.buffer_row) * kw, count, st.stream));
        }
      }
    }
    // every member buffer is freed on the compute stream, which waited for the last phase
    for (member_buffers& m : mine)
      for (auto* b : {&m.cur, &m.next, &m.part, &m.acc, &m.done}) b->free_on(st.stream);
  }

  plan plan_;
  attention_dims dims_;
  device::dtype type_;
  Transport transport_;
  round_program program_;
  std::vector<rank_program> programs_;
};

ZEPPELIN_NAMESPACE_END
