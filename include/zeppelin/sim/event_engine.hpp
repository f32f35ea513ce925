// zeppelin/sim/event_engine.hpp
// The discrete-event core of the step simulator: a DAG of tasks on a topology's resources.
//   in : tasks, each with the tasks it waits for:
//        - compute(rank, seconds, tag, priority): runs on the rank's ONE compute stream
//          (a GPU runs one kernel at a time in this model);
//        - flow(source, destination, bytes, tag): moves bytes over the ports of its link
//          class: intra-node flows use the source GPU's NVLink egress and the destination's
//          ingress (capacity: the topology's intra-node bandwidth), inter-node flows the
//          source NIC's send and the destination NIC's receive port (the NIC bandwidth; GPUs
//          mapped to one NIC share it). Concurrent flows share every port max-min fairly
//          (detail/fair_share.hpp), recomputed whenever a flow starts or drains; a flow
//          completes its link latency after its last byte (cost/link_model.hpp's
//          convention). Local (same-rank) and empty flows complete at once;
//        - join(): completes when its dependencies have (a marker, no resource).
//   out: engine_run: start / end of every task, the compute segments of every stream, the
//        flows, and per rank the busy, stalled and idle time up to the makespan.
// Stream policies: in_order runs a rank's compute tasks in the order they were added (a
// CUDA stream: a task waits for its turn even when a later one is ready); priority runs,
// whenever the stream is free, the ready task of smallest priority (ties: added first);
// preemptive_priority also suspends a running task when a task of strictly smaller priority
// becomes ready (CUDA stream priorities, which reschedule at thread-block granularity) and
// resumes it later with its remaining time.
// SM contention (sim/sm_contention.hpp): with comm_slowdown f > 0, a compute task other than
// a TP collective runs at (1 - f) of its speed while its rank is the source or the
// destination of a flow in flight (released, last byte not yet delivered); the rate is
// re-evaluated whenever a flow touching the rank starts or completes, and a task's busy time
// is the wall-clock time it held the stream.
// A rank is "stalled" while its stream is free and some of its compute tasks are unfinished
// (waiting on communication or on another rank), "idle" when it has nothing left to do.
// Deterministic: ties in time are broken by rank and task index. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/sim/detail/fair_share.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <queue>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Index of a task in an event_engine; no_task (-1) in a dependency list is ignored.
using task_id = std::int32_t;
inline constexpr task_id no_task = -1;

//! What a task stands for (the trace and the breakdown read it).
enum class task_kind : std::uint8_t {
  attention_forward = 0,   //!< compute: attention kernels
  attention_backward = 1,  //!< compute
  linear_forward = 2,      //!< compute: GEMMs, norms, MoE, LM head
  linear_backward = 3,     //!< compute
  tensor_parallel = 4,     //!< compute stream blocked by a TP collective (exposed communication)
  kv = 5,                  //!< flow: K/V of a ring round (or an all-gather step)
  dkv = 6,                 //!< flow: dK/dV of a backward ring round (or a reduce-scatter step)
  remap = 7,               //!< flow: hidden states between the attention and the token-balanced layout
  join = 8,                //!< marker
};

[[nodiscard]] constexpr std::string_view to_string(task_kind k) noexcept {
  switch (k) {
    case task_kind::attention_forward: return "attention_fwd";
    case task_kind::attention_backward: return "attention_bwd";
    case task_kind::linear_forward: return "linear_fwd";
    case task_kind::linear_backward: return "linear_bwd";
    case task_kind::tensor_parallel: return "tp_collective";
    case task_kind::kv: return "kv";
    case task_kind::dkv: return "dkv";
    case task_kind::remap: return "remap";
    case task_kind::join: return "join";
  }
  return "?";
}

//! Which leg of a (possibly proxy-routed) transfer a flow is.
enum class flow_leg : std::uint8_t { direct = 0, dispatch = 1, transfer = 2, combine = 3 };

[[nodiscard]] constexpr std::string_view to_string(flow_leg l) noexcept {
  switch (l) {
    case flow_leg::direct: return "direct";
    case flow_leg::dispatch: return "dispatch";
    case flow_leg::transfer: return "transfer";
    case flow_leg::combine: return "combine";
  }
  return "?";
}

