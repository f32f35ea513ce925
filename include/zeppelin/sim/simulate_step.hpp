// zeppelin/sim/simulate_step.hpp
// The step simulator: one training iteration of a step program (step/program.hpp) priced on
// the event engine, through the one driver (step/driver.hpp) and the simulator's backend
// (sim/step_backend.hpp). Every system's step (Zeppelin's CP layouts in a pipeline, WLB-LLM's
// packed micro-batches, Hydraulis' heterogeneous replicas, InfiniPipe's sliced chunks) is a
// step plan priced here, in one cost world.
//   in : a step program, the cluster topology, the cost model (sim/cost_model.hpp), options
//   out: step_sim_result: the iteration's seconds; per (replica, stage) the busy, compute,
//        recomputation and bubble seconds, per traffic class (tp, cp, pp, dp) the seconds a
//        transfer of the class was in flight on its ranks (their mean) and the bytes they
//        sent, and the memory peak of its busiest rank; WLB-LLM's two imbalance degrees
//        (attention: the most causal (query, key) pairs of a micro-batch over their mean;
//        latency: per replica the slowest micro-batch's forward over the mean, the worst
//        replica; both 1 for equal micro-batches); optionally the step record and the
//        engine's run (for traces, sim/step_trace.hpp)
// Memory first (sim/step_memory.hpp): nothing runs on a cluster it does not fit. With
// per_shape pricing every block's shape is priced before the step runs, on
// step_sim_options::threads threads, in the order of their first blocks; with a deadline
// the pricing stops once a rank's blocks priced so far add up past it (they run one after
// another on its compute stream, so the step cannot end sooner). Hydraulis' switching (step_group::exchange) runs flow by
// flow, or with exchange_pricing::per_port each exchange whole (sim/step_backend.hpp): its
// in-flight seconds on a rank are then the exchange's span.
// Errors: infeasible naming the replica, stage, micro-batch and bytes when a rank's peak is
// over the capacity; invalid_argument for a negative or NaN capacity, threads < 1, a NaN
// deadline, a record asked for with per_shape pricing, a program holding its exchanges'
// traffic alone (exchange_detail::traffic_only) priced per flow or recorded, or a program the
// driver cannot run.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/step_backend.hpp>
#include <zeppelin/sim/step_memory.hpp>
#include <zeppelin/step/driver.hpp>
#include <zeppelin/step/program.hpp>
#include <zeppelin/step/record.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct step_sim_options {
  block_pricing pricing = block_pricing::every_op;
  exchange_pricing exchanges = exchange_pricing::per_flow;  //!< Hydraulis' switching: flow by flow, or each exchange whole
  memory_settings memory{};           //!< bytes per state (the ZeRO stage follows the plan's sync)
  double memory_capacity_bytes = 0;   //!< per GPU; 0: the topology's GPU memory; +inf: not checked
  bool record = false;                //!< fill step_sim_result::record (every_op pricing)
  bool keep_run = false;              //!< keep the engine's run (for traces)
  int threads = 1;                    //!< per_shape: shapes priced at once (the result does not depend on it)
  //! Stop once the iteration is sure to take longer (the engine's next event lies past it;
  //! per_shape: already once a rank's blocks priced so far add up past it, before the step
  //! runs): the result is then `stopped`, iteration_s +inf. A planner's best price so far.
  double deadline_s = std::numeric_limits<double>::infinity();
  friend bool operator==(const step_sim_options&, const step_sim_options&) = default;
};

//! One pipeline stage of one replica (means over its tp x cp ranks unless said otherwise).
struct step_stage_report {
  std::int32_t replica = 0;
  std::int32_t stage = 0;
  double busy_s = 0;       //!< compute + recompute
  double compute_s = 0;    //!< forward and backward kernels (GEMMs, attention, memory ops)
  double recompute_s = 0;  //!< the forwards run again in backward
  double bubble_s = 0;     //!< iteration - busy
  std::array<double, traffic_classes> traffic_s{};      //!< seconds with a transfer of the class in flight
  std::array<double, traffic_classes> traffic_bytes{};  //!< bytes its ranks sent (sum)
  rank_memory_peak memory;                              //!< its ranks' largest peak
};

