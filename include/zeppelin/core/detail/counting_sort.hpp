// zeppelin/core/detail/counting_sort.hpp
// A stable counting sort: items ordered by a small integer key, equal keys keeping their order.
//   in : items; key(item) in [0, buckets); scratch storage the caller reuses across calls
//   out: items in key order; starts[k] .. starts[k + 1] the run of key k (buckets + 1 entries)
// O(items + buckets). Why: validate and the planner's launch-set bound group up to millions of
// items by a dense index (sequence, group, ring origin, micro-batch); a comparison sort pays a
// log factor for an order the keys already give.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

template <class T, class Key>
void stable_counting_sort(std::vector<T>& items, std::size_t buckets, Key&& key, std::vector<T>& scratch,
                          std::vector<std::size_t>& starts) {
  starts.assign(buckets + 1, 0);
  for (const T& x : items) ++starts[key(x) + 1];
  for (std::size_t k = 1; k <= buckets; ++k) starts[k] += starts[k - 1];
  scratch.resize(items.size());
  for (const T& x : items) scratch[starts[key(x)]++] = x;  // starts[k]: now the end of run k
  for (std::size_t k = buckets; k > 0; --k) starts[k] = starts[k - 1];
  starts[0] = 0;
  items.swap(scratch);
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
