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
//        - join(): completes when its dependencies have (a marker, no resource);
//        - delay(seconds, tag): completes `seconds` after its dependencies, on no resource (a
//          priced whole: an exchange whose time a caller knows, sim/step_backend.hpp);
//        - wait_for(task, dependency): one more dependency of a task not run yet, added after
//          it (a barrier whose members are known only later; a cycle is reported by run()).
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
// Code: event_engine builds the DAG; event_engine::runner (below it) runs the event loop, with
// detail/event_stream.hpp for a rank's stream and detail/event_flows.hpp for the flows moving bytes.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/sim/detail/event_flows.hpp>
#include <zeppelin/sim/detail/event_stream.hpp>

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
  activation = 9,          //!< flow: a pipeline stage's output activation to the next stage
  gradient = 10,           //!< flow: a pipeline stage's input gradient to the previous stage
  gradient_sync = 11,      //!< flow: a step of the data-parallel gradient all-reduce ring
  parameter_sync = 12,     //!< flow: mutual slices pulled from or pushed to the optimizer's shards (Hydraulis)
  parameter_gather = 13,   //!< flow: a ring edge of ZeRO-3's all-gather of a layer's parameters
  gradient_scatter = 14,   //!< flow: a ring edge of ZeRO-3's reduce-scatter of a layer's gradients
  tp_transfer = 15,        //!< flow: a ring step of a tensor-parallel collective
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
    case task_kind::activation: return "activation";
    case task_kind::gradient: return "gradient";
    case task_kind::gradient_sync: return "gradient_sync";
    case task_kind::parameter_sync: return "parameter_sync";
    case task_kind::parameter_gather: return "parameter_gather";
    case task_kind::gradient_scatter: return "gradient_scatter";
    case task_kind::tp_transfer: return "tp_transfer";
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
  bool finished = true;             //!< false: stopped at the deadline (makespan +inf, the rest what ran until then)
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
    // the ports flow() assigns (those of cost/link_model.hpp's ports_of): per rank an NVLink
    // egress and ingress, per NIC a send and a receive port
    port_capacity_ = detail::port_capacities(t);
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
    const task_id id = add(node_kind::compute, tag, deps);
    node& n = nodes_.back();
    n.rank = rank;
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
    const task_id id = add(node_kind::flow, tag, deps);
    node& n = nodes_.back();
    n.rank = source;
    n.destination = destination;
    n.amount = bytes;
    n.link = c;
    if (c == link_class::intra_node) {
      n.send_port = source;
      n.receive_port = R_ + destination;
    } else if (c == link_class::inter_node) {
      n.send_port = 2 * R_ + t_.nic_of(source);
      n.receive_port = 2 * R_ + M_ + t_.nic_of(destination);
    }
    return id;
  }
  task_id flow(rank_index source, rank_index destination, double bytes, task_tag tag, std::initializer_list<task_id> deps) {
    return flow(source, destination, bytes, tag, std::span<const task_id>(deps.begin(), deps.size()));
  }

  //! A marker that completes with the last of `deps` (at 0 when there are none).
  task_id join(std::span<const task_id> deps) { return add(node_kind::join, task_tag{}, deps); }
  task_id join(std::initializer_list<task_id> deps) { return join(std::span<const task_id>(deps.begin(), deps.size())); }

  //! A task of no resource that completes `seconds` (finite, >= 0) after its dependencies.
  task_id delay(double seconds, task_tag tag, std::span<const task_id> deps) {
    ZEPPELIN_EXPECTS(std::isfinite(seconds) && seconds >= 0, "a delay must be finite and non-negative", {{"seconds", seconds}});
    const task_id id = add(node_kind::delay, tag, deps);
    nodes_.back().amount = seconds;
    return id;
  }
  task_id delay(double seconds, task_tag tag, std::initializer_list<task_id> deps) {
    return delay(seconds, tag, std::span<const task_id>(deps.begin(), deps.size()));
  }

  //! Makes `task` also wait for `dependency`, which may have been added after it (both must
  //! exist; the engine has not run). The caller keeps the DAG acyclic: run() throws when a
  //! cycle leaves tasks unrun.
  void wait_for(task_id task, task_id dependency) {
    const auto n = static_cast<task_id>(nodes_.size());
    ZEPPELIN_EXPECTS(task >= 0 && task < n && dependency >= 0 && dependency < n && task != dependency,
                     "wait_for needs two different tasks of the engine", {{"task", double(task)}, {"dependency", double(dependency)}, {"tasks", double(n)}});
    link(dependency, task);
  }

  [[nodiscard]] std::size_t size() const noexcept { return nodes_.size(); }

  //! Room for `tasks` tasks and `dependencies` dependency edges in all, so that a caller who
  //! knows about how large its DAG is grows it once (an estimate: more is added as needed).
  void reserve(std::size_t tasks, std::size_t dependencies) {
    nodes_.reserve(tasks);
    tags_.reserve(tasks);
    succ_.reserve(dependencies);
  }

  //! Runs the DAG to completion (call once). Throws invalid_argument if some task can never
  //! run (impossible by construction: dependencies always name earlier tasks). With a finite
  //! `deadline` it stops once the next event lies past it: the run is then not `finished` and
  //! its makespan +inf (a planner that only needs to know the run is slower than its best).
  [[nodiscard]] engine_run run(double deadline = std::numeric_limits<double>::infinity());

 private:
  //! Which resource a task occupies.
  enum class node_kind : std::uint8_t {
    compute,  //!< its rank's compute stream
    flow,     //!< two ports (or nothing: local and empty flows)
    join,     //!< nothing
    delay,    //!< nothing, for `amount` seconds
  };

  struct node {
    node_kind kind = node_kind::join;
    rank_index rank = 0;                             // compute: its stream's rank; flow: the source
    rank_index destination = 0;                      // flow
    double amount = 0;                               // compute: full-speed seconds; flow: bytes; delay: seconds
    std::int64_t priority = 0;                       // compute
    std::int32_t order = 0;                          // compute: position in its rank's program
    link_class link = link_class::local;             // flow
    std::int32_t send_port = -1, receive_port = -1;  // flow over a link: the ports it occupies
    std::int32_t waiting = 0;                        // dependencies not yet completed
    std::int32_t first_succ = -1;                    // linked list of successors in succ_
  };

  class runner;  // one run's state and the steps of its event loop (below)

  task_id add(node_kind kind, task_tag tag, std::span<const task_id> deps) {
    const auto id = static_cast<task_id>(nodes_.size());
    node n{};
    n.kind = kind;
    nodes_.push_back(n);
    tags_.push_back(tag);
    for (const task_id d : deps) {
      if (d == no_task) continue;
      ZEPPELIN_EXPECTS(d >= 0 && d < id, "a task may only wait for earlier tasks", {{"task", double(id)}, {"dependency", double(d)}});
      link(d, id);
    }
    return id;
  }

  // `to` waits for `from`
  void link(task_id from, task_id to) {
    ++nodes_[static_cast<std::size_t>(to)].waiting;
    succ_.push_back({to, nodes_[static_cast<std::size_t>(from)].first_succ});
    nodes_[static_cast<std::size_t>(from)].first_succ = static_cast<std::int32_t>(succ_.size() - 1);
  }

  const topology& t_;
  stream_policy policy_;
  link_model link_;
  double slowdown_;
  rank_index R_;
  int M_;
  std::vector<node> nodes_;
  std::vector<task_tag> tags_;                          // per task (apart: the run hands them out whole)
  std::vector<std::pair<task_id, std::int32_t>> succ_;  // (successor, next)
  std::vector<std::vector<task_id>> program_;           // per rank, its compute tasks in the order added
  std::vector<double> port_capacity_;                   // bytes/s, indexed by node::send_port / receive_port
};