//! A task's label: kind plus where it belongs (group, ring round, layer, micro-batch).
struct task_tag {
  task_kind kind = task_kind::join;
  flow_leg leg = flow_leg::direct;
  std::int32_t group = -1;  //!< ring group, -1 for none (local work, linear modules, remap)
  std::int32_t round = -1;  //!< ring round / collective step, -1 for none
  std::int32_t layer = 0;
  std::int32_t micro_batch = 0;
  friend constexpr bool operator==(const task_tag&, const task_tag&) = default;
};

enum class stream_policy : std::uint8_t { in_order = 0, priority = 1, preemptive_priority = 2 };

//! A stretch of time a compute task ran (several per task when it was preempted).
struct compute_segment {
  task_id task = no_task;
  rank_index rank = 0;
  double start = 0;
  double end = 0;
};

//! A completed flow: [start, end] spans first byte to last byte + latency.
struct flow_record {
  task_id task = no_task;
  rank_index source = 0;
  rank_index destination = 0;
  double bytes = 0;
  link_class link = link_class::local;
  double start = 0;
  double end = 0;
};

//! Per-rank time accounting of a run (seconds, summing to the makespan).
struct stream_accounting {
  double busy[5] = {0, 0, 0, 0, 0};  //!< by compute task_kind 0..4
  double stalled = 0;
  double idle = 0;
  [[nodiscard]] double busy_total() const noexcept { return busy[0] + busy[1] + busy[2] + busy[3] + busy[4]; }
};

struct engine_run {
  double makespan = 0;
  std::vector<double> start, end;         //!< per task (end of a join = its release)
  std::vector<task_tag> tags;             //!< per task
  std::vector<compute_segment> segments;  //!< in completion order
  std::vector<flow_record> flows;         //!< in completion order
  std::vector<stream_accounting> ranks;
  double intra_node_bytes = 0;
  double inter_node_bytes = 0;
  double max_port_utilization = 0;  //!< largest sum of rates / capacity seen on any port (<= 1)
};

class event_engine {
 public:
  //! `comm_slowdown` in [0, 1): compute speed lost while the rank communicates (see the
  //! file comment; 0 = no contention). Throws invalid_argument outside that range.
  event_engine(const topology& t, stream_policy policy = stream_policy::in_order, link_model link = {},
               double comm_slowdown = 0)
      : t_(t), policy_(policy), link_(link), slowdown_(comm_slowdown), R_(t.num_ranks()), M_(t.num_nics()),
        program_(static_cast<std::size_t>(R_)) {
    ZEPPELIN_EXPECTS(std::isfinite(comm_slowdown) && comm_slowdown >= 0 && comm_slowdown < 1,
                     "the compute slowdown while communicating must lie in [0, 1)", {{"comm_slowdown", comm_slowdown}});
    fair_.capacity.assign(2 * static_cast<std::size_t>(R_) + 2 * static_cast<std::size_t>(M_), t.nic_link().bandwidth);
    std::fill_n(fair_.capacity.begin(), 2 * static_cast<std::size_t>(R_), t.intra_node_link().bandwidth);
  }

  //! A compute task of `seconds` (finite, >= 0) on `rank`. Lower `priority` runs first under
  //! the priority policies; in_order ignores it.
  task_id compute(rank_index rank, double seconds, task_tag tag, std::int64_t priority, std::span<const task_id> deps) {
    ZEPPELIN_EXPECTS(rank >= 0 && rank < R_, "compute task on a rank outside the topology",
                     {{"rank", double(rank)}, {"ranks", double(R_)}});
    ZEPPELIN_EXPECTS(std::isfinite(seconds) && seconds >= 0, "compute time must be finite and non-negative",
                     {{"seconds", seconds}});
    ZEPPELIN_EXPECTS(static_cast<int>(tag.kind) <= static_cast<int>(task_kind::tensor_parallel),
                     "a compute task needs a compute kind", {{"kind", double(static_cast<int>(tag.kind))}});
    const task_id id = add(tag, deps);
    node& n = nodes_.back();
    n.type = 0;
    n.a = rank;
    n.amount = seconds;
    n.priority = priority;
    n.order = static_cast<std::int32_t>(program_[static_cast<std::size_t>(rank)].size());
    program_[static_cast<std::size_t>(rank)].push_back(id);
    return id;
  }
  task_id compute(rank_index rank, double seconds, task_tag tag, std::int64_t priority,
                  std::initializer_list<task_id> deps) {
    return compute(rank, seconds, tag, priority, std::span<const task_id>(deps.begin(), deps.size()));
  }

