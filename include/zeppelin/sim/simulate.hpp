// zeppelin/sim/simulate.hpp
// A discrete-event model of one training step (forward and backward, every layer) of a plan.
//   in : plan (validated against batch and topology), batch, topology (the
//        tensor_parallel_view when TP > 1), model, sim_options, sim_cost_model
//   out: sim_result (sim/result.hpp): step time, tokens/s, lower bound, efficiency,
//        per-rank breakdown, imbalance, bytes moved, and optionally the phase timings and the
//        execution record of one layer.
// What runs is the plan's execution program (program/build.hpp, built from sim_options with
// the model's wire format), run by the one driver (program/driver.hpp) on the simulator's
// backend (sim/backend.hpp): the same phases, pieces, launches and dependencies the host and
// device engines execute, priced by the cost model instead of executed. Per micro-batch m
// (Hybrid DP's extra micro-batches run one after another):
//   forward phase, one layer:  [remap_in] -> attention -> [remap_out] -> linear [-> TP]
//   backward phase, one layer: linear [-> TP] -> [remap_in] -> attention -> [remap_out]
//   - attention launches are priced per launch (sim/detail/attention_call.hpp, every block
//     tiled on its own, as the CSR kernels do); copies and accumulator additions at the GPU's
//     memory bandwidth;
//   - every piece of a phase is a flow on the ports of sim/event_engine.hpp (NVLink per GPU,
//     NIC send / receive shared by the GPUs mapped to it, max-min fair), with NCCL's group
//     semantics per stage (sim/backend.hpp);
//   - compute streams: one (in_order; the event engine's in-order stream) or Zeppelin's
//     prioritised queues (preemptive stream priorities, inter > intra > local > linear);
//   - linear modules: tokens x FLOPs per token (cost/linear_flops.hpp) at the GEMM rate, on
//     the token-balanced layout with remapping, else on the attention layout; the LM head
//     runs once per micro-batch after the layers (forward + backward, max over ranks);
//   - SM contention (sim_cost_model::contention, sim/sm_contention.hpp, on by default): a
//     GPU's compute runs at (1 - f) while its own NCCL sends / receives / proxy legs are in
//     flight, f = NCCL CTAs / SMs (16 / 132 on H100 / H200);
//   - tensor parallelism: TP collectives block the stream after the linear modules.
// Layers are identical: sim_options::chained_layers of them are simulated back to back and
// the phase time is scaled to all layers. The step time is the sum over micro-batches of
// the scaled forward and backward phases and the LM head; the four parts of every rank's
// breakdown are scaled the same way and add up to it.
// Not modelled: the optimizer and the gradient all-reduce (the same for every method),
// communication kernels waiting for SMs held by attention (the other side of the paper's
// "bubbles"), the backward's per-pass preprocessing (one O . dO row sum) and the final
// casts of the device engine, activation recomputation. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/detail/parallel_for.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/program/driver.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/sim/backend.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/detail/independent_ranks.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>
#include <zeppelin/sim/lower_bound.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/result.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
//! Tokens each rank holds in the attention layout and in the linear modules' layout (the
//! token-balanced one when the program remaps), per micro-batch: [micro-batch][rank].
struct layer_tokens {
  std::vector<std::vector<token_count>> attention, linear;
};
// About how many tasks and dependencies one layer of `pass` of micro-batch `mb` adds per rank
// (an upper estimate for the reserve of the event engine, and the weight of a rank when
// ranks are simulated in chunks): its linear modules (and their TP collective), per segment
// its end, a task per compute operation, per exchange a join per stage it can use, and per
// piece it sends a flow at most.
struct rank_tasks {
  std::vector<std::size_t> tasks, dependencies;  // [rank]
};
inline rank_tasks tasks_of_layer(const execution_program& prog, pass_kind pass, std::int32_t mb) {
  const auto R = static_cast<std::size_t>(prog.num_ranks());
  rank_tasks out{std::vector<std::size_t>(R, 2), std::vector<std::size_t>(R, 0)};
  for (std::size_t r = 0; r < R; ++r)
    for (const program_segment& s : prog.pass(pass)[r].segments) {
      if (s.micro_batch != mb) continue;
      out.tasks[r] += 1;
      for (const program_op& op : s.ops) {
        const bool exchange = std::holds_alternative<exchange_phase>(op.body);
        out.tasks[r] += exchange ? 1 + route_stages : 1;
        out.dependencies[r] += 1 + op.after.size() + (exchange ? route_stages : 1);
      }
    }
  for (const program_phase& ph : prog.phases)
    if (ph.pass == pass && prog.levels[static_cast<std::size_t>(ph.level)].micro_batch == mb)
      for (const transfer& m : ph.pieces) {
        out.tasks[static_cast<std::size_t>(m.src)] += 1;
        out.dependencies[static_cast<std::size_t>(m.src)] += 3;
      }
  return out;
}

