// zeppelin/sim/flexsp_step.hpp
// The FlexSP-like baseline of InfiniPipe's evaluation on the event engine: heterogeneous
// Ulysses groups per micro-batch, ZeRO-3 over the whole cluster, no pipeline (Wang et al.,
// "FlexSP: Accelerating Large Language Model Training via Flexible Sequence Parallelism",
// ASPLOS 2025, as InfiniPipe's section 5 runs it).
//   in : the sequences' lengths, the model, a topology (all its GPUs train), the bytes of a
//        GPU the training may use, simulator options
//   out: flexsp_step_result: the iteration's seconds, the micro-batches (each a partition of
//        the GPUs into groups, each group its degree, first GPU and sequences), the engine run
// Groups: every sequence gets the smallest power-of-two Ulysses degree (a divisor of a
// node's GPUs or whole nodes) at which its activations (cost/chunk_cost.hpp, Eq. 5 with
// d_p = 1) fit next to the model states (ZeRO-3 over every GPU); a sequence that fits no
// group recomputes every layer in a group of every GPU.
// Micro-batches: FlexSP assigns sequences to groups with a MILP; a greedy stands in for it.
// Sequences in decreasing order of work (seconds x degree) go to the first micro-batch that
// has room: a new group on a free aligned block of the sequence's degree, else the least
// loaded group of the same degree whose GPUs still hold its activations; a new micro-batch
// when none has room. A group runs its sequences as one packed
// varlen input (one chunk of the cost model: compute per sequence, one all-to-all latency).
// Execution: ZeRO-3 gathers every layer's parameters over every GPU (rings of
// detail/collective_rings.hpp), so the groups of a micro-batch advance layer by layer
// together: each layer's compute of each group (its forward, or backward plus recompute,
// spread evenly over the layers, on the group's first GPU) waits for the layer's gather; the
// next layer's gather overlaps it (detail/zero3_traffic.hpp); every backward layer
// reduce-scatters its gradients once the groups are done with it. Micro-batches run one
// after the other.
// Errors: invalid_argument for no sequences, a length < 1, usable bytes not positive; what
// the cost model and the engine throw. Deterministic. Host-only.
#pragma once

#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/sim/detail/collective_rings.hpp>
#include <zeppelin/sim/detail/zero3_traffic.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct flexsp_group {
  int degree = 1;                     //!< Ulysses degree: GPUs first_gpu .. first_gpu + degree - 1
  rank_index first_gpu = 0;
  bool recompute = false;             //!< every layer recomputed (a sequence too long for any group)
  std::vector<std::int64_t> sequences;  //!< indices into the lengths, in the order added
  friend bool operator==(const flexsp_group&, const flexsp_group&) = default;
};

struct flexsp_step_result {
  double iteration_s = 0;
  std::vector<std::vector<flexsp_group>> micro_batches;  //!< in execution order
  engine_run run;
};

namespace detail {

struct flexsp_job {
  std::int64_t sequence = 0;
  std::size_t degree = 0;  //!< index into flexsp_degrees
  bool recompute = false;
  double seconds = 0;  //!< forward + backward (+ recompute) alone in its group
  double bytes = 0;    //!< activation bytes per GPU of its group
};

// The group degrees (powers of two that are node-aligned and divide the cluster, and the
// whole cluster) with the cost model of each.
struct flexsp_degrees {
  std::vector<int> degree;
  std::vector<chunk_cost_model> cost;

  flexsp_degrees(const model_config& model, const topology& topo) {
    const int gpus = topo.num_ranks();
    for (int d = 1; d <= gpus; d *= 2)
      if (node_aligned_group(topo, d) && gpus % d == 0) degree.push_back(d);
    if (degree.back() != gpus && node_aligned_group(topo, gpus)) degree.push_back(gpus);
    for (const int d : degree) cost.push_back(chunk_cost_model::for_model(model, topo, d, 1));
  }
};

// Per sequence the smallest degree its activations fit in, its time and memory (see the
// file comment).
[[nodiscard]] inline std::vector<flexsp_job> flexsp_jobs(std::span<const token_count> lengths, const flexsp_degrees& degrees, double budget) {
  std::vector<flexsp_job> jobs;
  for (std::size_t s = 0; s < lengths.size(); ++s) {
    const chunk whole{0, {{static_cast<std::int64_t>(s), 0, lengths[s]}}};
    for (std::size_t i = 0; i < degrees.degree.size(); ++i) {
      const chunk_cost_model& cost = degrees.cost[i];
      const double bytes = cost.activation_bytes(whole, lengths);
      const bool fits = bytes <= budget;
      if (!fits && i + 1 < degrees.degree.size()) continue;
      const double t = cost.busy_seconds(cost.forward, whole) + cost.busy_seconds(cost.backward, whole);
      jobs.push_back({static_cast<std::int64_t>(s), i, !fits, t + (fits ? 0.0 : cost.compute_seconds(cost.forward, whole)), fits ? bytes : 0.0});
      break;
    }
  }
  return jobs;
}

}  // namespace detail