struct step_sim_result {
  double iteration_s = 0;
  bool stopped = false;            //!< passed options.deadline_s: iteration_s is +inf and nothing else is filled
  double tokens_per_s = 0;
  double bubble_ratio = 0;         //!< mean over stages of bubble / iteration
  double attention_imbalance = 1;  //!< WLB-LLM: max / mean causal pairs per micro-batch
  double latency_imbalance = 1;    //!< WLB-LLM: max / mean forward latency per micro-batch, worst replica
  std::vector<step_stage_report> stages;             //!< replica by replica, stage by stage
  std::array<double, traffic_classes> traffic_bytes{};  //!< per traffic class, the bytes every rank sent (ranks outside the plan's replicas included)
  std::vector<std::vector<double>> forward_latency;  //!< [replica][micro-batch]: its forward blocks' seconds
  std::size_t tasks = 0;                             //!< tasks the engine ran
  engine_run run;                                    //!< with options.keep_run
  std::vector<std::int32_t> block_of_task;           //!< with options.keep_run: per task its block (-1: none)
  step_record record;                                //!< with options.record
  [[nodiscard]] const step_stage_report& stage(std::int32_t replica, std::int32_t s) const {
    for (const step_stage_report& x : stages)
      if (x.replica == replica && x.stage == s) return x;
    ZEPPELIN_THROW(invalid_argument, "step simulation: no such stage", {{"replica", double(replica)}, {"stage", double(s)}});
  }
};

