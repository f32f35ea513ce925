// zeppelin/sim/trace.hpp
// Chrome trace JSON (loads in Perfetto and chrome://tracing) of a simulated step.
//   in : a sim_result simulated with sim_options::record_trace, and the topology it ran on
//   out: {"displayTimeUnit": "ms", "otherData": {...}, "traceEvents": [...]} on a std::ostream:
//        - otherData: "format": "zeppelin.trace", "version": 1, the method, the step time, and
//          per phase its name, offset and layers_per_simulated_layer: the trace shows the
//          simulated layers of each phase, the step time counts each phase that many times;
//        - one process per node ("node n"), one track per GPU compute stream ("gpu g compute")
//          with one "X" event per compute segment (a preempted call has several);
//        - one track per GPU NVLink egress ("gpu g nvlink") for intra-node flows and one per
//          NIC send port ("nic j send") for inter-node flows; flows that overlap on a port go
//          to separate lanes ("nic j send #1", ...) so every track's events nest;
//        - phases (forward / backward of each micro-batch, the simulated layers only) are
//          laid end to end; each event's args carry layer, group, round, bytes, route leg.
// Times are microseconds with nanosecond digits; both ends of an event are rounded to whole
// nanoseconds, so back-to-back events never overlap. Host-only; plain std::ostream, no JSON
// library.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/json_writer.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/result.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

// "ts":..,"dur":.. of an interval in microseconds with nanosecond digits. Both ends are
// rounded to whole nanoseconds first and the duration is their difference, so an event that
// starts where another ends never overlaps it by a rounding step.
inline std::string fmt_interval(double start_s, double end_s) {
  const long long a = std::llround(start_s * 1e9), b = std::llround(end_s * 1e9);
  const auto us = [](long long ns) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%s%lld.%03lld", ns < 0 ? "-" : "", std::llabs(ns) / 1000, std::llabs(ns) % 1000);
    return std::string(buf);
  };
  return "\"ts\":" + us(a) + ",\"dur\":" + us(std::max(b - a, 0LL));
}

}  // namespace detail

