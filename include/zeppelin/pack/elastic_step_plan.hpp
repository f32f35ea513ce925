// zeppelin/pack/elastic_step_plan.hpp
// InfiniPipe's iteration as step plans (step/step_plan.hpp): each pipeline of an elastic plan
// (pack/elastic_pipeline.hpp) becomes one step plan, which the one step simulator prices
// (pack/sequence_step_plan.hpp simulate_back_to_back: the pipelines run one after another).
//   in : the elastic plan, the sequences' lengths, the model, the plan's options (d_s, d_p of
//        its cost model), the cluster (at least d_s x d_p GPUs; a stage's d_s GPUs one
//        node's, or whole nodes)
//   out: per pipeline a sequence_step_plan with one replica:
//          tp 1, cp d_s (the Ulysses group), pp d_p on the cluster's first d_s x d_p GPUs:
//          CP rank c of stage s on GPU s d_s + c;
//          micro-batches  the pipeline's chunks in forward order, each chunk's slices as its
//                         pieces (a slice [begin, end) keeps begin as its context: the K/V
//                         its earlier slices left on the stage);
//          schedule       chunk-level 1F1B with the pipeline's chains;
//          layouts        the ulysses partitioner over the stage's CP group: every piece
//                         zigzag-split over the d_s ranks, attention after the all-to-all
//                         (or any layout policy given: Zeppelin's hierarchical planner);
//          recompute      per (stage, chunk) the pipeline's stage-aware plan
//                         (stage_aware_recompute, capped at the stage's layers);
//          sync           fully_sharded: ZeRO-3 over each stage's d_s ranks, every layer's
//                         parameters gathered before its forward and backward and its
//                         gradients reduce-scattered after the backward.
// The fixed-chunk baselines (pack/fixed_chunk_pipeline.hpp) are elastic plans too and run the
// same way; with d_p = 1 and d_s every GPU, DeepSpeed-Ulysses with ZeRO-3 over the cluster.
// Errors: invalid_argument for a plan without pipelines, degrees < 1, a cluster with fewer
// than d_s x d_p GPUs; what make_replica and the partitioner throw.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/partition/ulysses.hpp>
#include <zeppelin/schedule/pipeline/chunk_one_f_one_b.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The step plan of pipeline `index` of `plan` (see the file comment), each chunk laid out by
//! `layout` (a partitioner, any_partitioner or any_cp_layout) over the stage's CP group.
template <class L>
[[nodiscard]] sequence_step_plan elastic_pipeline_step_plan(const elastic_plan& plan, std::size_t index, std::span<const token_count> lengths,
                                                            const model_config& model, const elastic_pipeline_options& options,
                                                            const topology& cluster, const L& layout) {
  ZEPPELIN_EXPECTS(index < plan.pipelines.size(), "no such pipeline in the elastic plan",
                   {{"pipeline", double(index)}, {"pipelines", double(plan.pipelines.size())}});
  const int sp = options.processor.cost.d_s, pp = options.processor.cost.d_p;
  ZEPPELIN_EXPECTS(sp >= 1 && pp >= 1, "the SP and PP degrees must be at least 1", {{"sp_degree", double(sp)}, {"pp_degree", double(pp)}});
  ZEPPELIN_EXPECTS(static_cast<long long>(sp) * pp <= cluster.num_ranks(), "the cluster has fewer GPUs than SP x PP",
                   {{"sp_x_pp", double(sp) * pp}, {"gpus", double(cluster.num_ranks())}});
  const elastic_pipeline& p = plan.pipelines[index];
  std::vector<std::vector<step_piece>> micro_batches;
  for (const std::int64_t k : p.forward) {
    ZEPPELIN_EXPECTS(k >= 0 && static_cast<std::size_t>(k) < plan.chunks.chunks.size(), "a pipeline names an unknown chunk",
                     {{"pipeline", double(index)}, {"chunk", double(k)}, {"chunks", double(plan.chunks.chunks.size())}});
    auto& pieces = micro_batches.emplace_back();
    for (const chunk_slice& s : plan.chunks.chunks[static_cast<std::size_t>(k)].slices) pieces.push_back({s.sequence, s.begin, s.end});
  }
  sequence_step_plan out;
  std::vector<token_count> documents = documents_of(micro_batches, lengths, out.sequences);
  std::vector<rank_index> ranks(static_cast<std::size_t>(sp) * static_cast<std::size_t>(pp));
  for (std::size_t g = 0; g < ranks.size(); ++g) ranks[g] = static_cast<rank_index>(g);  // (c, s) at s d_s + c
  out.plan.nodes = cluster.nodes();
  out.plan.gpus_per_node = cluster.gpus_per_node();
  out.plan.documents = std::move(documents);
  out.plan.sync = gradient_sync::fully_sharded;
  out.plan.replicas.push_back(make_replica(cluster, model, 1, sp, pp, std::move(ranks), tp_collectives::all_reduce,
                                           any_pipeline_schedule{chunk_one_f_one_b{.chains = p.chains}}, std::move(micro_batches), layout,
                                           stage_aware_recompute{p.checkpoint}));
  return out;
}

//! The step plan of pipeline `index` of `plan` with InfiniPipe's layout: Ulysses over the
//! stage's CP group (see the file comment).
[[nodiscard]] inline sequence_step_plan elastic_pipeline_step_plan(const elastic_plan& plan, std::size_t index, std::span<const token_count> lengths,
                                                                   const model_config& model, const elastic_pipeline_options& options,
                                                                   const topology& cluster) {
  token_count largest = 1;
  if (index < plan.pipelines.size())
    for (const std::int64_t k : plan.pipelines[index].forward)
      if (k >= 0 && static_cast<std::size_t>(k) < plan.chunks.chunks.size())
        largest = std::max(largest, plan.chunks.chunks[static_cast<std::size_t>(k)].tokens());
  return elastic_pipeline_step_plan(plan, index, lengths, model, options, cluster, ulysses{.capacity = largest, .cp_size = 0});
}

//! The step plans of every pipeline of `plan`, in plan order (see the file comment).
[[nodiscard]] inline std::vector<sequence_step_plan> elastic_step_plans(const elastic_plan& plan, std::span<const token_count> lengths,
                                                                        const model_config& model, const elastic_pipeline_options& options,
                                                                        const topology& cluster) {
  ZEPPELIN_EXPECTS(!plan.pipelines.empty(), "an elastic plan needs at least one pipeline", {});
  std::vector<sequence_step_plan> out;
  out.reserve(plan.pipelines.size());
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i) out.push_back(elastic_pipeline_step_plan(plan, i, lengths, model, options, cluster));
  return out;
}

//! elastic_step_plans with every chunk laid out by `layout` instead of Ulysses.
template <class L>
[[nodiscard]] std::vector<sequence_step_plan> elastic_step_plans(const elastic_plan& plan, std::span<const token_count> lengths,
                                                                 const model_config& model, const elastic_pipeline_options& options,
                                                                 const topology& cluster, const L& layout) {
  ZEPPELIN_EXPECTS(!plan.pipelines.empty(), "an elastic plan needs at least one pipeline", {});
  std::vector<sequence_step_plan> out;
  out.reserve(plan.pipelines.size());
  for (std::size_t i = 0; i < plan.pipelines.size(); ++i)
    out.push_back(elastic_pipeline_step_plan(plan, i, lengths, model, options, cluster, layout));
  return out;
}

ZEPPELIN_NAMESPACE_END
