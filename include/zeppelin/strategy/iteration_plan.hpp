// zeppelin/strategy/iteration_plan.hpp
// Hydraulis' per-iteration loop (section 4): for each candidate strategy, dispatch the
// iteration's sequences across its pipelines (stage 1), pack each pipeline's sequences into
// micro-batches (stage 2), and take the strategy whose slowest pipeline is fastest.
//   in : the candidate strategies (strategy/strategy_proposal.hpp), the iteration's
//        sequence lengths, a dispatch policy and a packing policy
//   out: iteration_plan: the chosen candidate, per pipeline its scheme, sequences (indices
//        into the lengths) and packing, and the iteration's predicted seconds (the slowest
//        pipeline's (PP - 1 + V) x slowest micro-batch)
// A candidate whose largest MaxLen is below the longest sequence is skipped, and so is one
// whose lower bound (candidate_lower_bound) already reaches the best plan found: candidates
// are planned in increasing order of that bound, so most are never dispatched. A candidate
// that leaves a pipeline without sequences is kept only when every candidate does (an
// iteration with fewer sequences than any strategy has pipelines): the authors' code
// rejects such strategies, and with no other choice the empty pipelines' GPUs idle.
// Ties: the lowest candidate index. Deterministic for deterministic policies.
// Errors: invalid_argument for no candidates or no sequences; infeasible when no candidate
// holds the longest sequence (naming it and the largest MaxLen); what the policies throw.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/strategy/dispatch.hpp>
#include <zeppelin/strategy/pipeline_packing.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct pipeline_plan {
  scheme_profile profile;
  std::vector<std::int64_t> sequences;  //!< indices into the iteration's lengths
  pipeline_packing packing;             //!< micro-batches as indices into the iteration's lengths
};

struct iteration_plan {
  std::size_t candidate = 0;  //!< index into the candidates
  std::vector<pipeline_plan> pipelines;
  double seconds = 0;  //!< the slowest pipeline's latency
};

//! The plan of one candidate: dispatch, then pack every non-empty pipeline.
template <dispatch_policy D, pipeline_packing_policy K>
[[nodiscard]] iteration_plan plan_with(const strategy& s, std::span<const token_count> lengths, const D& dispatcher, const K& packer) {
  const std::vector<scheme_profile> pipelines = pipelines_of(s);
  const dispatch_result d = dispatcher.dispatch(pipelines, lengths);
  iteration_plan plan;
  std::vector<token_count> own;
  for (std::size_t j = 0; j < pipelines.size(); ++j) {
    pipeline_plan p{pipelines[j], d.sequences[j], {}};
    if (!p.sequences.empty()) {
      own.clear();
      for (const std::int64_t i : p.sequences) own.push_back(lengths[static_cast<std::size_t>(i)]);
      p.packing = packer.pack(p.profile, own);
      for (auto& mb : p.packing.micro_batches)
        for (std::int64_t& i : mb) i = p.sequences[static_cast<std::size_t>(i)];  // back to iteration indices
      plan.seconds = std::max(plan.seconds, p.packing.seconds);
    }
    plan.pipelines.push_back(std::move(p));
  }
  return plan;
}

//! A lower bound on the seconds of any plan of `s` for `lengths`, the largest of:
//!   (a) the longest sequence alone on the best pipeline that holds it (the LB of
//!       strategy/dispatch.hpp);
//!   (b) for every MaxLen level M of the strategy (next lower level M'), the sequences
//!       longer than M' can only go to the pipelines with MaxLen >= M: their least work
//!       there, spread evenly over those pipelines (the slowest is at least the mean). The
//!       lowest level spreads every sequence over every pipeline.
//! Infinity when no pipeline holds the longest sequence.
[[nodiscard]] inline double candidate_lower_bound(const strategy& s, std::span<const token_count> lengths) {
  const token_count longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
  double bound = std::numeric_limits<double>::infinity();
  for (const strategy_part& part : s.parts)
    if (part.profile.max_len >= longest) bound = std::min(bound, pipeline_lower_bound(part.profile, std::span(&longest, 1)));
  if (bound == std::numeric_limits<double>::infinity()) return bound;
  std::vector<token_count> levels;
  for (const strategy_part& part : s.parts) levels.push_back(part.profile.max_len);
  std::sort(levels.begin(), levels.end(), std::greater<>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  for (std::size_t t = 0; t < levels.size(); ++t) {
    const token_count below = t + 1 < levels.size() ? levels[t + 1] : 0;
    int pipelines = 0;
    for (const strategy_part& part : s.parts)
      if (part.profile.max_len >= levels[t]) pipelines += part.pipelines;
    double work = 0;
    for (const token_count l : lengths) {
      if (l <= below) continue;
      double least = std::numeric_limits<double>::infinity();
      for (const strategy_part& part : s.parts)
        if (part.profile.max_len >= l) least = std::min(least, part.profile.sequence_seconds(l));
      work += least;
    }
    bound = std::max(bound, work / std::max(1, pipelines));
  }
  return bound;
}

//! Hydraulis' per-iteration choice (see the file comment).
template <dispatch_policy D, pipeline_packing_policy K>
[[nodiscard]] iteration_plan plan_iteration(std::span<const strategy> candidates, std::span<const token_count> lengths, const D& dispatcher,
                                            const K& packer) {
  ZEPPELIN_EXPECTS(!candidates.empty(), "an iteration plan needs at least one candidate strategy", {});
  ZEPPELIN_EXPECTS(!lengths.empty(), "an iteration plan needs at least one sequence", {});
  const token_count longest = *std::max_element(lengths.begin(), lengths.end());
  iteration_plan best, best_with_empty;
  best.seconds = best_with_empty.seconds = std::numeric_limits<double>::infinity();
  token_count largest = 0;
  std::vector<std::pair<double, std::size_t>> order;  // (lower bound, candidate), holding the longest only
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    token_count holds = 0;
    for (const strategy_part& part : candidates[c].parts) holds = std::max(holds, part.profile.max_len);
    largest = std::max(largest, holds);
    if (holds >= longest) order.emplace_back(candidate_lower_bound(candidates[c], lengths), c);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& [bound, c] : order) {
    if (bound > best.seconds) break;  // no later candidate can beat the best plan without idle pipelines
    if (bound == best.seconds && c > best.candidate) continue;  // could only tie, at a higher index
    iteration_plan plan = plan_with(candidates[c], lengths, dispatcher, packer);
    plan.candidate = c;
    const bool empty = std::any_of(plan.pipelines.begin(), plan.pipelines.end(), [](const pipeline_plan& p) { return p.sequences.empty(); });
    iteration_plan& slot = empty ? best_with_empty : best;
    if (plan.seconds < slot.seconds || (plan.seconds == slot.seconds && plan.candidate < slot.candidate)) slot = std::move(plan);
  }
  if (best.seconds < std::numeric_limits<double>::infinity()) return best;
  if (best_with_empty.seconds < std::numeric_limits<double>::infinity()) return best_with_empty;
  ZEPPELIN_THROW(infeasible, "no candidate strategy holds the iteration's longest sequence",
                 {{"longest", double(longest)}, {"largest_max_len", double(largest)}});
}

ZEPPELIN_NAMESPACE_END
