// zeppelin/planner/step_candidate.hpp
// The candidates the step planner (planner/plan_step.hpp) prices: named step planning
// policies.
//   concept step_planning_policy: a small regular value P with
//     p.plan(request, profiles) -> std::vector<sequence_step_plan>
//       the iteration as step plans run back to back (pack/sequence_step_plan.hpp), every
//       token of every document of the request in exactly one piece; throws infeasible (or
//       what its policies throw) when it cannot plan the request
//   Models: step_composition (planner/step_composition.hpp: strategy, packer, CP layout,
//   schedule, checkpoint, replica settings) and elastic_composition
//   (planner/elastic_composition.hpp: InfiniPipe's joint chunking, pipelines and
//   checkpointing, with a CP layout).
//   composed_step / elastic_step: the two with every policy chosen at run time (any_*).
//   step_candidate: a name and one of them.
// default_step_candidates(request): each paper's own composition, three baselines, and the
// compositions across papers the library makes possible:
//   | name                  | strategy     | packer                      | CP layout                                 | schedule, checkpoint, sync |
//   |-----------------------|--------------|-----------------------------|-------------------------------------------|----------------------------|
//   | megatron              | homogeneous  | loader: original windows    | per_sequence ring (Megatron-LM CP)        | 1F1B, none, ZeRO-1         |
//   | te                    | homogeneous  | loader: original windows    | per_document ring (TransformerEngine THD) | 1F1B, none, ZeRO-1         |
//   | ulysses               | homogeneous  | loader: original windows    | ulysses (DeepSpeed-Ulysses, USP)          | 1F1B, none, ZeRO-1         |
//   | wlb                   | homogeneous  | loader: wlb, 1.5 x context  | cheaper of per_document all-gather and per_sequence (WLB-LLM) | 1F1B, none, ZeRO-1 |
//   | zeppelin              | homogeneous  | loader: fixed_greedy        | cheapest of hierarchical, per_document, per_sequence, ulysses (Zeppelin) | 1F1B, none, ZeRO-1 |
//   | hydraulis             | hydraulis    | hydraulis dispatch + packing | allgather (Llama-3 CP, as T(l, P) prices) | 1F1B, none, switching      |
//   | infinipipe            | elastic (InfiniPipe)                        | ulysses                                   | chunk-1F1B, stage-aware, ZeRO-3 |
//   | hydraulis+zeppelin    | hydraulis    | hydraulis dispatch + packing | Zeppelin's                               | 1F1B, none, switching      |
//   | wlb+zeppelin          | homogeneous  | loader: wlb, 1.5 x context  | Zeppelin's                                | 1F1B, none, ZeRO-1         |
//   | infinipipe+zeppelin   | elastic (InfiniPipe)                        | hierarchical                              | chunk-1F1B, stage-aware, ZeRO-3 |
// The layouts' per-GPU capacity is max_sequence_length: a CP rank may hold a whole
// micro-batch (Hydraulis' may pass the context), so no layout refuses one for its size; what
// fits in memory the strategies decided (MaxLen). The cost-driven layouts price attention for
// the model's heads (cheapest_layout). Host-only.
#pragma once

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/planner/any_cp_layout.hpp>
#include <zeppelin/planner/cheapest_layout.hpp>
#include <zeppelin/planner/elastic_composition.hpp>
#include <zeppelin/planner/step_composition.hpp>
#include <zeppelin/planner/step_packer.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/planner/step_strategy.hpp>
#include <zeppelin/program/wire_format.hpp>

#include <cmath>
#include <concepts>
#include <span>
#include <string>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class P>
concept step_planning_policy = std::regular<P> && requires(const P& p, const step_request& r, std::span<const scheme_profile> profiles) {
  { p.plan(r, profiles) } -> std::same_as<std::vector<sequence_step_plan>>;
};

using composed_step = step_composition<any_step_strategy, any_step_packer, any_cp_layout, any_checkpoint_policy>;
using elastic_step = elastic_composition<any_cp_layout>;
static_assert(step_planning_policy<composed_step> && step_planning_policy<elastic_step>);

struct step_candidate {
  std::string name;
  std::variant<composed_step, elastic_step> policy;
  std::string about;  //!< its policies in words, for --explain

  [[nodiscard]] std::vector<sequence_step_plan> plan(const step_request& r, std::span<const scheme_profile> profiles) const {
    return std::visit([&](const auto& p) { return p.plan(r, profiles); }, policy);
  }
  friend bool operator==(const step_candidate&, const step_candidate&) = default;
};

