// zeppelin/sim/packing_methods.hpp
// The 4D methods of the WLB-LLM evaluation (Wang et al., OSDI 2025, section 6) as plain
// values: how documents become micro-batches (a packer, pack/) and how the CP group of a
// stage shares each micro-batch (a CP sharding, cost/cp_sharding.hpp).
//   in : the stage time model the step is priced with (its model, GPU, TP and CP give the
//        packers' workload W = W_a + W_l and the adaptive sharding's tile model); the
//        context window (WLB-LLM's outlier thresholds are fractions of it)
//   out: packing_method
// | name      | packer                                    | CP sharding              | L_max / context |
// |-----------|-------------------------------------------|--------------------------|-----------------|
// | plain_4d  | original (the data loader's windows)      | per-sequence             | 1               |
// | fixed_4d  | fixed_greedy (one global batch)           | per-document (padding-free) | 1            |
// | wlb       | wlb, 2 outlier queues (Algorithm 1)       | adaptive per micro-batch | variable_ratio  |
// The ablation's single techniques are the same values with one part swapped, e.g.
// {original, padding_free} (per-document sharding alone) or {wlb, per_sequence} (packing
// and outlier delay alone): packing_method is an aggregate, build any pair.
// L_max: fixed-length methods fill windows of the context; WLB-LLM's variable-length
// micro-batches may hold more than the context (its Eq. 2 bounds them by what memory
// allows, not by the window), and the outlier thresholds stay fractions of the context.
// The 4D simulator checks memory (sim/pipeline_simulator.hpp), so a ratio that does not fit
// fails there with the stage and bytes named.
// Errors: packing_method_by_name throws invalid_argument listing the valid names; the
// presets throw invalid_argument for variable_ratio < 1, context < 1 or an invalid stage
// model.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cost/adaptive_cp_sharding.hpp>
#include <zeppelin/cost/cp_sharding.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/workload.hpp>

#include <array>
#include <cmath>
#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! A packer, a CP sharding, and the largest micro-batch relative to the context window.
struct packing_method {
  any_packer packer{original{}};
  any_cp_sharding sharding{per_sequence_sharding{}};
  double max_tokens_ratio = 1.0;  //!< L_max / context, >= 1
  friend bool operator==(const packing_method&, const packing_method&) = default;
};

//! L_max of `method` for a context of `context` tokens: floor(ratio x context). Throws
//! invalid_argument for a ratio below 1 or not finite, or context < 1.
[[nodiscard]] inline token_count max_tokens_of(const packing_method& method, token_count context) {
  ZEPPELIN_EXPECTS(context >= 1, "the context window needs at least 1 token", {{"context", double(context)}});
  ZEPPELIN_EXPECTS(method.max_tokens_ratio >= 1 && std::isfinite(method.max_tokens_ratio),
                   "a packing method's L_max / context must be a finite number >= 1", {{"max_tokens_ratio", method.max_tokens_ratio}});
  return static_cast<token_count>(std::floor(method.max_tokens_ratio * static_cast<double>(context)));
}

//! WLB-LLM's W = W_a + W_l for the stage model's model, GPU, TP and CP.
[[nodiscard]] inline document_workload workload_of(const analytic_stage_time& stage) {
  return document_workload::for_model(stage.model, stage.gpu, stage.tp, stage.cp);
}

namespace packing_methods {

//! Plain-4D: the data loader's fixed-length windows, per-sequence CP sharding.
[[nodiscard]] inline packing_method plain_4d(const analytic_stage_time& stage) {
  return {.packer = {original{.workload = workload_of(stage)}}, .sharding = {per_sequence_sharding{}}};
}

//! Fixed-4D: fixed-length greedy packing of each global batch, per-document CP sharding.
[[nodiscard]] inline packing_method fixed_4d(const analytic_stage_time& stage) {
  return {.packer = {fixed_greedy{.window = 1, .workload = workload_of(stage)}}, .sharding = {padding_free_sharding{}}};
}

//! WLB-LLM: variable-length packing with two outlier queues (thresholds 1/2 and 3/4 of
//! `context`), micro-batches of up to variable_ratio x context tokens, adaptive CP sharding
//! priced by the stage model's tiles.
[[nodiscard]] inline packing_method wlb_4d(const analytic_stage_time& stage, token_count context, double variable_ratio = 1.5) {
  ZEPPELIN_EXPECTS(variable_ratio >= 1 && std::isfinite(variable_ratio), "WLB-LLM's L_max / context must be a finite number >= 1",
                   {{"variable_ratio", variable_ratio}});
  ZEPPELIN_EXPECTS(context >= 1, "the context window needs at least 1 token", {{"context", double(context)}});
  wlb packer = wlb::with_queues(2);
  packer.workload = workload_of(stage);
  packer.context_window = context;
  return {.packer = {packer}, .sharding = stage.with_adaptive_sharding().sharding, .max_tokens_ratio = variable_ratio};
}

}  // namespace packing_methods

//! Names accepted by packing_method_by_name.
inline constexpr std::array<std::string_view, 3> packing_method_names{"plain_4d", "fixed_4d", "wlb"};

//! The method called `name` ("plain_4d", "fixed_4d", "wlb") for `stage` and a context of
//! `context` tokens; throws invalid_argument listing the valid names for another.
[[nodiscard]] inline packing_method packing_method_by_name(std::string_view name, const analytic_stage_time& stage, token_count context) {
  if (name == "plain_4d") return packing_methods::plain_4d(stage);
  if (name == "fixed_4d") return packing_methods::fixed_4d(stage);
  if (name == "wlb") return packing_methods::wlb_4d(stage, context);
  ZEPPELIN_THROW(invalid_argument, "unknown packing method '" + std::string(name) + "' (valid: plain_4d, fixed_4d, wlb)", {});
}

ZEPPELIN_NAMESPACE_END
