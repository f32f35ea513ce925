// zeppelin/core/detail/counting_sort.hpp
// A stable counting sort: items ordered by a small integer key, equal keys keeping their order.
//   in : items; key(item) in [0, buckets); scratch storage the caller reuses across calls
//   out: items in key order; starts[k] .. starts[k + 1] the run of key k (buckets + 1 entries)
// O(items + buckets); stable_sort_by_key picks it where the keys' span is small. Why: validate,
// the planner's launch-set and flow bounds and the simulator's streams of pieces group up to
// millions of items by a dense index (sequence, group, ring origin, micro-batch, rank, port); a
// comparison sort pays a log factor for an order the keys already give.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
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

//! Items ordered by an integer key, equal keys keeping their order: by stable_counting_sort
//! over the keys' span when it is at most twice the items (O(items)), else by a stable
//! comparison sort (a few items whose keys lie far apart). key(item) returns a signed or
//! unsigned integer.
template <class T, class Key>
void stable_sort_by_key(std::vector<T>& items, Key&& key, std::vector<T>& scratch, std::vector<std::size_t>& starts) {
  if (items.size() < 2) return;
  auto low = key(items.front()), high = low;
  for (const T& x : items) {
    const auto k = key(x);
    low = k < low ? k : low;
    high = k > high ? k : high;
  }
  const auto span = static_cast<std::size_t>(high - low) + 1;
  if (span > 2 * items.size()) {
    std::stable_sort(items.begin(), items.end(), [&](const T& a, const T& b) { return key(a) < key(b); });
    return;
  }
  stable_counting_sort(items, span, [&](const T& x) { return static_cast<std::size_t>(key(x) - low); }, scratch, starts);
}

}  // namespace detail
ZEPPELIN_NAMESPACE_END
