// zeppelin/planner/step_strategy.hpp
// The strategy stage of a step composition: which pipelines (each of a scheme <TP, PP, CP>)
// the cluster is cut into. A strategy policy proposes candidates; the packer stage
// (planner/step_packer.hpp) assigns the documents to each and keeps the one it packs fastest.
//   concept step_strategy: a small regular value S with
//     s.candidates(request, profiles) -> std::vector<strategy>
//       profiles: scheme_profiles_of(request) (planner/step_request.hpp), computed once per
//       step; each strategy (strategy/strategy_proposal.hpp) a list of (scheme, pipelines)
//       parts using at most the cluster's GPUs. An empty list means the strategy has nothing
//       that holds the longest document.
// Models:
//   homogeneous_strategy  Megatron-LM's: one scheme for every pipeline, as many pipelines as
//                         fit the cluster; every scheme whose MaxLen holds the longest
//                         document is a candidate (the packer keeps the fastest), or the one
//                         `scheme` given
//   hydraulis_strategy    Hydraulis' heterogeneous proposal (strategy_proposal.hpp): the
//                         strategies of the proposal DP over the iteration's own lengths
// any_step_strategy holds one of them, chosen at run time; itself a step_strategy.
// Errors: homogeneous_strategy with a scheme the model does not allow on the cluster (no
// profile) throws invalid_argument naming its degrees. Deterministic. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/strategy/parallel_scheme.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>

#include <algorithm>
#include <concepts>
#include <optional>
#include <span>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

template <class S>
concept step_strategy = std::regular<S> && requires(const S& s, const step_request& r, std::span<const scheme_profile> profiles) {
  { s.candidates(r, profiles) } -> std::same_as<std::vector<strategy>>;
};

//! Megatron-LM's strategy (see the file comment).
struct homogeneous_strategy {
  std::optional<parallel_scheme> scheme;  //!< the one scheme; none: every scheme that holds the longest document

  [[nodiscard]] std::vector<strategy> candidates(const step_request& r, std::span<const scheme_profile> profiles) const {
    const long long gpus = r.cluster.num_ranks();
    const token_count longest = longest_document(r);
    std::vector<strategy> out;
    bool allowed = false;
    for (const scheme_profile& p : profiles) {
      if (scheme && !(p.scheme == *scheme)) continue;
      allowed = true;
      const long long pipelines = gpus / p.scheme.gpus();
      if (pipelines < 1 || p.max_len < longest) continue;
      out.push_back({.parts = {{.profile = p, .pipelines = static_cast<int>(pipelines)}}});
    }
    ZEPPELIN_EXPECTS(!scheme || allowed, "the homogeneous strategy's scheme is not one the model allows on the cluster",
                     {{"tp", double(scheme ? scheme->tp : 0)}, {"pp", double(scheme ? scheme->pp : 0)}, {"cp", double(scheme ? scheme->cp : 0)},
                      {"gpus", double(gpus)}});
    return out;
  }
  friend bool operator==(const homogeneous_strategy&, const homogeneous_strategy&) = default;
};

//! Hydraulis' heterogeneous proposal (see the file comment).
struct hydraulis_strategy {
  [[nodiscard]] std::vector<strategy> candidates(const step_request& r, std::span<const scheme_profile> profiles) const {
    if (profiles.empty()) return {};
    const long long gpus = r.cluster.num_ranks();
    return propose_strategies(profiles, gpus, r.documents, {.length_step = authors_length_step(gpus)});
  }
  friend bool operator==(const hydraulis_strategy&, const hydraulis_strategy&) = default;
};

struct any_step_strategy {
  std::variant<homogeneous_strategy, hydraulis_strategy> policy;

  [[nodiscard]] std::vector<strategy> candidates(const step_request& r, std::span<const scheme_profile> profiles) const {
    return std::visit([&](const auto& s) { return s.candidates(r, profiles); }, policy);
  }
  friend bool operator==(const any_step_strategy&, const any_step_strategy&) = default;
};

static_assert(step_strategy<homogeneous_strategy> && step_strategy<hydraulis_strategy> && step_strategy<any_step_strategy>);

ZEPPELIN_NAMESPACE_END
