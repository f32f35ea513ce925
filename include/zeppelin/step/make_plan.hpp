// zeppelin/step/make_plan.hpp
// Step plans of the common shapes, from their parts: the replicas' degrees and ranks, each
// micro-batch's pieces, a CP layout policy, a pipeline schedule and a checkpoint policy.
//   in : the cluster, the model, the iteration's documents, per replica its micro-batches'
//        pieces, and
//        - make_step_plan: one step_shape for every replica (Megatron-LM's rank order over
//          the cluster's first tp x cp x pp x dp ranks: TP fastest, then CP, then DP, then
//          PP, parallel_layout::rank_of), or
//        - make_replica: one replica of its own degrees on given ranks (Hydraulis'
//          heterogeneous replicas; a plan of such replicas is {nodes, gpus, documents,
//          replicas, sync})
//        a layout policy (any partitioner, or any_partitioner: it lays out each micro-batch
//        on its CP group's topology, step/cp_group_topology.hpp) and a checkpoint policy
//        (asked once per (virtual stage, micro-batch): recompute_counts)
//   out: a step plan; make_step_program (step/build.hpp) validates it
// The layers split evenly over the pp x V virtual stages (cost/layer_split.hpp, the first
// ones one more). Errors: invalid_argument for a layout needing more ranks than the cluster
// has, a replica list whose count is not dp, no pieces; what the policies throw.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/step/cp_group_topology.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What every replica of a homogeneous job shares.
struct step_shape {
  parallel_layout layout{};  //!< tp, cp, pp, dp
  tp_collectives tp_mode = tp_collectives::all_reduce;
  any_pipeline_schedule schedule{};
  gradient_sync sync = gradient_sync::all_reduce;
  friend bool operator==(const step_shape&, const step_shape&) = default;
};

namespace detail {

// The plan a layout policy makes for `b` on `t`.
template <class L>
plan lay_out(const L& layout, const batch& b, const topology& t) {
  if constexpr (requires { layout.partition(b, t); })
    return layout.partition(b, t);
  else
    return partition(layout, b, t);
}

}  // namespace detail

//! Per (virtual stage, micro-batch) the layers `policy` recomputes, as step_replica::recompute
//! holds them, for a replica whose layers and micro-batches are set.
template <checkpoint_policy C>
[[nodiscard]] std::vector<std::int32_t> recompute_counts(const step_replica& r, const C& policy) {
  const auto M = r.micro_batches.size();
  std::vector<std::int32_t> out(r.layers.size() * M, 0);
  for (std::size_t v = 0; v < r.layers.size(); ++v) {
    const int stage = static_cast<int>(v) % r.pp, chunk = static_cast<int>(v) / r.pp;
    int earlier = 0;
    for (int c = 0; c < chunk; ++c) earlier += r.layers[static_cast<std::size_t>(c * r.pp + stage)];
    for (std::size_t k = 0; k < M; ++k) {
      const int n = policy.recomputed_layers({stage, chunk, static_cast<int>(k), r.layers[v], earlier});
      ZEPPELIN_EXPECTS(n >= 0 && n <= r.layers[v], "a checkpoint policy recomputed more layers than the virtual stage holds",
                       {{"virtual_stage", double(v)}, {"micro_batch", double(k)}, {"recomputed", double(n)}, {"layers", double(r.layers[v])}});
      out[v * M + k] = n;
    }
  }
  return out;
}

