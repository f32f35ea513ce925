// zeppelin/pack/chunk_grouping.hpp
// How many chunk-level 1F1B pipelines an iteration runs back to back, and which units each
// runs: InfiniPipe's grouping dynamic program (Wang et al., "InfiniPipe: Elastic Pipeline
// Parallelism for Efficient Variable-Length Long-Context LLM Training", Eq. 14).
//   in : the chunk count of every unit (a cut sequence's chain, or one batched chunk:
//        chunk_order::chains) and cost(lo, hi): the seconds of one pipeline running the
//        units whose chunk count lies in [lo, hi], its warm-up / cool-down delta and its
//        recomputation included (infinity when no checkpointing lets it fit)
//   out: chunk_grouping: per pipeline the chunk counts it holds, and the total seconds
// Why group: a pipeline's window grows with its longest chain (N_prefill), so short
// sequences scheduled beside a long one need more recomputation than on their own, while
// every extra pipeline pays another warm-up and cool-down. With c_1 < ... < c_m the
// distinct counts, dp[0] = 0 and
//   dp[i] = min over k < i of dp[k] + cost(c_{k+1}, c_i),
// so a pipeline holds a contiguous range of counts (the paper's "sequences with k+1 .. i+1
// chunks"); m(m+1)/2 calls of cost. Ties: the fewest pipelines, then the smallest k.
// Pipelines are listed by increasing chunk count; they may run in any order, as gradients
// accumulate across them.
// Errors: invalid_argument for no units, a count < 1, or a cost that is NaN or negative;
// infeasible when every grouping has a pipeline of infinite cost (naming the smallest and
// largest chunk counts).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <limits>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct chunk_grouping {
  struct pipeline {
    int first_count = 0;  //!< the smallest chunk count of its units
    int last_count = 0;   //!< the largest
    double seconds = 0;   //!< cost(first_count, last_count)
    friend bool operator==(const pipeline&, const pipeline&) = default;
  };
  std::vector<pipeline> pipelines;  //!< by increasing chunk count
  double seconds = 0;               //!< the sum of the pipelines' seconds
  friend bool operator==(const chunk_grouping&, const chunk_grouping&) = default;
};

//! Eq. 14 over the units' chunk counts (see the file comment).
template <class Cost>
  requires std::invocable<const Cost&, int, int> && std::convertible_to<std::invoke_result_t<const Cost&, int, int>, double>
[[nodiscard]] chunk_grouping group_pipelines(std::span<const int> counts, const Cost& cost) {
  ZEPPELIN_EXPECTS(!counts.empty(), "grouping pipelines needs at least one unit", {});
  for (std::size_t u = 0; u < counts.size(); ++u)
    ZEPPELIN_EXPECTS(counts[u] >= 1, "a unit holds at least one chunk", {{"unit", double(u)}, {"chunks", double(counts[u])}});
  std::vector<int> levels(counts.begin(), counts.end());
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const std::size_t m = levels.size();
  constexpr double infinity = std::numeric_limits<double>::infinity();
  std::vector<double> dp(m + 1, infinity), seconds(m + 1, infinity);
  std::vector<std::size_t> from(m + 1, 0), groups(m + 1, 0);
  dp[0] = 0;
  for (std::size_t i = 1; i <= m; ++i)
    for (std::size_t k = 0; k < i; ++k) {
      if (dp[k] == infinity) continue;
      const double c = static_cast<double>(cost(levels[k], levels[i - 1]));
      ZEPPELIN_EXPECTS(!std::isnan(c) && c >= 0, "a pipeline's cost must be a number >= 0",
                       {{"first_count", double(levels[k])}, {"last_count", double(levels[i - 1])}, {"seconds", c}});
      const double total = dp[k] + c;
      if (total < dp[i] || (total == dp[i] && total < infinity && groups[k] + 1 < groups[i]))
        dp[i] = total, from[i] = k, seconds[i] = c, groups[i] = groups[k] + 1;
    }
  if (dp[m] == infinity)
    ZEPPELIN_THROW(infeasible, "no grouping of the units into pipelines fits: even a pipeline of one chunk count does not",
                   {{"first_count", double(levels.front())}, {"last_count", double(levels.back())}});
  chunk_grouping out;
  out.seconds = dp[m];
  for (std::size_t i = m; i > 0; i = from[i]) out.pipelines.push_back({levels[from[i]], levels[i - 1], seconds[i]});
  std::reverse(out.pipelines.begin(), out.pipelines.end());
  return out;
}

ZEPPELIN_NAMESPACE_END
