// examples/train_gpt/hydraulis_step.hpp
// Hydraulis' step for train_gpt (Li et al., "Hydraulis: Balancing Large Transformer Model
// Training via Co-designing Parallel Strategies and Data Assignment"): the library chooses the
// pipelines and assigns the step's documents to them; train_gpt runs what it planned.
//   in : the step's documents (token ids), hydraulis_planning (the schemes' profiles for the
//        priced model on the cluster's GPUs, and the candidate strategies: the library's
//        proposal for each step, or one the user gave), the GPT and its model_config, the
//        cluster, the attention's program options
//   out: the step plan (strategy/iteration_step_plan.hpp: one replica per pipeline that holds
//        documents, each of its scheme's <TP, PP, CP> on consecutive ranks, its micro-batches
//        the two-stage planner's (dispatch over the pipelines, then packing), TP with sequence
//        parallelism, Llama-3-style all-gather CP, 1F1B, switching as the gradient sync: the
//        master copy sharded over every rank, parameters pulled and gradients pushed as
//        mutual slices) and per replica its micro-batches' planned_steps
// Errors: what the planners throw (infeasible when no scheme holds the longest document).
// Host-only.
#pragma once

#include "step.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/step/cp_group_topology.hpp>
#include <zeppelin/strategy/iteration_plan.hpp>
#include <zeppelin/strategy/iteration_step_plan.hpp>
#include <zeppelin/strategy/plan_strategy.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace train_gpt {

//! How Hydraulis plans a step: the library's strategy settings (the priced model's proposal
//! each step), or a strategy the user fixed (its pipelines; the two-stage planner still
//! assigns every step's documents to them).
struct hydraulis_planning {
  model_config priced;
  strategy_settings settings;
  std::optional<strategy> fixed;
  any_checkpoint_policy recompute{no_recompute{}};
};

//! A step's step plan and, per replica, its micro-batches' data.
template <class T>
struct planned_replicas {
  step_plan plan;
  std::vector<std::vector<planned_step<T>>> micro_batches;  //!< [replica][micro-batch]
};

//! The strategy of the given pipelines (<TP, PP, CP> each), profiled for `how.priced`.
inline strategy strategy_of(const std::vector<parallel_scheme>& pipelines, const model_config& priced, const strategy_settings& s) {
  const std::vector<scheme_profile> profiles = profile_schemes(pipelines, priced, s.gpu, s.gpus, {.margin_bytes = s.margin_bytes});
  strategy out;
  for (const parallel_scheme& p : pipelines) {
    const scheme_profile* found = nullptr;
    for (const scheme_profile& q : profiles)
      if (q.scheme == p) found = &q;
    ZEPPELIN_EXPECTS(found != nullptr, "a Hydraulis pipeline's scheme does not fit the priced model in the GPU's memory",
                     {{"tp", double(p.tp)}, {"pp", double(p.pp)}, {"cp", double(p.cp)}});
    bool merged = false;
    for (strategy_part& part : out.parts)
      if (part.profile.scheme == p) ++part.pipelines, merged = true;
    if (!merged) out.parts.push_back({*found, 1});
  }
  return out;
}

//! The step plan of step `sb` (see the file comment).
template <class T>
planned_replicas<T> hydraulis_replicas(const step_batch& sb, const hydraulis_planning& how, const gpt_config& cfg, const model_config& model,
                                       const topology& cluster, const program_options& attention) {
  const batch& b = sb.lengths;
  std::vector<token_count> lengths;
  for (sequence_index q = 0; q < b.size(); ++q) lengths.push_back(b.length(q));
  const iteration_plan iteration =
      how.fixed ? plan_iteration(std::span<const strategy>(&*how.fixed, 1), lengths, how.settings.dispatch, greedy_pipeline_packing{})
                : plan_strategy(how.priced, how.settings, lengths).plan;
  planned_replicas<T> out;
  out.plan = step_plan_of(iteration, lengths, cluster, model, any_pipeline_schedule{one_f_one_b{}}, how.recompute,
                          allgather{.capacity = max_sequence_length, .cp_size = 0});
  for (const step_replica& r : out.plan.replicas) {
    const topology group = cp_group_topology(cluster, r, 0, 0);
    std::vector<planned_step<T>>& mine = out.micro_batches.emplace_back();
    for (const step_micro_batch& mb : r.micro_batches) {
      std::vector<token_count> doc_lengths;
      std::vector<std::int64_t> tokens;
      for (const step_piece& x : mb.pieces) {
        const auto q = static_cast<sequence_index>(x.document);
        doc_lengths.push_back(x.tokens());
        tokens.insert(tokens.end(), sb.tokens.begin() + b.offset(q), sb.tokens.begin() + b.offset(q) + b.length(q));
      }
      mine.push_back(plan_step<T>({batch(std::move(doc_lengths)), std::move(tokens)}, group, mb.layout, attention, {}, cfg));
    }
  }
  return out;
}

}  // namespace train_gpt
