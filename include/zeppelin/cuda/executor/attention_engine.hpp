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
// Schedule: the host executor's own data - attention_engine<float> (exec/) builds and checks
// the ring schedules (schedule/ring_schedule.hpp), engine queues give the local work, and
// the levels are ordered (micro-batch, inter before intra, group) as there. At construction
// every rank's per-round blocks become CSR waves over the original buffers
// (block_waves.hpp); a pass uploads its rank's descriptors once.
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
#include <zeppelin/exec/attention_engine.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
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
  //! Builds the schedules (through exec/'s attention_engine) and every rank's CSR waves.
  //! Throws invalid_argument for dims without a kernel (head_dim 64 / 128), a bad dtype, or a
  //! plan the ring schedules reject.
  device_attention_engine(plan p, const batch& b, attention_dims dims, device::dtype type, Transport transport = {})
      : host_(std::move(p), b, dims, {}, {}, kv_exchange::ring), type_(type), transport_(std::move(transport)) {
    ZEPPELIN_EXPECTS(device::is_supported_head_dim(dims.head_dim) && dims.heads <= device::detail::max_grid_yz,
                     "device attention engine: no kernel for this head dim (64, 128) or too many heads",
                     {{"head_dim", double(dims.head_dim)}, {"heads", double(dims.heads)}});
    ZEPPELIN_EXPECTS(type == device::dtype::bf16 || type == device::dtype::fp16, "device attention engine: unknown dtype",
                     {{"dtype", double(static_cast<int>(type))}});
    const auto& sched = host_.schedules();
    std::vector<std::size_t> order(sched.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      const auto& a = sched[x];
      const auto& c = sched[y];
      return std::tuple(a.micro_batch, queue_order(a.zone), a.group) < std::tuple(c.micro_batch, queue_order(c.zone), c.group);
    });
    for (const std::size_t i : order) {
      const auto& s = sched[i];
      if (levels_.empty() || levels_.back().micro_batch != s.micro_batch || levels_.back().zone != s.zone)
        levels_.push_back({s.micro_batch, s.zone, {}, 0});
      levels_.back().schedules.push_back(i);
      levels_.back().rounds = std::max(levels_.back().rounds, s.rounds());
    }
    const plan& pl = host_.layout();
    programs_.resize(static_cast<std::size_t>(pl.num_ranks()));
    for (rank_index r = 0; r < pl.num_ranks(); ++r) build_program(r);
  }

  [[nodiscard]] const plan& layout() const noexcept { return host_.layout(); }
  [[nodiscard]] const attention_dims& dims() const noexcept { return host_.dims(); }
  [[nodiscard]] device::dtype type() const noexcept { return type_; }
  [[nodiscard]] token_count rows(rank_index r) const { return host_.rows(r); }
  [[nodiscard]] token_count shard_row(rank_index r, std::size_t i) const { return host_.shard_row(r, i); }
  [[nodiscard]] const std::vector<ring_schedule>& schedules() const noexcept { return host_.schedules(); }
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
  struct level {
    std::int32_t micro_batch;
    zone_kind zone;
    std::vector<std::size_t> schedules;
    std::int32_t rounds;
  };
  struct member_ref {
    std::size_t schedule;
    std::int32_t pos;
  };
  // every CSR launch of one rank, and the descriptor bytes they point into
  struct rank_program {
    std::vector<std::vector<member_ref>> members;  // [level]
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
  // rank row of group-buffer row `row` of position pos
  [[nodiscard]] token_count rank_row(const ring_schedule& s, std::int32_t pos, token_count row) const {
    const rank_index r = s.ranks[static_cast<std::size_t>(pos)];
    for (const group_shard& g : s.layout[static_cast<std::size_t>(pos)])
      if (row >= g.row && row < g.row + g.range.size())
        return host_.shard_row(r, static_cast<std::size_t>(g.shard)) + (row - g.row);
    ZEPPELIN_THROW(invalid_argument, "device attention engine: a block row outside the group buffer", {{"row", double(row)}});
  }

  void build_program(rank_index me) {
    rank_program& pr = programs_[static_cast<std::size_t>(me)];
    const auto& sched = host_.schedules();
    const auto to_desc = [&](const ring_schedule& s, std::int32_t pos, const std::vector<attention_block>& blocks) {
      std::vector<device::block_desc> out;
      out.reserve(blocks.size());
      for (const attention_block& blk : blocks)
        out.push_back({rank_row(s, pos, blk.q_row), blk.q.size(), blk.kv_row, blk.k.size(), blk.q.begin, blk.k.begin, blk.mask});
      return out;
    };
    for (const level& lv : levels_) {
      auto& mem = pr.members.emplace_back();
      auto& fwd = pr.fwd.emplace_back();
      auto& bwd = pr.bwd.emplace_back();
      for (const std::size_t i : lv.schedules) {
        const ring_schedule& s = sched[i];
        for (std::int32_t p = 0; p < s.size(); ++p) {
          if (s.ranks[static_cast<std::size_t>(p)] != me) continue;
          mem.push_back({i, p});
          auto& f = fwd.emplace_back();
          auto& bw = bwd.emplace_back();
          for (std::int32_t k = 0; k < s.rounds(); ++k) {
            f.push_back(device::make_block_waves(to_desc(s, p, s.forward[static_cast<std::size_t>(k)][static_cast<std::size_t>(p)].blocks),
                                                 pr.fwd_desc));
            bw.push_back(device::make_block_waves(
                to_desc(s, p, s.backward[static_cast<std::size_t>(k)][static_cast<std::size_t>(p)].blocks), pr.bwd_desc));
          }
        }
      }
    }
    const plan& pl = host_.layout();
    const engine_queue queue = make_engine_queue(pl, me);
    const auto& shards = pl.placements[static_cast<std::size_t>(me)].shards;
    std::vector<std::vector<device::block_desc>> local(static_cast<std::size_t>(std::max(1, pl.micro_batches())));
    for (const engine_task& task : queue.tasks) {
      if (task.zone != zone_kind::local) continue;
      std::vector<attention_block> blocks;
      for (const std::int32_t qi : task.shards)
        for (const std::int32_t ki : task.shards) {
          const shard& qs = shards[static_cast<std::size_t>(qi)];
          const shard& ks = shards[static_cast<std::size_t>(ki)];
          append_blocks(group_shard{qs.seq, qs.range, qi, host_.shard_row(me, static_cast<std::size_t>(qi))},
                        group_shard{ks.seq, ks.range, ki, host_.shard_row(me, static_cast<std::size_t>(ki))}, blocks);
        }
      auto& out = local.at(static_cast<std::size_t>(task.micro_batch));
      for (const attention_block& blk : blocks)
        out.push_back({blk.q_row, blk.q.size(), blk.kv_row, blk.k.size(), blk.q.begin, blk.k.begin, blk.mask});
    }
    pr.local_fwd.resize(local.size());
    pr.local_bwd.resize(local.size());
    for (std::size_t mb = 0; mb < local.size(); ++mb) {
      pr.local_fwd[mb] = device::make_block_waves(local[mb], pr.fwd_desc);
      pr.local_bwd[mb] = device::make_block_waves(local[mb], pr.bwd_desc);
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
    const std::string pass = st.backward ? "backward" : "forward";
    const plan& pl = layout();
    for (std::int32_t mb = 0; mb < std::max(1, pl.micro_batches()); ++mb) {
      for (std::size_t li = 0; li < levels_.size(); ++li) {
        if (levels_[li].micro_batch != mb) continue;
        const std::string label = pass + " micro-batch " + std::to_string(mb) + " " + std::string(to_string(levels_[li].zone)) + " queue";
        run_ring(c, st, li, k, v, label);
      }
      held_kv local{k, v, st.dk_acc.template as<float>(), st.dv_acc.template as<float>()};
      compute(st, (st.backward ? st.prog->local_bwd : st.prog->local_fwd)[static_cast<std::size_t>(mb)], local);
    }
  }

  // the waves of one round on the held KV (compute stream)
  void compute(pass_state& st, const std::vector<device::block_wave>& waves, const held_kv& kv) const {
    const attention_dims& d = dims();
    const auto* base = st.desc.template as<std::byte>();
    for (const device::block_wave& w : waves) {
      const auto* cu_q = reinterpret_cast<const std::int32_t*>(base + w.cu_q);
      const auto* cu_k = reinterpret_cast<const std::int32_t*>(base + w.cu_k);
      const auto* q_off = reinterpret_cast<const std::int64_t*>(base + w.q_offset);
      const auto* k_off = reinterpret_cast<const std::int64_t*>(base + w.k_offset);
      const auto* masks = reinterpret_cast<const block_mask*>(base + w.masks);
      if (!st.backward) {
        device::attention_forward_params p;
        p.q = st.q, p.k = kv.k, p.v = kv.v;
        p.o_f32 = st.part_o.template as<float>();
        p.lse = st.part_lse.template as<float>();
        p.cu_seqlens_q = cu_q, p.cu_seqlens_k = cu_k, p.q_offset = q_off, p.k_offset = k_off, p.masks = masks;
        p.num_blocks = w.blocks, p.heads = d.heads, p.kv_heads = d.kv_heads, p.head_dim = d.head_dim;
        p.max_seqlen_q = w.max_q;
        p.total_q = static_cast<std::int64_t>(st.n);
        p.lse_stride = static_cast<std::int64_t>(st.n);
        p.softmax_scale = static_cast<float>(d.softmax_scale());
        p.type = type_;
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
        p.q = st.q, p.k = kv.k, p.v = kv.v, p.dout = st.d_o;
        p.lse = st.global_lse;
        p.delta = st.delta.template as<float>();
        p.dq_accum = st.dq_acc.template as<float>();
        p.dk_accum = kv.dk, p.dv_accum = kv.dv;
        p.cu_seqlens_q = cu_q, p.cu_seqlens_k = cu_k, p.q_offset = q_off, p.k_offset = k_off, p.masks = masks;
        p.num_blocks = w.blocks, p.heads = d.heads, p.kv_heads = d.kv_heads, p.head_dim = d.head_dim;
        p.max_seqlen_k = w.max_k;
        p.total_q = static_cast<std::int64_t>(st.n);
        p.lse_stride = static_cast<std::int64_t>(st.n);
        p.softmax_scale = static_cast<float>(d.softmax_scale());
        p.type = type_;
        device::validate(p);
        ZEPPELIN_CUDA_CHECK(device::attention_backward(p, st.stream));
      }
    }
  }

  // the per-member device buffers of one level
  struct member_buffers {
    const ring_schedule* s = nullptr;
    std::int32_t pos = 0;
    device::device_memory cur, next;           // KV in `type`
    device::device_memory part, acc, done;     // dK/dV in fp32 (backward)
  };

  template <class C>
  void exchange(C& c, pass_state& st, const std::vector<transfer>& all, const std::vector<std::span<const std::byte>>& send,
                const std::vector<std::span<std::byte>>& recv, const std::string& label, device::cuda_event& done) const {
    if (all.empty()) return;
    device::stream_wait(c.stream(), st.stream);
    transport_.exchange(c, std::span<const transfer>(all), std::span<const std::span<const std::byte>>(send),
                        std::span<const std::span<std::byte>>(recv), label);
    done.record(c.stream());
  }

  template <class C>
  void run_ring(C& c, pass_state& st, std::size_t li, const void* k, const void* v, const std::string& label) const {
    const level& lv = levels_[li];
    const auto& sched = host_.schedules();
    const rank_program& pr = *st.prog;
    const rank_index me = st.me;
    const std::size_t kw_bytes = static_cast<std::size_t>(dims().kv_row()) * esize();
    const auto kw = static_cast<std::size_t>(dims().kv_row());
    std::vector<member_buffers> mine;
    mine.reserve(pr.members[li].size());
    for (const member_ref& ref : pr.members[li]) {
      const ring_schedule& s = sched[ref.schedule];
      const token_count cap = *std::max_element(s.buffer_tokens.begin(), s.buffer_tokens.end());
      member_buffers& m = mine.emplace_back();
      m.s = &s;
      m.pos = ref.pos;
      m.cur = device::device_memory(kv_bytes(cap), st.stream);
      m.next = device::device_memory(kv_bytes(cap), st.stream);
      if (st.backward) {
        m.part = device::device_memory(dkv_floats(cap) * sizeof(float), st.stream);
        m.acc = device::device_memory(dkv_floats(cap) * sizeof(float), st.stream);
        m.done = device::device_memory(dkv_floats(cap) * sizeof(float), st.stream);
      }
      // gather the rank's shards of the group: keys then values (group buffer layout)
      const token_count own = s.buffer_tokens[static_cast<std::size_t>(m.pos)];
      auto* buf = m.cur.template as<std::byte>();
      for (const group_shard& g : s.layout[static_cast<std::size_t>(m.pos)]) {
        const auto from = static_cast<std::size_t>(host_.shard_row(me, static_cast<std::size_t>(g.shard))) * kw_bytes;
        const auto bytes = static_cast<std::size_t>(g.range.size()) * kw_bytes;
        ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(buf + static_cast<std::size_t>(g.row) * kw_bytes, static_cast<const std::byte*>(k) + from,
                                            bytes, cudaMemcpyDeviceToDevice, st.stream));
        ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(buf + static_cast<std::size_t>(own + g.row) * kw_bytes,
                                            static_cast<const std::byte*>(v) + from, bytes, cudaMemcpyDeviceToDevice, st.stream));
      }
    }
    const auto find = [&](const ring_schedule* s) -> member_buffers* {
      for (member_buffers& m : mine)
        if (m.s == s) return &m;
      return nullptr;
    };
    const auto bytes_of = [](const device::device_memory& d, std::size_t n) {
      return std::span<std::byte>(static_cast<std::byte*>(d.get()), n);
    };
    std::vector<transfer> all;
    std::vector<std::span<const std::byte>> send;
    std::vector<std::span<std::byte>> recv;
    // one transfer of the phase: payload `out` on the source, destination `in` on the target
    const auto add = [&](rank_index src, const ring_transfer& x, std::size_t bytes, const device::device_memory* out,
                         const device::device_memory* in) {
      all.push_back({src, x.peer, static_cast<std::int64_t>(bytes)});
      send.push_back(src == me && out ? std::span<const std::byte>(bytes_of(*out, bytes)) : std::span<const std::byte>{});
      recv.push_back(x.peer == me && in ? bytes_of(*in, bytes) : std::span<std::byte>{});
    };
    for (std::int32_t r = 0; r < lv.rounds; ++r) {
      all.clear(), send.clear(), recv.clear();
      for (const std::size_t i : lv.schedules) {
        const ring_schedule& s = sched[i];
        if (r >= s.rounds()) continue;
        member_buffers* m = find(&s);
        for (std::int32_t p = 0; p < s.size(); ++p) {
          const bool at_me = m && m->pos == p;
          if (!st.backward) {
            const forward_step& fs = s.forward[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
            if (fs.send_kv.active())
              add(fs.rank, fs.send_kv, kv_bytes(fs.send_kv.tokens), at_me ? &m->cur : nullptr,
                  m && fs.send_kv.peer == me ? &m->next : nullptr);
          } else {
            const backward_step& bs = s.backward[static_cast<std::size_t>(r)][static_cast<std::size_t>(p)];
            if (bs.send_kv.active())
              add(bs.rank, bs.send_kv, kv_bytes(bs.send_kv.tokens), at_me ? &m->cur : nullptr,
                  m && bs.send_kv.peer == me ? &m->next : nullptr);
            if (bs.send_dkv.active())
              add(bs.rank, bs.send_dkv, dkv_floats(bs.send_dkv.tokens) * sizeof(float), at_me ? &m->done : nullptr,
                  m && bs.send_dkv.peer == me ? &m->acc : nullptr);
          }
        }
      }
      device::cuda_event arrived;
      exchange(c, st, all, send, recv, label + " round " + std::to_string(r), arrived);
      // compute round r on the held KV while the phase is in flight
      std::vector<token_count> origin_rows(mine.size(), 0);
      for (std::size_t mi = 0; mi < mine.size(); ++mi) {
        member_buffers& m = mine[mi];
        const ring_schedule& s = *m.s;
        if (r >= s.rounds()) continue;
        const std::int32_t origin = st.backward ? s.backward[static_cast<std::size_t>(r)][static_cast<std::size_t>(m.pos)].kv_origin
                                                : s.forward[static_cast<std::size_t>(r)][static_cast<std::size_t>(m.pos)].kv_origin;
        const token_count n_o = s.buffer_tokens[static_cast<std::size_t>(origin)];
        origin_rows[mi] = n_o;
        const auto* kv = m.cur.template as<std::byte>();
        held_kv held{kv, kv + static_cast<std::size_t>(n_o) * kw_bytes, nullptr, nullptr};
        if (st.backward) {
          auto* part = m.part.template as<float>();
          if (n_o > 0) ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(part, 0, dkv_floats(n_o) * sizeof(float), st.stream));
          held.dk = part;
          held.dv = part + static_cast<std::size_t>(n_o) * kw;
        }
        const auto& waves = st.backward ? pr.bwd[li][mi][static_cast<std::size_t>(r)] : pr.fwd[li][mi][static_cast<std::size_t>(r)];
        compute(st, waves, held);
      }
      if (!all.empty()) arrived.wait_on(st.stream);
      for (std::size_t mi = 0; mi < mine.size(); ++mi) {
        member_buffers& m = mine[mi];
        const ring_schedule& s = *m.s;
        if (r >= s.rounds()) continue;
        if (st.backward) {
          // the accumulator of this origin arrived during the compute: fold it in
          if (r >= 1 && s.backward[static_cast<std::size_t>(r)][static_cast<std::size_t>(m.pos)].recv_dkv.active())
            ZEPPELIN_CUDA_CHECK(device::add_f32(m.part.template as<float>(), m.acc.template as<float>(),
                                                static_cast<std::int64_t>(dkv_floats(origin_rows[mi])), st.stream));
          std::swap(m.done, m.part);
        }
        if (r + 1 < s.rounds()) std::swap(m.cur, m.next);
      }
    }
    if (st.backward) {
      // the last accumulators go home
      all.clear(), send.clear(), recv.clear();
      for (const std::size_t i : lv.schedules) {
        const ring_schedule& s = sched[i];
        member_buffers* m = find(&s);
        for (std::int32_t p = 0; p < s.size(); ++p) {
          const dkv_return& h = s.dkv_home[static_cast<std::size_t>(p)];
          if (h.send_dkv.active())
            add(h.rank, h.send_dkv, dkv_floats(h.send_dkv.tokens) * sizeof(float), m && m->pos == p ? &m->done : nullptr,
                m && h.send_dkv.peer == me ? &m->acc : nullptr);
        }
      }
      device::cuda_event home;
      exchange(c, st, all, send, recv, label + " dK/dV return", home);
      if (!all.empty()) home.wait_on(st.stream);
      for (member_buffers& m : mine) {
        const ring_schedule& s = *m.s;
        const float* dkv = (s.size() > 1 ? m.acc : m.done).template as<float>();
        const token_count own = s.buffer_tokens[static_cast<std::size_t>(m.pos)];
        for (const group_shard& g : s.layout[static_cast<std::size_t>(m.pos)]) {
          const auto to = static_cast<std::size_t>(host_.shard_row(me, static_cast<std::size_t>(g.shard))) * kw;
          const auto count = static_cast<std::int64_t>(static_cast<std::size_t>(g.range.size()) * kw);
          ZEPPELIN_CUDA_CHECK(device::add_f32(st.dk_acc.template as<float>() + to, dkv + static_cast<std::size_t>(g.row) * kw, count, st.stream));
          ZEPPELIN_CUDA_CHECK(device::add_f32(st.dv_acc.template as<float>() + to, dkv + static_cast<std::size_t>(own + g.row) * kw,
                                              count, st.stream));
        }
      }
    }
    // every member buffer is freed on the compute stream, which waited for the last phase
    for (member_buffers& m : mine)
      for (auto* b : {&m.cur, &m.next, &m.part, &m.acc, &m.done}) b->free_on(st.stream);
  }

  attention_engine<float> host_;
  device::dtype type_;
  Transport transport_;
  std::vector<level> levels_;
  std::vector<rank_program> programs_;
};

ZEPPELIN_NAMESPACE_END