  //! A transfer of `bytes` (finite, >= 0) from `source` to `destination`.
  task_id flow(rank_index source, rank_index destination, double bytes, task_tag tag, std::span<const task_id> deps) {
    const link_class c = t_.between(source, destination);  // validates both ranks
    ZEPPELIN_EXPECTS(std::isfinite(bytes) && bytes >= 0, "flow sizes must be finite and non-negative", {{"bytes", bytes}});
    const task_id id = add(tag, deps);
    node& n = nodes_.back();
    n.type = 1;
    n.a = source;
    n.b = destination;
    n.amount = bytes;
    n.link = c;
    if (c == link_class::intra_node) {
      n.port_a = source;
      n.port_b = R_ + destination;
    } else if (c == link_class::inter_node) {
      n.port_a = 2 * R_ + t_.nic_of(source);
      n.port_b = 2 * R_ + M_ + t_.nic_of(destination);
    }
    return id;
  }
  task_id flow(rank_index source, rank_index destination, double bytes, task_tag tag, std::initializer_list<task_id> deps) {
    return flow(source, destination, bytes, tag, std::span<const task_id>(deps.begin(), deps.size()));
  }

  //! A marker that completes with the last of `deps` (at 0 when there are none).
  task_id join(std::span<const task_id> deps) {
    task_tag tag{};
    const task_id id = add(tag, deps);
    nodes_.back().type = 2;
    return id;
  }
  task_id join(std::initializer_list<task_id> deps) { return join(std::span<const task_id>(deps.begin(), deps.size())); }

  [[nodiscard]] std::size_t size() const noexcept { return nodes_.size(); }

  //! Runs the DAG to completion (call once). Throws invalid_argument if some task can never
  //! run (impossible by construction: dependencies always name earlier tasks).
  [[nodiscard]] engine_run run();

 private:
  struct node {
    task_tag tag{};
    std::uint8_t type = 2;  // 0 compute, 1 flow, 2 join
    rank_index a = 0, b = 0;
    double amount = 0;
    std::int64_t priority = 0;
    std::int32_t order = 0;
    link_class link = link_class::local;
    std::int32_t port_a = -1, port_b = -1;
    std::int32_t waiting = 0;
    std::int32_t first_succ = -1;  // linked list of successors in succ_
  };

  task_id add(task_tag tag, std::span<const task_id> deps) {
    const auto id = static_cast<task_id>(nodes_.size());
    node n{};
    n.tag = tag;
    nodes_.push_back(n);
    for (const task_id d : deps) {
      if (d == no_task) continue;
      ZEPPELIN_EXPECTS(d >= 0 && d < id, "a task may only wait for earlier tasks", {{"task", double(id)}, {"dependency", double(d)}});
      ++nodes_.back().waiting;
      succ_.push_back({id, nodes_[static_cast<std::size_t>(d)].first_succ});
      nodes_[static_cast<std::size_t>(d)].first_succ = static_cast<std::int32_t>(succ_.size() - 1);
    }
    return id;
  }

  const topology& t_;
  stream_policy policy_;
  link_model link_;
  double slowdown_;
  rank_index R_;
  int M_;
  std::vector<node> nodes_;
  std::vector<std::pair<task_id, std::int32_t>> succ_;  // (successor, next)
  std::vector<std::vector<task_id>> program_;
  detail::fair_share_state fair_;
};

