// zeppelin/strategy/homogeneous_baseline.hpp
// The homogeneous baseline of Hydraulis' evaluation (Megatron-LM-like): one scheme for every
// pipeline, the global batch split evenly over the data-parallel pipelines, each pipeline's
// sequences packed in arrival order into fixed-length micro-batches.
//   in : the scheme's profile, the number of pipelines d, the iteration's lengths, the
//        micro-batch length L (the context: Megatron-LM packs sequences into windows of it)
//   out: iteration_plan (strategy/iteration_plan.hpp) with d pipelines, seconds from the
//        profile's T(l, P) as Hydraulis' own plans
// Dispatch: sequences in arrival order, each to the pipeline with the fewest tokens so far
// (ties: the lowest index), as a data loader deals samples to data-parallel ranks by
// tokens, blind to attention's quadratic cost. Packing: each pipeline's sequences in order,
// a new micro-batch whenever the next one would pass L. A pipeline left without sequences
// idles.
// Errors: invalid_argument for d < 1, L < 1, no sequences, a sequence longer than L or the
// scheme's MaxLen (naming index, length and the limit).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/strategy/iteration_plan.hpp>
#include <zeppelin/strategy/pipeline_packing.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The Megatron-LM-like plan of the file comment.
[[nodiscard]] inline iteration_plan homogeneous_plan(const scheme_profile& profile, int pipelines, std::span<const token_count> lengths,
                                                     token_count micro_batch_tokens) {
  ZEPPELIN_EXPECTS(pipelines >= 1, "a homogeneous strategy needs at least 1 pipeline", {{"pipelines", double(pipelines)}});
  ZEPPELIN_EXPECTS(micro_batch_tokens >= 1, "the micro-batch length must be >= 1 token", {{"micro_batch_tokens", double(micro_batch_tokens)}});
  ZEPPELIN_EXPECTS(!lengths.empty(), "an iteration plan needs at least one sequence", {});
  const token_count limit = std::min(micro_batch_tokens, profile.max_len);
  for (std::size_t i = 0; i < lengths.size(); ++i)
    ZEPPELIN_EXPECTS(lengths[i] >= 1 && lengths[i] <= limit, "a sequence does not fit the baseline's micro-batches",
                     {{"index", double(i)}, {"length", double(lengths[i])}, {"limit", double(limit)}});
  iteration_plan plan;
  plan.pipelines.assign(static_cast<std::size_t>(pipelines), pipeline_plan{profile, {}, {}});
  std::vector<token_count> tokens(static_cast<std::size_t>(pipelines), 0);
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const auto j = static_cast<std::size_t>(std::min_element(tokens.begin(), tokens.end()) - tokens.begin());
    plan.pipelines[j].sequences.push_back(static_cast<std::int64_t>(i));
    tokens[j] += lengths[i];
  }
  for (pipeline_plan& p : plan.pipelines) {
    if (p.sequences.empty()) continue;
    std::vector<std::vector<std::int64_t>> windows;
    token_count filled = limit;  // forces a first window
    for (const std::int64_t i : p.sequences) {
      const token_count l = lengths[static_cast<std::size_t>(i)];
      if (filled + l > limit) windows.emplace_back(), filled = 0;
      windows.back().push_back(i);
      filled += l;
    }
    p.packing = packing_of(profile, std::move(windows), lengths);
    plan.seconds = std::max(plan.seconds, p.packing.seconds);
  }
  return plan;
}

ZEPPELIN_NAMESPACE_END
