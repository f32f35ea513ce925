// zeppelin/sim/step_trace.hpp
// Chrome trace JSON (Perfetto, chrome://tracing) of a simulated step (sim/simulate_step.hpp,
// run with step_sim_options::keep_run).
//   in : the step program and its simulation
//   out: {"displayTimeUnit":"ms","otherData":{"format":"zeppelin.step_trace","version":1,
//        "covers":...},"traceEvents":[...]} on a std::ostream:
//        - one process per replica ("replica r");
//        - one track per pipeline stage ("stage p") with an "X" event per block of its first
//          rank (TP and CP rank 0): "F3" / "B3" for micro-batch 3's forward and backward
//          (recomputation included), args: micro-batch, virtual stage, layers;
//        - one track per stage for the kernels of that rank ("stage p kernels": each compute
//          task with its kind), under every_op pricing;
//        - one track per stage for what that rank sends ("stage p sends"), in lanes ("#1",
//          ...) where transfers overlap, each named by its kind (activation, gradient,
//          tp_transfer, kv, gradient_sync, ...) with its traffic class.
// Times are microseconds with nanosecond digits. Returns the stream (check it: a full disk
// is an error the caller reports). Errors: invalid_argument when the result kept no run.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/sim/trace.hpp>
#include <zeppelin/step/program.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

inline std::ostream& write_step_trace(std::ostream& os, const step_program& prog, const step_sim_result& r) {
  ZEPPELIN_EXPECTS(!r.run.start.empty() || prog.blocks.empty(), "a step trace needs the simulation's run (step_sim_options::keep_run)", {});
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
  os << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"zeppelin.step_trace\",\"version\":1,"
        "\"covers\":\"one iteration; per stage its first rank\"},\"traceEvents\":[\n";
  // the ranks traced: each stage's first (TP and CP rank 0)
  std::map<rank_index, std::pair<int, int>> traced;  // rank -> (replica, stage)
  for (std::size_t ri = 0; ri < prog.plan.replicas.size(); ++ri) {
    const step_replica& rep = prog.plan.replicas[ri];
    meta("process_name", static_cast<int>(ri), -1, "\"replica " + std::to_string(ri) + "\"");
    for (int s = 0; s < rep.pp; ++s) {
      traced[rep.rank_of(0, 0, s)] = {static_cast<int>(ri), s};
      meta("thread_name", static_cast<int>(ri), s, "\"stage " + std::to_string(s) + "\"");
      meta("thread_sort_index", static_cast<int>(ri), s, std::to_string(s));
      meta("thread_name", static_cast<int>(ri), 500 + s, "\"stage " + std::to_string(s) + " kernels\"");
      meta("thread_sort_index", static_cast<int>(ri), 500 + s, std::to_string(500 + s));
    }
  }
  // blocks: the span of each block's compute on a traced rank
  std::map<std::pair<std::int32_t, rank_index>, std::pair<double, double>> spans;
  for (const compute_segment& s : r.run.segments) {
    const auto at = traced.find(s.rank);
    if (at == traced.end()) continue;
    const std::int32_t b = static_cast<std::size_t>(s.task) < r.block_of_task.size() ? r.block_of_task[static_cast<std::size_t>(s.task)] : -1;
    if (b >= 0) {
      auto [it, fresh] = spans.try_emplace({b, s.rank}, s.start, s.end);
      if (!fresh) it->second.first = std::min(it->second.first, s.start), it->second.second = std::max(it->second.second, s.end);
    }
    const task_tag& g = r.run.tags[static_cast<std::size_t>(s.task)];
    emit("{\"ph\":\"X\",\"name\":\"" + std::string(to_string(g.kind)) + "\",\"cat\":\"kernel\",\"pid\":" + std::to_string(at->second.first) +
         ",\"tid\":" + std::to_string(500 + at->second.second) + "," + detail::fmt_interval(s.start, s.end) +
         ",\"args\":{\"micro_batch\":" + std::to_string(g.micro_batch) + ",\"layer\":" + std::to_string(g.layer) + "}}");
  }
  for (const auto& [key, span] : spans) {
    const step_block& b = prog.blocks[static_cast<std::size_t>(key.first)];
    const auto& [replica, stage] = traced.at(key.second);
    emit("{\"ph\":\"X\",\"name\":\"" + std::string(b.pass == step_pass::forward ? "F" : "B") + std::to_string(b.micro_batch) +
         "\",\"cat\":\"block\",\"pid\":" + std::to_string(replica) + ",\"tid\":" + std::to_string(stage) + "," +
         detail::fmt_interval(span.first, span.second) + ",\"args\":{\"micro_batch\":" + std::to_string(b.micro_batch) +
         ",\"virtual_stage\":" + std::to_string(b.virtual_stage) + ",\"layers\":" + std::to_string(b.layers) +
         ",\"recomputed\":" + std::to_string(b.recomputed) + "}}");
  }
  std::vector<flow_record> flows;
  for (const flow_record& f : r.run.flows)
    if (f.end > f.start && traced.count(f.source)) flows.push_back(f);
  std::sort(flows.begin(), flows.end(), [](const flow_record& a, const flow_record& b) {
    return std::tie(a.source, a.start, a.task) < std::tie(b.source, b.start, b.task);
  });
  std::map<rank_index, std::vector<double>> lanes;  // per sending rank: end of each lane
  for (const flow_record& f : flows) {
    const auto& [replica, stage] = traced.at(f.source);
    auto& lane_end = lanes[f.source];
    std::size_t lane = 0;
    while (lane < lane_end.size() && lane_end[lane] > f.start + 1e-15) ++lane;
    const int tid = 1000 + stage * 100 + static_cast<int>(lane);
    if (lane == lane_end.size()) {
      lane_end.push_back(f.end);
      meta("thread_name", replica, tid, "\"stage " + std::to_string(stage) + " sends" + (lane ? " #" + std::to_string(lane) : "") + "\"");
      meta("thread_sort_index", replica, tid, std::to_string(tid));
    } else {
      lane_end[lane] = f.end;
    }
    const task_tag& g = r.run.tags[static_cast<std::size_t>(f.task)];
    const int k = traffic_class_of(g.kind);
    emit("{\"ph\":\"X\",\"name\":\"" + std::string(to_string(g.kind)) + "\",\"cat\":\"" +
         std::string(k >= 0 ? to_string(static_cast<traffic_class>(k)) : "other") + "\",\"pid\":" + std::to_string(replica) +
         ",\"tid\":" + std::to_string(tid) + "," + detail::fmt_interval(f.start, f.end) + ",\"args\":{\"micro_batch\":" +
         std::to_string(g.micro_batch) + ",\"bytes\":" + std::to_string(static_cast<long long>(f.bytes)) + ",\"to_rank\":" +
         std::to_string(f.destination) + "}}");
  }
  os << "\n]}\n";
  return os;
}

ZEPPELIN_NAMESPACE_END