inline engine_run event_engine::run() {
  using std::size_t;
  const size_t T = nodes_.size(), R = static_cast<size_t>(R_);
  engine_run out;
  out.start.assign(T, -1.0);
  out.end.assign(T, -1.0);
  out.tags.resize(T);
  for (size_t i = 0; i < T; ++i) out.tags[i] = nodes_[i].tag;
  out.ranks.resize(R);

  // per rank stream state
  struct stream {
    task_id running = no_task;
    double run_start = 0, run_end = 0;
    double mark = 0, work_left = 0, rate = 1;  // full-speed seconds left at `mark`, current speed
    std::int32_t generation = 0;
    std::int32_t next = 0;     // in_order: index into the program
    std::int32_t pending = 0;  // compute tasks not finished
    double free_since = 0;     // when the stream last became free
    bool dirty = false;
  };
  std::vector<stream> st(R);
  for (size_t r = 0; r < R; ++r) st[r].pending = static_cast<std::int32_t>(program_[r].size());
  std::vector<char> released(T, 0);
  std::vector<std::int32_t> comm(R, 0);  // flows in flight with the rank as an end
  std::vector<char> comm_changed(R, 0);
  auto touch = [&](rank_index r, std::int32_t d) {
    auto& c = comm[static_cast<size_t>(r)];
    const bool was = c > 0;
    c += d;
    if (was != (c > 0)) comm_changed[static_cast<size_t>(r)] = 1;
  };
  auto speed = [&](rank_index r, task_id id) {
    return slowdown_ > 0 && comm[static_cast<size_t>(r)] > 0 &&
                   nodes_[static_cast<size_t>(id)].tag.kind != task_kind::tensor_parallel
               ? 1.0 - slowdown_
               : 1.0;
  };
  std::vector<double> remaining_time(T, 0.0);
  for (size_t i = 0; i < T; ++i)
    if (nodes_[i].type == 0) remaining_time[i] = nodes_[i].amount;
  using ready_entry = std::tuple<std::int64_t, std::int32_t, task_id>;  // priority, order, id
  std::vector<std::priority_queue<ready_entry, std::vector<ready_entry>, std::greater<>>> ready(R);
  using timed = std::tuple<double, std::int32_t, std::int32_t>;  // time, rank or task, generation
  std::priority_queue<timed, std::vector<timed>, std::greater<>> compute_done, latency_done;

  std::vector<task_id> active;           // flows moving bytes
  std::vector<double> left_bytes(T, 0.0), rate;
  std::vector<std::int32_t> pa, pb;
  bool rates_dirty = false;
  double now = 0;
  std::vector<task_id> work;  // tasks whose dependencies are all done, to release now
  size_t completed = 0;

  auto complete = [&](task_id id) {
    const auto i = static_cast<size_t>(id);
    out.end[i] = now;
    ++completed;
    for (std::int32_t e = nodes_[i].first_succ; e >= 0; e = succ_[static_cast<size_t>(e)].second) {
      const task_id s = succ_[static_cast<size_t>(e)].first;
      if (--nodes_[static_cast<size_t>(s)].waiting == 0) work.push_back(s);
    }
  };
  auto release_all = [&] {
    while (!work.empty()) {
      const task_id id = work.back();
      work.pop_back();
      const auto i = static_cast<size_t>(id);
      node& n = nodes_[i];
      released[i] = 1;
      if (n.type == 2) {
        out.start[i] = now;
        complete(id);
      } else if (n.type == 1) {
        out.start[i] = now;
        if (n.link == link_class::local || n.amount == 0) {
          out.flows.push_back({id, n.a, n.b, n.amount, n.link, now, now});
          complete(id);
        } else {
          left_bytes[i] = n.amount;
          active.push_back(id);
          rates_dirty = true;
          touch(n.a, 1);
          touch(n.b, 1);
        }
      } else {
        auto& s = st[static_cast<size_t>(n.a)];
        if (policy_ != stream_policy::in_order) ready[static_cast<size_t>(n.a)].push({n.priority, n.order, id});
        s.dirty = true;
      }
    }
  };
  auto account_gap = [&](stream& s, rank_index r, double until) {
    const double gap = until - s.free_since;
    if (gap > 0) (s.pending > 0 ? out.ranks[static_cast<size_t>(r)].stalled : out.ranks[static_cast<size_t>(r)].idle) += gap;
  };
  auto start_task = [&](rank_index r, task_id id) {
    auto& s = st[static_cast<size_t>(r)];
    account_gap(s, r, now);
    s.running = id;
    s.run_start = now;
    s.mark = now;
    s.work_left = remaining_time[static_cast<size_t>(id)];
    s.rate = speed(r, id);
    s.run_end = now + s.work_left / s.rate;
    if (out.start[static_cast<size_t>(id)] < 0) out.start[static_cast<size_t>(id)] = now;
    compute_done.push({s.run_end, r, s.generation});
  };
  auto try_start = [&](rank_index r) {
    auto& s = st[static_cast<size_t>(r)];
    s.dirty = false;
    const auto& prog = program_[static_cast<size_t>(r)];
    if (policy_ == stream_policy::in_order) {
      if (s.running == no_task && s.next < static_cast<std::int32_t>(prog.size()) &&
          released[static_cast<size_t>(prog[static_cast<size_t>(s.next)])])
        start_task(r, prog[static_cast<size_t>(s.next++)]);
      return;
    }
    auto& q = ready[static_cast<size_t>(r)];
    if (q.empty()) return;
    if (s.running != no_task) {
      if (policy_ != stream_policy::preemptive_priority) return;
      const node& cur = nodes_[static_cast<size_t>(s.running)];
      if (std::get<0>(q.top()) >= cur.priority) return;
      // suspend the running task
      const auto i = static_cast<size_t>(s.running);
      if (now > s.run_start) {
        out.segments.push_back({s.running, r, s.run_start, now});
        out.ranks[static_cast<size_t>(r)].busy[static_cast<int>(cur.tag.kind)] += now - s.run_start;
      }
      remaining_time[i] = std::max(0.0, s.work_left - (now - s.mark) * s.rate);
      q.push({cur.priority, cur.order, s.running});
      ++s.generation;
      s.running = no_task;
      s.free_since = now;
    }
    const task_id id = std::get<2>(q.top());
    q.pop();
    start_task(r, id);
  };
  // a rank whose communication started or stopped: its running task changes speed now
  auto reprice = [&] {
    if (slowdown_ == 0) return;
    for (size_t r = 0; r < R; ++r) {
      if (!comm_changed[r]) continue;
      comm_changed[r] = 0;
      auto& s = st[r];
      if (s.running == no_task) continue;
      const double v = speed(static_cast<rank_index>(r), s.running);
      if (v == s.rate) continue;
      s.work_left = std::max(0.0, s.work_left - (now - s.mark) * s.rate);
      s.mark = now;
      s.rate = v;
      s.run_end = now + s.work_left / v;
      ++s.generation;
      compute_done.push({s.run_end, static_cast<std::int32_t>(r), s.generation});
    }
  };

  for (size_t i = 0; i < T; ++i)
    if (nodes_[i].waiting == 0) work.push_back(static_cast<task_id>(i));
  std::reverse(work.begin(), work.end());  // release in index order
  release_all();
  std::fill(comm_changed.begin(), comm_changed.end(), 0);  // nothing runs yet
  for (rank_index r = 0; r < R_; ++r) try_start(r);

  std::vector<task_id> drained;
  while (true) {
    if (rates_dirty) {
      pa.resize(active.size());
      pb.resize(active.size());
      for (size_t k = 0; k < active.size(); ++k) {
        pa[k] = nodes_[static_cast<size_t>(active[k])].port_a;
        pb[k] = nodes_[static_cast<size_t>(active[k])].port_b;
      }
      fair_.solve(pa, pb, rate);
      // utilisation check (no port double-booked)
      std::vector<double>& use = fair_.left;  // reuse as scratch: the solver resets it per call
      for (size_t k = 0; k < active.size(); ++k) use[static_cast<size_t>(pa[k])] = use[static_cast<size_t>(pb[k])] = 0;
      for (size_t k = 0; k < active.size(); ++k) {
        use[static_cast<size_t>(pa[k])] += rate[k];
        use[static_cast<size_t>(pb[k])] += rate[k];
      }
      for (size_t k = 0; k < active.size(); ++k)
        for (const auto p : {pa[k], pb[k]})
          out.max_port_utilization =
              std::max(out.max_port_utilization, use[static_cast<size_t>(p)] / fair_.capacity[static_cast<size_t>(p)]);
      rates_dirty = false;
    }
    while (!compute_done.empty()) {
      const auto& [t, r, g] = compute_done.top();
      if (st[static_cast<size_t>(r)].generation == g && st[static_cast<size_t>(r)].running != no_task) break;
      compute_done.pop();  // stale (preempted)
    }
    double next = std::numeric_limits<double>::infinity();
    if (!compute_done.empty()) next = std::get<0>(compute_done.top());
    if (!latency_done.empty()) next = std::min(next, std::get<0>(latency_done.top()));
    for (size_t k = 0; k < active.size(); ++k)
      next = std::min(next, now + left_bytes[static_cast<size_t>(active[k])] / rate[k]);
    if (!std::isfinite(next)) break;
    const double dt = next - now;
    // flows: advance, and drain those that finish now
    drained.clear();
    size_t keep = 0;
    for (size_t k = 0; k < active.size(); ++k) {
      const task_id id = active[k];
      double& left = left_bytes[static_cast<size_t>(id)];
      // the flow that set `next` drains even when dt is below the clock's resolution at `now`
      // (a tiny flow late in a phase: now + dt == now), else time would never advance
      if (left <= rate[k] * dt * (1 + 1e-12) + 1e-9 * nodes_[static_cast<size_t>(id)].amount || now + left / rate[k] <= next) {
        drained.push_back(id);
      } else {
        left -= rate[k] * dt;
        rate[keep] = rate[k];
        active[keep++] = id;
      }
    }
    active.resize(keep);
    rate.resize(keep);
    now = next;
    if (!drained.empty()) rates_dirty = true;
    for (const task_id id : drained) {
      const node& n = nodes_[static_cast<size_t>(id)];
      const double lat = link_model::latency(n.link, t_);
      (n.link == link_class::inter_node ? out.inter_node_bytes : out.intra_node_bytes) += n.amount;
      latency_done.push({now + lat, id, 0});
    }
    // compute completions at `now`
    while (!compute_done.empty() && std::get<0>(compute_done.top()) <= now) {
      const auto [t, r, g] = compute_done.top();
      compute_done.pop();
      auto& s = st[static_cast<size_t>(r)];
      if (s.generation != g || s.running == no_task) continue;
      const task_id id = s.running;
      const node& n = nodes_[static_cast<size_t>(id)];
      out.segments.push_back({id, r, s.run_start, now});
      out.ranks[static_cast<size_t>(r)].busy[static_cast<int>(n.tag.kind)] += now - s.run_start;
      s.running = no_task;
      s.free_since = now;
      --s.pending;
      s.dirty = true;
      complete(id);
    }
    while (!latency_done.empty() && std::get<0>(latency_done.top()) <= now) {
      const task_id id = std::get<1>(latency_done.top());
      latency_done.pop();
      const node& n = nodes_[static_cast<size_t>(id)];
      out.flows.push_back({id, n.a, n.b, n.amount, n.link, out.start[static_cast<size_t>(id)], now});
      touch(n.a, -1);
      touch(n.b, -1);
      complete(id);
    }
    release_all();
    reprice();
    for (rank_index r = 0; r < R_; ++r)
      if (st[static_cast<size_t>(r)].dirty) try_start(r);
  }
  ZEPPELIN_EXPECTS(completed == T, "event engine: some tasks never ran (a dependency cycle)",
                   {{"tasks", double(T)}, {"completed", double(completed)}});
  out.makespan = now;
  for (size_t r = 0; r < R; ++r) account_gap(st[r], static_cast<rank_index>(r), now);
  return out;
}

ZEPPELIN_NAMESPACE_END
