// tests/core/counting_sort_test.cpp
// detail::stable_counting_sort (core/detail/counting_sort.hpp) against std::stable_sort on
// seeded random items: the same order (equal keys keep their input order), and each key's run
// at starts[k] .. starts[k + 1], empty keys included; scratch reused across calls.
#include <catch2/catch.hpp>

#include <zeppelin/core/detail/counting_sort.hpp>
#include <zeppelin/core/random.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace zp = zeppelin;

TEST_CASE("stable_counting_sort orders like std::stable_sort and gives each key's run", "[core][counting_sort]") {
  struct item {
    std::size_t key = 0;
    std::size_t input = 0;  // place in the input: equal keys must keep this order
  };
  std::vector<item> scratch;
  std::vector<std::size_t> starts;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    zp::random_generator rng(seed);
    const auto buckets = static_cast<std::size_t>(rng.between(1, 50));
    const auto n = static_cast<std::size_t>(rng.between(0, 400));
    std::vector<item> items(n);
    for (std::size_t i = 0; i < n; ++i) items[i] = {static_cast<std::size_t>(rng.between(0, static_cast<std::int64_t>(buckets) - 1)), i};
    std::vector<item> expected = items;
    std::stable_sort(expected.begin(), expected.end(), [](const item& a, const item& b) { return a.key < b.key; });

    zp::detail::stable_counting_sort(items, buckets, [](const item& x) { return x.key; }, scratch, starts);
    INFO("seed " << seed << ", " << n << " items, " << buckets << " keys");
    REQUIRE(items.size() == n);
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(items[i].key == expected[i].key);
      REQUIRE(items[i].input == expected[i].input);
    }
    REQUIRE(starts.size() == buckets + 1);
    REQUIRE(starts.front() == 0);
    REQUIRE(starts.back() == n);
    for (std::size_t k = 0; k < buckets; ++k) {
      REQUIRE(starts[k] <= starts[k + 1]);
      for (std::size_t i = starts[k]; i < starts[k + 1]; ++i) REQUIRE(items[i].key == k);
    }
  }
}