//! Simulates the FlexSP-like step (see the file comment).
[[nodiscard]] inline flexsp_step_result simulate_flexsp_step(std::span<const token_count> lengths, const model_config& model,
                                                             const topology& topo, double usable_bytes, link_model link = {}) {
  ZEPPELIN_EXPECTS(!lengths.empty(), "a step needs at least one sequence", {});
  for (std::size_t i = 0; i < lengths.size(); ++i)
    ZEPPELIN_EXPECTS(lengths[i] >= 1, "a sequence needs at least 1 token", {{"index", double(i)}, {"length", double(lengths[i])}});
  ZEPPELIN_EXPECTS(std::isfinite(usable_bytes) && usable_bytes > 0, "the usable bytes of a GPU must be positive and finite",
                   {{"usable_bytes", usable_bytes}});
  const int gpus = topo.num_ranks();
  const double budget = stage_budgets(model, usable_bytes, gpus, 1).front();
  const detail::flexsp_degrees degrees(model, topo);
  std::vector<detail::flexsp_job> jobs = detail::flexsp_jobs(lengths, degrees, budget);
  const auto gpus_of = [&](const detail::flexsp_job& j) { return degrees.degree[j.degree]; };
  std::stable_sort(jobs.begin(), jobs.end(),
                   [&](const detail::flexsp_job& a, const detail::flexsp_job& b) { return a.seconds * gpus_of(a) > b.seconds * gpus_of(b); });

  // micro-batches: groups with their load (seconds) and activation bytes per GPU
  struct open_group {
    flexsp_group group;
    std::size_t degree = 0;  // index into `degrees`
    double seconds = 0, bytes = 0;
  };
  struct open_batch {
    std::vector<open_group> groups;
    std::vector<char> used;  // per GPU
  };
  // a new group on the first free aligned block of `b`, else the least loaded group of the
  // degree whose memory has room; false when neither exists
  const auto place = [&](open_batch& b, const detail::flexsp_job& j) {
    const int d = gpus_of(j);
    for (rank_index first = 0; first + d <= gpus; first += d)
      if (std::none_of(b.used.begin() + first, b.used.begin() + first + d, [](char u) { return u != 0; })) {
        std::fill(b.used.begin() + first, b.used.begin() + first + d, char{1});
        b.groups.push_back({{d, first, j.recompute, {j.sequence}}, j.degree, j.seconds, j.bytes});
        return true;
      }
    open_group* join = nullptr;
    for (open_group& g : b.groups)
      if (g.degree == j.degree && !g.group.recompute && !j.recompute && g.bytes + j.bytes <= budget && (join == nullptr || g.seconds < join->seconds))
        join = &g;
    if (join == nullptr) return false;
    join->group.sequences.push_back(j.sequence);
    join->seconds += j.seconds;
    join->bytes += j.bytes;
    return true;
  };
  std::vector<open_batch> batches;
  for (const detail::flexsp_job& j : jobs) {
    std::size_t b = 0;
    while (b < batches.size() && !place(batches[b], j)) ++b;
    if (b < batches.size()) continue;
    batches.emplace_back().used.assign(static_cast<std::size_t>(gpus), char{0});
    (void)place(batches.back(), j);  // an empty micro-batch has room for any group
  }

  // the event engine: per micro-batch and layer, the gather over every GPU, then each group
  flexsp_step_result out;
  event_engine engine(topo, stream_policy::in_order, link);
  std::vector<rank_index> all(static_cast<std::size_t>(gpus));
  std::iota(all.begin(), all.end(), rank_index{0});
  const detail::collective_rings rings = detail::make_collective_rings(topo, all);
  std::vector<std::size_t> every_edge(rings.edges.size());
  std::iota(every_edge.begin(), every_edge.end(), std::size_t{0});
  detail::zero3_stage_traffic<event_engine> traffic(rings, std::move(every_edge));
  const pipeline_memory_model states{model, {}, {.zero_stage = 3}};
  const stage_slice whole_model{model.layers, true, true};
  const double layer_bytes = states.parameters(whole_model) * states.settings.parameter_bytes / model.layers;
  std::vector<task_id> layer_tasks;
  for (std::size_t m = 0; m < batches.size(); ++m) {
    std::vector<flexsp_group>& groups = out.micro_batches.emplace_back();
    std::vector<double> forward, backward;  // per group, one layer
    for (const open_group& g : batches[m].groups) {
      groups.push_back(g.group);
      chunk packed{0, {}};
      for (const std::int64_t s : g.group.sequences) packed.slices.push_back({s, 0, lengths[static_cast<std::size_t>(s)]});
      const chunk_cost_model& cost = degrees.cost[g.degree];
      // the groups' own work: the gathers below are ZeRO-3's time, not the cost model's floor
      forward.push_back(cost.busy_seconds(cost.forward, packed) / model.layers);
      backward.push_back((cost.busy_seconds(cost.backward, packed) + (g.group.recompute ? cost.compute_seconds(cost.forward, packed) : 0.0)) /
                         model.layers);
    }
    for (const bool is_forward : {true, false})
      for (int layer = 0; layer < model.layers; ++layer) {
        const task_tag tag{is_forward ? task_kind::linear_forward : task_kind::linear_backward, flow_leg::direct, -1, layer, 0,
                           static_cast<std::int32_t>(m)};
        const task_id gather = traffic.gather(engine, layer_bytes, tag);
        layer_tasks.clear();
        for (std::size_t g = 0; g < groups.size(); ++g)
          layer_tasks.push_back(engine.compute(groups[g].first_gpu, (is_forward ? forward : backward)[g], tag, 0, {gather}));
        const task_id done = engine.join(std::span<const task_id>(layer_tasks));
        traffic.computed(done);
        if (!is_forward) traffic.reduce_scatter(engine, layer_bytes, done, tag);
      }
  }
  out.run = engine.run();
  out.iteration_s = out.run.makespan;
  return out;
}

ZEPPELIN_NAMESPACE_END
