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
//   hydraulis_packing  Hydraulis' dispatch and stage-2 packing (plan_iteration: greedy
//                      dispatch trials, then per pipeline the packing of least T).
// any_step_packer holds one of them, chosen at run time; itself a step_packer.
// Deterministic. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/packing.hpp>
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
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class K>
concept step_packer = std::regular<K> && requires(const K& k, const step_request& r, std::span<const strategy> candidates) {
  { k.assign(r, candidates) } -> std::same_as<iteration_plan>;
};

//! The data loader's packing (see the file comment).
struct loader_packing {
  any_packer packer{original{}};
  double max_tokens_ratio = 1.0;  //!< L_max / context, >= 1 (WLB-LLM: 1.5)

  //! The plan of candidate `c` (index `index`), or nothing when a micro-batch fits no pipeline.
  [[nodiscard]] std::optional<iteration_plan> assign_to(const step_request& r, const strategy& c, std::size_t index) const {
    const std::vector<scheme_profile> pipelines = pipelines_of(c);
    const token_count context = context_of(r);
    token_count room = static_cast<token_count>(std::floor(max_tokens_ratio * static_cast<double>(context)));
    token_count most = 0;
    for (const scheme_profile& p : pipelines) most = std::max(most, p.max_len);
    room = std::min(room, most);
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

    iteration_plan out;
    out.candidate = index;
    std::vector<std::vector<std::vector<std::int64_t>>> micro_batches(pipelines.size());
    std::vector<double> load(pipelines.size(), 0.0);
    std::vector<token_count> own_lengths;
    for (const packed_iteration& it : packed)
      for (const packed_micro_batch& mb : it.micro_batches) {
        if (mb.documents.empty()) continue;
        own_lengths.clear();
        for (const std::int64_t d : mb.documents) own_lengths.push_back(r.documents[static_cast<std::size_t>(d)]);
        std::optional<std::size_t> to;
        double to_finish = 0;
        for (std::size_t j = 0; j < pipelines.size(); ++j) {
          if (pipelines[j].max_len < mb.tokens) continue;
          const double finish = load[j] + pipelines[j].micro_batch_seconds(own_lengths);
          if (!to || finish < to_finish) to = j, to_finish = finish;
        }
        if (!to) return std::nullopt;
        load[*to] = to_finish;
        micro_batches[*to].push_back(mb.documents);
      }
    for (std::size_t j = 0; j < pipelines.size(); ++j) {
      pipeline_plan& p = out.pipelines.emplace_back();
      p.profile = pipelines[j];
      for (const auto& mb : micro_batches[j]) p.sequences.insert(p.sequences.end(), mb.begin(), mb.end());
      p.packing = packing_of(pipelines[j], std::move(micro_batches[j]), r.documents);
      out.seconds = std::max(out.seconds, p.packing.seconds);
    }
    return out;
  }

  [[nodiscard]] iteration_plan assign(const step_request& r, std::span<const strategy> candidates) const {
    ZEPPELIN_EXPECTS(max_tokens_ratio >= 1 && std::isfinite(max_tokens_ratio), "the loader's L_max / context must be a finite number >= 1",
                     {{"max_tokens_ratio", max_tokens_ratio}});
    std::optional<iteration_plan> best;
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      std::optional<iteration_plan> p = assign_to(r, candidates[c], c);
      if (p && (!best || p->seconds < best->seconds)) best = std::move(p);
    }
    if (!best)
      ZEPPELIN_THROW(infeasible, "no candidate strategy's pipelines hold the loader's micro-batches",
                     {{"candidates", double(candidates.size())}, {"longest_document", double(longest_document(r))}});
    return std::move(*best);
  }
  friend bool operator==(const loader_packing&, const loader_packing&) = default;
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
  std::variant<loader_packing, hydraulis_packing> policy;

  [[nodiscard]] iteration_plan assign(const step_request& r, std::span<const strategy> candidates) const {
    return std::visit([&](const auto& k) { return k.assign(r, candidates); }, policy);
  }
  friend bool operator==(const any_step_packer&, const any_step_packer&) = default;
};

static_assert(step_packer<loader_packing> && step_packer<hydraulis_packing> && step_packer<any_step_packer>);

ZEPPELIN_NAMESPACE_END
