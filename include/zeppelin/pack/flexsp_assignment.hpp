// zeppelin/pack/flexsp_assignment.hpp
// The FlexSP-like baseline's plan (Wang et al., "FlexSP: Accelerating Large Language Model
// Training via Flexible Sequence Parallelism", ASPLOS 2025, as InfiniPipe's section 5 runs
// it): per micro-batch, heterogeneous Ulysses groups on disjoint GPUs, each running its
// sequences whole; no pipeline. pack/flexsp_step_plan.hpp turns it into step plans.
//   in : the sequences' lengths, the model, a topology (all its GPUs train), the bytes of a
//        GPU the training may use
//   out: flexsp_assignment: the micro-batches in execution order, each a list of groups
//        (degree, first GPU, sequences in the order added, whether it recomputes)
// Degrees: every sequence gets the smallest power-of-two Ulysses degree (a divisor of a
// node's GPUs or whole nodes, and of the cluster) at which its activations
// (cost/chunk_cost.hpp, Eq. 5 with d_p = 1) fit next to the model states (ZeRO-3 over every
// GPU: stage_budgets with d_s = all GPUs, d_p = 1); a sequence that fits no group
// recomputes every layer in a group of every GPU.
// Micro-batches: FlexSP assigns sequences to groups with a MILP; a greedy stands in for it.
// Sequences in decreasing order of work (seconds alone in their group, cost/chunk_cost.hpp,
// x degree) go to the first micro-batch that has room: a new group on the first free
// aligned block of the sequence's degree, else the least loaded group of the same degree
// whose GPUs still hold its activations; a new micro-batch when none has room.
// Errors: invalid_argument for no sequences, a length < 1, usable bytes not positive or not
// finite; what the cost model throws. Deterministic. Host-only.
#pragma once

#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/chunk_cost.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One Ulysses group of a micro-batch.
struct flexsp_group {
  int degree = 1;                       //!< GPUs first_gpu .. first_gpu + degree - 1
  rank_index first_gpu = 0;
  bool recompute = false;               //!< every layer recomputed (a sequence too long for any group)
  std::vector<std::int64_t> sequences;  //!< indices into the lengths, in the order added
  friend bool operator==(const flexsp_group&, const flexsp_group&) = default;
};

struct flexsp_assignment {
  std::vector<std::vector<flexsp_group>> micro_batches;  //!< in execution order
  friend bool operator==(const flexsp_assignment&, const flexsp_assignment&) = default;
};

namespace detail {

struct flexsp_job {
  std::int64_t sequence = 0;
  std::size_t degree = 0;  // index into flexsp_degrees
  bool recompute = false;
  double seconds = 0;  // forward + backward (+ recompute) alone in its group
  double bytes = 0;    // activation bytes per GPU of its group
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

//! The FlexSP-like groups of every micro-batch (see the file comment).
[[nodiscard]] inline flexsp_assignment assign_flexsp_groups(std::span<const token_count> lengths, const model_config& model, const topology& topo,
                                                            double usable_bytes) {
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
  flexsp_assignment out;
  for (const open_batch& b : batches) {
    std::vector<flexsp_group>& groups = out.micro_batches.emplace_back();
    for (const open_group& g : b.groups) groups.push_back(g.group);
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
