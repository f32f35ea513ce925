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
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/schedule/engine_queue.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! How a ring group's KV reaches its members.
enum class kv_exchange : std::uint8_t {
  automatic = 0,   //!< all_gather for plans of method "allgather", ring otherwise
  ring = 1,        //!< G rounds of point-to-point KV passing (TE CP "P2P")
  all_gather = 2,  //!< one all-gather of KV, one reduce of dK/dV (LLaMA-3 CP)
};

template <class T, class Kernel = host_attention, class Transport = direct_transport>
  requires attention_kernel<Kernel, T>
class attention_engine {
 public:
  //! Builds the schedules of every (ring group, micro-batch) of `p`. Throws invalid_argument
  //! for bad dims or a plan the ring schedules reject (schedule/ring_schedule.hpp), and when
  //! the plan does not match the batch.
  attention_engine(plan p, const batch& b, attention_dims dims, Kernel kernel = {}, Transport transport = {},
                   kv_exchange exchange = kv_exchange::automatic)
      : plan_(std::move(p)), dims_(dims), kernel_(std::move(kernel)), transport_(std::move(transport)) {
    validate(dims_);
    all_gather_ = exchange == kv_exchange::all_gather || (exchange == kv_exchange::automatic && plan_.method == "allgather");
    const auto R = static_cast<std::size_t>(plan_.num_ranks());
    shard_row_.resize(R);
    rows_.assign(R, 0);
    for (std::size_t r = 0; r < R; ++r) {
      for (const shard& s : plan_.placements[r].shards) {
        ZEPPELIN_EXPECTS(s.seq >= 0 && s.seq < b.size() && s.range.begin >= 0 && s.range.end <= b.length(s.seq) &&
                             !s.range.empty(),
                         "attention engine: a shard does not fit the batch",
                         {{"rank", double(r)}, {"seq", double(s.seq)}, {"begin", double(s.range.begin)},
                          {"end", double(s.range.end)}});
        shard_row_[r].push_back(rows_[r]);
        rows_[r] += s.range.size();
      }
      queues_.push_back(make_engine_queue(plan_, static_cast<rank_index>(r)));
    }
    // one schedule per (group of zone intra/inter, micro-batch) that has shards
    std::vector<std::pair<std::int32_t, group_index>> keys;
    for (const auto& pl : plan_.placements)
      for (const shard& s : pl.shards)
        if (s.group != no_group && plan_.groups.at(static_cast<std::size_t>(s.group)).zone != zone_kind::local)
          keys.emplace_back(s.micro_batch, s.group);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (const auto& [mb, g] : keys) schedules_.push_back(make_ring_schedule(plan_, b, g, mb));
    // levels: (micro-batch, inter before intra), schedules by group id
    std::vector<std::size_t> order(schedules_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
      const auto& a = schedules_[x];
      const auto& c = schedules_[y];
      return std::tuple(a.micro_batch, queue_order(a.zone), a.group) < std::tuple(c.micro_batch, queue_order(c.zone), c.group);
    });
    for (const std::size_t i : order) {
      const auto& s = schedules_[i];
      if (levels_.empty() || levels_.back().micro_batch != s.micro_batch || levels_.back().zone != s.zone)
        levels_.push_back({s.micro_batch, s.zone, {}, 0});
      levels_.back().schedules.push_back(i);
      levels_.back().rounds = std::max(levels_.back().rounds, s.rounds());
    }
    micro_batches_ = plan_.micro_batches();
  }

  [[nodiscard]] const plan& layout() const noexcept { return plan_; }
  [[nodiscard]] const attention_dims& dims() const noexcept { return dims_; }
  [[nodiscard]] bool uses_all_gather() const noexcept { return all_gather_; }
  //! Tokens (rows) rank r holds: the size of its buffers.
  [[nodiscard]] token_count rows(rank_index r) const { return rows_.at(static_cast<std::size_t>(r)); }
  //! First row of shard i of rank r in the rank's buffers.
  [[nodiscard]] token_count shard_row(rank_index r, std::size_t i) const { return shard_row_.at(static_cast<std::size_t>(r)).at(i); }
  //! The schedules the engine runs (one per ring group and micro-batch).
  [[nodiscard]] const std::vector<ring_schedule>& schedules() const noexcept { return schedules_; }

  //! Forward on the calling rank (every rank of `c` must call it). Sizes: q, o rows * H * D;
  //! k, v rows * KV * D; lse H * rows. Throws invalid_argument on a size mismatch or a
  //! communicator whose size differs from the plan's.
  template <communicator C>
    requires transport_for<Transport, C>
  void forward(C& c, std::span<const T> q, std::span<const T> k, std::span<const T> v, std::span<T> o,
               std::span<T> lse) const {
    const rank_index me = check_rank(c);
    const token_count n = rows_[static_cast<std::size_t>(me)];
    check_size(q.size(), n * dims_.q_row(), "q");
    check_size(k.size(), n * dims_.kv_row(), "k");
    check_size(v.size(), n * dims_.kv_row(), "v");
    check_size(o.size(), n * dims_.q_row(), "o");
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
    const rank_index me = check_rank(c);
    const token_count n = rows_[static_cast<std::size_t>(me)];
    check_size(q.size(), n * dims_.q_row(), "q");
    check_size(k.size(), n * dims_.kv_row(), "k");
    check_size(v.size(), n * dims_.kv_row(), "v");
    check_size(o.size(), n * dims_.q_row(), "o");
    check_size(d_o.size(), n * dims_.q_row(), "d_o");
    check_size(lse.size(), n * dims_.heads, "lse");
    check_size(dq.size(), n * dims_.q_row(), "dq");
    check_size(dk.size(), n * dims_.kv_row(), "dk");
    check_size(dv.size(), n * dims_.kv_row(), "dv");
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
  struct level {
    std::int32_t micro_batch;
    zone_kind zone;
    std::vector<std::size_t> schedules;
    std::int32_t rounds;
  };
  // the calling rank's tensors; forward fills o/lse, backward reads go/glse/gdo, fills d*
  struct tensors {
    std::span<const T> q, k, v;
    std::span<T> o, lse;
    std::span<const T> go, gdo, glse;
    std::span<T> dq;
    token_count rows;
    std::span<T> dk{}, dv{};
  };
  // one ring group the calling rank belongs to, within a level
  struct member {
    const ring_schedule* s;
    std::int32_t pos;
    std::vector<T> cur, next, acc, done;  // KV held, KV arriving, dKV of the held origin, dKV finished
    std::vector<std::vector<T>> origin;   // all-gather: KV (then partial dKV) per origin
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
  [[nodiscard]] std::int64_t kv_elems(token_count rows) const noexcept { return 2 * rows * dims_.kv_row(); }
  [[nodiscard]] std::int64_t kv_bytes(token_count rows) const noexcept {
    return kv_elems(rows) * static_cast<std::int64_t>(sizeof(T));
  }
  // rank row of group-buffer row `row` of position `pos` (blocks never cross a shard)
  [[nodiscard]] token_count rank_row(const ring_schedule& s, std::int32_t pos, token_count row) const {
    const auto& lay = s.layout[static_cast<std::size_t>(pos)];
    const rank_index r = s.ranks[static_cast<std::size_t>(pos)];
    for (const group_shard& g : lay)
      if (row >= g.row && row < g.row + g.range.size())
        return shard_row_[static_cast<std::size_t>(r)][static_cast<std::size_t>(g.shard)] + (row - g.row);
    ZEPPELIN_THROW(invalid_argument, "attention engine: a block row outside the group buffer", {{"row", double(row)}});
  }
  // the calling rank's KV group buffer (keys then values) of position pos
  std::vector<T> gather_kv(const ring_schedule& s, std::int32_t pos, const tensors& t) const {
    const token_count n = s.buffer_tokens[static_cast<std::size_t>(pos)];
    const std::int64_t w = dims_.kv_row();
    std::vector<T> buf(static_cast<std::size_t>(kv_elems(n)));
    const rank_index r = s.ranks[static_cast<std::size_t>(pos)];
    for (const group_shard& g : s.layout[static_cast<std::size_t>(pos)]) {
      const token_count from = shard_row_[static_cast<std::size_t>(r)][static_cast<std::size_t>(g.shard)];
      const auto count = static_cast<std::ptrdiff_t>(g.range.size() * w);
      std::copy_n(t.k.begin() + from * w, count, buf.begin() + g.row * w);
      std::copy_n(t.v.begin() + from * w, count, buf.begin() + (n + g.row) * w);
    }
    return buf;
  }
  // adds / writes a finished dKV group buffer into the rank's dK, dV rows
  void scatter_dkv(const ring_schedule& s, std::int32_t pos, const std::vector<T>& buf, const tensors& t) const {
    const token_count n = s.buffer_tokens[static_cast<std::size_t>(pos)];
    const std::int64_t w = dims_.kv_row();
    const rank_index r = s.ranks[static_cast<std::size_t>(pos)];
    for (const group_shard& g : s.layout[static_cast<std::size_t>(pos)]) {
      const token_count to = shard_row_[static_cast<std::size_t>(r)][static_cast<std::size_t>(g.shard)];
      for (std::int64_t x = 0; x < g.range.size() * w; ++x) {
        t.dk[static_cast<std::size_t>(to * w + x)] += buf[static_cast<std::size_t>(g.row * w + x)];
        t.dv[static_cast<std::size_t>(to * w + x)] += buf[static_cast<std::size_t>((n + g.row) * w + x)];
      }
    }
  }

  // one block: q rows at rank row qr (rank buffers), keys at row kr of a KV buffer of kv_rows
  // rows (keys then values); backward adds dK/dV into dkv (same layout) when given
  void compute(const attention_block& blk, token_count qr, const T* kv, token_count kv_rows, token_count kr, T* dkv,
               const tensors& t, bool backward) const {
    const std::int64_t qw = dims_.q_row(), kw = dims_.kv_row();
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

  template <class C>
  void exchange(C& c, const std::vector<transfer>& all, const std::vector<std::span<const std::byte>>& send,
                const std::vector<std::span<std::byte>>& recv, const std::string& label) const {
    transport_.exchange(c, std::span<const transfer>(all), std::span<const std::span<const std::byte>>(send),
                        std::span<const std::span<std::byte>>(recv), label);
  }

  template <class C>
  void run(C& c, tensors& t, bool backward) const {
    const rank_index me = c.rank();
    const std::string pass = backward ? "backward" : "forward";
    std::vector<T> local_kv, local_dkv;
    for (std::int32_t mb = 0; mb < micro_batches_; ++mb) {
      for (const level& lv : levels_) {
        if (lv.micro_batch != mb) continue;
        const std::string label = pass + " micro-batch " + std::to_string(mb) + " " + std::string(to_string(lv.zone)) + " queue";
        std::vector<member> mine;
        for (const std::size_t i : lv.schedules) {
          const auto& s = schedules_[i];
          for (std::int32_t p = 0; p < s.size(); ++p)
            if (s.ranks[static_cast<std::size_t>(p)] == me) mine.push_back(member{&s, p, {}, {}, {}, {}, {}});
        }
        if (all_gather_) run_all_gather(c, lv, mine, t, backward, label);
        else run_ring(c, lv, mine, t, backward, label);
      }
      // local queue: sequences this rank holds alone
      for (const engine_task& task : queues_[static_cast<std::size_t>(me)].tasks) {
        if (task.micro_batch != mb || task.zone != zone_kind::local) continue;
        const auto& shards = plan_.placements[static_cast<std::size_t>(me)].shards;
        std::vector<attention_block> blocks;
        for (const std::int32_t qi : task.shards)
          for (const std::int32_t ki : task.shards) {
            const shard& qs = shards[static_cast<std::size_t>(qi)];
            const shard& ks = shards[static_cast<std::size_t>(ki)];
            append_blocks(group_shard{qs.seq, qs.range, qi, shard_row_[static_cast<std::size_t>(me)][static_cast<std::size_t>(qi)]},
                          group_shard{ks.seq, ks.range, ki, shard_row_[static_cast<std::size_t>(me)][static_cast<std::size_t>(ki)]},
                          blocks);
          }
        if (blocks.empty()) continue;
        if (local_kv.empty()) {  // the rank's K/V as one buffer (keys then values), built once
          local_kv.resize(static_cast<std::size_t>(kv_elems(t.rows)));
          std::copy(t.k.begin(), t.k.end(), local_kv.begin());
          std::copy(t.v.begin(), t.v.end(), local_kv.begin() + t.rows * dims_.kv_row());
          if (backward) local_dkv.assign(local_kv.size(), T(0));
        }
        for (const attention_block& blk : blocks)
          compute(blk, blk.q_row, local_kv.data(), t.rows, blk.kv_row, local_dkv.data(), t, backward);
      }
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
  void run_ring(C& c, const level& lv, std::vector<member>& mine, tensors& t, bool backward, const std::string& label) const {
    const rank_index me = c.rank();
    for (member& m : mine) {
      m.cur = gather_kv(*m.s, m.pos, t);
      if (backward) m.acc.assign(m.cur.size(), T(0));
    }
    std::vector<transfer> all;
    std::vector<std::span<const std::byte>> send;
    std::vector<std::span<std::byte>> recv;
    const auto add = [&](rank_index src, const ring_transfer& x, std::span<const T> out, std::vector<T>* in) {
      const std::int64_t bytes = kv_bytes(x.tokens);
      all.push_back({src, x.peer, bytes});
      send.push_back(src == me ? std::as_bytes(out) : std::span<const std::byte>{});
      std::span<std::byte> dst{};
      if (x.peer == me && in) {
        in->assign(static_cast<std::size_t>(kv_elems(x.tokens)), T(0));
        dst = std::as_writable_bytes(std::span<T>(*in));
      }
      recv.push_back(dst);
    };
    // the member of the calling rank in schedule s (nullptr if none)
    const auto find = [&](const ring_schedule* s) -> member* {
      for (member& m : mine)
        if (m.s == s) return &m;
      return nullptr;
    };
    for (std::int32_t k = 0; k < lv.rounds; ++k) {
      all.clear(), send.clear(), recv.clear();
      for (const std::size_t i : lv.schedules) {
        const ring_schedule& s = schedules_[i];
        if (k >= s.rounds()) continue;
        member* m = find(&s);
        for (std::int32_t p = 0; p < s.size(); ++p) {
          const bool at_me = m && m->pos == p;
          if (!backward) {
            const forward_step& st = s.forward[static_cast<std::size_t>(k)][static_cast<std::size_t>(p)];
            if (st.send_kv.active())
              add(st.rank, st.send_kv, at_me ? std::span<const T>(m->cur) : std::span<const T>{},
                  m && st.send_kv.peer == me ? &m->next : nullptr);
          } else {
            const backward_step& st = s.backward[static_cast<std::size_t>(k)][static_cast<std::size_t>(p)];
            if (st.send_kv.active())
              add(st.rank, st.send_kv, at_me ? std::span<const T>(m->cur) : std::span<const T>{},
                  m && st.send_kv.peer == me ? &m->next : nullptr);
            if (st.send_dkv.active())
              add(st.rank, st.send_dkv, at_me ? std::span<const T>(m->done) : std::span<const T>{},
                  m && st.send_dkv.peer == me ? &m->acc : nullptr);
          }
        }
      }
      exchange(c, all, send, recv, label + " round " + std::to_string(k));
      for (member& m : mine) {
        const ring_schedule& s = *m.s;
        if (k >= s.rounds()) continue;
        const auto& blocks = backward ? s.backward[static_cast<std::size_t>(k)][static_cast<std::size_t>(m.pos)].blocks
                                      : s.forward[static_cast<std::size_t>(k)][static_cast<std::size_t>(m.pos)].blocks;
        const std::int32_t origin = backward ? s.backward[static_cast<std::size_t>(k)][static_cast<std::size_t>(m.pos)].kv_origin
                                             : s.forward[static_cast<std::size_t>(k)][static_cast<std::size_t>(m.pos)].kv_origin;
        const token_count kv_rows = s.buffer_tokens[static_cast<std::size_t>(origin)];
        if (backward && k == 0) m.acc.assign(static_cast<std::size_t>(kv_elems(kv_rows)), T(0));
        for (const attention_block& blk : blocks)
          compute(blk, rank_row(s, m.pos, blk.q_row), m.cur.data(), kv_rows, blk.kv_row, m.acc.data(), t, backward);
        if (k + 1 < s.rounds()) m.cur.swap(m.next);
        if (backward) m.done.swap(m.acc);
      }
    }
    if (!backward) return;
    // the last accumulators go home
    all.clear(), send.clear(), recv.clear();
    for (const std::size_t i : lv.schedules) {
      const ring_schedule& s = schedules_[i];
      member* m = find(&s);
      for (std::int32_t p = 0; p < s.size(); ++p) {
        const dkv_return& h = s.dkv_home[static_cast<std::size_t>(p)];
        if (h.send_dkv.active())
          add(h.rank, h.send_dkv, m && m->pos == p ? std::span<const T>(m->done) : std::span<const T>{},
              m && h.send_dkv.peer == me ? &m->acc : nullptr);
      }
    }
    exchange(c, all, send, recv, label + " dK/dV return");
    for (member& m : mine) scatter_dkv(*m.s, m.pos, m.s->size() > 1 ? m.acc : m.done, t);
  }

  template <class C>
  void run_all_gather(C& c, const level& lv, std::vector<member>& mine, tensors& t, bool backward,
                      const std::string& label) const {
    std::vector<transfer> all;
    std::vector<std::span<const std::byte>> send;
    std::vector<std::span<std::byte>> recv;
    const auto find = [&](const ring_schedule* s) -> member* {
      for (member& m : mine)
        if (m.s == s) return &m;
      return nullptr;
    };
    for (member& m : mine) {
      m.origin.resize(static_cast<std::size_t>(m.s->size()));
      m.origin[static_cast<std::size_t>(m.pos)] = gather_kv(*m.s, m.pos, t);
    }
    // phase 1: every member's KV to every other member (group order, then destination order)
    for (const std::size_t i : lv.schedules) {
      const ring_schedule& s = schedules_[i];
      member* m = find(&s);
      for (std::int32_t p = 0; p < s.size(); ++p)
        for (std::int32_t d = 0; d < s.size(); ++d) {
          if (d == p) continue;
          const token_count n = s.buffer_tokens[static_cast<std::size_t>(p)];
          all.push_back({s.ranks[static_cast<std::size_t>(p)], s.ranks[static_cast<std::size_t>(d)], kv_bytes(n)});
          send.push_back(m && m->pos == p ? std::as_bytes(std::span<const T>(m->origin[static_cast<std::size_t>(p)]))
                                          : std::span<const std::byte>{});
          std::span<std::byte> dst{};
          if (m && m->pos == d) {
            auto& buf = m->origin[static_cast<std::size_t>(p)];
            buf.assign(static_cast<std::size_t>(kv_elems(n)), T(0));
            dst = std::as_writable_bytes(std::span<T>(buf));
          }
          recv.push_back(dst);
        }
    }
    exchange(c, all, send, recv, label + " KV all-gather");
    std::vector<std::vector<std::vector<T>>> parts(mine.size());
    for (std::size_t mi = 0; mi < mine.size(); ++mi) {
      member& m = mine[mi];
      const ring_schedule& s = *m.s;
      if (backward) {
        parts[mi].resize(static_cast<std::size_t>(s.size()));
        for (std::int32_t o = 0; o < s.size(); ++o)
          parts[mi][static_cast<std::size_t>(o)].assign(
              static_cast<std::size_t>(kv_elems(s.buffer_tokens[static_cast<std::size_t>(o)])), T(0));
      }
      for (std::int32_t k = 0; k < s.rounds(); ++k) {
        const forward_step& st = s.forward[static_cast<std::size_t>(k)][static_cast<std::size_t>(m.pos)];
        const auto o = static_cast<std::size_t>(st.kv_origin);
        for (const attention_block& blk : st.blocks)
          compute(blk, rank_row(s, m.pos, blk.q_row), m.origin[o].data(), s.buffer_tokens[o], blk.kv_row,
                  backward ? parts[mi][o].data() : nullptr, t, backward);
      }
    }
    if (!backward) return;
    // phase 2: partial dK/dV of origin d to its owner d, which sums them
    all.clear(), send.clear(), recv.clear();
    std::vector<std::vector<std::vector<T>>> incoming(mine.size());
    for (std::size_t mi = 0; mi < mine.size(); ++mi) incoming[mi].resize(static_cast<std::size_t>(mine[mi].s->size()));
    for (const std::size_t i : lv.schedules) {
      const ring_schedule& s = schedules_[i];
      member* m = find(&s);
      const auto mi = m ? static_cast<std::size_t>(m - mine.data()) : 0;
      for (std::int32_t p = 0; p < s.size(); ++p)
        for (std::int32_t d = 0; d < s.size(); ++d) {
          if (d == p) continue;
          const token_count n = s.buffer_tokens[static_cast<std::size_t>(d)];
          all.push_back({s.ranks[static_cast<std::size_t>(p)], s.ranks[static_cast<std::size_t>(d)], kv_bytes(n)});
          send.push_back(m && m->pos == p ? std::as_bytes(std::span<const T>(parts[mi][static_cast<std::size_t>(d)]))
                                          : std::span<const std::byte>{});
          std::span<std::byte> dst{};
          if (m && m->pos == d) {
            auto& buf = incoming[mi][static_cast<std::size_t>(p)];
            buf.assign(static_cast<std::size_t>(kv_elems(n)), T(0));
            dst = std::as_writable_bytes(std::span<T>(buf));
          }
          recv.push_back(dst);
        }
    }
    exchange(c, all, send, recv, label + " dK/dV reduce");
    for (std::size_t mi = 0; mi < mine.size(); ++mi) {
      member& m = mine[mi];
      auto& own = parts[mi][static_cast<std::size_t>(m.pos)];
      for (std::int32_t p = 0; p < m.s->size(); ++p) {  // fixed summation order: ring position
        if (p == m.pos) continue;
        const auto& in = incoming[mi][static_cast<std::size_t>(p)];
        for (std::size_t x = 0; x < own.size(); ++x) own[x] += in[x];
      }
      scatter_dkv(*m.s, m.pos, own, t);
    }
  }

  plan plan_;
  attention_dims dims_;
  Kernel kernel_;
  Transport transport_;
  bool all_gather_ = false;
  std::int32_t micro_batches_ = 1;
  std::vector<std::vector<token_count>> shard_row_;
  std::vector<token_count> rows_;
  std::vector<engine_queue> queues_;
  std::vector<ring_schedule> schedules_;
  std::vector<level> levels_;
};

ZEPPELIN_NAMESPACE_END
