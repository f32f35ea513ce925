// zeppelin/sim/pipeline_simulator.hpp
// The 4D step simulator: one training iteration of TP x CP x PP x DP on the event engine.
//   in : per data-parallel replica its micro-batches (documents, optional CP shares; they
//        enter the pipeline in this order), a pipeline schedule policy, a checkpoint
//        policy, a stage time model (cost/stage_time.hpp), the memory model (whose layout
//        gives tp, cp, pp and dp, and whose model is the one simulated), a topology with at
//        least tp x cp x pp x dp GPUs, options
//   out: pipeline_sim_result (sim/pipeline_result.hpp): iteration time; per replica and
//        stage busy, bubble, recompute, CP and DP waits and peak memory; WLB-LLM's two
//        imbalance degrees; the schedules; the engine run (for sim/pipeline_trace.hpp)
// How a step is modelled (each piece THE schedule's ops, interpreted once):
//   - stage p of replica r runs on one compute stream, that of the GPU at layout coordinates
//     (tp 0, cp 0, p, r); its TP x CP group advances together (cost/stage_time.hpp prices the
//     slowest CP rank, and reports the others' wait);
//   - forward(k, c) takes the time model's forward of micro-batch k on chunk c; backward
//     takes its backward plus recomputed_layers x one layer's forward (checkpoint policy);
//   - each send is a flow of tokens / cp x hidden x bytes / tp (sequence parallel) bytes
//     from the stage's GPU to the peer stage's, released when the producing op ends; the
//     consuming op waits for it (every GPU of the group moves its own share in parallel on
//     its own link, so one flow stands for all of them);
//   - after a stage's last backward on every replica, the gradients are all-reduced over the
//     DP replicas with a ring (2 (dp - 1) steps of bytes / dp, parameters x gradient bytes
//     per GPU); Megatron-LM also reduces over CP, which changes the ring size, not its
//     per-GPU traffic, by a factor (n - 1) / n;
//   - ZeRO-3 (memory settings zero_stage 3, over the dp x cp GPUs of a stage, more than
//     one): every forward and backward runs layer by layer, each layer waiting for the
//     ring all-gather of its parameters over the group (parameter bytes per element; the
//     next layer's gather overlaps the current layer's compute), and every backward layer
//     reduce-scatters its gradients in the same precision (sim/detail/zero3_traffic.hpp,
//     sim/detail/collective_rings.hpp). The reduce-scatters replace the DP all-reduce. An op's
//     time is spread evenly over its layers;
//   - memory (sim/pipeline_peak_memory.hpp) is checked before anything runs; a schedule
//     from a policy that is not valid_by_construction (schedule/pipeline/schedule_policy.hpp)
//     goes through validate() first.
// Errors: invalid_argument for replicas != dp, an empty replica, an invalid micro-batch,
// more stages than layers, a topology with fewer GPUs than the layout, bad options, ZeRO-3
// with zero_shards other than 0 or dp x cp (its traffic runs over the layout's GPUs);
// infeasible when a stage's peak memory exceeds the capacity (naming stage, micro-batch,
// bytes and capacity); what the policies and models throw. Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>
#include <zeppelin/schedule/pipeline/validate.hpp>
#include <zeppelin/sim/detail/collective_rings.hpp>
#include <zeppelin/sim/detail/zero3_traffic.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/link_sharing.hpp>
#include <zeppelin/sim/pipeline_peak_memory.hpp>
#include <zeppelin/sim/pipeline_result.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct pipeline_sim_options {
  link_model link{};
  //! Bytes one GPU may hold; 0 = the topology's GPU memory; +infinity = no check.
  double memory_capacity_bytes = 0;
};

