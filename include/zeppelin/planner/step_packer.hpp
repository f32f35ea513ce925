// zeppelin/planner/step_packer.hpp
// The packer stage of a step composition: which documents each pipeline of a strategy trains,
// in which micro-batches, and which of the strategy stage's candidates is kept.
//   concept step_packer: a small regular value K with
//     k.assign(request, candidates) -> iteration_plan
//       candidates: the strategy stage's (planner/step_strategy.hpp), not empty. The plan
//       (strategy/iteration_plan.hpp) names the candidate kept, its pipelines in
//       pipelines_of order with the documents of each, as micro-batches of document
//       indices, every document in exactly one; its seconds the packer's own estimate.
//       Throws infeasible when no candidate can hold the documents.
// Models:
//   loader_packing     the data loader packs the whole iteration with a packer of pack/
//                      (original: Megatron-LM's windows; fixed_greedy, fixed_exact: balanced
//                      fixed-length; wlb: WLB-LLM's variable-length packing with outlier
//                      queues), N = P x ceil(tokens / (P x context)) micro-batches for P
//                      pipelines, each of at most max_tokens_ratio x context tokens (and the
//                      pipelines' MaxLen); what the packer holds back is flushed into further
//                      micro-batches of the same step (a step trains all its documents). The
//                      micro-batches, in the packer's order, go each to the pipeline that
//                      would finish it first by its profile's T (ties: the lower index), among
//                      those whose MaxLen holds it. A packer with a `workload` member gets
//                      the pipeline scheme's (pack/workload.hpp), one with a
//                      `context_window` the loader's window. The candidate whose slowest
//                      pipeline is predicted fastest is kept (ties: the earlier).
//   sequence_processor_packing
//                      InfiniPipe's sequence processor (pack/sequence_processor.hpp, Algorithm
//                      1) with one slice: documents stay whole (the strategy's CP splits
//                      the long ones), packed best-fit decreasing into chunks of at most the
//                      longest document's tokens and backward time, the chunk cost model of
//                      one GPU per stage (d_s = 1: the chunks balance compute) and the
//                      pipeline's PP; each chunk a micro-batch, dealt to the pipelines as
//                      the loader's are. The candidate whose slowest pipeline is predicted
//                      fastest is kept.
//   hydraulis_packing  Hydraulis' dispatch and stage-2 packing (plan_iteration: greedy
//                      dispatch trials, then per pipeline the packing of least T).
// any_step_packer holds one of them, chosen at run time; itself a step_packer.
// Deterministic. Host-only.
#pragma once

#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/sequence_processor.hpp>
#include <zeppelin/pack/workload.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/strategy/dispatch.hpp>
#include <zeppelin/strategy/iteration_plan.hpp>
#include <zeppelin/strategy/pipeline_packing.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class K>
concept step_packer = std::regular<K> && requires(const K& k, const step_request& r, std::span<const strategy> candidates) {
  { k.assign(r, candidates) } -> std::same_as<iteration_plan>;
};

