// zeppelin/sim/backend.hpp
// The simulator's backend of the execution program (program/driver.hpp): instead of moving
// bytes and running kernels it adds tasks to an event engine (sim/event_engine.hpp), priced
// by the cost model, with exactly the dependencies the device engine's streams and events
// give them. It runs the ranks it is given: every rank, or a set of ranks that exchange bytes
// with no other (sim/detail/independent_ranks.hpp), whose pieces alone it adds.
//   in : the event engine, the program, the pass, the per-launch prices, the per-rank tasks
//        the segment starts after (`prev`, updated to the segment's end), the layer and
//        micro-batch labels, the ranks it runs (ascending), an optional execution record, and
//        optionally the engine's rank of each program rank (a CP layout's program runs on
//        the ranks of its CP group inside a whole cluster's engine: step/program.hpp)
//   out: tasks, and the launch statistics.
// Per rank and operation:
//   compute op   one compute task on the rank's GPU, after the previous operation of its
//                stream (or the segment's start) and the operations it names in `after`;
//                priority = its stream's priority. An attention launch costs its price
//                (sim/detail/attention_call.hpp); a copy, add or zero costs its bytes
//                (read + write) at the GPU's memory bandwidth.
//   exchange     NCCL's group semantics, stage by stage (dispatch, transfer + direct,
//                combine): a rank's group of a stage is posted once its previous
//                communication has finished and the exchange's `after` operations are done;
//                the pieces one rank sends another in a stage (one leg, one kind of rows)
//                are one flow, as NCCL runs a group's sends to one peer in order over one
//                connection; a flow starts once BOTH its ranks have posted the group holding
//                it (the rendezvous of ncclSend / ncclRecv), and a rank's group completes
//                when every flow it sends or receives in it has arrived.
// The segment ends, per rank, when all its tasks have. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/counting_sort.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/transfer.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/sim/detail/attention_call.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What the attention launches added so far compute.
struct launch_stats {
  double launches = 0;     //!< attention launches with work
  double flops = 0;        //!< executed FLOPs, forward + backward, tile padding included
  //! (query, key) pairs x heads computed, every launch: pairs x wire heads when every launch
  //! computes every head; a head lane of the all-to-all collective adds its share
  std::int64_t head_pairs = 0;
};

//! The price of every launch of a program (sim/detail/attention_call.hpp): each block of a
//! launch is tiled on its own, as the CSR kernels do. Launches that share a block list and
//! their head count (the lanes of an all-to-all subgroup) are priced once.
[[nodiscard]] inline std::vector<detail::call_cost> price_launches(const execution_program& prog, const attention_time_model& model) {
  std::vector<detail::call_cost> out;
  out.reserve(prog.launches.size());
  std::vector<detail::call_item> items;
  std::map<std::pair<const void*, std::int32_t>, detail::call_cost> shared;
  for (const program_launch& l : prog.launches) {
    // a head lane (the all-to-all collective) computes its share of the heads
    const std::int32_t heads = l.lane.whole() ? prog.wire.heads : l.lane.heads;
    const auto price = [&] {
      items.clear();
      for (std::size_t i = 0; i < l.blocks.size(); ++i) {
        const attention_block& b = l.blocks[i];
        items.push_back({static_cast<std::int32_t>(i), b.seq, b.q, block_pairs(b.q, b.k, b.mask)});
      }
      return detail::price_call(items, model, heads, prog.wire.head_dim);
    };
    if (!l.blocks.is_shared()) {
      out.push_back(price());
      continue;
    }
    auto it = shared.find({l.blocks.identity(), heads});
    if (it == shared.end()) it = shared.emplace(std::pair{l.blocks.identity(), heads}, price()).first;
    out.push_back(it->second);
  }
  return out;
}

class sim_backend {
 public:
  sim_backend(event_engine& e, const execution_program& prog, pass_kind pass, const topology& t,
              const std::vector<detail::call_cost>& prices, std::vector<task_id>& prev, std::int32_t layer, std::int32_t micro_batch,
              launch_stats& stats, std::span<const rank_index> ranks, execution_record* record = nullptr,
              std::span<const rank_index> engine_ranks = {})
      : e_(e), prog_(prog), pass_(pass), t_(t), prices_(prices), prev_(prev), layer_(layer), mb_(micro_batch), stats_(stats),
        record_(record), ranks_(ranks.begin(), ranks.end()), engine_rank_(engine_ranks.begin(), engine_ranks.end()) {
    ZEPPELIN_EXPECTS(engine_rank_.empty() || engine_rank_.size() == static_cast<std::size_t>(prog.num_ranks()),
                     "simulator backend: the engine ranks must map every program rank",
                     {{"engine_ranks", double(engine_rank_.size())}, {"program_ranks", double(prog.num_ranks())}});
    const auto R = static_cast<std::size_t>(prog.num_ranks());
    runs_rank_.assign(R, 0);
    for (const rank_index r : ranks_) runs_rank_[static_cast<std::size_t>(r)] = 1;
    task_of_.resize(R);
    last_.assign(R, std::vector<task_id>(prog.streams.size(), no_task));
    comm_.assign(R, no_task);
    ready_.assign(R, no_task);
    touched_.resize(R);
    parts_.resize(R);
    stream_to_.assign(R, 0);
  }