namespace step_candidates {

//! The layouts' per-GPU capacity (see the file comment).
inline constexpr token_count layout_capacity = max_sequence_length;

//! Zeppelin's CP layout: the cheapest of its hierarchical planner, the per-document and
//! per-sequence rings and Ulysses, by the priced attention of the slowest rank (the layouts
//! the CP-level cost-driven planner chooses among, docs/planner.md).
[[nodiscard]] inline any_cp_layout zeppelin_layout(const step_request& r) {
  constexpr token_count capacity = layout_capacity;
  return {cheapest_layout{{partitioner_by_name("hierarchical", {.capacity = capacity}), partitioner_by_name("per_document", {.capacity = capacity}),
                           partitioner_by_name("per_sequence", {.capacity = capacity}), partitioner_by_name("ulysses", {.capacity = capacity})},
                          attention_time_model::for_gpu(r.cluster.gpu()),
                          wire_format::for_model(r.model)}};
}

//! A homogeneous job's composition: the loader's packing with `packer`, CP layout `layout`.
[[nodiscard]] inline composed_step homogeneous(any_packer packer, double max_tokens_ratio, any_cp_layout layout) {
  return {.strategy = {homogeneous_strategy{}},
          .packer = {loader_packing{.packer = std::move(packer), .max_tokens_ratio = max_tokens_ratio}},
          .layout = std::move(layout),
          .schedule = {one_f_one_b{}},
          .checkpoint = {no_recompute{}},
          .replicas = {.tp_mode = tp_collectives::sequence_parallel, .sync = gradient_sync::sharded_optimizer}};
}

//! Hydraulis' composition with CP layout `layout`.
[[nodiscard]] inline composed_step hydraulis(any_cp_layout layout) {
  return {.strategy = {hydraulis_strategy{}},
          .packer = {hydraulis_packing{}},
          .layout = std::move(layout),
          .schedule = {one_f_one_b{}},
          .checkpoint = {no_recompute{}},
          .replicas = {.tp_mode = tp_collectives::sequence_parallel, .sync = gradient_sync::switching}};
}

}  // namespace step_candidates

//! The candidates of the file comment's table, in its order.
[[nodiscard]] inline std::vector<step_candidate> default_step_candidates(const step_request& r) {
  using namespace step_candidates;
  constexpr token_count capacity = layout_capacity;
  wlb packer = wlb::with_queues(2);
  const any_cp_layout wlb_layout{wlb_adaptive_layout(capacity, attention_time_model::for_gpu(r.cluster.gpu()), wire_format::for_model(r.model),
                                                     collective_kind::all_gather)};
  const any_cp_layout zeppelin = zeppelin_layout(r);
  std::vector<step_candidate> out;
  out.push_back({"megatron", homogeneous(any_packer{original{}}, 1.0, {partitioner_by_name("per_sequence", {.capacity = capacity})}),
                 "homogeneous <TP, CP, PP> x DP; loader windows (original); per-sequence ring CP; 1F1B; ZeRO-1"});
  out.push_back({"te", homogeneous(any_packer{original{}}, 1.0, {partitioner_by_name("per_document", {.capacity = capacity})}),
                 "homogeneous <TP, CP, PP> x DP; loader windows (original); per-document ring CP (TransformerEngine THD); 1F1B; ZeRO-1"});
  out.push_back({"ulysses", homogeneous(any_packer{original{}}, 1.0, {partitioner_by_name("ulysses", {.capacity = capacity})}),
                 "homogeneous <TP, CP, PP> x DP; loader windows (original); Ulysses all-to-all CP (DeepSpeed-Ulysses, USP); 1F1B; ZeRO-1"});
  out.push_back({"wlb", homogeneous(any_packer{packer}, 1.5, wlb_layout),
                 "homogeneous; WLB-LLM packing (2 outlier queues, 1.5 x context); per micro-batch the cheaper of per-document all-gather and per-sequence CP; 1F1B; ZeRO-1"});
  out.push_back({"zeppelin", homogeneous(any_packer{fixed_greedy{}}, 1.0, zeppelin),
                 "homogeneous; fixed-length greedy packing; per micro-batch the cheapest of Zeppelin's hierarchical, per-document, per-sequence and Ulysses CP; 1F1B; ZeRO-1"});
  out.push_back({"hydraulis", hydraulis({partitioner_by_name("allgather", {.capacity = max_sequence_length})}),
                 "Hydraulis' heterogeneous pipelines, dispatch and packing; all-gather CP; 1F1B; switching"});
  out.push_back({"infinipipe", elastic_step{.layout = {partitioner_by_name("ulysses", {.capacity = max_sequence_length})}},
                 "InfiniPipe's chunks (sliced documents), back-to-back chunk-1F1B pipelines, stage-aware checkpointing; Ulysses; ZeRO-3"});
  out.push_back({"hydraulis+zeppelin", hydraulis(zeppelin),
                 "Hydraulis' heterogeneous pipelines, dispatch and packing; Zeppelin's CP layout; 1F1B; switching"});
  out.push_back({"wlb+zeppelin", homogeneous(any_packer{packer}, 1.5, zeppelin),
                 "homogeneous; WLB-LLM packing; Zeppelin's CP layout; 1F1B; ZeRO-1"});
  out.push_back({"infinipipe+zeppelin", elastic_step{.layout = {partitioner_by_name("hierarchical", {.capacity = max_sequence_length})}},
                 "InfiniPipe's chunks, pipelines and checkpointing; Zeppelin's hierarchical CP layout; ZeRO-3"});
  return out;
}

ZEPPELIN_NAMESPACE_END
