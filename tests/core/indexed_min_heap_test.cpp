// The indexed min-heap (detail/indexed_min_heap.hpp) against a std::set of (key, id) pairs
// under seeded random inserts, key changes up and down, erasures and pops, with many equal
// keys (ties go to the lower id).
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/detail/indexed_min_heap.hpp>

#include <cstdint>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

using namespace zeppelin;

TEST_CASE("indexed min-heap: the least (key, id) first under random sets, erasures and pops", "[core][heap]") {
  random_generator rng(20261126, 5);
  std::size_t checked = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const auto ids = static_cast<std::int32_t>(1 + rng.below(trial % 4 == 0 ? 3 : 64));
    detail::indexed_min_heap heap;
    heap.reserve_ids(static_cast<std::size_t>(ids));
    std::set<std::pair<double, std::int32_t>> expected;
    std::vector<double> key_of(static_cast<std::size_t>(ids), -1);
    for (int step = 0; step < 400; ++step) {
      const auto id = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(ids)));
      const auto i = static_cast<std::size_t>(id);
      const std::uint64_t what = rng.below(4);
      if (what <= 1) {  // insert or move, keys from a small range so that many tie
        const double key = static_cast<double>(rng.below(8));
        if (key_of[i] >= 0) expected.erase({key_of[i], id});
        expected.insert({key, id});
        key_of[i] = key;
        heap.set(id, key);
      } else if (what == 2 && key_of[i] >= 0) {
        expected.erase({key_of[i], id});
        key_of[i] = -1;
        heap.erase(id);
      } else if (!expected.empty()) {  // pop the least
        const auto [key, least] = *expected.begin();
        REQUIRE(heap.top() == least);
        CHECK(heap.top_key() == key);
        expected.erase(expected.begin());
        key_of[static_cast<std::size_t>(least)] = -1;
        heap.erase(least);
      }
      REQUIRE(heap.size() == expected.size());
      REQUIRE(heap.empty() == expected.empty());
      if (!expected.empty()) {
        REQUIRE(heap.top() == expected.begin()->second);
        REQUIRE(heap.top_key() == expected.begin()->first);
      }
      for (std::int32_t x = 0; x < ids; ++x) REQUIRE(heap.contains(x) == (key_of[static_cast<std::size_t>(x)] >= 0));
      ++checked;
    }
    // what is left leaves in (key, id) order
    for (const auto& [key, id] : expected) {
      REQUIRE(heap.top() == id);
      REQUIRE(heap.top_key() == key);
      heap.erase(id);
    }
    CHECK(heap.empty());
  }
  CHECK(checked == 40 * 400);
}

TEST_CASE("indexed min-heap: reserving more ids keeps what is in the heap", "[core][heap]") {
  detail::indexed_min_heap heap;
  heap.reserve_ids(2);
  heap.set(1, 5.0);
  heap.set(0, 5.0);
  heap.reserve_ids(10);
  heap.set(9, 1.0);
  CHECK(heap.top() == 9);
  heap.erase(9);
  CHECK(heap.top() == 0);  // a tie: the lower id
  CHECK(heap.contains(1));
  CHECK_FALSE(heap.contains(5));
  heap.set(0, 7.0);  // moved down
  CHECK(heap.top() == 1);
}
