// zeppelin/planner/step_request.hpp
// What the step planner (planner/plan_step.hpp) plans one training iteration from, and what
// every policy of a step composition reads.
//   documents     the iteration's document lengths, in the data loader's order (what every
//                 piece of the resulting step plans names, by index)
//   cluster       nodes x GPUs per node, the GPU and its links
//   model         the model trained
//   context       the data loader's window: Megatron-LM packs documents into micro-batches of
//                 it and WLB-LLM's outlier thresholds are fractions of it. It is never below
//                 the longest document (context_of): documents are never cut by a loader.
//   margin_bytes  GPU memory kept free on every GPU (the framework's, fragmentation); the
//                 rest is what the schemes' MaxLen and InfiniPipe's budgets may use
//   schemes       the degrees the strategies choose from (strategy/parallel_scheme.hpp):
//                 TP 1 .. 8 within a node, CP 1 .. 32, every PP that divides the layers
// scheme_profiles_of: Hydraulis' profiles (strategy/scheme_profile.hpp) of every scheme
// <TP, PP, CP> the model allows on the cluster: MaxLen, UtilLen and T(l, P) of each, the
// table every strategy policy chooses pipelines from.
// Errors: validate(step_request) throws invalid_argument for no documents, a length outside
// [1, max_sequence_length], a negative or non-finite margin, a context < 0, an invalid model.
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/strategy/parallel_scheme.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct step_request {
  std::vector<token_count> documents;
  topology cluster{topology_config{}};
  model_config model{};
  token_count context = 0;        //!< 0: the longest document
  double margin_bytes = 8.0 * (1ull << 30);
  scheme_space schemes{.tp = {1, 2, 4, 8}, .cp = {1, 2, 4, 8, 16, 32}, .max_pp = 0};
};

//! Throws invalid_argument naming the value (see the file comment).
inline void validate(const step_request& r) {
  ZEPPELIN_EXPECTS(!r.documents.empty(), "a step needs at least one document", {});
  for (std::size_t i = 0; i < r.documents.size(); ++i)
    ZEPPELIN_EXPECTS(r.documents[i] >= 1 && r.documents[i] <= max_sequence_length, "a document length must be in [1, max_sequence_length]",
                     {{"document", double(i)}, {"length", double(r.documents[i])}, {"max_sequence_length", double(max_sequence_length)}});
  ZEPPELIN_EXPECTS(r.context >= 0 && r.context <= max_sequence_length, "the context window must be in [0, max_sequence_length] (0: the longest document)",
                   {{"context", double(r.context)}});
  ZEPPELIN_EXPECTS(r.margin_bytes >= 0 && std::isfinite(r.margin_bytes), "the memory margin must be a finite number of bytes >= 0",
                   {{"margin_bytes", r.margin_bytes}});
  validate(r.model);
}

//! The longest document of the request.
[[nodiscard]] inline token_count longest_document(const step_request& r) noexcept {
  return r.documents.empty() ? 0 : *std::max_element(r.documents.begin(), r.documents.end());
}

//! The loader's window: the request's context, at least the longest document.
[[nodiscard]] inline token_count context_of(const step_request& r) noexcept { return std::max(r.context, longest_document(r)); }

//! The tokens of the iteration.
[[nodiscard]] inline token_count total_tokens(const step_request& r) noexcept {
  token_count n = 0;
  for (const token_count d : r.documents) n += d;
  return n;
}

//! Hydraulis' profile of every scheme the model allows on the cluster (see the file comment).
[[nodiscard]] inline std::vector<scheme_profile> scheme_profiles_of(const step_request& r) {
  const long long gpus = r.cluster.num_ranks();
  const std::vector<parallel_scheme> schemes = enumerate_schemes(r.model, gpus, r.cluster.gpus_per_node(), r.schemes);
  return profile_schemes(schemes, r.model, r.cluster.gpu(), gpus, {.margin_bytes = r.margin_bytes});
}

ZEPPELIN_NAMESPACE_END