//! One run of an event_engine. Every iteration of run()'s loop moves the clock to the next
//! event (a compute task's end, a flow's last byte, a flow's arrival after its latency, a delay's end),
//! completes what ends there, releases the tasks that were waiting for it, and starts compute
//! on the streams that changed. Reads the engine's tasks, counts down their `waiting` and takes
//! their tags (an engine runs once).
class event_engine::runner {
 public:
  explicit runner(event_engine& engine)
      : e_(engine), ranks_(static_cast<std::size_t>(engine.R_)), flows_(engine.port_capacity_) {
    const std::size_t tasks = e_.nodes_.size();
    out_.start.assign(tasks, -1.0);
    out_.end.assign(tasks, -1.0);
    out_.tags = std::move(e_.tags_);  // run() is called once
    out_.ranks.resize(ranks_);
    streams_.resize(ranks_);
    for (std::size_t r = 0; r < ranks_; ++r) streams_[r].unfinished = static_cast<std::int32_t>(e_.program_[r].size());
    released_.assign(tasks, 0);
    compute_left_.assign(tasks, 0.0);
    for (std::size_t i = 0; i < tasks; ++i)
      if (e_.nodes_[i].kind == node_kind::compute) compute_left_[i] = e_.nodes_[i].amount;
    ready_.resize(ranks_);
    flows_touching_.assign(ranks_, 0);
    communication_changed_.assign(ranks_, 0);
  }

