// zeppelin/sim/simulate.hpp
// A discrete-event model of one training step (forward and backward, every layer) of a plan.
//   in : plan (validated against batch and topology), batch, topology (the
//        tensor_parallel_view when TP > 1), model, sim_options, sim_cost_model
//   out: sim_result (sim/result.hpp): step time, tokens/s, lower bound, efficiency,
//        per-rank breakdown, imbalance, bytes moved, and optionally the phase timings.
// The model, per micro-batch m (Hybrid DP's extra micro-batches run one after another):
//   forward phase, one layer:  [remap B -> A] -> attention -> [remap A -> B] -> linear [-> TP]
//   backward phase, one layer: linear [-> TP] -> [remap B -> A] -> attention -> [remap A -> B]
//   - attention, ring groups (sim_options::collective == ring): G rounds; in round k position
//     r computes its queries against the K/V it holds (one varlen call: the round's blocks
//     of schedule/ring_schedule.hpp, priced by sim/detail/attention_call.hpp) while the K/V
//     for round k + 1 travel from r - 1 (posted as soon as they arrived, as TE does), so a
//     round waits only when its K/V are late. Backward: K/V go round the reversed ring and
//     the partial dK/dV follow the computation (a position forwards dK/dV(o) once its own
//     block is added and the partial from r + 1 arrived); the last dK/dV return home.
//   - attention, all-gather (LLaMA CP): the ring all-gather of K/V precedes one call; the
//     backward gathers again, computes, and reduce-scatters dK/dV: all on the critical path.
//   - kernel launches (sim_options::launch): per_group = one varlen call per ring group,
//     round and position, after that group's K/V; fused_round = one call per rank, queue
//     and round over the blocks of all the rank's groups in the queue, after all their K/V
//     (priced over the union of the blocks, sim/detail/attention_call.hpp).
//   - sequences held whole by one rank: one varlen call per rank and direction.
//   - engine (sim_options::engine): in_order = one stream in queue order (inter -> intra ->
//     local, round by round); prioritized = Zeppelin's engine, preemptive stream priorities
//     (inter > intra > local > linear), so local work fills the gaps of the rings.
//   - linear modules: tokens x FLOPs per token (cost/linear_flops.hpp) at the GEMM rate, on
//     the token-balanced layout with remapping, else on the attention layout; the LM head
//     runs once per micro-batch after the layers (forward + backward, max over ranks).
//   - links: every transfer is a flow on the ports of sim/event_engine.hpp (NVLink per GPU,
//     NIC send / receive shared by the GPUs mapped to it, max-min fair). The transfers of a
//     round go through a router (route/router.hpp): direct_router, or sim_options::proxy
//     (proxy_router, three-step routing) with routing on; a routed piece runs dispatch ->
//     transfer -> combine (sim/detail/phase_builder.hpp).
//   - SM contention (sim_cost_model::contention, sim/sm_contention.hpp, on by default): a
//     GPU's compute runs at (1 - f) while its own NCCL sends / receives / proxy legs are in
//     flight, f = NCCL CTAs / SMs (16 / 132 on H100 / H200).
//   - tensor parallelism: TP collectives block the stream after the linear modules.
// Layers are identical: sim_options::chained_layers of them are simulated back to back and
// the phase time is scaled to all layers. The step time is the sum over micro-batches of
// the scaled forward and backward phases and the LM head; the four parts of every rank's
// breakdown are scaled the same way and add up to it.
// Not modelled: the optimizer and the gradient all-reduce (the same for every method),
// communication kernels waiting for SMs held by attention (the other side of the paper's
// "bubbles"), activation recomputation. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/detail/phase_builder.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/lower_bound.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/result.hpp>

