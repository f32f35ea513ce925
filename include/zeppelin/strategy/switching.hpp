// zeppelin/strategy/switching.hpp
// Hydraulis' switching between strategies (section 5): the optimizer keeps fp32 parameters
// and states fully sharded over all N GPUs, and each iteration's strategy pulls the bf16
// parameters it needs and pushes its gradients back, moving "mutual slices", the finest
// partition shared by the two layouts.
//   in : a strategy (its pipelines in pipelines_of order occupy consecutive GPUs, ranks
//        within a pipeline in Megatron-LM's tp-cp-pp order), N, the model
//   out: switching_plan: the pull and push transfers as plain data (source GPU, destination
//        GPU, the layers whose tensors move, the segment range of each tensor, bytes), the
//        bytes each GPU moves, and a per-GPU bandwidth bound on their time
// Pull: every tensor is cut into LCM(N, TP_max) equal segments; GPU g owns segments
// [g s / N, (g + 1) s / N) of every tensor; TP rank t of a pipeline of TP degree T needs
// segments [t s / T, (t + 1) s / T) of the tensors of its stage's layers (every CP rank
// the same). Each needed segment comes from its owner (a local move when the owner is the
// GPU itself, not listed). Push: gradients exist in D = sum_i d_i CP(P_i) copies (every
// pipeline and CP rank holds one of each TP shard); tensors are cut into
// LCM(N, D x TP_max) segments; segment k is first reduced on copy k mod D (a reduce-scatter
// over the copies: the other holders of k send theirs there), then linked to its owner.
// Both move bf16 (bytes_per_element). With one scheme and TP 1 the pull is an all-gather,
// as in ZeRO (the paper's remark). The push reduces on copy k mod D, not on the owner's
// copy, so even a homogeneous strategy links reduced segments to their owners: at most the
// model's bytes more than ZeRO's reduce-scatter, spread over all GPUs.
// Time: switching_seconds bounds a step from below by its busiest port: a GPU's NVLink
// bytes sent or received, or a NIC's cross-node bytes sent or received (every GPU behind
// it), each at full bandwidth, plus the link latency; a step program (step/build.hpp)
// carries the transfers of make_switching_plan as its gradient sync, and
// sim/simulate_step.hpp runs them on the event engine (flow by flow, or each exchange
// whole at this bound: exchange_pricing). Hydraulis overlaps the pull and push with propagation when every micro-batch of a pipeline holds at
// least TP x CP x F / B tokens (overlap_tokens: F the GPU's bf16 FLOP/s, B the slowest link).
// Errors: invalid_argument for N < the strategy's GPUs, an empty strategy, an invalid model,
// bytes_per_element <= 0.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/busiest_port.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/strategy/dispatch.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One move of mutual slices: segments [first_segment, first_segment + segments) of every
//! parameter tensor of layers [first_layer, first_layer + layers) (with the embedding or
//! LM head when the stage holds them), from GPU src to GPU dst.
struct slice_transfer {
  int src = 0;
  int dst = 0;
  int first_layer = 0;
  int layers = 0;
  std::int64_t first_segment = 0;
  std::int64_t segments = 0;
  double bytes = 0;
  friend bool operator==(const slice_transfer&, const slice_transfer&) = default;
};

struct switching_plan {
  std::int64_t pull_segments = 1;          //!< LCM(N, TP_max)
  std::int64_t push_segments = 1;          //!< LCM(N, D x TP_max)
  int copies = 1;                          //!< D = sum of pipelines x CP
  std::vector<slice_transfer> pull;        //!< owner -> user
  std::vector<slice_transfer> push_reduce; //!< copy -> reducing copy
  std::vector<slice_transfer> push_link;   //!< reducing copy -> owner
};