  engine_run run(double deadline) {
    release_tasks_without_dependencies();
    start_compute_on_changed_streams();
    while (true) {
      flows_.share_ports_if_changed(now_);
      const double next = next_event_time();
      if (!std::isfinite(next)) break;
      if (next > deadline) {
        out_.finished = false;
        out_.makespan = std::numeric_limits<double>::infinity();
        return std::move(out_);
      }
      advance_clock_to(next);
      complete_compute_ending_now();
      complete_flows_arriving_now();
      complete_delays_ending_now();
      release_ready_tasks();
      reprice_compute_after_communication_changes();
      start_compute_on_changed_streams();
    }
    return finish();
  }

 private:
  using ready_entry = std::tuple<std::int64_t, std::int32_t, task_id>;  // priority, order, id
  using ready_queue = std::priority_queue<ready_entry, std::vector<ready_entry>, std::greater<>>;
  using timed = std::tuple<double, std::int32_t, std::int32_t>;  // time, rank or task, generation
  using timed_queue = std::priority_queue<timed, std::vector<timed>, std::greater<>>;

  const node& task(task_id id) const { return e_.nodes_[static_cast<std::size_t>(id)]; }
  detail::compute_stream& stream(rank_index r) { return streams_[static_cast<std::size_t>(r)]; }

  // ---- the steps of the loop --------------------------------------------------------------

  // Releases, in index order, every task with no dependencies; nothing runs yet, so no
  // running task needs repricing for the flows this starts.
  void release_tasks_without_dependencies() {
    for (std::size_t i = e_.nodes_.size(); i-- > 0;)
      if (e_.nodes_[i].waiting == 0) newly_ready_.push_back(static_cast<task_id>(i));  // popped from the back
    release_ready_tasks();
    for (const rank_index r : changed_ranks_) communication_changed_[static_cast<std::size_t>(r)] = 0;
    changed_ranks_.clear();
  }

  // The earliest of: a running compute task's end, a flow's arrival, a flow's last byte
  // (infinity when nothing is in progress). Drops the compute ends made stale by preemption
  // or a speed change on the way.
  double next_event_time() {
    while (!compute_ends_.empty()) {
      const auto& [t, r, g] = compute_ends_.top();
      if (is_current(r, g)) break;
      compute_ends_.pop();
    }
    double next = std::numeric_limits<double>::infinity();
    if (!compute_ends_.empty()) next = std::get<0>(compute_ends_.top());
    if (!arrivals_.empty()) next = std::min(next, std::get<0>(arrivals_.top()));
    if (!delay_ends_.empty()) next = std::min(next, std::get<0>(delay_ends_.top()));
    return std::min(next, flows_.next_drain());
  }

