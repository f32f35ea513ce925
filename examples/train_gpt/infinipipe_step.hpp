// examples/train_gpt/infinipipe_step.hpp
// InfiniPipe's step for train_gpt (Wang et al., "InfiniPipe: Elastic Pipeline Parallelism for
// Efficient Variable-Length Long-Context LLM Training"): the library plans a step's documents
// and train_gpt runs what it planned.
//   in : the step's documents (token ids), infinipipe_planning (the elastic planner's options:
//        its cost model prices the chunks for the priced model on d_s = CP ranks per stage and
//        d_p = the stages; the most tokens a chunk may hold, which forces slicing), the GPT and
//        its model_config, the cluster, the attention's program options
//   out: the step's parts, run one after another (InfiniPipe's back-to-back pipelines): per
//        part its step plan (pack/elastic_step_plan.hpp: chunk-level 1F1B over the chunks,
//        Ulysses over each stage's CP ranks, the stage-aware checkpointing of the pipeline,
//        ZeRO-3 over each stage's CP ranks) and per micro-batch (chunk) its planned_step: the
//        tokens of its slices, each placed in its document (step.hpp piece_origin: positions
//        from the slice's first, the last token's target the document's next token)
// Errors: what the planner throws (infeasible when no slice count fits the chunk limit).
// Host-only.
#pragma once

#include "step.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/elastic_step_plan.hpp>
#include <zeppelin/step/cp_group_topology.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace train_gpt {

//! How InfiniPipe plans a step: the elastic planner's options, and a checkpoint policy that
//! replaces the recomputation it plans (none: its stage-aware plans).
struct infinipipe_planning {
  elastic_pipeline_options options;
  std::optional<any_checkpoint_policy> recompute;
};

//! One step plan of a step and its micro-batches' data.
template <class T>
struct planned_part {
  step_plan plan;
  std::vector<planned_step<T>> micro_batches;  //!< of its one replica, in the plan's order
};

//! The parts of step `sb` (see the file comment).
template <class T>
std::vector<planned_part<T>> infinipipe_parts(const step_batch& sb, const infinipipe_planning& how, const gpt_config& cfg,
                                              const model_config& model, const topology& cluster, const program_options& attention) {
  const batch& b = sb.lengths;
  std::vector<token_count> lengths;
  for (sequence_index q = 0; q < b.size(); ++q) lengths.push_back(b.length(q));
  const elastic_plan planned = plan_elastic_pipeline(lengths, how.options);
  std::vector<planned_part<T>> out;
  for (sequence_step_plan& part : elastic_step_plans(planned, lengths, model, how.options, cluster)) {
    planned_part<T>& mine = out.emplace_back();
    const step_replica& r = part.plan.replicas.front();
    const topology group = cp_group_topology(cluster, r, 0, 0);
    for (const step_micro_batch& mb : r.micro_batches) {
      std::vector<token_count> piece_lengths;
      std::vector<std::int64_t> tokens;
      std::vector<piece_origin> origins;
      for (const step_piece& x : mb.pieces) {
        const auto q = static_cast<sequence_index>(part.sequences[static_cast<std::size_t>(x.document)]);
        const auto first = sb.tokens.begin() + b.offset(q);
        piece_lengths.push_back(x.tokens());
        tokens.insert(tokens.end(), first + x.begin, first + x.end);
        origins.push_back({x.begin, x.end < b.length(q) ? *(first + x.end) : -1});
      }
      mine.micro_batches.push_back(
          plan_step<T>({batch(std::move(piece_lengths)), std::move(tokens)}, group, mb.layout, attention, origins, cfg));
    }
    mine.plan = std::move(part.plan);
  }
  return out;
}

}  // namespace train_gpt
