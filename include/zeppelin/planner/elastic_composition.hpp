// zeppelin/planner/elastic_composition.hpp
// InfiniPipe's composition as a step planning policy: its elastic planner
// (pack/elastic_pipeline.hpp) decides the chunks (documents sliced and packed by the sequence
// processor), their back-to-back chunk-level 1F1B pipelines and each pipeline's stage-aware
// checkpointing together, as the paper does; what stays swappable is the CP layout of every
// chunk over a stage's d_s GPUs (Ulysses, InfiniPipe's own; Zeppelin's hierarchical planner;
// any layout policy of step/make_plan.hpp).
//   in : the step request; the degrees: d_p = pp (0: the InfiniPipe planner's fastest of
//        1, 2, 4, ... up to the model's layers), d_s = the cluster's GPUs / d_p, a stage's
//        d_s GPUs within one node or whole nodes, dividing the model's heads (Ulysses
//        splits them)
//   out: plan(request, profiles) -> per elastic pipeline one step plan (elastic_step_plans),
//        run back to back; ZeRO-3 over each stage's GPUs, as InfiniPipe trains
// Memory: each GPU's memory minus the request's margin is InfiniPipe's usable budget.
// Errors: infeasible when no degree pair plans (naming the longest document); what the
// elastic planner and the layout throw for the pp given. Deterministic. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/elastic_step_plan.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>

#include <optional>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Whether d_s = gpus / pp GPUs per stage suit InfiniPipe on `r`'s cluster and model.
[[nodiscard]] inline bool elastic_degrees_fit(const step_request& r, int pp) noexcept {
  const long long gpus = r.cluster.num_ranks();
  if (pp < 1 || pp > r.model.layers || gpus % pp != 0) return false;
  const long long sp = gpus / pp;
  const int per_node = r.cluster.gpus_per_node();
  const bool placed = sp <= per_node ? per_node % sp == 0 : sp % per_node == 0;
  return placed && r.model.heads % sp == 0 && r.model.kv_heads % sp == 0;
}

template <class L>
struct elastic_composition {
  L layout{};
  int pp = 0;  //!< d_p; 0: the planner's fastest (see the file comment)

  //! The elastic plan of `r` on d_s x d_p = the cluster, or nothing when it does not plan.
  [[nodiscard]] static std::optional<elastic_plan> planned(const step_request& r, int d_p, elastic_pipeline_options& options) {
    const auto d_s = static_cast<int>(r.cluster.num_ranks() / d_p);
    options = elastic_pipeline_options::for_model(r.model, r.cluster, d_s, d_p, r.cluster.gpu().memory_bytes - r.margin_bytes);
    try {
      return plan_elastic_pipeline(r.documents, options);
    } catch (const infeasible&) {
      return std::nullopt;
    }
  }

  [[nodiscard]] std::vector<sequence_step_plan> plan(const step_request& r, std::span<const scheme_profile>) const {
    std::optional<elastic_plan> best;
    elastic_pipeline_options best_options, options;
    if (pp > 0) {
      ZEPPELIN_EXPECTS(elastic_degrees_fit(r, pp), "InfiniPipe's d_p does not split the cluster into stages of d_s GPUs that divide the heads",
                       {{"pp", double(pp)}, {"gpus", double(r.cluster.num_ranks())}, {"heads", double(r.model.heads)}});
      best = planned(r, pp, best_options);
    } else {
      for (int d_p = 1; d_p <= r.model.layers; d_p *= 2) {
        if (!elastic_degrees_fit(r, d_p)) continue;
        std::optional<elastic_plan> p = planned(r, d_p, options);
        if (p && (!best || p->seconds < best->seconds)) best = std::move(p), best_options = options;
      }
    }
    if (!best)
      ZEPPELIN_THROW(infeasible, "InfiniPipe's elastic planner finds no plan on this cluster",
                     {{"longest_document", double(longest_document(r))}, {"gpus", double(r.cluster.num_ranks())}, {"pp", double(pp)}});
    return elastic_step_plans(*best, r.documents, r.model, best_options, r.cluster, layout);
  }
  friend bool operator==(const elastic_composition&, const elastic_composition&) = default;
};

ZEPPELIN_NAMESPACE_END
