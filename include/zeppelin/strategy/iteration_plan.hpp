// zeppelin/strategy/iteration_plan.hpp
// Hydraulis' per-iteration loop (section 4): for each candidate strategy, dispatch the
// iteration's sequences across its pipelines (stage 1), pack each pipeline's sequences into
// micro-batches (stage 2), and take the strategy whose slowest pipeline is fastest.
//   in : the candidate strategies (strategy/strategy_proposal.hpp), the iteration's
//        sequence lengths, a dispatch policy and a packing policy, the threads that pack a
//        dispatch's pipelines at once (the plan does not depend on them)
//   out: iteration_plan: the chosen candidate, per pipeline its scheme, sequences (indices
//        into the lengths) and packing, and the iteration's predicted seconds (the slowest
//        pipeline's (PP - 1 + V) x slowest micro-batch)
// A candidate whose largest MaxLen is below the longest sequence is skipped, and so is one
// whose lower bound (candidate_lower_bound) already reaches the best plan found: candidates
// are planned in increasing order of that bound, so most are never dispatched. A dispatch
// whose makespan passes the best plan is given up (dispatch_within) and never packed: a
// plan is never faster than its dispatch's makespan, for latencies with a, b, c >= 0. A candidate
// that leaves a pipeline without sequences is kept only when every candidate does (an
// iteration with fewer sequences than any strategy has pipelines): the authors' code
// rejects such strategies, and with no other choice the empty pipelines' GPUs idle.
// Ties: the lowest candidate index. Deterministic for deterministic policies.
// Errors: invalid_argument for no candidates, no sequences or threads < 1; infeasible when
// no candidate holds the longest sequence (naming it and the largest MaxLen); what the
// policies throw.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/detail/parallel_for.hpp>
#include <zeppelin/strategy/dispatch.hpp>
#include <zeppelin/strategy/pipeline_packing.hpp>
#include <zeppelin/strategy/strategy_proposal.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
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

namespace detail {
// Pack every non-empty pipeline of a dispatch on up to `threads` threads; nullopt when a
// pipeline's packing passes the cutoff. The result, and which error a packer's throw
// surfaces, are those of packing the pipelines in order and stopping at the first that
// passes the cutoff or throws: a pipeline after one known to pass it is not packed.
template <pipeline_packing_policy K>
[[nodiscard]] std::optional<iteration_plan> packed(std::span<const scheme_profile> pipelines, const dispatch_result& d,
                                                   std::span<const token_count> lengths, const K& packer, double cutoff, int threads = 1) {
  const std::size_t n = pipelines.size();
  std::vector<pipeline_plan> plans(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<std::size_t> first_over{n};  // the lowest pipeline known to pass the cutoff
  parallel_for(n, threads, [&](std::size_t j) {
    pipeline_plan& p = plans[j];
    p = {pipelines[j], d.sequences[j], {}};
    if (p.sequences.empty() || j > first_over.load()) return;
    try {
      std::vector<token_count> own;
      for (const std::int64_t i : p.sequences) own.push_back(lengths[static_cast<std::size_t>(i)]);
      p.packing = packer.pack(p.profile, own);
    } catch (...) {
      errors[j] = std::current_exception();
      return;
    }
    for (auto& mb : p.packing.micro_batches)
      for (std::int64_t& i : mb) i = p.sequences[static_cast<std::size_t>(i)];  // back to iteration indices
    if (p.packing.seconds > cutoff)
      for (std::size_t seen = first_over.load(); j < seen && !first_over.compare_exchange_weak(seen, j);) {}
  });
  iteration_plan plan;
  for (std::size_t j = 0; j < n; ++j) {
    if (errors[j]) std::rethrow_exception(errors[j]);
    plan.seconds = std::max(plan.seconds, plans[j].packing.seconds);
    if (plan.seconds > cutoff) return std::nullopt;
  }
  plan.pipelines = std::move(plans);
  return plan;
}
}  // namespace detail

//! The plan of one candidate: dispatch, then pack every non-empty pipeline.
template <dispatch_policy D, pipeline_packing_policy K>
[[nodiscard]] iteration_plan plan_with(const strategy& s, std::span<const token_count> lengths, const D& dispatcher, const K& packer) {
  const std::vector<scheme_profile> pipelines = pipelines_of(s);
  return *detail::packed(pipelines, dispatcher.dispatch(pipelines, lengths), lengths, packer, std::numeric_limits<double>::infinity());
}

//! A lower bound on the seconds of any plan of `s` for `lengths`: dispatch_lower_bound
//! (strategy/dispatch.hpp) over its pipelines. Infinity when no pipeline holds the longest
//! sequence.
[[nodiscard]] inline double candidate_lower_bound(const strategy& s, std::span<const token_count> lengths) {
  return dispatch_lower_bound(pipelines_of(s), lengths);
}

//! Hydraulis' per-iteration choice (see the file comment).
template <dispatch_policy D, pipeline_packing_policy K>
[[nodiscard]] iteration_plan plan_iteration(std::span<const strategy> candidates, std::span<const token_count> lengths, const D& dispatcher,
                                            const K& packer, int threads = 1) {
  ZEPPELIN_EXPECTS(threads >= 1, "an iteration plan needs at least 1 thread", {{"threads", double(threads)}});
  ZEPPELIN_EXPECTS(!candidates.empty(), "an iteration plan needs at least one candidate strategy", {});
  ZEPPELIN_EXPECTS(!lengths.empty(), "an iteration plan needs at least one sequence", {});
  const token_count longest = *std::max_element(lengths.begin(), lengths.end());
  iteration_plan best, best_with_empty;
  best.seconds = best_with_empty.seconds = std::numeric_limits<double>::infinity();
  token_count largest = 0;
  std::vector<std::pair<double, std::size_t>> order;  // (lower bound, candidate), holding the longest only
  std::vector<std::vector<scheme_profile>> pipelines(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    pipelines[c] = pipelines_of(candidates[c]);
    largest = std::max(largest, pipelines[c].front().max_len);
    if (pipelines[c].front().max_len >= longest) order.emplace_back(dispatch_lower_bound(pipelines[c], lengths), c);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& [bound, c] : order) {
    if (bound > best.seconds) break;  // no later candidate can beat the best plan without idle pipelines
    if (bound == best.seconds && c > best.candidate) continue;  // could only tie, at a higher index
    // A plan is never faster than its dispatch's makespan. The dispatch's cutoff leaves room
    // for the rounding between the two sums, so a candidate that ties the best is planned.
    const std::optional<dispatch_result> d = dispatch_within(dispatcher, pipelines[c], lengths, best.seconds * (1 + 1e-9));
    if (!d) continue;
    const bool empty = d->has_empty_pipeline();
    iteration_plan& slot = empty ? best_with_empty : best;
    std::optional<iteration_plan> plan = detail::packed(pipelines[c], *d, lengths, packer, slot.seconds, threads);
    if (!plan) continue;
    plan->candidate = c;
    if (plan->seconds < slot.seconds || (plan->seconds == slot.seconds && c < slot.candidate)) slot = std::move(*plan);
  }
  if (best.seconds < std::numeric_limits<double>::infinity()) return best;
  if (best_with_empty.seconds < std::numeric_limits<double>::infinity()) return best_with_empty;
  ZEPPELIN_THROW(infeasible, "no candidate strategy holds the iteration's longest sequence",
                 {{"longest", double(longest)}, {"largest_max_len", double(largest)}});
}

ZEPPELIN_NAMESPACE_END
