// tests/schedule/engine_queue_test.cpp
// make_engine_queue (schedule/engine_queue.hpp): a hand-written plan with the expected task
// list, and random plans checked for the order micro-batch -> inter -> intra -> local, group
// id / sequence index inside a queue, one task per (group) or (local sequence), and every
// shard of the rank in exactly one task.
#include "../support/subscript.hpp"

#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/schedule/engine_queue.hpp>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

using namespace zeppelin;

namespace {
using zeppelin_test::at;
}  // namespace

TEST_CASE("engine queue runs inter-node rings, then intra-node rings, then local sequences", "[schedule][queue]") {
  plan p;
  p.nodes = 2;
  p.gpus_per_node = 2;
  p.capacity = 100;
  p.placements.resize(4);
  p.groups = {{0, zone_kind::intra_node, {0, 1}}, {1, zone_kind::inter_node, {0, 2}}, {2, zone_kind::local, {0}}};
  // rank 0 stores: local seq 5, intra group 0 (seq 1), local seq 3, inter group 1 (seq 2, two chunks), group 2 seq 4
  p.placements[0].shards = {{5, {0, 4}, no_group, 0}, {1, {0, 3}, 0, 0}, {3, {0, 2}, no_group, 0},
                            {2, {0, 2}, 1, 0},        {2, {6, 8}, 1, 0}, {4, {0, 5}, 2, 0}};
  const engine_queue q = make_engine_queue(p, 0);
  REQUIRE(q.rank == 0);
  const std::vector<engine_task> expected{
      {zone_kind::inter_node, 0, 1, -1, {3, 4}},
      {zone_kind::intra_node, 0, 0, -1, {1}},
      {zone_kind::local, 0, no_group, 3, {2}},
      {zone_kind::local, 0, 2, 4, {5}},
      {zone_kind::local, 0, no_group, 5, {0}},
  };
  CHECK(q.tasks == expected);
  CHECK(make_engine_queue(p, 3).tasks.empty());
  CHECK(make_engine_queues(p).size() == 4);
  CHECK_THROWS_AS(make_engine_queue(p, 4), invalid_argument);
  p.placements[1].shards.push_back({0, {0, 1}, 7, 0});
  try {
    (void)make_engine_queue(p, 1);
    FAIL("no throw");
  } catch (const invalid_argument& e) {
    CHECK(e.value("group") == 7.0);
  }
}

TEST_CASE("engine queue order and shard coverage on random plans", "[schedule][queue]") {
  random_generator rng(41, 1);
  for (int t = 0; t < 300; ++t) {
    const auto ranks = static_cast<rank_index>(rng.between(1, 8));
    plan p;
    p.nodes = 1;
    p.gpus_per_node = ranks;
    p.capacity = 1000;
    p.placements.resize(at(ranks));
    const auto ngroups = static_cast<group_index>(rng.between(0, 6));
    for (group_index g = 0; g < ngroups; ++g)
      p.groups.push_back({g, static_cast<zone_kind>(rng.below(3)), {0}});
    for (rank_index r = 0; r < ranks; ++r) {
      const auto nshards = rng.between(0, 12);
      for (std::int64_t i = 0; i < nshards; ++i) {
        const auto group = static_cast<group_index>(rng.between(-1, ngroups - 1));
        p.placements[at(r)].shards.push_back({static_cast<sequence_index>(rng.below(10)), {0, 1}, group,
                                              static_cast<std::int32_t>(rng.below(3))});
      }
    }
    for (const engine_queue& q : make_engine_queues(p)) {
      const auto& shards = p.placements[at(q.rank)].shards;
      std::vector<int> seen(shards.size(), 0);
      for (std::size_t i = 0; i < q.tasks.size(); ++i) {
        const engine_task& task = q.tasks[i];
        REQUIRE(!task.shards.empty());
        REQUIRE(std::is_sorted(task.shards.begin(), task.shards.end()));
        for (std::int32_t s : task.shards) {
          ++seen[at(s)];
          const shard& sh = shards[at(s)];
          REQUIRE(sh.micro_batch == task.micro_batch);
          const zone_kind z = sh.group == no_group ? zone_kind::local : p.groups[at(sh.group)].zone;
          REQUIRE(queue_order(z) == queue_order(task.zone));
          if (task.zone == zone_kind::local) REQUIRE(sh.seq == task.seq);
          else REQUIRE((sh.group == task.group && task.seq == -1));
        }
        if (i > 0) {  // strictly increasing (micro-batch, queue, group id | sequence index)
          const engine_task& prev = q.tasks[i - 1];
          const auto key = [](const engine_task& x) {
            return std::make_tuple(x.micro_batch, queue_order(x.zone), x.zone == zone_kind::local ? x.seq : x.group);
          };
          REQUIRE(key(prev) < key(task));
        }
      }
      REQUIRE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
    }
  }
}