namespace detail {

// What one GPU of the strategy holds: its stage's layers and its TP shard.
struct switching_user {
  int gpu, tp, tp_rank, copy, first_layer, layers;
  double elements;  // parameter elements of the stage (all tensors, before TP)
};

inline std::vector<switching_user> switching_users(const strategy& s, const model_config& model) {
  std::vector<switching_user> out;
  int gpu = 0, copy = 0;
  for (const scheme_profile& p : pipelines_of(s)) {
    const parallel_layout layout{.tp = p.scheme.tp, .cp = p.scheme.cp, .pp = p.scheme.pp, .dp = 1};
    const std::vector<stage_slice> slices = split_model(model, p.scheme.pp);
    const pipeline_memory_model full{model, {.tp = 1, .cp = 1, .pp = 1, .dp = 1}, {}};
    std::vector<int> first(slices.size(), 0);
    for (std::size_t k = 1; k < slices.size(); ++k) first[k] = first[k - 1] + slices[k - 1].layers;
    for (int stage = 0; stage < p.scheme.pp; ++stage)
      for (int c = 0; c < p.scheme.cp; ++c)
        for (int t = 0; t < p.scheme.tp; ++t)
          out.push_back({gpu + static_cast<int>(layout.rank_of({t, c, stage, 0})), p.scheme.tp, t, copy + c, first[static_cast<std::size_t>(stage)],
                         slices[static_cast<std::size_t>(stage)].layers, full.parameters(slices[static_cast<std::size_t>(stage)])});
    gpu += static_cast<int>(p.scheme.gpus());
    copy += p.scheme.cp;
  }
  return out;
}

// The segment grids of a switching plan: TP_max and D over `users`, LCM(N, TP_max) and
// LCM(N, D x TP_max).
struct switching_grid {
  int tp_max = 1, copies = 0;
  std::int64_t pull_segments = 1, push_segments = 1;
};

inline switching_grid switching_grid_of(std::span<const switching_user> users, long long gpus) {
  switching_grid out;
  for (const switching_user& u : users) {
    ZEPPELIN_EXPECTS(u.gpu >= 0 && u.gpu < gpus, "a switching user's GPU is outside the cluster", {{"gpu", double(u.gpu)}, {"gpus", double(gpus)}});
    out.tp_max = std::max(out.tp_max, u.tp);
    out.copies = std::max(out.copies, u.copy + 1);
  }
  out.pull_segments = std::lcm(static_cast<std::int64_t>(gpus), static_cast<std::int64_t>(out.tp_max));
  out.push_segments = std::lcm(static_cast<std::int64_t>(gpus), static_cast<std::int64_t>(out.copies) * out.tp_max);
  return out;
}

}  // namespace detail

//! A lower bound on the transfers make_switching_plan lists for `users` on N GPUs, in
//! O(users), so that a caller can refuse a plan too large to hold before building it: every
//! owner range a user's pull crosses (its own aside) and every segment of its push (each
//! moves, but for the at most LCM / N that it both reduces and owns). With every optimizer
//! state sharded over all N GPUs this grows as N x LCM(N, D x TP_max) / TP: at least N^2 / TP.
[[nodiscard]] inline std::int64_t switching_transfers_at_least(std::span<const detail::switching_user> users, long long gpus) {
  const detail::switching_grid grid = detail::switching_grid_of(users, gpus);
  const std::int64_t per_owner = grid.pull_segments / gpus;  // pull segments each GPU owns
  std::int64_t count = 0;
  for (const detail::switching_user& u : users) {
    const std::int64_t lo = u.tp_rank * grid.pull_segments / u.tp, hi = (u.tp_rank + 1) * grid.pull_segments / u.tp;
    const std::int64_t first_owner = lo / per_owner, last_owner = (hi - 1) / per_owner;
    count += last_owner - first_owner + 1 - (u.gpu >= first_owner && u.gpu <= last_owner ? 1 : 0);
    const std::int64_t push = (u.tp_rank + 1) * grid.push_segments / u.tp - u.tp_rank * grid.push_segments / u.tp;
    count += std::max<std::int64_t>(0, push - grid.push_segments / gpus);
  }
  return count;
}

