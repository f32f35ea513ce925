// tests/program/small_list_test.cpp
// small_list (program/small_list.hpp) against std::vector on seeded random sequences of
// pushes, copies, moves, assignments and clears: the same items in the same order after every
// step, in place up to N and on the heap beyond, copies deep, moved-from lists empty.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/program/small_list.hpp>

#include <cstdint>
#include <utility>
#include <vector>

using namespace zeppelin;

namespace {

template <class List>
std::vector<std::int32_t> items_of(const List& l) {
  return {l.begin(), l.end()};
}

}  // namespace

TEST_CASE("small_list: holds what a vector holds through pushes, copies, moves and clears", "[program]") {
  random_generator rng(2411);
  using list = small_list<std::int32_t, 2>;
  static_assert(sizeof(list) == sizeof(std::vector<std::int32_t>));
  for (int trial = 0; trial < 400; ++trial) {
    list a, b;
    std::vector<std::int32_t> va, vb;
    for (int step = 0; step < 40; ++step) {
      switch (rng.below(7)) {
        case 0:
        case 1:
        case 2: {
          const auto x = static_cast<std::int32_t>(rng.below(1000));
          a.push_back(x);
          va.push_back(x);
          break;
        }
        case 3: {  // copy: deep, the source unchanged
          list c(a);
          c.push_back(-1);
          CHECK(items_of(a) == va);
          b = c;
          vb = va;
          vb.push_back(-1);
          break;
        }
        case 4: {  // move: the target takes the items, the source is empty
          b = std::move(a);
          vb = std::move(va);
          CHECK(a.empty());
          a.push_back(7);
          va = {7};
          break;
        }
        case 5: {
          list c(std::move(b));
          CHECK(b.empty());
          CHECK(items_of(c) == vb);
          b = c;
          break;
        }
        default:
          a.clear();
          va.clear();
      }
      REQUIRE(items_of(a) == va);
      REQUIRE(items_of(b) == vb);
      REQUIRE(a.size() == va.size());
      CHECK((a == b) == (va == vb));
      if (!va.empty()) CHECK(a[va.size() - 1] == va.back());
    }
  }
  const list braced{3, 1, 4, 1, 5};
  CHECK(items_of(braced) == std::vector<std::int32_t>{3, 1, 4, 1, 5});
  CHECK(list{} == list{});
  CHECK_FALSE(list{1} == list{1, 2});
}
