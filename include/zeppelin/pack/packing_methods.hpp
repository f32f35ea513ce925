// zeppelin/pack/packing_methods.hpp
// The 4D methods of the WLB-LLM evaluation (Wang et al., OSDI 2025, section 6) as plain
// values: how documents become micro-batches (a packer, pack/) and how the CP group of a
// stage lays out each micro-batch (a CP layout policy, planner/any_cp_layout.hpp).
//   in : the model, GPU and parallel layout the step runs on (they give the packers'
//        workload W = W_a + W_l, and the heads the adaptive layout prices its launches
//        with); the context window (WLB-LLM's outlier thresholds are fractions of it)
//   out: packing_method
// | name      | packer                                    | CP layout                         | L_max / context |
// |-----------|-------------------------------------------|-----------------------------------|-----------------|
// | plain_4d  | original (the data loader's windows)      | per_sequence (the packed stream)  | 1               |
// | fixed_4d  | fixed_greedy (one global batch)           | per_document (padding-free)       | 1               |
// | wlb       | wlb, 2 outlier queues (Algorithm 1)       | the cheaper of the two, per micro-batch | variable_ratio |
// The ablation's single techniques are the same values with one part swapped, e.g.
// {original, per_document} (per-document sharding alone) or {wlb, per_sequence} (packing
// and outlier delay alone): packing_method is an aggregate, build any pair.
// L_max: fixed-length methods fill windows of the context; WLB-LLM's variable-length
// micro-batches may hold more than the context (its Eq. 2 bounds them by what memory
// allows, not by the window), and the outlier thresholds stay fractions of the context.
// The step simulator checks memory (sim/simulate_step.hpp), so a ratio that does not fit
// fails there with the stage and bytes named. The layouts' capacity is L_max: a CP rank may
// hold a whole micro-batch, so no layout is refused for its size.
// Errors: packing_method_by_name throws invalid_argument listing the valid names; the
// presets throw invalid_argument for variable_ratio < 1, context < 1, an invalid model or
// layout.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/workload.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/planner/any_cp_layout.hpp>
#include <zeppelin/planner/cheapest_layout.hpp>
#include <zeppelin/program/wire_format.hpp>

#include <array>
#include <cmath>
#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! A packer, a CP layout policy, and the largest micro-batch relative to the context window.
struct packing_method {
  any_packer packer{original{}};
  any_cp_layout layout{partitioner_by_name("per_sequence")};
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

//! Where a WLB-LLM method runs: the model, the GPU, TP and CP (the packers' workload and the
//! adaptive layout's launches).
struct packing_target {
  model_config model;
  gpu_spec gpu;
  parallel_layout layout{};

  [[nodiscard]] document_workload workload() const { return document_workload::for_model(model, gpu, layout.tp, layout.cp); }
  //! The wire format of one CP rank's attention launches (heads after TP).
  [[nodiscard]] wire_format wire() const {
    return wire_format::for_shape(model.heads / layout.tp, model.kv_heads / layout.tp, model.head_dim, model.bytes_per_element);
  }
};

namespace packing_methods {

//! Plain-4D: the data loader's fixed-length windows, per-sequence CP layout.
[[nodiscard]] inline packing_method plain_4d(const packing_target& target, token_count context) {
  return {.packer = {original{.workload = target.workload()}},
          .layout = {partitioner_by_name("per_sequence", {.capacity = context})},
          .max_tokens_ratio = 1.0};
}

//! Fixed-4D: fixed-length greedy packing of each global batch, per-document CP layout.
[[nodiscard]] inline packing_method fixed_4d(const packing_target& target, token_count context) {
  return {.packer = {fixed_greedy{.window = 1, .workload = target.workload()}},
          .layout = {partitioner_by_name("per_document", {.capacity = context})},
          .max_tokens_ratio = 1.0};
}

//! WLB-LLM: variable-length packing with two outlier queues (thresholds 1/2 and 3/4 of
//! `context`), micro-batches of up to variable_ratio x context tokens, per micro-batch the
//! cheaper of the per-document and per-sequence layouts (planner/cheapest_layout.hpp), the
//! per-document one's groups running `per_document_collective`.
[[nodiscard]] inline packing_method wlb_4d(const packing_target& target, token_count context, double variable_ratio = 1.5,
                                           collective_kind per_document_collective = collective_kind::ring) {
  ZEPPELIN_EXPECTS(variable_ratio >= 1 && std::isfinite(variable_ratio), "WLB-LLM's L_max / context must be a finite number >= 1",
                   {{"variable_ratio", variable_ratio}});
  ZEPPELIN_EXPECTS(context >= 1, "the context window needs at least 1 token", {{"context", double(context)}});
  wlb packer = wlb::with_queues(2);
  packer.workload = target.workload();
  packer.context_window = context;
  const auto capacity = static_cast<token_count>(std::floor(variable_ratio * static_cast<double>(context)));
  return {.packer = {packer},
          .layout = {wlb_adaptive_layout(capacity, attention_time_model::for_gpu(target.gpu), target.wire(), per_document_collective)},
          .max_tokens_ratio = variable_ratio};
}

}  // namespace packing_methods

//! Names accepted by packing_method_by_name.
inline constexpr std::array<std::string_view, 3> packing_method_names{"plain_4d", "fixed_4d", "wlb"};

//! The method called `name` ("plain_4d", "fixed_4d", "wlb") for `target` and a context of
//! `context` tokens; throws invalid_argument listing the valid names for another.
[[nodiscard]] inline packing_method packing_method_by_name(std::string_view name, const packing_target& target, token_count context) {
  if (name == "plain_4d") return packing_methods::plain_4d(target, context);
  if (name == "fixed_4d") return packing_methods::fixed_4d(target, context);
  if (name == "wlb") return packing_methods::wlb_4d(target, context);
  ZEPPELIN_THROW(invalid_argument, "unknown packing method '" + std::string(name) + "' (valid: plain_4d, fixed_4d, wlb)", {});
}

ZEPPELIN_NAMESPACE_END
