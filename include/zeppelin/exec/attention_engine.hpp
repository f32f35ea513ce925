// zeppelin/exec/attention_engine.hpp
// The attention engine (Zeppelin 3.2): executes the ring schedules of a plan, forward and
// backward, on every rank of a communicator, with a kernel policy and a transport policy.
//   in : the plan and batch (built once, shared read-only by every rank), attention_dims;
//        per rank its tensors in the PLAN's layout: the rank's shards concatenated in
//        placement order (rows(rank) tokens), Q/O/dO/dQ [rows][heads][D],
//        K/V/dK/dV [rows][kv_heads][D], LSE [heads][rows] (natural log)
//   out: forward: O and LSE of every query token against every earlier key of its sequence;
//        backward: dQ, dK, dV (overwritten), from the GLOBAL O, dO and LSE.
// Order: micro-batch ascending; in each, the inter-node queue, then the intra-node queue
// (the ring groups of that zone, all advancing round by round together: phase k carries
// round k of every group, posted as ONE group of sends/receives through the transport),
// then the local queue (schedule/engine_queue.hpp: sequences held by one rank, no
// communication). Every rank runs the same phases, so proxy routes through ranks outside a
// group are served (exec/transport.hpp).
// Ring (exactly schedule/ring_schedule.hpp): forward round k computes the blocks of
// forward[k][p] with the KV it holds and sends that KV on; partial O/LSE are merged with
// exec/lse_merge.hpp. Backward round k (reversed ring) first exchanges KV, the dK/dV
// accumulator finished last round and the partial accumulator of the KV now held, then adds
// the blocks of backward[k][p]; after the last round the accumulators return home.
// All-gather (plan.method == "allgather", partition/allgather.hpp, or kv_exchange::all_gather):
// one phase gathers every member's KV, the rank computes the blocks of all rounds, and in the
// backward a second phase sends each partial dK/dV to its owner, which sums them.
// A KV buffer travels as [rows][kv_heads][D] keys followed by the values in the same layout.
// The phases and per-rank work come from exec/round_program.hpp (shared with the CUDA engine).
// Host executor: per-block scratch on the heap; kernels run on the calling thread.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/lse_merge.hpp>
#include <zeppelin/exec/round_program.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

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

template <class T, class Kernel = host_attention, class Transport = direct_transport>
  requires attention_kernel<Kernel, T>
class attention_engine {
 public:
  //! Builds the round program of `p` (exec/round_program.hpp). Throws invalid_argument for bad
  //! dims or a plan the ring schedules reject (schedule/ring_schedule.hpp), and when the plan
  //! does not match the batch.
  attention_engine(plan p, const batch& b, attention_dims dims, Kernel kernel = {}, Transport transport = {},
                   kv_exchange exchange = kv_exchange::automatic)
      : plan_(std::move(p)), dims_(dims), kernel_(std::move(kernel)), transport_(std::move(transport)) {
    validate(dims_);
    program_ = make_round_program(plan_, b, exchange);
  }

  [[nodiscard]] const plan& layout() const noexcept { return plan_; }
  [[nodiscard]] const attention_dims& dims() const noexcept { return dims_; }
  [[nodiscard]] bool uses_all_gather() const noexcept { return program_.all_gather; }
  //! Tokens (rows) rank r holds: the size of its buffers.
  [[nodiscard]] token_count rows(rank_index r) const { return program_.rows.at(static_cast<std::size_t>(r)); }
  //! First row of shard i of rank r in the rank's buffers.
  [[nodiscard]] token_count shard_row(rank_index r, std::size_t i) const {
    return program_.shard_row.at(static_cast<std::size_t>(r)).at(i);
  }
  //! The schedules the engine runs (one per ring group and micro-batch).
  [[nodiscard]] const std::vector<ring_schedule>& schedules() const noexcept { return program_.schedules; }
  //! The phases and per-rank work the engine executes.
  [[nodiscard]] const round_program& program() const noexcept { return program_; }

  //! Forward on the calling rank (every rank of `c` must call it). Sizes: q, o rows * H * D;
  //! k, v rows * KV * D; lse H * rows. Throws invalid_argument on a size mismatch or a
  //! communicator whose size differs from the plan's.
  template <communicator C>
    requires transport_for<Transport, C>
  void forward(C& c, std::span<const T> q, std::span<const T> k, std::span<const T> v, std::span<T> o,
               std::span<T> lse) const {
    const token_count n = rows(check_rank(c));
    check_sizes(n, {{"q", q.size(), false}, {"k", k.size(), true}, {"v", v.size(), true}, {"o", o.size(), false}});
    check_size(lse.size(), n * dims_.heads, "lse");
    std::fill(o.begin(), o.end(), T(0));
    std::fill(lse.begin(), lse.end(), -std::numeric_limits<T>::infinity());
    tensors t{q, k, v, o, lse, {}, {}, {}, {}, n};
    run(c, t, false);
  }