//! Writes the Chrome trace of `r` (see the file comment). Throws invalid_argument when `r`
//! holds no phases (simulate without record_trace).
inline void write_chrome_trace(std::ostream& os, const sim_result& r, const topology& t) {
  ZEPPELIN_EXPECTS(!r.trace.empty(), "no trace recorded: simulate with sim_options::record_trace = true", {});
  // tracks: (pid = node, base tid) -> lanes of end times
  struct track {
    int pid;
    std::string name;
    std::vector<double> lane_end;
  };
  std::map<std::pair<int, int>, track> tracks;  // key (pid, tid base)
  std::vector<std::tuple<int, int, std::string>> names;  // (pid, tid, name) emitted as metadata
  bool first = true;
  // what the trace covers, for a reader comparing it with the step's table (docs/formats.md)
  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"zeppelin.trace\",\"version\":1,\"method\":\""
     << detail::json_escape(r.method) << "\",\"step_time_s\":" << detail::json_double(r.step_time_s)
     << ",\"covers\":\"each phase's simulated layers; the step time counts each phase layers_per_simulated_layer "
        "times\",\"phases\":[";
  for (std::size_t i = 0; i < r.trace.size(); ++i)
    os << (i ? "," : "") << "{\"name\":\"" << detail::json_escape(r.trace[i].name) << "\",\"offset_us\":"
       << detail::json_double(r.trace[i].offset_s * 1e6) << ",\"layers_per_simulated_layer\":"
       << detail::json_double(r.trace[i].scale) << "}";
  os << "]},\"traceEvents\":[\n";
  auto emit = [&](const std::string& event) {
    os << (first ? "" : ",\n") << event;
    first = false;
  };
  for (int n = 0; n < t.nodes(); ++n)
    emit("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(n) + ",\"args\":{\"name\":\"node " +
         std::to_string(n) + "\"}}");
  // lane of an interval on a track: first lane free at `start`
  auto lane_tid = [&](int pid, int base, const std::string& name, double start, double end) {
    track& tr = tracks[{pid, base}];
    tr.pid = pid;
    tr.name = name;
    std::size_t lane = 0;
    while (lane < tr.lane_end.size() && tr.lane_end[lane] > start + 1e-15) ++lane;
    if (lane == tr.lane_end.size()) {
      tr.lane_end.push_back(end);
      const int tid = base + static_cast<int>(lane);
      names.emplace_back(pid, tid, lane == 0 ? name : name + " #" + std::to_string(lane));
    } else {
      tr.lane_end[lane] = end;
    }
    return base + static_cast<int>(lane);
  };
  for (const sim_phase& ph : r.trace) {
    const engine_run& run = ph.run;
    auto args = [&](task_id id) {
      const task_tag& g = run.tags[static_cast<std::size_t>(id)];
      return "\"phase\":\"" + detail::json_escape(ph.name) + "\",\"layer\":" + std::to_string(g.layer) +
             ",\"group\":" + std::to_string(g.group) + ",\"round\":" + std::to_string(g.round);
    };
    // compute segments in start order so lanes stay nested
    std::vector<compute_segment> segs = run.segments;
    std::sort(segs.begin(), segs.end(), [](const compute_segment& a, const compute_segment& b) {
      return std::tie(a.rank, a.start, a.task) < std::tie(b.rank, b.start, b.task);
    });
    for (const compute_segment& s : segs) {
      const int node = t.node_of(s.rank), gpu = t.local_gpu_of(s.rank);
      const int tid = lane_tid(node, gpu * 1000, "gpu " + std::to_string(gpu) + " compute", ph.offset_s + s.start, ph.offset_s + s.end);
      const task_tag& g = run.tags[static_cast<std::size_t>(s.task)];
      emit("{\"ph\":\"X\",\"name\":\"" + std::string(to_string(g.kind)) + "\",\"cat\":\"compute\",\"pid\":" + std::to_string(node) +
           ",\"tid\":" + std::to_string(tid) + "," + detail::fmt_interval(ph.offset_s + s.start, ph.offset_s + s.end) +
           ",\"args\":{" + args(s.task) + "}}");
    }
    std::vector<flow_record> flows;
    for (const flow_record& f : run.flows)
      if (f.end > f.start) flows.push_back(f);
    std::sort(flows.begin(), flows.end(), [](const flow_record& a, const flow_record& b) {
      return std::tie(a.source, a.start, a.task) < std::tie(b.source, b.start, b.task);
    });
    for (const flow_record& f : flows) {
      const int node = t.node_of(f.source), gpu = t.local_gpu_of(f.source);
      const bool inter = f.link == link_class::inter_node;
      const int nic = t.local_nic_of_gpu(gpu);
      const int base = inter ? 200000 + nic * 1000 : 100000 + gpu * 1000;
      const std::string name = inter ? "nic " + std::to_string(nic) + " send" : "gpu " + std::to_string(gpu) + " nvlink";
      const int tid = lane_tid(node, base, name, ph.offset_s + f.start, ph.offset_s + f.end);
      const task_tag& g = run.tags[static_cast<std::size_t>(f.task)];
      emit("{\"ph\":\"X\",\"name\":\"" + std::string(to_string(g.kind)) + "\",\"cat\":\"" + (inter ? "nic" : "nvlink") +
           "\",\"pid\":" + std::to_string(node) + ",\"tid\":" + std::to_string(tid) + "," +
           detail::fmt_interval(ph.offset_s + f.start, ph.offset_s + f.end) + ",\"args\":{" +
           args(f.task) + ",\"bytes\":" + std::to_string(static_cast<long long>(f.bytes)) + ",\"to\":" +
           std::to_string(f.destination) + ",\"leg\":\"" + std::string(to_string(g.leg)) + "\"}}");
    }
  }
  std::sort(names.begin(), names.end());
  for (const auto& [pid, tid, name] : names) {
    emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"name\":\"" + detail::json_escape(name) + "\"}}");
    emit("{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
         ",\"args\":{\"sort_index\":" + std::to_string(tid) + "}}");
  }
  os << "\n]}\n";
}

ZEPPELIN_NAMESPACE_END