  [[nodiscard]] std::span<const rank_index> ranks() const noexcept { return ranks_; }

  void begin_segment(std::size_t seg) {
    for (const rank_index rank : ranks_) {
      const auto r = static_cast<std::size_t>(rank);
      task_of_[r].assign(prog_.pass(pass_)[r].segments.at(seg).ops.size(), no_task);
      std::fill(last_[r].begin(), last_[r].end(), prev_[r]);
      comm_[r] = prev_[r];
      parts_[r].assign(1, prev_[r]);
    }
    segment_ = seg;
  }

  void end_segment(std::size_t) {
    for (const rank_index rank : ranks_) {
      const auto r = static_cast<std::size_t>(rank);
      prev_[r] = parts_[r].size() == 1 ? parts_[r].front() : e_.join(parts_[r]);
    }
  }

  void compute(rank_index rank, std::size_t, std::int32_t index, const program_op& op) {
    const auto r = static_cast<std::size_t>(rank);
    std::vector<task_id>& deps = dependencies_of(r, last_[r][static_cast<std::size_t>(op.stream)], op);
    const std::int64_t priority = prog_.streams[static_cast<std::size_t>(op.stream)].priority;
    const task_kind kind = pass_ == pass_kind::forward ? task_kind::attention_forward : task_kind::attention_backward;
    task_id id = no_task;
    if (const auto* run = std::get_if<run_attention>(&op.body)) {
      const program_launch& l = prog_.launches[static_cast<std::size_t>(run->launch)];
      const detail::call_cost& c = prices_[static_cast<std::size_t>(run->launch)];
      if (c.flops > 0) {
        stats_.launches += 1;
        stats_.flops += pass_ == pass_kind::forward ? c.flops : attention_backward_ratio * c.flops;
        stats_.head_pairs += c.pairs * (l.lane.whole() ? prog_.wire.heads : l.lane.heads);
      }
      if (record_) record_->add(l);
      id = e_.compute(engine_rank(rank), pass_ == pass_kind::forward ? c.forward_s : c.backward_s, tag(kind, l.level, l.round), priority,
                      deps);
    } else {
      id = e_.compute(engine_rank(rank), memory_seconds(r, op.body), tag(kind, -1, -1), priority, deps);
    }
    task_of_[r][static_cast<std::size_t>(index)] = id;
    last_[r][static_cast<std::size_t>(op.stream)] = id;
    parts_[r].push_back(id);
  }