inline layer_tokens tokens_per_layout(const plan& p, const execution_program& prog) {
  layer_tokens out;
  const auto R = static_cast<std::size_t>(p.num_ranks());
  out.attention.assign(static_cast<std::size_t>(prog.micro_batches), std::vector<token_count>(R, 0));
  for (std::size_t r = 0; r < R; ++r)
    for (const shard& s : p.placements[r].shards) out.attention[static_cast<std::size_t>(s.micro_batch)][r] += s.range.size();
  out.linear = out.attention;
  for (std::size_t mb = 0; mb < prog.linear_layout.size(); ++mb)
    if (!prog.linear_layout[mb].empty())
      for (std::size_t r = 0; r < R; ++r) out.linear[mb][r] = prog.linear_layout[mb][r].tokens();
  return out;
}

// The inputs every chunk of one pass of one micro-batch shares (read-only).
struct pass_context {
  const execution_program& prog;
  const topology& t;
  const model_config& m;
  const sim_options& o;
  const sim_cost_model& cost;
  const std::vector<call_cost>& prices;          // per launch
  const std::vector<token_count>& linear_tokens;  // [rank]: tokens of the linear modules
  const rank_tasks& estimate;
  pass_kind pass;
  std::int32_t micro_batch;
  int chained;   // layers simulated
  double scale;  // layers per simulated layer
  stream_policy policy;
  double slowdown;  // SM contention
  std::int64_t linear_priority;
};

// What one chunk's engine computed.
struct chunk_run {
  double makespan = 0, inter_node_bytes = 0, intra_node_bytes = 0, max_port_utilization = 0;
  launch_stats stats;
  std::optional<engine_run> traced;  // the run itself, when the options ask for a trace
};

// Runs the ranks of one chunk through the pass's chained layers in an engine of their own:
// their linear modules, then (or, backward, before) the program's segments of the
// micro-batch. Adds the ranks' scaled breakdowns into breakdown[rank] and leaves each rank's
// last task in prev[rank]; touches no other rank's entries (chunks may run at once). The
// execution record of the first layer goes to `record` when given.
inline chunk_run simulate_chunk(const pass_context& c, std::span<const rank_index> ranks, std::vector<task_id>& prev,
                                std::vector<rank_breakdown>& breakdown, execution_record* record) {
  const bool forward = c.pass == pass_kind::forward;
  const topology& t = c.t;
  event_engine e(t, c.policy, c.cost.link, c.slowdown);
  std::size_t tasks = 0, dependencies = 0;
  for (const rank_index r : ranks) {
    tasks += c.estimate.tasks[static_cast<std::size_t>(r)];
    dependencies += c.estimate.dependencies[static_cast<std::size_t>(r)];
  }
  const auto layers = static_cast<std::size_t>(c.chained);
  e.reserve(layers * tasks, layers * dependencies);
  const double linear_fwd_flops = linear_forward_flops_per_token(c.m);
  // the linear modules of one layer on every rank of the chunk, after `prev`
  const auto linear = [&](std::int32_t layer) {
    for (const rank_index rank : ranks) {
      const auto r = static_cast<std::size_t>(rank);
      const double flops = static_cast<double>(c.linear_tokens[r]) * linear_fwd_flops * (forward ? 1.0 : 2.0);
      const task_tag tg{forward ? task_kind::linear_forward : task_kind::linear_backward, flow_leg::direct, -1, -1, layer, c.micro_batch};
      prev[r] = e.compute(rank, c.cost.linear.seconds(flops, t.gpu()), tg, c.linear_priority, {prev[r]});
      if (c.o.tensor_parallel > 1) {
        const double s = tensor_parallel_collectives_per_layer *
                         tensor_parallel_collective_seconds(c.linear_tokens[r], c.m, t, c.o.tensor_parallel);
        prev[r] = e.compute(rank, s, {task_kind::tensor_parallel, flow_leg::direct, -1, -1, layer, c.micro_batch}, c.linear_priority,
                            {prev[r]});
      }
    }
  };
  chunk_run out;
  for (int l = 0; l < c.chained; ++l) {
    const std::int32_t layer = forward ? l : c.chained - 1 - l;
    if (!forward) linear(layer);
    sim_backend backend(e, c.prog, c.pass, t, c.prices, prev, layer, c.micro_batch, out.stats, ranks, l == 0 ? record : nullptr);
    run_pass(c.prog, c.pass, backend, [&](const program_segment& s) { return s.micro_batch == c.micro_batch; });
    if (forward) linear(layer);
  }
  engine_run run = e.run();
  out.makespan = run.makespan;
  out.inter_node_bytes = run.inter_node_bytes;
  out.intra_node_bytes = run.intra_node_bytes;
  out.max_port_utilization = run.max_port_utilization;
  for (const rank_index rank : ranks) {
    const auto r = static_cast<std::size_t>(rank);
    const stream_accounting& a = run.ranks[r];
    rank_breakdown& br = breakdown[r];
    br.attention_s += c.scale * (a.busy[static_cast<int>(task_kind::attention_forward)] +
                                 a.busy[static_cast<int>(task_kind::attention_backward)]);
    br.linear_s += c.scale * (a.busy[static_cast<int>(task_kind::linear_forward)] + a.busy[static_cast<int>(task_kind::linear_backward)]);
    br.exposed_comm_s += c.scale * (a.stalled + a.busy[static_cast<int>(task_kind::tensor_parallel)]);
    br.idle_s += c.scale * a.idle;
  }
  if (c.o.record_trace) out.traced = std::move(run);
  return out;
}
}  // namespace detail

