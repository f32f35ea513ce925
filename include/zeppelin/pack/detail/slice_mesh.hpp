// zeppelin/pack/detail/slice_mesh.hpp
// The slice mesh of InfiniPipe's workload-balanced chunking (Wang et al., "InfiniPipe:
// Elastic Pipeline Parallelism for Efficient Variable-Length Long-Context LLM Training",
// Algorithm 1, line 1): the longest sequence cut into n slices of equal time.
//   in : the longest length L >= 1, n in [1, L], and cumulative(x), the marginal time of a
//        sequence's first x tokens (strictly increasing and convex in x, cumulative(0) = 0;
//        a slice [b, e) then costs cumulative(e) - cumulative(b))
//   out: n slice lengths, each >= 1, non-increasing, summing to L
// Method: boundary j is the integer x whose cumulative(x) is nearest to j/n cumulative(L)
// (binary search; ties to the larger x), which puts every slice within one token's time of
// the equal share; the lengths are then sorted non-increasing (only nearly equal slices
// can be out of order after rounding; sorting moves each length by less than one token,
// as sorting is a contraction in the max norm) and slices rounded to 0 tokens get one token
// from the longest slices. Convexity makes the real-valued slices non-increasing (later
// slices carry more causal context per token).
// Errors: none (the caller checks L and n). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

template <class Cumulative>
[[nodiscard]] std::vector<token_count> equal_time_mesh(token_count longest, int n, const Cumulative& cumulative) {
  const auto slices = static_cast<std::size_t>(n);
  std::vector<token_count> bound(slices + 1, 0);
  bound[slices] = longest;
  const double total = cumulative(longest);
  for (std::size_t j = 1; j < slices; ++j) {
    const double target = total * static_cast<double>(j) / static_cast<double>(n);
    token_count lo = bound[j - 1], hi = longest;
    while (lo < hi) {
      const token_count mid = lo + (hi - lo) / 2;
      if (cumulative(mid) >= target)
        hi = mid;
      else
        lo = mid + 1;
    }
    if (lo > bound[j - 1] && target - cumulative(lo - 1) < cumulative(lo) - target) --lo;
    bound[j] = lo;
  }
  std::vector<token_count> mesh(slices);
  for (std::size_t j = 0; j < slices; ++j) mesh[j] = bound[j + 1] - bound[j];
  std::sort(mesh.begin(), mesh.end(), std::greater<>());
  for (std::size_t j = slices; j-- > 0 && mesh[j] == 0;) {
    mesh[j] = 1;
    // The last of the longest slices gives the token back: the order stays non-increasing.
    const auto last_longest = std::upper_bound(mesh.begin(), mesh.end(), mesh.front(), std::greater<>()) - 1;
    --*last_longest;
  }
  return mesh;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