  //! Backward on the calling rank: dq, dk, dv are overwritten. `o` and `lse` are the outputs
  //! of forward(), `d_o` the gradient of o (rows * H * D).
  template <communicator C>
    requires transport_for<Transport, C>
  void backward(C& c, std::span<const T> q, std::span<const T> k, std::span<const T> v, std::span<const T> o,
                std::span<const T> d_o, std::span<const T> lse, std::span<T> dq, std::span<T> dk, std::span<T> dv) const {
    const token_count n = rows(check_rank(c));
    check_sizes(n, {{"q", q.size(), false}, {"k", k.size(), true}, {"v", v.size(), true}, {"o", o.size(), false},
                    {"d_o", d_o.size(), false}});
    check_size(lse.size(), n * dims_.heads, "lse");
    check_sizes(n, {{"dq", dq.size(), false}, {"dk", dk.size(), true}, {"dv", dv.size(), true}});
    std::fill(dq.begin(), dq.end(), T(0));
    std::fill(dk.begin(), dk.end(), T(0));
    std::fill(dv.begin(), dv.end(), T(0));
    tensors t{q, k, v, {}, {}, o, d_o, lse, {}, n};
    t.dq = dq;
    t.dk = dk;
    t.dv = dv;
    run(c, t, true);
  }

 private:
  // the calling rank's tensors; forward fills o/lse, backward reads go/glse/gdo, fills d*
  struct tensors {
    std::span<const T> q, k, v;
    std::span<T> o, lse;
    std::span<const T> go, gdo, glse;
    std::span<T> dq;
    token_count rows;
    std::span<T> dk{}, dv{};
  };
  // the calling rank's buffers of one member of a level
  struct member {
    const level_member* m;
    std::vector<T> cur, next, acc, done;  // KV held, KV arriving, dKV of the held origin, dKV finished
    std::vector<std::vector<T>> origin;   // all-gather: KV per origin
    std::vector<std::vector<T>> part, in; // all-gather backward: partial dKV per origin, arriving dKV per source
  };
  struct sized {
    const char* what;
    std::size_t size;
    bool kv;  // rows * kv_row elements, else rows * q_row
  };

  rank_index check_rank(const auto& c) const {
    ZEPPELIN_EXPECTS(c.size() == plan_.num_ranks(), "attention engine: the communicator and the plan have different rank counts",
                     {{"communicator", double(c.size())}, {"plan", double(plan_.num_ranks())}});
    return c.rank();
  }
  static void check_size(std::size_t got, std::int64_t want, const char* what) {
    ZEPPELIN_EXPECTS(static_cast<std::int64_t>(got) == want, std::string("attention engine: buffer ") + what + " has the wrong size",
                     {{"size", double(got)}, {"expected", double(want)}});
  }
  void check_sizes(token_count n, std::initializer_list<sized> buffers) const {
    for (const sized& b : buffers) check_size(b.size, n * (b.kv ? dims_.kv_row() : dims_.q_row()), b.what);
  }
  [[nodiscard]] std::int64_t kv_elems(token_count rows) const noexcept { return 2 * rows * dims_.kv_row(); }
  // a buffer of `rows` KV (or dKV) rows, zeroed, as the destination of a transfer
  std::span<std::byte> receive_into(std::vector<T>& buf, token_count rows) const {
    buf.assign(static_cast<std::size_t>(kv_elems(rows)), T(0));
    return std::as_writable_bytes(std::span<T>(buf));
  }
  // the calling rank's KV group buffer (keys then values) of member m
  std::vector<T> gather_kv(const level_member& m, const tensors& t) const {
    const std::int64_t w = dims_.kv_row();
    std::vector<T> buf(static_cast<std::size_t>(kv_elems(m.own_rows)));
    for (const row_run& g : m.shards) {
      const auto count = static_cast<std::ptrdiff_t>(g.rows * w);
      std::copy_n(t.k.begin() + g.rank_row * w, count, buf.begin() + g.buffer_row * w);
      std::copy_n(t.v.begin() + g.rank_row * w, count, buf.begin() + (m.own_rows + g.buffer_row) * w);
    }
    return buf;
  }
  // adds a finished dKV group buffer into the rank's dK, dV rows
  void scatter_dkv(const level_member& m, const std::vector<T>& buf, const tensors& t) const {
    const std::int64_t w = dims_.kv_row();
    for (const row_run& g : m.shards)
      for (std::int64_t x = 0; x < g.rows * w; ++x) {
        t.dk[static_cast<std::size_t>(g.rank_row * w + x)] += buf[static_cast<std::size_t>(g.buffer_row * w + x)];
        t.dv[static_cast<std::size_t>(g.rank_row * w + x)] += buf[static_cast<std::size_t>((m.own_rows + g.buffer_row) * w + x)];
      }
  }