//! Simulates one iteration of `prog` (see the file comment).
[[nodiscard]] inline step_sim_result simulate_step(const step_program& prog, const topology& t, const sim_cost_model& cost,
                                                   const step_sim_options& o = {}) {
  ZEPPELIN_EXPECTS(o.memory_capacity_bytes >= 0 && !std::isnan(o.memory_capacity_bytes),
                   "the memory capacity must be >= 0 bytes (0: the GPU's)", {{"memory_capacity_bytes", o.memory_capacity_bytes}});
  ZEPPELIN_EXPECTS(o.threads >= 1, "step simulation: threads must be >= 1", {{"threads", double(o.threads)}});
  ZEPPELIN_EXPECTS(!std::isnan(o.deadline_s), "step simulation: the deadline must be a number of seconds (+inf: none)", {});
  ZEPPELIN_EXPECTS(t.num_ranks() == prog.num_ranks(), "step simulation: the topology is not the program's cluster",
                   {{"ranks", double(t.num_ranks())}, {"program_ranks", double(prog.num_ranks())}});
  ZEPPELIN_EXPECTS(prog.exchange_traffic.empty() || (o.exchanges == exchange_pricing::per_port && !o.record),
                   "step simulation: a program that holds its exchanges' traffic alone (exchange_detail::traffic_only) lists no "
                   "transfers to run as flows or record; price it with exchange_pricing::per_port and no record, or build it listed",
                   {{"exchanges", double(prog.exchanges)}});
  const double capacity = o.memory_capacity_bytes > 0 ? o.memory_capacity_bytes : t.gpu().memory_bytes;
  const std::vector<rank_memory_peak> peaks = step_memory_peaks(prog, o.memory);
  for (std::size_t g = 0; g < peaks.size(); ++g) {
    const step_position& at = prog.positions[g];
    if (at.replica < 0 || peaks[g].peak_bytes <= capacity) continue;
    ZEPPELIN_THROW(infeasible,
                   "pipeline stage " + std::to_string(at.stage) + " runs out of GPU memory at micro-batch " + std::to_string(peaks[g].micro_batch) +
                       ": it needs " + std::to_string(peaks[g].peak_bytes / double(1ull << 30)) + " GiB of " +
                       std::to_string(capacity / double(1ull << 30)) + " GiB",
                   {{"replica", double(at.replica)}, {"stage", double(at.stage)}, {"micro_batch", double(peaks[g].micro_batch)},
                    {"rank", double(g)}, {"bytes", peaks[g].peak_bytes}, {"capacity_bytes", capacity}});
  }

  bool prioritized = false;
  for (const auto& replica : prog.layouts)
    for (const step_layout& lay : replica) prioritized = prioritized || lay.attention.streams.size() > 1;
  const stream_policy policy = prioritized ? stream_policy::preemptive_priority : stream_policy::in_order;
  event_engine e(t, policy, cost.link, cost.contention.slowdown(t.gpu()));
  std::vector<rank_index> ranks(static_cast<std::size_t>(prog.num_ranks()));
  std::iota(ranks.begin(), ranks.end(), 0);
  step_sim_result out;
  step_sim_backend backend(e, prog, t, cost, o.pricing, ranks, o.record ? &out.record : nullptr);
  backend.set_stream_policy(policy);
  backend.set_exchange_pricing(o.exchanges);
  if (o.pricing == block_pricing::per_shape) {
    // a rank whose blocks alone pass the deadline: stopped before the step runs
    if (backend.price_shapes(o.threads, o.deadline_s) > 0) {
      out.iteration_s = std::numeric_limits<double>::infinity();
      out.stopped = true;
      return out;
    }
  }
  run_step(prog, backend);
  out.tasks = e.size();
  engine_run run = e.run(o.deadline_s);
  out.iteration_s = run.makespan;
  if (!run.finished) {
    out.stopped = true;
    return out;
  }

  // per rank: compute, recompute and the traffic classes
  const std::size_t R = ranks.size();
  std::vector<double> compute(R, 0), recompute(R, 0);
  std::vector<std::array<double, traffic_classes>> traffic_s(R), traffic_bytes(R);
  for (std::size_t r = 0; r < R; ++r) {
    const shaped_block_time& s = backend.shaped()[r];
    compute[r] = s.compute_s, recompute[r] = s.recompute_s, traffic_s[r] = s.traffic_s, traffic_bytes[r] = s.traffic_bytes;
  }
  if (o.pricing == block_pricing::every_op)
    for (const compute_segment& s : run.segments)
      (backend.recomputes(s.task) ? recompute : compute)[static_cast<std::size_t>(s.rank)] += s.end - s.start;
  std::vector<std::vector<std::pair<double, double>>> spans(R * traffic_classes);
  for (const flow_record& f : run.flows) {
    const int k = traffic_class_of(run.tags[static_cast<std::size_t>(f.task)].kind);
    if (k < 0) continue;
    spans[static_cast<std::size_t>(f.source) * traffic_classes + static_cast<std::size_t>(k)].emplace_back(f.start, f.end);
    if (f.destination != f.source)
      spans[static_cast<std::size_t>(f.destination) * traffic_classes + static_cast<std::size_t>(k)].emplace_back(f.start, f.end);
    traffic_bytes[static_cast<std::size_t>(f.source)][static_cast<std::size_t>(k)] += f.bytes;
  }
  for (const priced_exchange& x : backend.exchanges_priced()) {
    const int k = traffic_class_of(run.tags[static_cast<std::size_t>(x.task)].kind);
    const auto r = static_cast<std::size_t>(x.rank);
    spans[r * traffic_classes + static_cast<std::size_t>(k)].emplace_back(run.start[static_cast<std::size_t>(x.task)], run.end[static_cast<std::size_t>(x.task)]);
    traffic_bytes[r][static_cast<std::size_t>(k)] += x.bytes_sent;
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t k = 0; k < static_cast<std::size_t>(traffic_classes); ++k) {
      traffic_s[r][k] += detail::union_length(spans[r * static_cast<std::size_t>(traffic_classes) + k]);
      out.traffic_bytes[k] += traffic_bytes[r][k];
    }

  // per (replica, stage)
  double bubble_sum = 0;
  for (std::size_t ri = 0; ri < prog.plan.replicas.size(); ++ri) {
    const step_replica& rep = prog.plan.replicas[ri];
    const auto per_stage = static_cast<std::size_t>(rep.tp) * static_cast<std::size_t>(rep.cp);
    for (int s = 0; s < rep.pp; ++s) {
      step_stage_report x;
      x.replica = static_cast<std::int32_t>(ri);
      x.stage = s;
      for (std::size_t i = 0; i < per_stage; ++i) {
        const auto g = static_cast<std::size_t>(rep.ranks[static_cast<std::size_t>(s) * per_stage + i]);
        x.compute_s += compute[g] / static_cast<double>(per_stage);
        x.recompute_s += recompute[g] / static_cast<double>(per_stage);
        for (std::size_t k = 0; k < traffic_classes; ++k) {
          x.traffic_s[k] += traffic_s[g][k] / static_cast<double>(per_stage);
          x.traffic_bytes[k] += traffic_bytes[g][k];
        }
        if (peaks[g].peak_bytes >= x.memory.peak_bytes) x.memory = peaks[g];
      }
      x.busy_s = x.compute_s + x.recompute_s;
      x.bubble_s = std::max(0.0, out.iteration_s - x.busy_s);
      bubble_sum += out.iteration_s > 0 ? x.bubble_s / out.iteration_s : 0.0;
      out.stages.push_back(x);
    }
  }
  out.bubble_ratio = out.stages.empty() ? 0.0 : bubble_sum / static_cast<double>(out.stages.size());

  // each block's span (its first to its last task), for the forward latencies
  const std::vector<std::int32_t>& block_of = backend.block_of_task();
  std::vector<std::pair<double, double>> span_of(prog.blocks.size(), {std::numeric_limits<double>::infinity(), 0.0});
  for (std::size_t id = 0; id < block_of.size() && id < run.start.size(); ++id) {
    if (block_of[id] < 0 || run.start[id] < 0) continue;
    auto& sp = span_of[static_cast<std::size_t>(block_of[id])];
    sp.first = std::min(sp.first, run.start[id]);
    sp.second = std::max(sp.second, run.end[id]);
  }
  out.forward_latency.resize(prog.plan.replicas.size());
  for (std::size_t ri = 0; ri < prog.plan.replicas.size(); ++ri) out.forward_latency[ri].assign(prog.plan.replicas[ri].micro_batches.size(), 0.0);
  for (std::size_t b = 0; b < prog.blocks.size(); ++b) {
    const step_block& blk = prog.blocks[b];
    if (blk.pass != step_pass::forward || !std::isfinite(span_of[b].first)) continue;
    out.forward_latency[static_cast<std::size_t>(blk.replica)][static_cast<std::size_t>(blk.micro_batch)] += span_of[b].second - span_of[b].first;
  }
  out.latency_imbalance = 1;
  for (const std::vector<double>& lat : out.forward_latency) {
    const double total = std::accumulate(lat.begin(), lat.end(), 0.0);
    if (total > 0) out.latency_imbalance = std::max(out.latency_imbalance, *std::max_element(lat.begin(), lat.end()) * static_cast<double>(lat.size()) / total);
  }
  double max_pairs = 0, sum_pairs = 0, count = 0;
  token_count tokens = 0;
  for (const step_replica& rep : prog.plan.replicas)
    for (const step_micro_batch& mb : rep.micro_batches) {
      double pairs = 0;
      for (const step_piece& x : mb.pieces)
        pairs += static_cast<double>(causal_pairs(x.tokens())) + static_cast<double>(x.tokens()) * static_cast<double>(x.context());
      max_pairs = std::max(max_pairs, pairs);
      sum_pairs += pairs;
      count += 1;
      tokens += mb.tokens();
    }
  out.attention_imbalance = sum_pairs > 0 ? std::max(1.0, max_pairs / (sum_pairs / count)) : 1.0;
  out.tokens_per_s = out.iteration_s > 0 ? static_cast<double>(tokens) / out.iteration_s : 0.0;
  out.record.sort();
  if (o.keep_run) {
    out.block_of_task = block_of;
    out.run = std::move(run);
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