namespace detail {

// Stage times per (micro-batch, distinct chunk shape): chunks of one shape cost the same.
template <stage_time_model T>
class stage_time_table {
 public:
  stage_time_table(const T& model, std::span<const micro_batch> mbs, const std::vector<stage_slice>& slices) {
    for (const stage_slice& s : slices) {
      const auto it = std::find(shapes_.begin(), shapes_.end(), s);
      shape_of_.push_back(static_cast<int>(it - shapes_.begin()));
      if (it == shapes_.end()) shapes_.push_back(s);
    }
    times_.reserve(mbs.size() * shapes_.size());
    for (const micro_batch& mb : mbs)
      for (const stage_slice& s : shapes_) times_.push_back(model.times(mb, s));
  }
  [[nodiscard]] const stage_times& at(int micro_batch, int virtual_stage) const {
    return times_[static_cast<std::size_t>(micro_batch) * shapes_.size() +
                  static_cast<std::size_t>(shape_of_[static_cast<std::size_t>(virtual_stage)])];
  }

 private:
  std::vector<stage_slice> shapes_;
  std::vector<int> shape_of_;
  std::vector<stage_times> times_;
};

}  // namespace detail

//! Simulates one iteration (see the file comment).
template <pipeline_schedule_policy S, checkpoint_policy C, stage_time_model T, link_sharing L = shared_links>
[[nodiscard]] pipeline_sim_result simulate_pipeline(std::span<const std::vector<micro_batch>> replicas, const S& schedule_policy,
                                                    const C& checkpoint, const T& time_model, const pipeline_memory_model& memory,
                                                    const topology& topo, const pipeline_sim_options& options = {},
                                                    const L& links = {}) {
  const parallel_layout& layout = memory.layout;
  validate(layout);
  ZEPPELIN_EXPECTS(replicas.size() == static_cast<std::size_t>(layout.dp), "one micro-batch list per data-parallel replica is needed",
                   {{"replicas", double(replicas.size())}, {"dp", double(layout.dp)}});
  ZEPPELIN_EXPECTS(static_cast<long long>(topo.num_ranks()) >= layout.gpus(), "the topology has fewer GPUs than the layout needs",
                   {{"gpus", double(topo.num_ranks())}, {"layout_gpus", double(layout.gpus())}});
  ZEPPELIN_EXPECTS(options.memory_capacity_bytes >= 0 && !std::isnan(options.memory_capacity_bytes),
                   "the memory capacity must be >= 0 bytes (0: the GPU's)", {{"memory_capacity_bytes", options.memory_capacity_bytes}});
  const double capacity = options.memory_capacity_bytes > 0 ? options.memory_capacity_bytes : topo.gpu().memory_bytes;
  const int P = layout.pp;

  pipeline_sim_result result;
  result.layout = layout;
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    ZEPPELIN_EXPECTS(!replicas[r].empty(), "every data-parallel replica needs at least one micro-batch", {{"replica", double(r)}});
    for (const micro_batch& mb : replicas[r]) validate(mb);
    std::vector<token_count> tokens;
    tokens.reserve(replicas[r].size());
    for (const micro_batch& mb : replicas[r]) tokens.push_back(mb.tokens());
    result.schedules.push_back(schedule_policy.build(P, tokens));
    if constexpr (!schedule_valid_by_construction<S>) (void)validate(result.schedules.back());
  }
  const int V = result.schedules.front().virtual_stages;
  const std::vector<stage_slice> slices = split_model(memory.model, P * V);
  const int last_virtual = P * V - 1;

  // Memory first: nothing runs on a cluster it does not fit.
  result.stages.assign(replicas.size(), std::vector<pipeline_stage_report>(static_cast<std::size_t>(P)));
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    const auto peaks = pipeline_peak_memory(result.schedules[r], slices, memory, checkpoint);
    for (int p = 0; p < P; ++p) {
      const stage_memory_peak& m = peaks[static_cast<std::size_t>(p)];
      result.stages[r][static_cast<std::size_t>(p)].memory = m;
      if (m.peak_bytes > capacity)
        ZEPPELIN_THROW(infeasible,
                       "pipeline stage " + std::to_string(p) + " runs out of GPU memory at micro-batch " + std::to_string(m.micro_batch) +
                           ": it needs " + std::to_string(m.peak_bytes / double(1ull << 30)) + " GiB of " +
                           std::to_string(capacity / double(1ull << 30)) + " GiB",
                       {{"stage", double(p)}, {"replica", double(r)}, {"micro_batch", double(m.micro_batch)},
                        {"bytes", m.peak_bytes}, {"capacity_bytes", capacity}});
    }
  }

  auto engine = links.make_engine(topo, options.link);
  if constexpr (requires { engine.reserve(std::size_t{}, std::size_t{}); }) {
    std::size_t ops = 0;
    for (const auto& s : result.schedules)
      for (const auto& stage : s.ops) ops += stage.size();
    engine.reserve(ops / 2, ops / 2 + 2 * static_cast<std::size_t>(layout.dp) * static_cast<std::size_t>(P));
  }
  const double boundary_bytes_per_token = memory.checkpoint_bytes_per_token_layer() / layout.cp;
  // ZeRO-3: per stage the rings of its dp x cp GPUs (tp rank 0 stands for every TP rank)
  const long long zero_group = static_cast<long long>(layout.dp) * layout.cp;
  const bool zero3 = memory.settings.zero_stage == 3 && zero_group > 1;
  ZEPPELIN_EXPECTS(memory.settings.zero_stage != 3 || memory.settings.zero_shards == 0 ||
                       memory.settings.zero_shards == static_cast<double>(zero_group),
                   "the simulator runs ZeRO-3's traffic over a stage's dp x cp GPUs: zero_shards must be 0 or dp x cp",
                   {{"zero_shards", memory.settings.zero_shards}, {"dp_x_cp", double(zero_group)}});
  std::vector<detail::collective_rings> zero_rings;
  std::vector<double> zero_layer_bytes;  // per virtual stage: one layer's parameters
  if (zero3) {
    for (const stage_slice& slice : slices) zero_layer_bytes.push_back(memory.parameters(slice) * memory.settings.parameter_bytes / slice.layers);
    for (int p = 0; p < P; ++p) {
      std::vector<rank_index> members;
      for (int i = 0; i < layout.dp; ++i)
        for (int c = 0; c < layout.cp; ++c) members.push_back(layout.rank_of({0, c, p, i}));
      zero_rings.push_back(detail::make_collective_rings(topo, std::move(members)));
    }
  }
  using engine_type = decltype(engine);
  std::vector<std::vector<task_id>> last_backward(replicas.size(), std::vector<task_id>(static_cast<std::size_t>(P), no_task));
  std::vector<detail::stage_time_table<T>> tables;  // per replica; the imbalance degrees read them too
  tables.reserve(replicas.size());
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    const auto& mbs = replicas[r];
    const pipeline_schedule& s = result.schedules[r];
    const std::size_t M = mbs.size();
    const detail::stage_time_table<T>& table = tables.emplace_back(time_model, mbs, slices);
    const auto rank_of = [&](int p) { return layout.rank_of({0, 0, p, static_cast<int>(r)}); };
    // the flow bringing (virtual stage, micro-batch) its input; created by the producer's send
    std::vector<task_id> activation_in(static_cast<std::size_t>(P * V) * M, no_task), gradient_in = activation_in;
    std::vector<task_id> forward_task(static_cast<std::size_t>(P * V) * M, no_task), backward_task = forward_task;
    const auto at = [&](int v, int mb) { return static_cast<std::size_t>(v) * M + static_cast<std::size_t>(mb); };
    std::vector<detail::zero3_stage_traffic<engine_type>> zero_traffic;  // per stage, empty without ZeRO-3
    for (std::size_t p = 0; p < zero_rings.size(); ++p) {
      std::vector<std::size_t> own;
      for (std::size_t e = 0; e < zero_rings[p].edges.size(); ++e)
        if (layout.coordinates_of(zero_rings[p].edges[e].source).dp == static_cast<int>(r)) own.push_back(e);
      zero_traffic.emplace_back(zero_rings[p], std::move(own));
    }
    std::vector<std::size_t> position(static_cast<std::size_t>(P), 0);
    std::size_t remaining = 0;
    for (const auto& ops : s.ops) remaining += ops.size();
    while (remaining > 0) {
      bool progressed = false;
      for (int p = 0; p < P; ++p) {
        const auto& ops = s.ops[static_cast<std::size_t>(p)];
        pipeline_stage_report& report = result.stages[r][static_cast<std::size_t>(p)];
        std::size_t& i = position[static_cast<std::size_t>(p)];
        for (; i < ops.size(); ++i, --remaining, progressed = true) {
          const pipeline_op& op = ops[i];
          const int v = s.virtual_stage(p, op.chunk);
          const std::size_t u = at(v, op.micro_batch);
          if (op.kind == pipeline_op_kind::forward || op.kind == pipeline_op_kind::backward) {
            const bool forward = op.kind == pipeline_op_kind::forward;
            const bool needs_input = forward ? v > 0 : v < last_virtual;
            const task_id input = forward ? activation_in[u] : gradient_in[u];
            if (needs_input && input == no_task) break;  // its producer has not been reached yet
            const stage_times& t = table.at(op.micro_batch, v);
            double seconds = forward ? t.forward : t.backward;
            if (!forward) {
              const int rc = recomputed_layers_at(checkpoint, slices, P, p, op.chunk, op.micro_batch);
              report.recompute_s += rc * t.layer_forward;
              seconds += rc * t.layer_forward;
              report.cp_wait_s += t.cp_wait;
            }
            (forward ? report.forward_s : report.backward_s) += seconds;
            const task_tag tag{forward ? task_kind::linear_forward : task_kind::linear_backward, flow_leg::direct, -1, op.chunk, p,
                               op.micro_batch};
            task_id id = no_task;
            if (zero3) {
              // layer by layer behind the gathers of their parameters
              const int layers = slices[static_cast<std::size_t>(v)].layers;
              const double layer_bytes = zero_layer_bytes[static_cast<std::size_t>(v)];
              auto& traffic = zero_traffic[static_cast<std::size_t>(p)];
              for (int layer = 0; layer < layers; ++layer) {
                const task_id deps[2] = {traffic.gather(engine, layer_bytes, tag), layer == 0 && needs_input ? input : no_task};
                id = engine.compute(rank_of(p), seconds / layers, tag, 0, deps);
                traffic.computed(id);
                if (!forward) traffic.reduce_scatter(engine, layer_bytes, id, tag);
              }
            } else {
              const task_id deps[1] = {input};
              id = engine.compute(rank_of(p), seconds, tag, 0, std::span<const task_id>(deps, needs_input ? 1 : 0));
            }
            (forward ? forward_task : backward_task)[u] = id;
            if (!forward) last_backward[r][static_cast<std::size_t>(p)] = id;
          } else if (is_send(op.kind)) {
            const bool activation = op.kind == pipeline_op_kind::send_activation;
            const int to = activation ? v + 1 : v - 1;
            const task_tag tag{activation ? task_kind::activation : task_kind::gradient, flow_leg::direct, -1, op.chunk, p,
                               op.micro_batch};
            const task_id producer = activation ? forward_task[u] : backward_task[u];
            (activation ? activation_in : gradient_in)[at(to, op.micro_batch)] =
                engine.flow(rank_of(p), rank_of(op.peer), static_cast<double>(op.tokens) * boundary_bytes_per_token, tag, {producer});
          }
          // receives: the consuming compute op waits on the flow itself
        }
      }
      ZEPPELIN_EXPECTS(progressed, "the pipeline schedule cannot make progress", {{"replica", double(r)}});
    }
  }

  // Data-parallel gradient all-reduce per stage: a ring over the replicas' stage GPUs.
  if (layout.dp > 1 && !zero3) {
    for (int p = 0; p < P; ++p) {
      double gradient_bytes = 0;
      for (int c = 0; c < V; ++c) gradient_bytes += memory.parameters(slices[static_cast<std::size_t>(c * P + p)]);
      gradient_bytes *= memory.settings.gradient_bytes / layout.dp;
      std::vector<task_id> arrived(static_cast<std::size_t>(layout.dp));
      for (int i = 0; i < layout.dp; ++i) arrived[static_cast<std::size_t>(i)] = last_backward[static_cast<std::size_t>(i)][static_cast<std::size_t>(p)];
      for (int step = 0; step < 2 * (layout.dp - 1); ++step) {
        std::vector<task_id> next(arrived.size());
        for (int i = 0; i < layout.dp; ++i) {
          const int to = (i + 1) % layout.dp;
          const task_tag tag{task_kind::gradient_sync, flow_leg::direct, -1, step, p, 0};
          // a ring step sends once this rank holds what arrived in the step before
          next[static_cast<std::size_t>(to)] = engine.flow(layout.rank_of({0, 0, p, i}), layout.rank_of({0, 0, p, to}), gradient_bytes, tag,
                                                           {arrived[static_cast<std::size_t>(i)], last_backward[static_cast<std::size_t>(i)][static_cast<std::size_t>(p)]});
        }
        arrived = std::move(next);
      }
    }
  }

  result.run = engine.run();
  result.iteration_s = result.run.makespan;
  double bubble_sum = 0;
  for (int p = 0; p < P; ++p) {
    double latest = 0;
    for (std::size_t r = 0; r < replicas.size(); ++r)
      latest = std::max(latest, result.run.end[static_cast<std::size_t>(last_backward[r][static_cast<std::size_t>(p)])]);
    for (std::size_t r = 0; r < replicas.size(); ++r) {
      pipeline_stage_report& rep = result.stages[r][static_cast<std::size_t>(p)];
      rep.dp_wait_s = latest - result.run.end[static_cast<std::size_t>(last_backward[r][static_cast<std::size_t>(p)])];
      rep.busy_s = result.run.ranks[static_cast<std::size_t>(layout.rank_of({0, 0, p, static_cast<int>(r)}))].busy_total();
      rep.bubble_s = std::max(0.0, result.iteration_s - rep.busy_s);
      bubble_sum += result.iteration_s > 0 ? rep.bubble_s / result.iteration_s : 0.0;
    }
  }
  result.bubble_ratio = bubble_sum / (static_cast<double>(P) * static_cast<double>(replicas.size()));

  // WLB-LLM's imbalance degrees: attention work (causal pairs) max / mean over every
  // micro-batch of the global batch; forward latency max x PP / total, per replica (the worst).
  double max_pairs = 0, sum_pairs = 0;
  std::size_t count = 0;
  result.latency_imbalance = 0;
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    const detail::stage_time_table<T>& table = tables[r];
    double max_latency = 0, total_latency = 0;
    for (std::size_t k = 0; k < replicas[r].size(); ++k) {
      double pairs = 0;
      for (const token_count d : replicas[r][k].documents) pairs += static_cast<double>(causal_pairs(d));
      max_pairs = std::max(max_pairs, pairs);
      sum_pairs += pairs;
      ++count;
      double latency = 0;
      for (int v = 0; v <= last_virtual; ++v) latency += table.at(static_cast<int>(k), v).forward;
      max_latency = std::max(max_latency, latency);
      total_latency += latency;
    }
    if (total_latency > 0) result.latency_imbalance = std::max(result.latency_imbalance, max_latency * P / total_latency);
  }
  result.attention_imbalance = sum_pairs > 0 ? max_pairs / (sum_pairs / static_cast<double>(count)) : 1.0;
  return result;
}

ZEPPELIN_NAMESPACE_END