  // one block: q rows at rank row blk.q_row, keys at row blk.kv_row of a KV buffer of kv_rows
  // rows (keys then values); backward adds dK/dV into dkv (same layout) when given
  void compute(const attention_block& blk, const T* kv, token_count kv_rows, T* dkv, const tensors& t, bool backward) const {
    const std::int64_t qw = dims_.q_row(), kw = dims_.kv_row();
    const token_count qr = blk.q_row, kr = blk.kv_row;
    const T* key = kv + kr * kw;
    const T* value = kv + (kv_rows + kr) * kw;
    const token_count m = blk.q.size();
    if (!backward) {
      std::vector<T> out(static_cast<std::size_t>(m * qw)), lse(static_cast<std::size_t>(m * dims_.heads));
      kernel_.forward(attention_forward_args<T>{dims_, blk.mask, blk.q, blk.k, t.q.data() + qr * qw, key, value, out.data(),
                                                lse.data(), m});
      merge_block(t.o.data() + qr * qw, t.lse.data() + qr, t.rows, out.data(), lse.data(), m, m, dims_.heads,
                  dims_.head_dim);
      return;
    }
    kernel_.backward(attention_backward_args<T>{dims_, blk.mask, blk.q, blk.k, t.q.data() + qr * qw, key, value,
                                                t.go.data() + qr * qw, t.gdo.data() + qr * qw, t.glse.data() + qr, t.rows,
                                                t.dq.data() + qr * qw, dkv + kr * kw, dkv + (kv_rows + kr) * kw});
  }

  // binds phase `phase` of `lv` to the members' buffers (buffer_of(member, transfer, sending))
  // and runs it through the transport
  template <class C, class BufferOf>
  void exchange(C& c, const round_level& lv, std::vector<member>& mine, const std::vector<round_transfer>& phase,
                BufferOf&& buffer_of, const std::string& label) const {
    const auto state = [&](const level_member& m) -> member& {
      for (member& x : mine)
        if (x.m == &m) return x;
      ZEPPELIN_THROW(invalid_argument, "attention engine: a transfer of a group the rank is not in", {{"group", double(m.group)}});
    };
    const auto bytes = kv_elems(1) * static_cast<std::int64_t>(sizeof(T));
    bound_phase bp;
    bind_phase(
        bp, lv, c.rank(), std::span<const round_transfer>(phase), bytes, bytes,
        [&](const level_member& m, const round_transfer& x) { return std::as_bytes(std::span<const T>(buffer_of(state(m), x, true))); },
        [&](const level_member& m, const round_transfer& x) { return receive_into(buffer_of(state(m), x, false), x.tokens); });
    transport_.exchange(c, std::span<const transfer>(bp.all), std::span<const std::span<const std::byte>>(bp.send),
                        std::span<const std::span<std::byte>>(bp.recv), label);
  }

  template <class C>
  void run(C& c, tensors& t, bool backward) const {
    const auto me = static_cast<std::size_t>(c.rank());
    std::vector<T> local_kv, local_dkv;
    for (std::int32_t mb = 0; mb < program_.micro_batches; ++mb) {
      for (const round_level& lv : program_.levels) {
        if (lv.micro_batch != mb) continue;
        std::vector<member> mine;
        for (const level_member& m : lv.members[me]) mine.push_back(member{&m, {}, {}, {}, {}, {}, {}, {}});
        if (program_.all_gather) run_all_gather(c, lv, mine, t, backward, level_label(lv, backward));
        else run_ring(c, lv, mine, t, backward, level_label(lv, backward));
      }
      // local queue: sequences this rank holds alone
      const auto& blocks = program_.local[me][static_cast<std::size_t>(mb)];
      if (blocks.empty()) continue;
      if (local_kv.empty()) {  // the rank's K/V as one buffer (keys then values), built once
        local_kv.resize(static_cast<std::size_t>(kv_elems(t.rows)));
        std::copy(t.k.begin(), t.k.end(), local_kv.begin());
        std::copy(t.v.begin(), t.v.end(), local_kv.begin() + t.rows * dims_.kv_row());
        if (backward) local_dkv.assign(local_kv.size(), T(0));
      }
      for (const attention_block& blk : blocks) compute(blk, local_kv.data(), t.rows, local_dkv.data(), t, backward);
    }
    if (backward && !local_dkv.empty()) {
      const std::int64_t w = dims_.kv_row();
      for (std::int64_t x = 0; x < t.rows * w; ++x) {
        t.dk[static_cast<std::size_t>(x)] += local_dkv[static_cast<std::size_t>(x)];
        t.dv[static_cast<std::size_t>(x)] += local_dkv[static_cast<std::size_t>(t.rows * w + x)];
      }
    }
  }