  // Moves every flow's bytes up to `next` and sets the clock there; a flow whose last byte
  // left counts its bytes and arrives its link latency later.
  void advance_clock_to(double next) {
    const std::vector<task_id>& drained = flows_.advance(next);
    now_ = next;
    for (const task_id id : drained) {
      const node& n = task(id);
      (n.link == link_class::inter_node ? out_.inter_node_bytes : out_.intra_node_bytes) += n.amount;
      arrivals_.push({now_ + link_model::latency(n.link, e_.t_), id, 0});
    }
  }

  // Every compute task whose (current) end is now completes and frees its stream.
  void complete_compute_ending_now() {
    while (!compute_ends_.empty() && std::get<0>(compute_ends_.top()) <= now_) {
      const auto [t, r, g] = compute_ends_.top();
      compute_ends_.pop();
      if (!is_current(r, g)) continue;
      detail::compute_stream& s = stream(r);
      const task_id id = s.running;
      account_busy(r, s);
      s.release(now_);
      --s.unfinished;
      request_scheduling(r);
      complete(id);
    }
  }

  // Every flow whose bytes arrived by now (last byte + latency) completes; its ends stop
  // communicating.
  void complete_flows_arriving_now() {
    while (!arrivals_.empty() && std::get<0>(arrivals_.top()) <= now_) {
      const task_id id = std::get<1>(arrivals_.top());
      arrivals_.pop();
      const node& n = task(id);
      out_.flows.push_back({id, n.rank, n.destination, n.amount, n.link, out_.start[static_cast<std::size_t>(id)], now_});
      count_communication(n.rank, -1);
      count_communication(n.destination, -1);
      complete(id);
    }
  }

  // Every delay whose seconds have passed completes.
  void complete_delays_ending_now() {
    while (!delay_ends_.empty() && std::get<0>(delay_ends_.top()) <= now_) {
      const task_id id = std::get<1>(delay_ends_.top());
      delay_ends_.pop();
      complete(id);
    }
  }

  // Releases the tasks whose dependencies all completed (and, through joins and empty
  // flows that complete at once, the tasks those release): a join completes, a flow
  // starts moving bytes (or completes: local or empty), a compute task queues on its stream.
  void release_ready_tasks() {
    while (!newly_ready_.empty()) {
      const task_id id = newly_ready_.back();
      newly_ready_.pop_back();
      released_[static_cast<std::size_t>(id)] = 1;
      switch (task(id).kind) {
        case node_kind::join: release_join(id); break;
        case node_kind::delay: release_delay(id); break;
        case node_kind::flow: release_flow(id); break;
        case node_kind::compute: release_compute(id); break;
      }
    }
  }

  // SM contention: a running task on a rank whose communication started or stopped changes
  // speed now (and so its end).
  void reprice_compute_after_communication_changes() {
    if (e_.slowdown_ == 0) return;
    std::sort(changed_ranks_.begin(), changed_ranks_.end());  // rank order: deterministic
    for (const rank_index rank : changed_ranks_) {
      const auto r = static_cast<std::size_t>(rank);
      communication_changed_[r] = 0;
      detail::compute_stream& s = streams_[r];
      if (s.free()) continue;
      const double v = compute_speed(rank, s.running);
      if (v == s.speed) continue;
      s.change_speed(now_, v);
      compute_ends_.push({s.run_end, rank, s.generation});
    }
    changed_ranks_.clear();
  }

  // Every stream that had a task released or completed starts (or, preemptive, switches to)
  // the task its policy picks.
  void start_compute_on_changed_streams() {
    std::sort(to_schedule_.begin(), to_schedule_.end());  // rank order: deterministic
    for (const rank_index r : to_schedule_) schedule_stream(r);
    to_schedule_.clear();
  }

  // The makespan, and each rank's trailing stalled or idle time.
  engine_run finish() {
    const std::size_t tasks = e_.nodes_.size();
    ZEPPELIN_EXPECTS(completed_ == tasks, "event engine: some tasks never ran (a dependency cycle)",
                     {{"tasks", double(tasks)}, {"completed", double(completed_)}});
    out_.makespan = now_;
    for (rank_index r = 0; r < e_.R_; ++r) account_gap(r, stream(r), now_);
    out_.max_port_utilization = flows_.max_port_utilization();
    return std::move(out_);
  }

