// zeppelin/strategy/iteration_step_plan.hpp
// A Hydraulis iteration plan (strategy/iteration_plan.hpp) as a step plan
// (step/step_plan.hpp), so that the one step simulator (sim/simulate_step.hpp) prices it
// in the same cost world as every other system's step: TP collectives, CP attention,
// pipeline sends and the optimizer's switching over mutual slices on one event engine.
//   in : the iteration plan, the iteration's sequence lengths (what its indices name), the
//        cluster topology, the model, a pipeline schedule (default 1F1B, Hydraulis'), a
//        checkpoint policy (default none, as the planner's MaxLen assumes) and a CP layout
//        policy (any partitioner or any_partitioner; default allgather without a token
//        limit: Llama-3's K/V all-gather, the CP that T(l, P) prices, see
//        cp_collective_seconds in strategy/scheme_profile.hpp; memory is the simulator's
//        check, not the layout's)
//   out: step_plan: documents = the lengths; one replica per pipeline that holds sequences,
//        with its scheme's tp, cp and pp, its micro-batches those of its packing (every
//        sequence a whole-document piece, in packing order), layers split evenly
//        (make_replica), TP with sequence parallelism (the TP that T(l, P) prices), and
//        sync = gradient_sync::switching (fp32 states sharded over every rank of the
//        cluster, parameters pulled and gradients pushed as mutual slices)
// Placement: the pipelines occupy consecutive GPUs from rank 0 in the plan's order (that of
// pipelines_of, as strategy/switching.hpp assumes), ranks inside a pipeline in Megatron-LM's
// order (TP fastest, then CP, then PP). A pipeline without sequences keeps its GPUs, which
// idle: it has no replica and holds no parameters.
// hydraulis_program_options(): the step program options of Hydraulis' training, bf16
// activations, parameters and gradients (its pull and push move bf16, as the switching
// plan prices them); make_step_program's defaults push fp32 gradients (Megatron-LM's).
// Errors: invalid_argument for a plan whose pipelines hold no sequence, a sequence index
// outside the lengths, pipelines needing more GPUs than the cluster has; what make_replica
// and validate (step/validate.hpp) throw: a sequence in no micro-batch or in two, a scheme's
// CP ranks placed unlike over nodes on different stages, a layout the policy refuses.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/allgather.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/step/program.hpp>
#include <zeppelin/step/step_plan.hpp>
#include <zeppelin/step/validate.hpp>
#include <zeppelin/strategy/iteration_plan.hpp>

#include <cstddef>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Hydraulis' element sizes: bf16 activations, parameters and gradients.
[[nodiscard]] inline step_program_options hydraulis_program_options() {
  step_program_options o;
  o.activation_bytes = 2;
  o.parameter_bytes = 2;
  o.gradient_bytes = 2;
  return o;
}

//! How the replicas of an iteration plan run their TP collectives and meet their gradients:
//! Hydraulis' own (sequence parallelism, switching) unless a composition says otherwise
//! (planner/step_composition.hpp: a homogeneous job syncs like Megatron-LM).
struct replica_settings {
  tp_collectives tp_mode = tp_collectives::sequence_parallel;
  gradient_sync sync = gradient_sync::switching;
  friend bool operator==(const replica_settings&, const replica_settings&) = default;
};

//! The step plan of `plan` (see the file comment), each micro-batch's CP layout from `layout`,
//! the replicas' TP collectives and gradient sync from `settings`.
template <class L, checkpoint_policy C>
[[nodiscard]] step_plan step_plan_of(const iteration_plan& plan, std::span<const token_count> lengths, const topology& cluster,
                                     const model_config& model, const any_pipeline_schedule& schedule, const C& checkpoint, const L& layout,
                                     const replica_settings& settings = {}) {
  long long gpus = 0;
  bool holds = false;
  for (const pipeline_plan& p : plan.pipelines) {
    gpus += p.profile.scheme.gpus();
    holds = holds || !p.packing.micro_batches.empty();
  }
  ZEPPELIN_EXPECTS(holds, "an iteration plan needs a pipeline that holds sequences", {{"pipelines", double(plan.pipelines.size())}});
  ZEPPELIN_EXPECTS(gpus <= cluster.num_ranks(), "the iteration plan's pipelines need more GPUs than the cluster has",
                   {{"gpus", double(gpus)}, {"cluster_gpus", double(cluster.num_ranks())}});
  step_plan out;
  out.nodes = cluster.nodes();
  out.gpus_per_node = cluster.gpus_per_node();
  out.documents.assign(lengths.begin(), lengths.end());
  out.sync = settings.sync;
  rank_index first = 0;
  for (const pipeline_plan& p : plan.pipelines) {
    const parallel_scheme& s = p.profile.scheme;
    const auto size = static_cast<rank_index>(s.gpus());
    if (!p.packing.micro_batches.empty()) {
      std::vector<rank_index> ranks(static_cast<std::size_t>(size));
      for (rank_index i = 0; i < size; ++i) ranks[static_cast<std::size_t>(i)] = first + i;  // (s cp + c) tp + t from the first
      out.replicas.push_back(make_replica(cluster, model, s.tp, s.cp, s.pp, std::move(ranks), settings.tp_mode, schedule,
                                          whole_documents(lengths, p.packing.micro_batches), layout, checkpoint));
    }
    first += size;
  }
  validate(out, cluster, model);
  return out;
}

//! step_plan_of with allgather CP layouts without a token limit (see the file comment).
template <checkpoint_policy C = no_recompute>
[[nodiscard]] step_plan step_plan_of(const iteration_plan& plan, std::span<const token_count> lengths, const topology& cluster,
                                     const model_config& model, const any_pipeline_schedule& schedule = {one_f_one_b{}},
                                     const C& checkpoint = {}) {
  return step_plan_of(plan, lengths, cluster, model, schedule, checkpoint, allgather{.capacity = max_sequence_length, .cp_size = 0});
}

ZEPPELIN_NAMESPACE_END
