// zeppelin/sim/dedicated_link_engine.hpp
// A task DAG timed in one pass, every transfer alone on its link.
//   in : the task-building calls of event_engine (sim/event_engine.hpp): compute(rank,
//        seconds, tag, priority, deps), flow(source, destination, bytes, tag, deps), join(deps)
//   out: engine_run, as event_engine::run() fills it, where
//        - a rank's compute tasks run in the order they were added (event_engine's in_order
//          policy), each at the later of its stream being free and its dependencies' ends;
//        - a flow starts when its dependencies have ended and takes its link's latency plus
//          bytes / bandwidth (cost/link_model.hpp), whatever else is in flight: no port is
//          shared. Local and empty flows take 0;
//        - busy, stalled and idle per rank add up to the makespan, as in event_engine.
// What it is for: pipelines whose transfers rarely overlap on a port (one activation and one
// gradient per stage and step), where the event engine's fair sharing changes little and
// costs most of the time: O(tasks + dependencies) instead of an event loop. Where transfers
// do contend (DP all-reduce rings on shared NICs), event_engine is the accurate one.
// Priorities are ignored (in-order streams only); comm_slowdown is not modelled.
// Errors: invalid_argument for a rank outside the topology, a negative or non-finite
// duration or byte count, a dependency on a later task. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

class dedicated_link_engine {
 public:
  explicit dedicated_link_engine(const topology& t, link_model link = {})
      : t_(t), link_(link), stream_free_(static_cast<std::size_t>(t.num_ranks()), 0.0) {
    out_.ranks.resize(static_cast<std::size_t>(t.num_ranks()));
  }

  task_id compute(rank_index rank, double seconds, task_tag tag, std::int64_t /*priority*/, std::span<const task_id> deps) {
    ZEPPELIN_EXPECTS(rank >= 0 && rank < t_.num_ranks(), "compute task on a rank outside the topology",
                     {{"rank", double(rank)}, {"ranks", double(t_.num_ranks())}});
    ZEPPELIN_EXPECTS(std::isfinite(seconds) && seconds >= 0, "compute time must be finite and non-negative", {{"seconds", seconds}});
    ZEPPELIN_EXPECTS(static_cast<int>(tag.kind) <= static_cast<int>(task_kind::tensor_parallel), "a compute task needs a compute kind",
                     {{"kind", double(static_cast<int>(tag.kind))}});
    double& free = stream_free_[static_cast<std::size_t>(rank)];
    const double start = std::max(ready(deps), free);
    const task_id id = add(tag, start, start + seconds);
    free = start + seconds;
    out_.ranks[static_cast<std::size_t>(rank)].busy[static_cast<int>(tag.kind)] += seconds;
    out_.segments.push_back({id, rank, start, start + seconds});
    return id;
  }
  task_id compute(rank_index rank, double seconds, task_tag tag, std::int64_t priority, std::initializer_list<task_id> deps) {
    return compute(rank, seconds, tag, priority, std::span<const task_id>(deps.begin(), deps.size()));
  }

  task_id flow(rank_index source, rank_index destination, double bytes, task_tag tag, std::span<const task_id> deps) {
    ZEPPELIN_EXPECTS(source >= 0 && source < t_.num_ranks() && destination >= 0 && destination < t_.num_ranks(),
                     "flow between ranks outside the topology",
                     {{"source", double(source)}, {"destination", double(destination)}, {"ranks", double(t_.num_ranks())}});
    const link_class c = t_.between(source, destination);
    const double start = ready(deps);
    const double end = start + link_.seconds(bytes, c, t_);
    const task_id id = add(tag, start, end);
    if (c == link_class::intra_node) out_.intra_node_bytes += bytes;
    if (c == link_class::inter_node) out_.inter_node_bytes += bytes;
    if (c != link_class::local && bytes > 0) out_.max_port_utilization = 1;
    out_.flows.push_back({id, source, destination, bytes, c, start, end});
    return id;
  }
  task_id flow(rank_index source, rank_index destination, double bytes, task_tag tag, std::initializer_list<task_id> deps) {
    return flow(source, destination, bytes, tag, std::span<const task_id>(deps.begin(), deps.size()));
  }

  task_id join(std::span<const task_id> deps) {
    const double at = ready(deps);
    return add(task_tag{}, at, at);
  }
  task_id join(std::initializer_list<task_id> deps) { return join(std::span<const task_id>(deps.begin(), deps.size())); }

  [[nodiscard]] std::size_t size() const noexcept { return out_.end.size(); }

  //! Room for `computes` compute tasks and `flows` flows (avoids regrowing the record).
  void reserve(std::size_t computes, std::size_t flows) {
    for (auto* v : {&out_.start, &out_.end}) v->reserve(computes + flows);
    out_.tags.reserve(computes + flows);
    out_.segments.reserve(computes);
    out_.flows.reserve(flows);
  }

  //! The timings (call once: it hands over what was recorded).
  [[nodiscard]] engine_run run() {
    for (std::size_t r = 0; r < out_.ranks.size(); ++r) {
      stream_accounting& a = out_.ranks[r];
      a.stalled = std::max(0.0, stream_free_[r] - a.busy_total());
      a.idle = std::max(0.0, out_.makespan - stream_free_[r]);
    }
    return std::move(out_);
  }

 private:
  double ready(std::span<const task_id> deps) const {
    double at = 0;
    const auto id = static_cast<task_id>(out_.end.size());
    for (const task_id d : deps) {
      if (d == no_task) continue;
      ZEPPELIN_EXPECTS(d >= 0 && d < id, "a task may only wait for earlier tasks", {{"task", double(id)}, {"dependency", double(d)}});
      at = std::max(at, out_.end[static_cast<std::size_t>(d)]);
    }
    return at;
  }
  task_id add(task_tag tag, double start, double end) {
    const auto id = static_cast<task_id>(out_.end.size());
    out_.start.push_back(start);
    out_.end.push_back(end);
    out_.tags.push_back(tag);
    out_.makespan = std::max(out_.makespan, end);
    return id;
  }

  const topology& t_;
  link_model link_;
  std::vector<double> stream_free_;
  engine_run out_;
};

ZEPPELIN_NAMESPACE_END