  template <class C>
  void run_ring(C& c, const round_level& lv, std::vector<member>& mine, tensors& t, bool backward, const std::string& label) const {
    for (member& m : mine) {
      m.cur = gather_kv(*m.m, t);
      if (backward) m.acc.assign(m.cur.size(), T(0));
    }
    // KV: send the held buffer, receive the next; dK/dV: send the finished one, receive the partial
    const auto ring_buffer = [](member& m, const round_transfer& x, bool sending) -> std::vector<T>& {
      if (x.payload == round_payload::kv) return sending ? m.cur : m.next;
      return sending ? m.done : m.acc;
    };
    const auto& rounds = backward ? lv.backward_rounds : lv.forward_rounds;
    for (std::int32_t k = 0; k < lv.rounds; ++k) {
      exchange(c, lv, mine, rounds[static_cast<std::size_t>(k)], ring_buffer, label + " round " + std::to_string(k));
      for (member& m : mine) {
        const auto& steps = backward ? m.m->backward : m.m->forward;
        if (k >= static_cast<std::int32_t>(steps.size())) continue;
        const member_round& st = steps[static_cast<std::size_t>(k)];
        if (backward && k == 0) m.acc.assign(static_cast<std::size_t>(kv_elems(st.kv_rows)), T(0));
        for (const attention_block& blk : st.blocks) compute(blk, m.cur.data(), st.kv_rows, m.acc.data(), t, backward);
        if (k + 1 < static_cast<std::int32_t>(steps.size())) m.cur.swap(m.next);
        if (backward) m.done.swap(m.acc);
      }
    }
    if (!backward) return;
    // the last accumulators go home
    exchange(c, lv, mine, lv.dkv_return, ring_buffer, label + " dK/dV return");
    for (member& m : mine) scatter_dkv(*m.m, m.m->size > 1 ? m.acc : m.done, t);
  }

  template <class C>
  void run_all_gather(C& c, const round_level& lv, std::vector<member>& mine, tensors& t, bool backward,
                      const std::string& label) const {
    for (member& m : mine) {
      m.origin.resize(static_cast<std::size_t>(m.m->size));
      m.origin[static_cast<std::size_t>(m.m->pos)] = gather_kv(*m.m, t);
    }
    // phase 1: every member's KV to every other member, kept per origin
    exchange(c, lv, mine, lv.kv_gather,
             [](member& m, const round_transfer& x, bool) -> std::vector<T>& { return m.origin[static_cast<std::size_t>(x.origin)]; },
             label + " KV all-gather");
    for (member& m : mine) {
      if (backward) {
        m.part.resize(m.origin.size());
        for (std::size_t o = 0; o < m.origin.size(); ++o) m.part[o].assign(m.origin[o].size(), T(0));
      }
      for (const member_round& st : m.m->forward) {
        const auto o = static_cast<std::size_t>(st.kv_origin);
        for (const attention_block& blk : st.blocks)
          compute(blk, m.origin[o].data(), st.kv_rows, backward ? m.part[o].data() : nullptr, t, backward);
      }
    }
    if (!backward) return;
    // phase 2: partial dK/dV of origin d to its owner d, which sums them
    for (member& m : mine) m.in.resize(m.origin.size());
    exchange(c, lv, mine, lv.dkv_reduce,
             [](member& m, const round_transfer& x, bool sending) -> std::vector<T>& {
               return sending ? m.part[static_cast<std::size_t>(x.origin)] : m.in[static_cast<std::size_t>(x.src_pos)];
             },
             label + " dK/dV reduce");
    for (member& m : mine) {
      auto& own = m.part[static_cast<std::size_t>(m.m->pos)];
      for (std::int32_t p = 0; p < m.m->size; ++p) {  // fixed summation order: ring position
        if (p == m.m->pos) continue;
        const auto& in = m.in[static_cast<std::size_t>(p)];
        for (std::size_t x = 0; x < own.size(); ++x) own[x] += in[x];
      }
      scatter_dkv(*m.m, own, t);
    }
  }

  plan plan_;
  attention_dims dims_;
  Kernel kernel_;
  Transport transport_;
  round_program program_;
};

ZEPPELIN_NAMESPACE_END