namespace detail {

//! The most tokens a micro-batch of `r` may hold on `pipelines`: ratio x the loader's window,
//! and no pipeline's MaxLen.
[[nodiscard]] inline token_count micro_batch_room(const step_request& r, std::span<const scheme_profile> pipelines, double ratio) {
  token_count most = 0;
  for (const scheme_profile& p : pipelines) most = std::max(most, p.max_len);
  return std::min(static_cast<token_count>(std::floor(ratio * static_cast<double>(context_of(r)))), most);
}

//! Candidate `index`'s plan: `micro_batches` (document indices of `r`), in order, each to the
//! pipeline that would finish it first by its profile's T (ties: the lower index) among those
//! whose MaxLen holds it; nothing when one fits no pipeline.
[[nodiscard]] inline std::optional<iteration_plan> deal_to_pipelines(const step_request& r, std::span<const scheme_profile> pipelines,
                                                                     std::span<const std::vector<std::int64_t>> micro_batches,
                                                                     std::size_t index) {
  iteration_plan out;
  out.candidate = index;
  std::vector<std::vector<std::vector<std::int64_t>>> dealt(pipelines.size());
  std::vector<double> load(pipelines.size(), 0.0);
  std::vector<token_count> own_lengths;
  for (const std::vector<std::int64_t>& mb : micro_batches) {
    own_lengths.clear();
    token_count tokens = 0;
    for (const std::int64_t d : mb) own_lengths.push_back(r.documents[static_cast<std::size_t>(d)]), tokens += own_lengths.back();
    std::optional<std::size_t> to;
    double to_finish = 0;
    for (std::size_t j = 0; j < pipelines.size(); ++j) {
      if (pipelines[j].max_len < tokens) continue;
      const double finish = load[j] + pipelines[j].micro_batch_seconds(own_lengths);
      if (!to || finish < to_finish) to = j, to_finish = finish;
    }
    if (!to) return std::nullopt;
    load[*to] = to_finish;
    dealt[*to].push_back(mb);
  }
  for (std::size_t j = 0; j < pipelines.size(); ++j) {
    pipeline_plan& p = out.pipelines.emplace_back();
    p.profile = pipelines[j];
    for (const auto& mb : dealt[j]) p.sequences.insert(p.sequences.end(), mb.begin(), mb.end());
    p.packing = packing_of(pipelines[j], std::move(dealt[j]), r.documents);
    out.seconds = std::max(out.seconds, p.packing.seconds);
  }
  return out;
}

//! The candidate whose plan `plan_of(candidate, index)` is fastest (ties: the earlier);
//! throws infeasible (naming `who`) when none plans.
template <class PlanOf>
[[nodiscard]] iteration_plan fastest_candidate(const step_request& r, std::span<const strategy> candidates, const PlanOf& plan_of, const char* who) {
  std::optional<iteration_plan> best;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    std::optional<iteration_plan> p = plan_of(candidates[c], c);
    if (p && (!best || p->seconds < best->seconds)) best = std::move(p);
  }
  if (!best)
    ZEPPELIN_THROW(infeasible, std::string("no candidate strategy's pipelines hold ") + who,
                   {{"candidates", double(candidates.size())}, {"longest_document", double(longest_document(r))}});
  return std::move(*best);
}

}  // namespace detail

//! The data loader's packing (see the file comment).
struct loader_packing {
  any_packer packer{original{}};
  double max_tokens_ratio = 1.0;  //!< L_max / context, >= 1 (WLB-LLM: 1.5)

  //! The plan of candidate `c` (index `index`), or nothing when a micro-batch fits no pipeline.
  [[nodiscard]] std::optional<iteration_plan> assign_to(const step_request& r, const strategy& c, std::size_t index) const {
    const std::vector<scheme_profile> pipelines = pipelines_of(c);
    const token_count context = context_of(r);
    const token_count room = detail::micro_batch_room(r, pipelines, max_tokens_ratio);
    if (room < longest_document(r)) return std::nullopt;
    const auto P = static_cast<token_count>(pipelines.size());
    const token_count per_pipeline = std::max<token_count>(1, (total_tokens(r) + P * context - 1) / (P * context));
    const packing_limits limits{.micro_batches = static_cast<int>(std::min<token_count>(P * per_pipeline, packing_limits::max_micro_batches)),
                                .max_tokens = room};
    any_packer own = packer;
    std::visit(
        [&](auto& p) {
          if constexpr (requires { p.workload; })
            p.workload = document_workload::for_model(r.model, r.cluster.gpu(), pipelines.front().scheme.tp, pipelines.front().scheme.cp);
          if constexpr (requires { p.context_window; }) p.context_window = context;
        },
        own.policy);
    std::vector<document_ref> arriving;
    arriving.reserve(r.documents.size());
    for (std::size_t i = 0; i < r.documents.size(); ++i) arriving.push_back({static_cast<std::int64_t>(i), r.documents[i]});
    any_packer::state state;
    std::vector<packed_iteration> packed{own.pack(state, arriving, limits)};
    for (packed_iteration& more : own.flush(state, limits)) packed.push_back(std::move(more));

    std::vector<std::vector<std::int64_t>> micro_batches;
    for (packed_iteration& it : packed)
      for (packed_micro_batch& mb : it.micro_batches)
        if (!mb.documents.empty()) micro_batches.push_back(std::move(mb.documents));
    return detail::deal_to_pipelines(r, pipelines, micro_batches, index);
  }

