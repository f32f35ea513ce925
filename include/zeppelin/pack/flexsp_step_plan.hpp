// zeppelin/pack/flexsp_step_plan.hpp
// The FlexSP-like baseline's iteration as step plans (step/step_plan.hpp): one per
// micro-batch of its greedy assignment (pack/flexsp_assignment.hpp), run one after another
// by the one step simulator (pack/sequence_step_plan.hpp simulate_back_to_back).
//   in : the assignment, the sequences' lengths, the model, the cluster it was made for
//   out: per micro-batch a sequence_step_plan whose replicas are its groups, in order: each
//        tp 1, cp = the group's degree on GPUs first_gpu .. first_gpu + degree - 1, pp 1,
//        one micro-batch of the group's sequences whole (in the order added), laid out by
//        the ulysses partitioner over the group, every layer recomputed when the group
//        recomputes, none otherwise; sync fully_sharded: ZeRO-3 over each group's GPUs in
//        its blocks, and groups that differ meet by Hydraulis' switching after the step
//        (step/build.hpp), groups alike by an all-reduce of their gradient shards.
// FlexSP itself shards the model states over every GPU and all-gathers each layer across
// the cluster; the step program shards over each group and moves the rest by switching
// (docs/infinipipe.md, "Simulation").
// Errors: invalid_argument for an assignment without micro-batches, an empty micro-batch or
// group, a group outside the cluster, a sequence index outside the lengths; what
// make_replica and the partitioner throw.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/pack/flexsp_assignment.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/partition/ulysses.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The step plan of one micro-batch's groups (see the file comment).
[[nodiscard]] inline sequence_step_plan flexsp_micro_batch_step_plan(std::span<const flexsp_group> groups, std::span<const token_count> lengths,
                                                                     const model_config& model, const topology& cluster) {
  ZEPPELIN_EXPECTS(!groups.empty(), "a FlexSP micro-batch needs at least one group", {});
  std::vector<std::vector<step_piece>> pieces;  // per group: its sequences, named by sequence
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const flexsp_group& x = groups[g];
    ZEPPELIN_EXPECTS(x.degree >= 1 && x.first_gpu >= 0 && static_cast<long long>(x.first_gpu) + x.degree <= cluster.num_ranks(),
                     "a FlexSP group must lie inside the cluster",
                     {{"group", double(g)}, {"first_gpu", double(x.first_gpu)}, {"degree", double(x.degree)}, {"gpus", double(cluster.num_ranks())}});
    ZEPPELIN_EXPECTS(!x.sequences.empty(), "a FlexSP group needs at least one sequence", {{"group", double(g)}});
    auto& mine = pieces.emplace_back();
    for (const std::int64_t s : x.sequences) {
      ZEPPELIN_EXPECTS(s >= 0 && static_cast<std::size_t>(s) < lengths.size(), "a FlexSP group names an unknown sequence",
                       {{"group", double(g)}, {"sequence", double(s)}, {"sequences", double(lengths.size())}});
      mine.push_back({s, 0, lengths[static_cast<std::size_t>(s)]});
    }
  }
  sequence_step_plan out;
  out.plan.documents = documents_of(pieces, lengths, out.sequences);
  out.plan.nodes = cluster.nodes();
  out.plan.gpus_per_node = cluster.gpus_per_node();
  out.plan.sync = gradient_sync::fully_sharded;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const flexsp_group& x = groups[g];
    std::vector<rank_index> ranks(static_cast<std::size_t>(x.degree));
    for (int c = 0; c < x.degree; ++c) ranks[static_cast<std::size_t>(c)] = x.first_gpu + c;
    token_count tokens = 0;
    for (const step_piece& p : pieces[g]) tokens += p.tokens();
    const ulysses layout{.capacity = std::max<token_count>(tokens, 1), .cp_size = 0};
    std::vector<std::vector<step_piece>> one{std::move(pieces[g])};
    const any_pipeline_schedule schedule{one_f_one_b{}};
    out.plan.replicas.push_back(x.recompute ? make_replica(cluster, model, 1, x.degree, 1, std::move(ranks), tp_collectives::all_reduce, schedule,
                                                          std::move(one), layout, full_recompute{})
                                            : make_replica(cluster, model, 1, x.degree, 1, std::move(ranks), tp_collectives::all_reduce, schedule,
                                                          std::move(one), layout, no_recompute{}));
  }
  return out;
}

//! The step plans of every micro-batch of `assignment`, in execution order (see the file
//! comment).
[[nodiscard]] inline std::vector<sequence_step_plan> flexsp_step_plans(const flexsp_assignment& assignment, std::span<const token_count> lengths,
                                                                       const model_config& model, const topology& cluster) {
  ZEPPELIN_EXPECTS(!assignment.micro_batches.empty(), "a FlexSP assignment needs at least one micro-batch", {});
  std::vector<sequence_step_plan> out;
  out.reserve(assignment.micro_batches.size());
  for (const std::vector<flexsp_group>& groups : assignment.micro_batches)
    out.push_back(flexsp_micro_batch_step_plan(groups, lengths, model, cluster));
  return out;
}

ZEPPELIN_NAMESPACE_END
