// zeppelin/partition/detail/water_fill.hpp
// Water filling: spread `amount` tokens over m bins (GPUs or nodes) so that the fullest
// receiving bin ends as low as possible.
//   in : the bins' current loads x_j (x_j <= cap), their common capacity cap, and amount with
//        amount <= sum_j (cap - x_j)
//   out: integer shares a_j >= 0, sum a_j = amount, x_j + a_j <= cap: every bin below a level
//        lambda is raised to lambda (a_j = max(0, lambda - x_j)) for the largest integer
//        lambda with sum_j max(0, lambda - x_j) <= amount; the r < |{j : x_j <= lambda}|
//        tokens left over go one each to the bins with x_j <= lambda, lowest index first.
// O(m log m). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

//! Shares of `amount` over bins of loads `load` and capacity `cap` (see the file comment).
inline std::vector<token_count> water_fill(std::span<const token_count> load, token_count cap, token_count amount) {
  const std::size_t m = load.size();
  std::vector<token_count> share(m, 0);
  if (m == 0 || amount <= 0) return share;
  std::vector<std::size_t> order(m);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return load[a] < load[b]; });
  // raise the k least-loaded bins to a level in [y_{k-1}, y_k): fill(v) = k v - prefix_k
  token_count level = cap, prefix = 0;
  for (std::size_t k = 1; k <= m; ++k) {
    prefix += load[order[k - 1]];
    const token_count next = k < m ? std::min(load[order[k]], cap) : cap;
    const token_count v = (amount + prefix) / static_cast<token_count>(k);  // largest v with k v - prefix <= amount
    if (v < next || k == m) {
      level = std::min(v, cap);
      break;
    }
  }
  token_count left = amount;
  for (std::size_t j = 0; j < m; ++j)
    if (load[j] < level) share[j] = level - load[j], left -= share[j];
  for (std::size_t j = 0; j < m && left > 0; ++j)
    if (load[j] <= level) ++share[j], --left;
  return share;
}

}  // namespace detail

ZEPPELIN_NAMESPACE_END