  // ---- releasing and completing tasks -----------------------------------------------------

  // `id` ends now; the successors it was the last dependency of become ready.
  void complete(task_id id) {
    const auto i = static_cast<std::size_t>(id);
    out_.end[i] = now_;
    ++completed_;
    for (std::int32_t e = e_.nodes_[i].first_succ; e >= 0; e = e_.succ_[static_cast<std::size_t>(e)].second) {
      const task_id s = e_.succ_[static_cast<std::size_t>(e)].first;
      if (--e_.nodes_[static_cast<std::size_t>(s)].waiting == 0) newly_ready_.push_back(s);
    }
  }

  // a join is a marker: it completes as it is released
  void release_join(task_id id) {
    out_.start[static_cast<std::size_t>(id)] = now_;
    complete(id);
  }

  // a delay ends its seconds from now (at once when they are 0)
  void release_delay(task_id id) {
    out_.start[static_cast<std::size_t>(id)] = now_;
    const double seconds = task(id).amount;
    if (seconds == 0) return complete(id);
    delay_ends_.push({now_ + seconds, id, 0});
  }

  // a local or empty flow completes at once; any other starts moving bytes, and its ends
  // count as communicating until it arrives
  void release_flow(task_id id) {
    const node& n = task(id);
    out_.start[static_cast<std::size_t>(id)] = now_;
    if (n.link == link_class::local || n.amount == 0) {
      out_.flows.push_back({id, n.rank, n.destination, n.amount, n.link, now_, now_});
      complete(id);
      return;
    }
    flows_.add(id, n.send_port, n.receive_port, n.amount, now_);
    count_communication(n.rank, 1);
    count_communication(n.destination, 1);
  }

  // in_order streams find it through the program; the priority policies queue it
  void release_compute(task_id id) {
    const node& n = task(id);
    if (e_.policy_ != stream_policy::in_order) ready_[static_cast<std::size_t>(n.rank)].push({n.priority, n.order, id});
    request_scheduling(n.rank);
  }

  // the stream of `r` picks a task at the end of this event (once however often asked)
  void request_scheduling(rank_index r) {
    detail::compute_stream& s = stream(r);
    if (s.needs_scheduling) return;
    s.needs_scheduling = true;
    to_schedule_.push_back(r);
  }

  // ---- compute streams --------------------------------------------------------------------

  // A scheduled end (rank, generation) still stands: nothing preempted or repriced the task.
  bool is_current(rank_index r, std::int32_t generation) {
    const detail::compute_stream& s = stream(r);
    return s.generation == generation && !s.free();
  }

  // The speed a compute task runs at on `r` now: slowed while the rank communicates, unless
  // it is a TP collective (communication itself).
  double compute_speed(rank_index r, task_id id) const {
    return e_.slowdown_ > 0 && flows_touching_[static_cast<std::size_t>(r)] > 0 &&
                   out_.tags[static_cast<std::size_t>(id)].kind != task_kind::tensor_parallel
               ? 1.0 - e_.slowdown_
               : 1.0;
  }

  // Starts the task the stream policy picks on a free stream; under preemptive_priority,
  // suspends the running task first when a strictly more urgent one is ready.
  void schedule_stream(rank_index r) {
    detail::compute_stream& s = stream(r);
    s.needs_scheduling = false;
    const auto& program = e_.program_[static_cast<std::size_t>(r)];
    if (e_.policy_ == stream_policy::in_order) {
      if (s.free() && s.next_in_program < static_cast<std::int32_t>(program.size()) &&
          released_[static_cast<std::size_t>(program[static_cast<std::size_t>(s.next_in_program)])])
        start_compute(r, program[static_cast<std::size_t>(s.next_in_program++)]);
      return;
    }
    ready_queue& ready = ready_[static_cast<std::size_t>(r)];
    if (ready.empty()) return;
    if (!s.free()) {
      if (e_.policy_ != stream_policy::preemptive_priority) return;
      if (std::get<0>(ready.top()) >= task(s.running).priority) return;
      suspend_running(r);
    }
    const task_id id = std::get<2>(ready.top());
    ready.pop();
    start_compute(r, id);
  }