//! Simulates one training step of `p`; see the file comment. Throws invalid_plan when the
//! plan fails validate(p, b, t), invalid_argument for a bad model, cost model or options
//! (chained_layers < 0, tensor_parallel < 1, NCCL CTAs not below the GPU's SMs, a proxy
//! outside the topology).
[[nodiscard]] inline sim_result simulate(const plan& p, const batch& b, const topology& t, const model_config& m,
                                         const sim_options& o, const sim_cost_model& cost) {
  validate(m);  // the plan: make_program validates it first thing (once, not twice)
  ZEPPELIN_EXPECTS(o.chained_layers >= 0, "chained_layers must be >= 0 (0 = every layer)",
                   {{"chained_layers", double(o.chained_layers)}});
  ZEPPELIN_EXPECTS(o.tensor_parallel >= 1, "tensor_parallel must be >= 1", {{"tensor_parallel", double(o.tensor_parallel)}});
  ZEPPELIN_EXPECTS(o.tasks_per_engine >= 1, "tasks_per_engine must be >= 1", {{"tasks_per_engine", double(o.tasks_per_engine)}});
  ZEPPELIN_EXPECTS(o.threads >= 1, "threads must be >= 1", {{"threads", double(o.threads)}});
  const execution_program prog = make_program(p, b, t, to_program_options(o, wire_format::for_model(m)));
  const int chained = o.chained_layers == 0 ? m.layers : std::min(o.chained_layers, m.layers);
  const double scale = static_cast<double>(m.layers) / chained;
  const stream_policy policy = prog.streams.size() > 1 ? stream_policy::preemptive_priority : stream_policy::in_order;
  const auto R = static_cast<std::size_t>(t.num_ranks());
  const double slowdown = cost.contention.slowdown(t.gpu());
  const double head_flops = lm_head_flops_per_token(m) + lm_head_backward_flops_per_token(m);
  const std::vector<detail::call_cost> prices = price_launches(prog, cost.attention);
  const detail::layer_tokens tokens = detail::tokens_per_layout(p, prog);
  const auto linear_priority = static_cast<std::int64_t>(prog.streams.size());

  sim_result res;
  res.method = p.method;
  res.micro_batches = p.micro_batches();
  res.ranks.assign(R, {});
  double clock = 0;  // trace time axis
  for (std::int32_t mb = 0; mb < res.micro_batches; ++mb) {
    const auto& linear_tokens = tokens.linear[static_cast<std::size_t>(mb)];
    for (const pass_kind pass : {pass_kind::forward, pass_kind::backward}) {
      const bool forward = pass == pass_kind::forward;
      // the pass's ranks, chunk by chunk of ranks that exchange nothing with other chunks
      // (one chunk when a trace or record is asked for: it shows every rank on one time axis)
      const detail::rank_tasks estimate = detail::tasks_of_layer(prog, pass, mb);
      const bool whole = o.record_trace || o.record_execution;
      // with threads, at least four chunks per thread where the components allow (balance)
      const std::size_t all_tasks = std::accumulate(estimate.tasks.begin(), estimate.tasks.end(), std::size_t{0});
      const std::size_t per_thread = o.threads > 1 ? all_tasks / (4 * static_cast<std::size_t>(o.threads)) : all_tasks;
      const std::size_t target =
          whole ? std::numeric_limits<std::size_t>::max() : std::min(o.tasks_per_engine / static_cast<std::size_t>(chained), per_thread);
      const std::vector<std::vector<rank_index>> chunks = detail::independent_rank_chunks(prog, pass, mb, t, estimate.tasks, target);
      const detail::pass_context context{prog, t,  m,       o,     cost,   prices,   tokens.linear[static_cast<std::size_t>(mb)], estimate,
                                         pass, mb, chained, scale, policy, slowdown, linear_priority};
      std::vector<detail::chunk_run> done(chunks.size());
      std::vector<task_id> prev(R, no_task);
      // each chunk writes its own slot and its own ranks' breakdowns; combined in chunk order
      detail::parallel_for(chunks.size(), o.threads, [&](std::size_t c) {
        done[c] = detail::simulate_chunk(context, chunks[c], prev, res.ranks, o.record_execution ? &res.record : nullptr);
      });
      launch_stats stats;
      double makespan = 0, inter_node_bytes = 0, intra_node_bytes = 0;
      for (const detail::chunk_run& c : done) {
        makespan = std::max(makespan, c.makespan);
        inter_node_bytes += c.inter_node_bytes;
        intra_node_bytes += c.intra_node_bytes;
        res.max_port_utilization = std::max(res.max_port_utilization, c.max_port_utilization);
        stats.launches += c.stats.launches;
        stats.flops += c.stats.flops;
        stats.head_pairs += c.stats.head_pairs;
      }
      // a chunk that ended before the pass did idles until then
      for (std::size_t c = 0; c < chunks.size(); ++c)
        for (const rank_index r : chunks[c]) res.ranks[static_cast<std::size_t>(r)].idle_s += scale * (makespan - done[c].makespan);
      const double phase = scale * makespan;
      (forward ? res.forward_s : res.backward_s) += phase;
      res.step_time_s += phase;
      res.cross_node_bytes += scale * inter_node_bytes;
      res.intra_node_bytes += scale * intra_node_bytes;
      res.attention_launches += scale * stats.launches;
      res.attention_flops += scale * stats.flops;
      // every chained layer computes the same pairs; a head lane computes a share of the heads
      if (forward) res.attention_pairs += stats.head_pairs / (std::int64_t{prog.wire.heads} * chained);
      if (o.record_trace)  // one chunk (see above)
        res.trace.push_back({std::string(forward ? "forward" : "backward") + " mb" + std::to_string(mb), clock, scale,
                             std::move(*done.front().traced)});
      clock += phase / scale;
    }
    // LM head: once per micro-batch, forward + backward, on the linear layout
    double head = 0;
    std::vector<double> per_rank(R);
    for (std::size_t r = 0; r < R; ++r) {
      per_rank[r] = cost.linear.seconds(static_cast<double>(linear_tokens[r]) * head_flops, t.gpu());
      head = std::max(head, per_rank[r]);
      res.ranks[r].attention_tokens += tokens.attention[static_cast<std::size_t>(mb)][r];
      res.ranks[r].linear_tokens += linear_tokens[r];
    }
    for (std::size_t r = 0; r < R; ++r) {
      res.ranks[r].linear_s += per_rank[r];
      res.ranks[r].idle_s += head - per_rank[r];
    }
    res.lm_head_s += head;
    res.step_time_s += head;
    clock += head;
  }
  res.record.sort();
  res.tokens_per_s = static_cast<double>(b.total_tokens()) / res.step_time_s;
  res.lower_bound_s = step_lower_bound(b, m, t, cost);
  res.efficiency = res.lower_bound_s / res.step_time_s;
  double sum = 0, top = 0;
  for (const rank_breakdown& br : res.ranks) sum += br.compute_s(), top = std::max(top, br.compute_s());
  // max >= mean; the max keeps rounding from putting a perfectly balanced step below 1
  res.imbalance = sum > 0 ? std::max(1.0, top / (sum / static_cast<double>(R))) : 1.0;
  return res;
}

//! simulate() with sim_cost_model::for_topology(t).
[[nodiscard]] inline sim_result simulate(const plan& p, const batch& b, const topology& t, const model_config& m,
                                         const sim_options& o = {}) {
  return simulate(p, b, t, m, o, sim_cost_model::for_topology(t));
}

ZEPPELIN_NAMESPACE_END