  [[nodiscard]] iteration_plan assign(const step_request& r, std::span<const strategy> candidates) const {
    ZEPPELIN_EXPECTS(max_tokens_ratio >= 1 && std::isfinite(max_tokens_ratio), "the loader's L_max / context must be a finite number >= 1",
                     {{"max_tokens_ratio", max_tokens_ratio}});
    return detail::fastest_candidate(
        r, candidates, [&](const strategy& c, std::size_t index) { return assign_to(r, c, index); }, "the loader's micro-batches");
  }
  friend bool operator==(const loader_packing&, const loader_packing&) = default;
};

//! InfiniPipe's sequence processor as a packer (see the file comment).
struct sequence_processor_packing {
  //! The plan of candidate `c` (index `index`), or nothing when its pipelines cannot hold the
  //! longest document or a chunk.
  [[nodiscard]] static std::optional<iteration_plan> assign_to(const step_request& r, const strategy& c, std::size_t index) {
    const std::vector<scheme_profile> pipelines = pipelines_of(c);
    if (detail::micro_batch_room(r, pipelines, 1.0) < longest_document(r)) return std::nullopt;
    const sequence_processor processor{.cost = chunk_cost_model::for_model(r.model, r.cluster, 1, pipelines.front().scheme.pp)};
    const chunking chunks = processor.process(r.documents, 1);
    std::vector<std::vector<std::int64_t>> micro_batches;
    for (const chunk& k : chunks.chunks) {
      std::vector<std::int64_t>& mb = micro_batches.emplace_back();
      for (const chunk_slice& x : k.slices) mb.push_back(x.sequence);
    }
    return detail::deal_to_pipelines(r, pipelines, micro_batches, index);
  }

  [[nodiscard]] iteration_plan assign(const step_request& r, std::span<const strategy> candidates) const {
    return detail::fastest_candidate(
        r, candidates, [&](const strategy& c, std::size_t index) { return assign_to(r, c, index); }, "the sequence processor's chunks");
  }
  friend bool operator==(const sequence_processor_packing&, const sequence_processor_packing&) = default;
};

//! Hydraulis' dispatch and packing (see the file comment).
struct hydraulis_packing {
  greedy_dispatch dispatch{};

  [[nodiscard]] iteration_plan assign(const step_request& r, std::span<const strategy> candidates) const {
    if (candidates.empty())
      ZEPPELIN_THROW(infeasible, "no strategy holds the longest document", {{"longest_document", double(longest_document(r))}});
    return plan_iteration(candidates, r.documents, dispatch, greedy_pipeline_packing{}, 1);
  }
  friend bool operator==(const hydraulis_packing&, const hydraulis_packing&) = default;
};

struct any_step_packer {
  std::variant<loader_packing, sequence_processor_packing, hydraulis_packing> policy;

  [[nodiscard]] iteration_plan assign(const step_request& r, std::span<const strategy> candidates) const {
    return std::visit([&](const auto& k) { return k.assign(r, candidates); }, policy);
  }
  friend bool operator==(const any_step_packer&, const any_step_packer&) = default;
};

static_assert(step_packer<loader_packing> && step_packer<sequence_processor_packing> && step_packer<hydraulis_packing> &&
              step_packer<any_step_packer>);

ZEPPELIN_NAMESPACE_END
