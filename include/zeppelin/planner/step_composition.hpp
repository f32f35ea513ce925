// zeppelin/planner/step_composition.hpp
// A step composition: the five policies that together plan one training iteration, each
// swappable on its own (a model of the library's or one a user writes).
//   strategy    step_strategy (planner/step_strategy.hpp): the pipelines' schemes
//   packer      step_packer (planner/step_packer.hpp): documents -> pipelines and micro-batches
//   layout      a CP layout policy (step/make_plan.hpp): any partitioner, any_partitioner,
//               any_cp_layout (the cost-driven cheapest_layout included), laying out every
//               micro-batch over its pipeline's CP group
//   schedule    the pipeline schedule (any_pipeline_schedule)
//   checkpoint  a checkpoint_policy (checkpoint/): per (virtual stage, micro-batch) the
//               layers recomputed in backward
//   replicas    tp_mode and gradient sync of the replicas (strategy/iteration_step_plan.hpp
//               replica_settings): switching for heterogeneous replicas (Hydraulis), the
//               sharded optimizer for a homogeneous job (Megatron-LM)
//   in : the step request (planner/step_request.hpp) and the cluster's scheme profiles
//   out: plan(request, profiles) -> the iteration as step plans run back to back
//        (pack/sequence_step_plan.hpp); a composition yields one, over every document
// Every composition is a step planning policy (planner/step_candidate.hpp), as InfiniPipe's
// elastic composition is (planner/elastic_composition.hpp).
// Errors: infeasible when no candidate strategy holds the documents; what the policies and
// step_plan_of throw (e.g. a layout that refuses a micro-batch). Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/planner/step_packer.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/planner/step_strategy.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/strategy/iteration_step_plan.hpp>

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <step_strategy S, step_packer K, class L, checkpoint_policy C>
struct step_composition {
  S strategy{};
  K packer{};
  L layout{};
  any_pipeline_schedule schedule{one_f_one_b{}};
  C checkpoint{};
  replica_settings replicas{.tp_mode = tp_collectives::sequence_parallel, .sync = gradient_sync::sharded_optimizer};

  //! The iteration of `r` as one step plan over all its documents (see the file comment).
  [[nodiscard]] std::vector<sequence_step_plan> plan(const step_request& r, std::span<const scheme_profile> profiles) const {
    const std::vector<struct strategy> candidates = strategy.candidates(r, profiles);
    if (candidates.empty())
      ZEPPELIN_THROW(infeasible, "no pipeline scheme holds the longest document",
                     {{"longest_document", double(longest_document(r))}, {"schemes", double(profiles.size())}});
    const iteration_plan assigned = packer.assign(r, candidates);
    sequence_step_plan part;
    part.plan = step_plan_of(assigned, r.documents, r.cluster, r.model, schedule, checkpoint, layout, replicas);
    part.sequences.resize(r.documents.size());
    std::iota(part.sequences.begin(), part.sequences.end(), std::int64_t{0});
    return {std::move(part)};
  }
  friend bool operator==(const step_composition&, const step_composition&) = default;
};

ZEPPELIN_NAMESPACE_END
