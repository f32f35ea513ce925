// sub_communicator: views over disjoint rank subsets of one loopback world run their own
// collectives at the same time (and the parent's, in between) with the results of a world of
// their own; bad member lists and peers are refused.
#include <zeppelin/comm/collectives.hpp>
#include <zeppelin/comm/host_loopback.hpp>
#include <zeppelin/comm/sub_communicator.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <mutex>
#include <numeric>
#include <vector>

using namespace zeppelin;
using namespace std::chrono_literals;

static_assert(communicator<sub_communicator<host_loopback_comm>>);

TEST_CASE("sub_communicator: interleaved views gather their own members, renumbered", "[comm]") {
  // 6 ranks: view A = {0, 2, 4}, view B = {5, 3, 1} (reversed: view rank 0 is parent rank 5)
  const host_loopback_world world{.ranks = 6, .gpus_per_node = 2, .timeout = 20000ms};
  std::vector<std::vector<int>> gathered(6);
  std::vector<int> view_rank(6, -1), view_node(6, -1);
  std::mutex m;
  world.run([&](host_loopback_comm& c) {
    const bool in_a = c.rank() % 2 == 0;
    sub_communicator<host_loopback_comm> view(c, in_a ? std::vector<rank_index>{0, 2, 4} : std::vector<rank_index>{5, 3, 1});
    std::vector<rank_index> group(3);
    std::iota(group.begin(), group.end(), 0);
    const std::vector<int> mine{100 * c.rank() + 1, 100 * c.rank() + 2};
    std::vector<int> all(6);
    const std::vector<token_count> counts(3, 2);
    all_gather_v(view, std::span<const rank_index>(group), std::span<const int>(mine), std::span<int>(all),
                 std::span<const token_count>(counts), "view gather");
    // the parent still works between the views' collectives
    std::vector<int> world_all(6);
    const std::vector<rank_index> everyone{0, 1, 2, 3, 4, 5};
    const std::vector<token_count> ones(6, 1);
    all_gather_v(c, std::span<const rank_index>(everyone), std::span<const int>(mine.data(), 1), std::span<int>(world_all),
                 std::span<const token_count>(ones), "world gather");
    std::lock_guard lock(m);
    gathered[static_cast<std::size_t>(c.rank())] = all;
    view_rank[static_cast<std::size_t>(c.rank())] = view.rank();
    view_node[static_cast<std::size_t>(c.rank())] = view.node_of(view.rank());
    CHECK(world_all == std::vector<int>{1, 101, 201, 301, 401, 501});
  });
  for (const int r : {0, 2, 4}) CHECK(gathered[static_cast<std::size_t>(r)] == std::vector<int>{1, 2, 201, 202, 401, 402});
  for (const int r : {1, 3, 5}) CHECK(gathered[static_cast<std::size_t>(r)] == std::vector<int>{501, 502, 301, 302, 101, 102});
  CHECK(view_rank == std::vector<int>{0, 2, 1, 1, 2, 0});
  CHECK(view_node == std::vector<int>{0, 0, 1, 1, 2, 2});  // the parent's nodes (2 GPUs per node)
}

TEST_CASE("sub_communicator: bad members and peers are refused", "[comm]") {
  const host_loopback_world world{.ranks = 3, .timeout = 20000ms};
  std::vector<int> refused(3, 0);
  world.run([&](host_loopback_comm& c) {
    const auto refuses = [&](std::vector<rank_index> members) {
      try {
        sub_communicator<host_loopback_comm> view(c, std::move(members));
        return false;
      } catch (const invalid_argument&) {
        return true;
      }
    };
    int n = 0;
    n += refuses({0, 1, 2, 3});               // 3 is outside the parent
    n += refuses({0, 1, 1, 2});               // listed twice
    n += refuses(c.rank() == 0 ? std::vector<rank_index>{1, 2} : std::vector<rank_index>{0});  // the caller is not a member
    sub_communicator<host_loopback_comm> whole(c, {2, 1, 0});
    try {
      (void)whole.parent_rank(3);
    } catch (const invalid_argument&) {
      ++n;
    }
    refused[static_cast<std::size_t>(c.rank())] = n;
  });
  CHECK(refused == std::vector<int>{4, 4, 4});
}
