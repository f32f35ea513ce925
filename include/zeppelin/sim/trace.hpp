// zeppelin/sim/trace.hpp
// Chrome trace JSON (loads in Perfetto and chrome://tracing) of a simulated step.
//   in : a sim_result simulated with sim_options::record_trace, and the topology it ran on
//   out: {"traceEvents": [...], "displayTimeUnit": "ms"} on a std::ostream:
//        - one process per node ("node n"), one track per GPU compute stream ("gpu g compute")
//          with one "X" event per compute segment (a preempted call has several);
//        - one track per GPU NVLink egress ("gpu g nvlink") for intra-node flows and one per
//          NIC send port ("nic j send") for inter-node flows; flows that overlap on a port go
//          to separate lanes ("nic j send #1", ...) so every track's events nest;
//        - phases (forward / backward of each micro-batch, the simulated layers only) are
//          laid end to end; each event's args carry layer, group, round, bytes, route leg.
// Times are microseconds. Host-only; plain std::ostream, no JSON library.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/result.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else out += c;
  }
  return out;
}

inline std::string fmt_us(double seconds) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.3f", seconds * 1e6);
  return buf;
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
  os << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
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
           ",\"tid\":" + std::to_string(tid) + ",\"ts\":" + detail::fmt_us(ph.offset_s + s.start) +
           ",\"dur\":" + detail::fmt_us(s.end - s.start) + ",\"args\":{" + args(s.task) + "}}");
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
           "\",\"pid\":" + std::to_string(node) + ",\"tid\":" + std::to_string(tid) + ",\"ts\":" +
           detail::fmt_us(ph.offset_s + f.start) + ",\"dur\":" + detail::fmt_us(f.end - f.start) + ",\"args\":{" +
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