  void exchange(std::int32_t phase, std::span<const rank_index> ranks, std::span<const std::int32_t> index) {
    const program_phase& ph = prog_.phases[static_cast<std::size_t>(phase)];
    // per rank of the phase: posted once its previous communication and the op's `after`
    // work are done (scratch indexed by rank, touched only for the phase's ranks)
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto r = static_cast<std::size_t>(ranks[i]);
      const program_op& op = prog_.pass(pass_)[r].segments[segment_].ops[static_cast<std::size_t>(index[i])];
      const std::vector<task_id>& deps = dependencies_of(r, comm_[r], op);
      ready_[r] = deps.size() == 1 ? deps.front() : e_.join(deps);
    }
    for (int stage = 0; stage < route_stages; ++stage) {
      const std::vector<stream_of_pieces>& flows = streams_of_stage(ph, stage);
      if (flows.empty()) continue;
      for (const rank_index r : ranks) touched_[static_cast<std::size_t>(r)].clear();
      for (const stream_of_pieces& x : flows) {
        const auto s = static_cast<std::size_t>(x.src), d = static_cast<std::size_t>(x.dst);
        task_tag g = tag(x.kind, ph.level, ph.round);
        g.leg = leg_of(x.step);
        const task_id f = e_.flow(engine_rank(x.src), engine_rank(x.dst), static_cast<double>(x.bytes), g, {ready_[s], ready_[d]});
        touched_[s].push_back(f);
        if (d != s) touched_[d].push_back(f);
      }
      if (record_)
        for (const transfer& m : ph.pieces)
          if (stage_of(m.step) == stage && runs_rank_[static_cast<std::size_t>(m.src)]) record_->add(ph, m);
      // every flow of the stage waits for the ready task of both its ends: a rank's next
      // stage waits for its flows alone (one flow: that flow itself, no join)
      for (const rank_index rank : ranks) {
        const auto r = static_cast<std::size_t>(rank);
        if (touched_[r].empty()) continue;
        ready_[r] = touched_[r].size() == 1 ? touched_[r].front() : e_.join(touched_[r]);
      }
    }
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto r = static_cast<std::size_t>(ranks[i]);
      comm_[r] = ready_[r];
      task_of_[r][static_cast<std::size_t>(index[i])] = ready_[r];
      parts_[r].push_back(ready_[r]);
    }
  }

 private:
  [[nodiscard]] rank_index engine_rank(rank_index r) const noexcept {
    return engine_rank_.empty() ? r : engine_rank_[static_cast<std::size_t>(r)];
  }
  // `first` and the tasks of the operations `op` names in `after` (a scratch list)
  std::vector<task_id>& dependencies_of(std::size_t r, task_id first, const program_op& op) {
    deps_.assign(1, first);
    for (const std::int32_t a : op.after) deps_.push_back(task_of_[r][static_cast<std::size_t>(a)]);
    return deps_;
  }

  //! The pieces of one stage that one rank sends another over one leg, as one flow.
  struct stream_of_pieces {
    rank_index src = 0, dst = 0;
    route_step step = route_step::direct;
    task_kind kind = task_kind::remap;
    std::int64_t bytes = 0;
    std::size_t first = 0;  //!< index of its first piece in the phase
  };

  // The pieces of `stage` merged by (source, destination, leg, kind), in the order of their
  // first piece. NCCL runs the sends of one group to one peer in order over that peer's
  // connection, so the pieces a rank sends a peer in a stage share one stream of bytes (one
  // max-min share of each port), and the stage waits for all of them: one flow of their sum.
  // O(pieces of the phase): grouped by source and put back in piece order by counting sorts
  // (core/detail/counting_sort.hpp), merged through each destination's latest stream from the
  // source (a source's streams to one destination over several legs or kinds are searched).
  [[nodiscard]] const std::vector<stream_of_pieces>& streams_of_stage(const program_phase& ph, int stage) {
    merged_.clear();
    for (std::size_t i = 0; i < ph.pieces.size(); ++i) {
      const transfer& m = ph.pieces[i];
      if (stage_of(m.step) == stage && runs_rank_[static_cast<std::size_t>(m.src)])
        merged_.push_back({m.src, m.dst, m.step, flow_kind(ph, m), m.bytes, i});
    }
    detail::stable_sort_by_key(merged_, [](const stream_of_pieces& x) { return x.src; }, sorted_, starts_);
    const auto same_stream = [](const stream_of_pieces& x, const stream_of_pieces& y) {
      return x.src == y.src && x.dst == y.dst && x.step == y.step && x.kind == y.kind;
    };
    std::size_t out = 0;
    for (std::size_t i = 0, from = 0; i < merged_.size(); ++i) {
      const stream_of_pieces x = merged_[i];
      if (i == 0 || x.src != merged_[i - 1].src) from = out;  // this source's streams: [from, out)
      std::size_t& latest = stream_to_[static_cast<std::size_t>(x.dst)];
      std::size_t at = out;
      if (latest >= from && latest < out && merged_[latest].dst == x.dst) {  // the source has a stream to x.dst
        at = latest;
        if (!same_stream(merged_[at], x))
          for (at = from; at < out && !same_stream(merged_[at], x);) ++at;
      }
      if (at < out) {
        merged_[at].bytes += x.bytes;
      } else {
        merged_[out] = x;
        latest = out++;
      }
    }
    merged_.resize(out);
    detail::stable_sort_by_key(merged_, [](const stream_of_pieces& x) { return x.first; }, sorted_, starts_);
    return merged_;
  }

  [[nodiscard]] task_tag tag(task_kind k, std::int32_t level, std::int32_t round) const {
    return {k, flow_leg::direct, level, round, layer_, mb_};
  }
  static flow_leg leg_of(route_step s) {
    switch (s) {
      case route_step::dispatch: return flow_leg::dispatch;
      case route_step::transfer: return flow_leg::transfer;
      case route_step::combine: return flow_leg::combine;
      case route_step::direct: break;
    }
    return flow_leg::direct;
  }
  static task_kind flow_kind(const program_phase& ph, const transfer& m) {
    switch (ph.bindings[static_cast<std::size_t>(m.payload)].rows_of) {
      case row_kind::kv: return task_kind::kv;
      case row_kind::dkv: return task_kind::dkv;
      case row_kind::q:
      case row_kind::qkv:
      case row_kind::lse: break;
    }
    // the all-to-all collective's Q, O, LSE, dO, dQ rows travel like a remap's rows
    return task_kind::remap;
  }
  // bytes of one row of a buffer of the current pass on rank r
  [[nodiscard]] std::int64_t row_bytes(std::size_t r, const buffer_ref& b) const {
    if (b.where == buffer_ref::space::arena) {
      const arena& a = prog_.pass(pass_)[r].arenas[static_cast<std::size_t>(b.index)];
      return prog_.wire.row_bytes(a.rows_of, a.heads);
    }
    if (b.is(tensor_kind::remap_source) || b.is(tensor_kind::remap_target))
      return prog_.wire.row_bytes(prog_.pass(pass_)[r].segments[segment_].rows_of);
    return prog_.wire.row_bytes(row_kind_of(static_cast<tensor_kind>(b.index)));
  }
  // bytes of `heads` heads of one row of a buffer
  [[nodiscard]] std::int64_t head_bytes(std::size_t r, const buffer_ref& b, std::int32_t heads) const {
    const row_kind kind = b.where == buffer_ref::space::arena ? prog_.pass(pass_)[r].arenas[static_cast<std::size_t>(b.index)].rows_of
                                                              : row_kind_of(static_cast<tensor_kind>(b.index));
    return prog_.wire.row_bytes(kind, heads);
  }
  // seconds of a memory operation: bytes read plus bytes written at the memory bandwidth. Every
  // run of an operation has rows of the same size, so the bytes are (rows of all runs) x (bytes
  // of a row): exact in double (integers below 2^53), as the sum of the runs' bytes was.
  [[nodiscard]] double memory_seconds(std::size_t r, const op_body& body) const {
    const double bw = t_.gpu().memory_bandwidth;
    if (!(bw > 0)) return 0;
    double bytes = 0;
    if (const auto* c = std::get_if<copy_rows>(&body)) bytes = 2.0 * static_cast<double>(rows_of(c->runs) * row_bytes(r, c->to));
    if (const auto* a = std::get_if<add_rows>(&body)) bytes = 3.0 * static_cast<double>(rows_of(a->runs) * row_bytes(r, a->to));
    if (const auto* z = std::get_if<zero_rows>(&body)) bytes = static_cast<double>(z->rows * row_bytes(r, z->to));
    // a head operation moves its runs once per move
    if (const auto* c = std::get_if<copy_heads>(&body))
      bytes = 2.0 * static_cast<double>(c->moves.size()) * static_cast<double>(rows_of(c->runs) * head_bytes(r, c->to, c->heads));
    if (const auto* a = std::get_if<add_heads>(&body))
      bytes = 3.0 * static_cast<double>(a->moves.size()) * static_cast<double>(rows_of(a->runs) * head_bytes(r, a->to, a->heads));
    return bytes / bw;
  }
  [[nodiscard]] static token_count rows_of(const run_list& runs) noexcept {
    token_count n = 0;
    for (const row_run& x : runs) n += x.rows;
    return n;
  }

  event_engine& e_;
  const execution_program& prog_;
  pass_kind pass_;
  const topology& t_;
  const std::vector<detail::call_cost>& prices_;
  std::vector<task_id>& prev_;
  std::int32_t layer_, mb_;
  launch_stats& stats_;
  execution_record* record_;
  std::vector<rank_index> ranks_;              //!< the ranks it runs, ascending
  std::vector<rank_index> engine_rank_;        //!< [program rank]: its engine rank (empty: the same)
  std::vector<char> runs_rank_;                //!< [rank]: whether it runs that rank
  std::size_t segment_ = 0;
  std::vector<std::vector<task_id>> task_of_;  //!< [rank][op]: the op's task in this segment
  std::vector<std::vector<task_id>> last_;     //!< [rank][stream]: the stream's last task
  std::vector<task_id> comm_;                  //!< [rank]: its last communication
  std::vector<task_id> ready_;                 //!< [rank]: scratch of exchange()
  std::vector<std::vector<task_id>> touched_;  //!< [rank]: scratch of exchange()
  std::vector<std::vector<task_id>> parts_;    //!< [rank]: every task of the segment
  std::vector<stream_of_pieces> merged_;       //!< scratch of exchange()
  std::vector<stream_of_pieces> sorted_;       //!< scratch of streams_of_stage()
  std::vector<std::size_t> starts_;            //!< scratch of streams_of_stage()
  std::vector<std::size_t> stream_to_;         //!< [rank]: scratch of streams_of_stage()
  std::vector<task_id> deps_;                  //!< scratch of dependencies_of()
};

ZEPPELIN_NAMESPACE_END