  // The running task gives up the stream now, keeps its full-speed work left, and goes back
  // to the ready queue.
  void suspend_running(rank_index r) {
    detail::compute_stream& s = stream(r);
    const node& n = task(s.running);
    if (now_ > s.run_start) account_busy(r, s);
    compute_left_[static_cast<std::size_t>(s.running)] = s.work_left_at(now_);
    ready_[static_cast<std::size_t>(r)].push({n.priority, n.order, s.running});
    ++s.generation;
    s.release(now_);
  }

  // `id` takes the free stream of `r` now (ending the stream's stalled or idle gap) and is
  // scheduled to end at the speed `r` allows now.
  void start_compute(rank_index r, task_id id) {
    detail::compute_stream& s = stream(r);
    account_gap(r, s, now_);
    s.start(id, now_, compute_left_[static_cast<std::size_t>(id)], compute_speed(r, id));
    if (out_.start[static_cast<std::size_t>(id)] < 0) out_.start[static_cast<std::size_t>(id)] = now_;
    compute_ends_.push({s.run_end, r, s.generation});
  }

  // ---- accounting ---------------------------------------------------------------------------

  // The running task held the stream from its run_start to now: a segment, and busy time of its kind.
  void account_busy(rank_index r, const detail::compute_stream& s) {
    out_.segments.push_back({s.running, r, s.run_start, now_});
    out_.ranks[static_cast<std::size_t>(r)].busy[static_cast<int>(out_.tags[static_cast<std::size_t>(s.running)].kind)] +=
        now_ - s.run_start;
  }

  // The stream was free from free_since to `until`: stalled while the rank had compute left,
  // else idle.
  void account_gap(rank_index r, const detail::compute_stream& s, double until) {
    const double gap = until - s.free_since;
    stream_accounting& a = out_.ranks[static_cast<std::size_t>(r)];
    if (gap > 0) (s.unfinished > 0 ? a.stalled : a.idle) += gap;
  }

  // A flow with `r` as an end starts (+1) or arrives (-1); notes when the rank starts or
  // stops communicating.
  void count_communication(rank_index r, std::int32_t delta) {
    std::int32_t& count = flows_touching_[static_cast<std::size_t>(r)];
    const bool was = count > 0;
    count += delta;
    if (was != (count > 0) && !communication_changed_[static_cast<std::size_t>(r)]) {
      communication_changed_[static_cast<std::size_t>(r)] = 1;
      changed_ranks_.push_back(r);
    }
  }

  event_engine& e_;
  std::size_t ranks_;
  engine_run out_;
  double now_ = 0;
  std::size_t completed_ = 0;
  std::vector<task_id> newly_ready_;  // dependencies all completed, not yet released (popped from the back)
  std::vector<char> released_;        // per task
  std::vector<double> compute_left_;  // per compute task: full-speed seconds left (less after a suspension)
  std::vector<detail::compute_stream> streams_;
  std::vector<ready_queue> ready_;   // per rank (priority policies): released tasks not running
  timed_queue compute_ends_;         // (end, rank, stream generation); stale entries skipped
  timed_queue arrivals_;             // (last byte + latency, flow task, 0)
  timed_queue delay_ends_;           // (end, delay task, 0)
  detail::flows_in_flight flows_;
  std::vector<std::int32_t> flows_touching_;  // per rank: flows in flight (released, not arrived) with it as an end
  std::vector<char> communication_changed_;   // per rank: flows_touching_ crossed zero since the last reprice
  std::vector<rank_index> changed_ranks_;     // the ranks with communication_changed_ set
  std::vector<rank_index> to_schedule_;       // the ranks whose stream has needs_scheduling set
};

inline engine_run event_engine::run(double deadline) { return runner(*this).run(deadline); }

ZEPPELIN_NAMESPACE_END