#include <algorithm>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Simulates one training step of `p`; see the file comment. Throws invalid_plan when the
//! plan fails validate(p, b, t), invalid_argument for a bad model, cost model or options
//! (chained_layers < 0, tensor_parallel < 1, NCCL CTAs not below the GPU's SMs, a proxy
//! outside the topology).
[[nodiscard]] inline sim_result simulate(const plan& p, const batch& b, const topology& t, const model_config& m,
                                         const sim_options& o, const sim_cost_model& cost) {
  validate(m);
  validate(p, b, t);
  ZEPPELIN_EXPECTS(o.chained_layers >= 0, "chained_layers must be >= 0 (0 = every layer)",
                   {{"chained_layers", double(o.chained_layers)}});
  ZEPPELIN_EXPECTS(o.tensor_parallel >= 1, "tensor_parallel must be >= 1", {{"tensor_parallel", double(o.tensor_parallel)}});
  const bool all_gather = o.collective == attention_collective::all_gather ||
                          (o.collective == attention_collective::from_plan && p.method == "allgather");
  const int chained = o.chained_layers == 0 ? m.layers : std::min(o.chained_layers, m.layers);
  const double scale = static_cast<double>(m.layers) / chained;
  const stream_policy policy =
      o.engine == engine_policy::prioritized ? stream_policy::preemptive_priority : stream_policy::in_order;
  const auto R = static_cast<std::size_t>(t.num_ranks());
  const double slowdown = cost.contention.slowdown(t.gpu());
  const double head_flops = lm_head_flops_per_token(m) + lm_head_backward_flops_per_token(m);

  sim_result res;
  res.method = p.method;
  res.micro_batches = p.micro_batches();
  res.ranks.assign(R, {});
  double clock = 0;  // trace time axis
  for (std::int32_t mb = 0; mb < res.micro_batches; ++mb) {
    const detail::mb_layout L = detail::make_mb_layout(p, b, t, m, cost, o, mb);
    for (int direction = 0; direction < 2; ++direction) {
      const bool forward = direction == 0;
      event_engine e(t, policy, cost.link, slowdown);
      detail::phase_builder builder(e, t, m, cost, o, L, all_gather);
      std::vector<task_id> prev(R, no_task);
      for (int l = 0; l < chained; ++l) {
        if (forward) builder.forward_layer(l, prev);
        else builder.backward_layer(chained - 1 - l, prev);
      }
      engine_run run = e.run();
      const double phase = scale * run.makespan;
      (forward ? res.forward_s : res.backward_s) += phase;
      res.step_time_s += phase;
      res.cross_node_bytes += scale * run.inter_node_bytes;
      res.intra_node_bytes += scale * run.intra_node_bytes;
      res.max_port_utilization = std::max(res.max_port_utilization, run.max_port_utilization);
      const auto& launched = builder.stats();
      res.attention_launches += scale * launched.launches;
      res.attention_flops += scale * launched.flops;
      if (forward) res.attention_pairs += launched.pairs / chained;  // every chained layer computes the same pairs
      for (std::size_t r = 0; r < R; ++r) {
        const stream_accounting& a = run.ranks[r];
        rank_breakdown& br = res.ranks[r];
        br.attention_s += scale * (a.busy[static_cast<int>(task_kind::attention_forward)] +
                                   a.busy[static_cast<int>(task_kind::attention_backward)]);
        br.linear_s += scale * (a.busy[static_cast<int>(task_kind::linear_forward)] +
                                a.busy[static_cast<int>(task_kind::linear_backward)]);
        br.exposed_comm_s += scale * (a.stalled + a.busy[static_cast<int>(task_kind::tensor_parallel)]);
        br.idle_s += scale * a.idle;
      }
      if (o.record_trace)
        res.trace.push_back({std::string(forward ? "forward" : "backward") + " mb" + std::to_string(mb), clock, scale,
                             std::move(run)});
      clock += phase / scale;
    }
    // LM head: once per micro-batch, forward + backward, on the linear layout
    double head = 0;
    std::vector<double> per_rank(R);
    for (std::size_t r = 0; r < R; ++r) {
      per_rank[r] = cost.linear.seconds(static_cast<double>(L.linear_tokens[r]) * head_flops, t.gpu());
      head = std::max(head, per_rank[r]);
      res.ranks[r].attention_tokens += L.attention_tokens[r];
      res.ranks[r].linear_tokens += L.linear_tokens[r];
    }
    for (std::size_t r = 0; r < R; ++r) {
      res.ranks[r].linear_s += per_rank[r];
      res.ranks[r].idle_s += head - per_rank[r];
    }
    res.lm_head_s += head;
    res.step_time_s += head;
    clock += head;
  }
  res.tokens_per_s = static_cast<double>(b.total_tokens()) / res.step_time_s;
  res.lower_bound_s = step_lower_bound(b, m, t, cost);
  res.efficiency = res.lower_bound_s / res.step_time_s;
  double sum = 0, top = 0;
  for (const rank_breakdown& br : res.ranks) sum += br.compute_s(), top = std::max(top, br.compute_s());
  res.imbalance = sum > 0 ? top / (sum / static_cast<double>(R)) : 1.0;
  return res;
}

//! simulate() with sim_cost_model::for_topology(t).
[[nodiscard]] inline sim_result simulate(const plan& p, const batch& b, const topology& t, const model_config& m,
                                         const sim_options& o = {}) {
  return simulate(p, b, t, m, o, sim_cost_model::for_topology(t));
}

ZEPPELIN_NAMESPACE_END
