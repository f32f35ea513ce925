// zeppelin/strategy/plan_strategy.hpp
// Hydraulis end to end for one iteration: from a model, a cluster and the iteration's
// sequence lengths to the chosen heterogeneous strategy and its data assignment.
//   in : model, strategy_settings (GPUs, GPUs per node, the GPU's spec, the memory margin kept
//        free, the dispatcher), lengths (the iteration's sequences, also the proposal's sample)
//   out: strategy_choice: the candidate strategies (propose_strategies over the schemes that
//        fit: enumerate_schemes + profile_schemes, on the authors' length grid
//        authors_length_step) and the iteration plan that chose among
//        them (plan_iteration with greedy dispatch and greedy pipeline packing)
// The same call behind `zeppelin strategy` and the C ABI's zeppelin_strategy_create.
// Errors: infeasible when the model fits no scheme on the GPUs (naming the GPU count and
// memory) or no scheme holds the longest sequence; invalid_argument for bad settings.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/strategy/dispatch.hpp>
#include <zeppelin/strategy/iteration_plan.hpp>
#include <zeppelin/strategy/parallel_scheme.hpp>
#include <zeppelin/strategy/pipeline_packing.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>

#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct strategy_settings {
  long long gpus = 8;
  int gpus_per_node = 8;
  gpu_spec gpu{};              //!< its memory_bytes bounds every scheme's MaxLen
  double margin_bytes = 0;     //!< memory kept free on every GPU
  greedy_dispatch dispatch{};  //!< trials, seed and threads of the greedy dispatch (the packing uses its threads too)
};

struct strategy_choice {
  std::vector<strategy> candidates;
  iteration_plan plan;  //!< plan.candidate indexes candidates
  [[nodiscard]] const strategy& chosen() const { return candidates.at(plan.candidate); }
};

//! Hydraulis' strategy and assignment of `lengths` (see the file comment).
[[nodiscard]] inline strategy_choice plan_strategy(const model_config& model, const strategy_settings& s,
                                                   std::span<const token_count> lengths) {
  const std::vector<parallel_scheme> schemes = enumerate_schemes(model, s.gpus, s.gpus_per_node);
  const std::vector<scheme_profile> profiles = profile_schemes(schemes, model, s.gpu, s.gpus, {.margin_bytes = s.margin_bytes});
  if (profiles.empty())
    ZEPPELIN_THROW(infeasible, "the model fits no parallel scheme on these GPUs",
                   {{"gpus", double(s.gpus)}, {"gpus_per_node", double(s.gpus_per_node)}, {"gpu_memory_bytes", s.gpu.memory_bytes},
                    {"margin_bytes", s.margin_bytes}});
  strategy_choice out;
  out.candidates = propose_strategies(profiles, s.gpus, lengths, {.length_step = authors_length_step(s.gpus)});
  out.plan = plan_iteration(out.candidates, lengths, s.dispatch, greedy_pipeline_packing{}, s.dispatch.threads);
  return out;
}

ZEPPELIN_NAMESPACE_END