//! One replica of degrees tp, cp, pp on `ranks` ((t, c, s) at (s cp + c) tp + t), its
//! micro-batches' pieces laid out by `layout`, its recomputation from `checkpoint`.
template <class L, checkpoint_policy C>
[[nodiscard]] step_replica make_replica(const topology& cluster, const model_config& model, int tp, int cp, int pp, std::vector<rank_index> ranks,
                                        tp_collectives tp_mode, any_pipeline_schedule schedule, std::vector<std::vector<step_piece>> micro_batches,
                                        const L& layout, const C& checkpoint) {
  ZEPPELIN_EXPECTS(!micro_batches.empty(), "a replica needs at least one micro-batch", {});
  step_replica r;
  r.tp = tp, r.cp = cp, r.pp = pp;
  r.ranks = std::move(ranks);
  r.tp_mode = tp_mode;
  r.schedule = std::move(schedule);
  r.layers = split_layers(model.layers, pp * r.schedule.virtual_stages());
  ZEPPELIN_EXPECTS(r.ranks.size() == static_cast<std::size_t>(tp) * static_cast<std::size_t>(cp) * static_cast<std::size_t>(pp),
                   "a replica needs tp x cp x pp ranks", {{"ranks", double(r.ranks.size())}, {"tp", double(tp)}, {"cp", double(cp)}, {"pp", double(pp)}});
  const topology shape = cp_group_topology(cluster, r, 0, 0);
  for (std::vector<step_piece>& pieces : micro_batches) {
    ZEPPELIN_EXPECTS(!pieces.empty(), "a micro-batch needs at least one piece", {});
    std::vector<token_count> lengths;
    for (const step_piece& x : pieces) lengths.push_back(x.tokens());
    step_micro_batch mb;
    mb.layout = detail::lay_out(layout, batch(std::move(lengths)), shape);
    mb.pieces = std::move(pieces);
    r.micro_batches.push_back(std::move(mb));
  }
  r.recompute = recompute_counts(r, checkpoint);
  return r;
}

//! The step plan of a homogeneous job (see the file comment): pieces[d] the micro-batches of
//! replica d, in the order they enter its pipeline.
template <class L, checkpoint_policy C>
[[nodiscard]] step_plan make_step_plan(const topology& cluster, const model_config& model, std::vector<token_count> documents,
                                       std::vector<std::vector<std::vector<step_piece>>> pieces, const step_shape& shape, const L& layout,
                                       const C& checkpoint) {
  validate(shape.layout);
  ZEPPELIN_EXPECTS(shape.layout.gpus() <= cluster.num_ranks(), "the layout needs more GPUs than the cluster has",
                   {{"gpus", double(shape.layout.gpus())}, {"cluster_gpus", double(cluster.num_ranks())}});
  ZEPPELIN_EXPECTS(pieces.size() == static_cast<std::size_t>(shape.layout.dp), "one micro-batch list per data-parallel replica is needed",
                   {{"replicas", double(pieces.size())}, {"dp", double(shape.layout.dp)}});
  step_plan p;
  p.nodes = cluster.nodes();
  p.gpus_per_node = cluster.gpus_per_node();
  p.documents = std::move(documents);
  p.sync = shape.sync;
  const parallel_layout& l = shape.layout;
  for (int d = 0; d < l.dp; ++d) {
    std::vector<rank_index> ranks;
    for (int s = 0; s < l.pp; ++s)
      for (int c = 0; c < l.cp; ++c)
        for (int t = 0; t < l.tp; ++t) ranks.push_back(l.rank_of({t, c, s, d}));
    p.replicas.push_back(make_replica(cluster, model, l.tp, l.cp, l.pp, std::move(ranks), shape.tp_mode, shape.schedule,
                                      std::move(pieces[static_cast<std::size_t>(d)]), layout, checkpoint));
  }
  return p;
}

//! Whole documents as pieces: micro-batch k of `documents_of[k]` (document indices).
[[nodiscard]] inline std::vector<std::vector<step_piece>> whole_documents(std::span<const token_count> lengths,
                                                                          std::span<const std::vector<std::int64_t>> documents_of) {
  std::vector<std::vector<step_piece>> out;
  for (const std::vector<std::int64_t>& docs : documents_of) {
    auto& mb = out.emplace_back();
    for (const std::int64_t d : docs) {
      ZEPPELIN_EXPECTS(d >= 0 && static_cast<std::size_t>(d) < lengths.size(), "no such document", {{"document", double(d)}, {"documents", double(lengths.size())}});
      mb.push_back({d, 0, lengths[static_cast<std::size_t>(d)]});
    }
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
