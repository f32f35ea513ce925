// zeppelin/sim/pipeline_trace.hpp
// Chrome trace JSON (Perfetto, chrome://tracing) of a simulated pipeline iteration.
//   in : a pipeline_sim_result (sim/pipeline_simulator.hpp)
//   out: {"displayTimeUnit":"ms","otherData":{"format":"zeppelin.pipeline_trace","version":1,
//        "covers":...},"traceEvents":[...]} on a std::ostream:
//        - one process per data-parallel replica ("replica r");
//        - one track per pipeline stage ("stage p") with an "X" event per forward ("F3")
//          and backward ("B3", recomputation included), args: micro-batch, chunk;
//        - one track per stage for what its first GPU (TP and CP rank 0, which stands for
//          the group) sends ("stage p sends": activations, gradients, gradient all-reduce
//          steps, ZeRO-3's ring edges), in lanes ("#1", ...) where transfers overlap.
// Times are microseconds with nanosecond digits (both ends rounded: back-to-back events never
// overlap). Host-only; plain std::ostream.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/pipeline_result.hpp>
#include <zeppelin/sim/trace.hpp>

#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

inline void write_pipeline_trace(std::ostream& os, const pipeline_sim_result& r) {
  const parallel_layout& l = r.layout;
  bool first = true;
  const auto emit = [&](const std::string& event) {
    os << (first ? "" : ",\n") << event;
    first = false;
  };
  const auto meta = [&](const char* what, int pid, int tid, const std::string& value) {
    emit(std::string("{\"ph\":\"M\",\"name\":\"") + what + "\",\"pid\":" + std::to_string(pid) +
         (tid >= 0 ? ",\"tid\":" + std::to_string(tid) : std::string()) + ",\"args\":{\"" +
         (std::string(what) == "thread_sort_index" ? "sort_index" : "name") + "\":" + value + "}}");
  };
  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"zeppelin.pipeline_trace\",\"version\":1,"
        "\"covers\":\"one iteration, every stage and replica\"},\"traceEvents\":[\n";
  // engine rank -> (replica, stage)
  const auto where = [&](rank_index rank) { return l.coordinates_of(rank); };
  for (int d = 0; d < l.dp; ++d) {
    meta("process_name", d, -1, "\"replica " + std::to_string(d) + "\"");
    for (int p = 0; p < l.pp; ++p) {
      meta("thread_name", d, p, "\"stage " + std::to_string(p) + "\"");
      meta("thread_sort_index", d, p, std::to_string(p));
    }
  }
  for (const compute_segment& s : r.run.segments) {
    const layout_coordinates c = where(s.rank);
    const task_tag& g = r.run.tags[static_cast<std::size_t>(s.task)];
    const char* name = g.kind == task_kind::linear_forward ? "F" : "B";
    emit("{\"ph\":\"X\",\"name\":\"" + std::string(name) + std::to_string(g.micro_batch) + "\",\"cat\":\"compute\",\"pid\":" +
         std::to_string(c.dp) + ",\"tid\":" + std::to_string(c.pp) + "," + detail::fmt_interval(s.start, s.end) + ",\"args\":{\"micro_batch\":" + std::to_string(g.micro_batch) +
         ",\"chunk\":" + std::to_string(g.round) + "}}");
  }
  std::vector<flow_record> flows;
  for (const flow_record& f : r.run.flows) {
    const layout_coordinates c = where(f.source);
    if (f.end > f.start && c.tp == 0 && c.cp == 0) flows.push_back(f);
  }
  std::sort(flows.begin(), flows.end(), [](const flow_record& a, const flow_record& b) {
    return std::tie(a.source, a.start, a.task) < std::tie(b.source, b.start, b.task);
  });
  std::map<rank_index, std::vector<double>> lanes;  // per sending rank: end of each lane
  for (const flow_record& f : flows) {
    const layout_coordinates c = where(f.source);
    auto& lane_end = lanes[f.source];
    std::size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > f.start + 1e-15) ++lane;
    const int tid = 1000 + c.pp * 100 + static_cast<int>(lane);
    if (lane == lane_end.size()) {
      lane_end.push_back(f.end);
      meta("thread_name", c.dp, tid, "\"stage " + std::to_string(c.pp) + " sends" + (lane ? " #" + std::to_string(lane) : "") + "\"");
      meta("thread_sort_index", c.dp, tid, std::to_string(tid));
    } else {
      lane_end[lane] = f.end;
    }
    const task_tag& g = r.run.tags[static_cast<std::size_t>(f.task)];
    emit("{\"ph\":\"X\",\"name\":\"" + std::string(to_string(g.kind)) + "\",\"cat\":\"p2p\",\"pid\":" + std::to_string(c.dp) +
         ",\"tid\":" + std::to_string(tid) + "," + detail::fmt_interval(f.start, f.end) +
         ",\"args\":{\"micro_batch\":" + std::to_string(g.micro_batch) + ",\"bytes\":" +
         std::to_string(static_cast<long long>(f.bytes)) + ",\"to_stage\":" + std::to_string(where(f.destination).pp) + "}}");
  }
  os << "\n]}\n";
}

ZEPPELIN_NAMESPACE_END
