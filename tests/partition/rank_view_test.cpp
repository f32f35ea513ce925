// tests/partition/rank_view_test.cpp
// core/rank_view.hpp on the plans of every partitioner: the views of all ranks add up to the
// plan (every shard once, every token counted per micro-batch), every group appears in the
// view of each member with its position, and ring neighbours agree (the next of position i
// is the rank at position i + 1, whose previous is the rank at i); bad ranks and broken plans
// are refused with the numbers.
#include <catch2/catch.hpp>

#include "partition_test_support.hpp"
#include "support/expect_error.hpp"

#include <zeppelin/core/rank_view.hpp>

#include <string_view>

using namespace zeppelin;
using zeppelin_test::make_topology;
using zeppelin_test::random_batch;

TEST_CASE("the ranks' views add up to the plan, and ring neighbours agree", "[partition][rank_view]") {
  random_generator rng(20261124, 0);
  int checked = 0;
  for (const auto& [nodes, gpus] : {std::pair{1, 4}, std::pair{2, 4}, std::pair{4, 2}}) {
    const topology t = make_topology(nodes, gpus);
    for (int trial = 0; trial < 8; ++trial) {
      const batch b = random_batch(rng, rng.between(20, 400) * t.num_ranks());
      const token_count capacity = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks() * 2;
      const partitioner_settings settings{.capacity = capacity, .cp_size = t.num_ranks() / 2, .metric = attention_cost_metric{}};
      for (const std::string_view name : partitioner_names) {
        INFO(name << " on " << nodes << "x" << gpus << " trial " << trial);
        const plan p = partition(partitioner_by_name(name, settings), b, t);
        token_count total = 0;
        std::vector<int> members_seen(p.groups.size(), 0);
        for (rank_index r = 0; r < p.num_ranks(); ++r) {
          const rank_view v = rank_view_of(p, r);
          CHECK(v.rank == r);
          CHECK(v.node == t.node_of(r));
          CHECK(v.local_gpu == t.local_gpu_of(r));
          CHECK(v.shards == p.placements[static_cast<std::size_t>(r)].shards);
          CHECK(v.tokens() == p.placements[static_cast<std::size_t>(r)].tokens());
          CHECK(static_cast<std::int32_t>(v.tokens_per_micro_batch.size()) == p.micro_batches());
          total += v.tokens();
          for (std::size_t i = 0; i < v.groups.size(); ++i) {
            const group_membership& m = v.groups[i];
            if (i > 0) CHECK(v.groups[i - 1].group < m.group);
            const ring_group& g = p.groups[static_cast<std::size_t>(m.group)];
            ++members_seen[static_cast<std::size_t>(m.group)];
            REQUIRE(m.size == static_cast<std::int32_t>(g.ranks.size()));
            CHECK(g.ranks[static_cast<std::size_t>(m.position)] == r);
            CHECK(m.zone == g.zone);
            CHECK(m.collective == g.collective);
            const rank_view next = rank_view_of(p, m.next);
            const auto in_next = std::find_if(next.groups.begin(), next.groups.end(),
                                              [&](const group_membership& x) { return x.group == m.group; });
            REQUIRE(in_next != next.groups.end());
            CHECK(in_next->previous == r);
            CHECK(in_next->position == (m.position + 1) % m.size);
            token_count group_tokens = 0;
            for (const shard& s : v.shards)
              if (s.group == m.group) group_tokens += s.range.size();
            CHECK(m.tokens == group_tokens);
          }
        }
        CHECK(total == b.total_tokens());
        for (std::size_t g = 0; g < p.groups.size(); ++g) CHECK(members_seen[g] == static_cast<int>(p.groups[g].ranks.size()));
        ++checked;
      }
    }
  }
  CHECK(checked == 3 * 8 * static_cast<int>(partitioner_names.size()));
}

TEST_CASE("a rank outside the plan, or a shard of a missing group, is refused with the numbers", "[partition][rank_view]") {
  const topology t = make_topology(1, 4);
  const batch b({100, 40, 7});
  plan p = hierarchical<>{.capacity = 64}.partition(b, t);
  for (const rank_index bad : {-1, 4, 99}) {
    const auto e = zeppelin_test::expect_invalid([&] { (void)rank_view_of(p, bad); });
    CHECK(e.value("rank") == static_cast<double>(bad));
    CHECK(e.value("ranks") == 4.0);
  }
  p.placements[0].shards.front().group = 77;
  const auto e = zeppelin_test::expect_invalid([&] { (void)rank_view_of(p, 0); });
  CHECK(e.value("group") == 77.0);
}