//! The pull and push plans of the GPUs `users` describe on N GPUs (see the file comment):
//! each user a GPU with its TP degree and rank, its copy (pipeline x CP rank, numbered from 0
//! without gaps) and the layers (and parameter elements, before TP) of one of its stages.
[[nodiscard]] inline switching_plan make_switching_plan(std::span<const detail::switching_user> users, long long gpus,
                                                        double bytes_per_element = 2) {
  ZEPPELIN_EXPECTS(!users.empty(), "a switching plan needs GPUs that hold parameters", {});
  ZEPPELIN_EXPECTS(bytes_per_element > 0, "bytes per element must be positive", {{"bytes_per_element", bytes_per_element}});
  const detail::switching_grid grid = detail::switching_grid_of(users, gpus);
  const int copies = grid.copies;
  switching_plan plan;
  plan.copies = copies;
  plan.pull_segments = grid.pull_segments;
  plan.push_segments = grid.push_segments;
  const auto owner_of = [&](std::int64_t segment, std::int64_t segments) { return static_cast<int>(segment / (segments / gpus)); };
  // Pull: each needed segment range from its owners, split where the owner changes.
  for (const detail::switching_user& u : users) {
    const std::int64_t seg = plan.pull_segments, lo = u.tp_rank * seg / u.tp, hi = (u.tp_rank + 1) * seg / u.tp;
    for (std::int64_t k = lo; k < hi;) {
      const int owner = owner_of(k, seg);
      const std::int64_t end = std::min<std::int64_t>(hi, static_cast<std::int64_t>(owner + 1) * (seg / gpus));
      if (owner != u.gpu)
        plan.pull.push_back({owner, u.gpu, u.first_layer, u.layers, k, end - k, u.elements * static_cast<double>(end - k) / static_cast<double>(seg) * bytes_per_element});
      k = end;
    }
  }
  // Push: segment k of a TP shard is reduced on copy k mod D (among that shard's holders),
  // then linked to its owner. The reducing copy may cut the layers into other stages: each
  // of its stages takes the layers it shares with the sender.
  const std::int64_t seg = plan.push_segments;
  std::vector<std::vector<std::size_t>> by_copy(static_cast<std::size_t>(copies));
  for (std::size_t i = 0; i < users.size(); ++i) by_copy[static_cast<std::size_t>(users[i].copy)].push_back(i);
  for (const detail::switching_user& u : users) {
    const double per_layer = u.elements / std::max(1, u.layers) / static_cast<double>(seg) * bytes_per_element;
    const std::int64_t lo = u.tp_rank * seg / u.tp, hi = (u.tp_rank + 1) * seg / u.tp;
    for (std::int64_t k = lo; k < hi; ++k) {
      const int reducer_copy = static_cast<int>(k % copies);
      if (u.copy != reducer_copy) {
        for (const std::size_t ri : by_copy[static_cast<std::size_t>(reducer_copy)]) {
          const detail::switching_user& r = users[ri];
          const int first = std::max(u.first_layer, r.first_layer), end = std::min(u.first_layer + u.layers, r.first_layer + r.layers);
          if (first >= end || k < r.tp_rank * seg / r.tp || k >= (r.tp_rank + 1) * seg / r.tp) continue;
          plan.push_reduce.push_back({u.gpu, r.gpu, first, end - first, k, 1, per_layer * (end - first)});
        }
        continue;
      }
      const int owner = owner_of(k, seg);
      if (owner != u.gpu) plan.push_link.push_back({u.gpu, owner, u.first_layer, u.layers, k, 1, per_layer * u.layers});
    }
  }
  return plan;
}

//! The pull and push plans of `s` on N GPUs (see the file comment).
[[nodiscard]] inline switching_plan make_switching_plan(const strategy& s, long long gpus, const model_config& model,
                                                        double bytes_per_element = 2) {
  validate(model);
  ZEPPELIN_EXPECTS(!s.parts.empty(), "a switching plan needs a strategy with pipelines", {});
  ZEPPELIN_EXPECTS(gpus >= s.gpus(), "the cluster has fewer GPUs than the strategy uses", {{"gpus", double(gpus)}, {"strategy_gpus", double(s.gpus())}});
  const std::vector<detail::switching_user> users = detail::switching_users(s, model);
  return make_switching_plan(users, gpus, bytes_per_element);
}

//! A lower bound on the time of `transfers` on `topo` (see the file comment): the busiest
//! NVLink port (a GPU's same-node bytes sent or received) or NIC (the cross-node bytes its
//! GPUs send or receive), each at full bandwidth, plus the link latency
//! (busiest_port_seconds, cost/busiest_port.hpp).
[[nodiscard]] inline double switching_seconds(std::span<const slice_transfer> transfers, const topology& topo) {
  std::vector<link_flow> flows;
  flows.reserve(transfers.size());
  for (const slice_transfer& t : transfers) flows.push_back({t.src, t.dst, t.bytes});
  return busiest_port_seconds(flows, topo);
}

//! Hydraulis' overlap threshold: a pipeline's pull and push hide behind propagation when
//! each of its micro-batches holds at least TP x CP x F / B tokens (F: bf16 FLOP/s of the
//! GPU, B: the slowest link's bytes/s).
[[nodiscard]] inline double overlap_tokens(const parallel_scheme& s, const gpu_spec& gpu, double slowest_bandwidth) {
  ZEPPELIN_EXPECTS(slowest_bandwidth > 0, "the slowest link needs a positive bandwidth", {{"bandwidth", slowest_bandwidth}});
  return static_cast<double>(s.tp) * s.cp * gpu.peak_flops / slowest_bandwidth;
}

ZEPPELIN_NAMESPACE_END
