// A layout's sums (cost/layout_totals.hpp) and the partitioners that lay them out without
// their shards (partition_into a layout_totals_store): on seeded random batches the streamed
// sums equal the sums of the partitioner's plan and the sums counted shard by shard, the
// stream refuses what the plan refuses, and even_split, allgather and ulysses lay out alike but
// for their collectives.
#include "partition_test_support.hpp"

#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/layout_totals.hpp>
#include <zeppelin/partition/registry.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

void check_same(const layout_totals& x, const layout_totals& y) {
  CHECK(x.nodes == y.nodes);
  CHECK(x.gpus_per_node == y.gpus_per_node);
  CHECK(x.ranks == y.ranks);
  CHECK(x.micro_batches == y.micro_batches);
  CHECK(x.groups == y.groups);
  CHECK(x.held == y.held);
  CHECK(x.loose_pairs == y.loose_pairs);
  REQUIRE(x.serves.size() == y.serves.size());
  // the same sums per (group, micro-batch, member), wherever each list put them
  for (std::size_t g = 0; g < x.serves.size(); ++g) {
    REQUIRE(x.serves[g].size() == y.serves[g].size());
    for (std::size_t k = 0; k < x.serves[g].size(); ++k) {
      CHECK(x.serves[g][k].micro_batch == y.serves[g][k].micro_batch);
      for (std::size_t i = 0; i < x.groups[g].ranks.size(); ++i) {
        CHECK(x.member_tokens[x.serves[g][k].first + i] == y.member_tokens[y.serves[g][k].first + i]);
        CHECK(x.member_pairs[x.serves[g][k].first + i] == y.member_pairs[y.serves[g][k].first + i]);
      }
    }
  }
}

// the sums of `p` counted shard by shard, against `t`
void check_counts(const plan& p, const layout_totals& t) {
  const std::size_t ranks = p.placements.size();
  std::vector<double> held(static_cast<std::size_t>(p.micro_batches()) * ranks, 0.0), loose(held.size(), 0.0);
  std::vector<double> grouped_tokens(p.groups.size(), 0.0), grouped_pairs(p.groups.size(), 0.0);
  for (std::size_t r = 0; r < ranks; ++r)
    for (const shard& s : p.placements[r].shards) {
      const std::size_t at = static_cast<std::size_t>(s.micro_batch) * ranks + r;
      held[at] += static_cast<double>(s.range.size());
      const auto pairs = static_cast<double>(causal_pairs(s.range, token_range{0, s.range.end}));
      if (s.group == no_group) loose[at] += pairs;
      else grouped_tokens[static_cast<std::size_t>(s.group)] += static_cast<double>(s.range.size()),
           grouped_pairs[static_cast<std::size_t>(s.group)] += pairs;
    }
  CHECK(t.held == held);
  CHECK(t.loose_pairs == loose);
  for (std::size_t g = 0; g < p.groups.size(); ++g) {
    double tokens = 0, pairs = 0;
    for (const layout_totals::served& x : t.serves[g])
      for (std::size_t i = 0; i < p.groups[g].ranks.size(); ++i) tokens += t.member_tokens[x.first + i], pairs += t.member_pairs[x.first + i];
    CHECK(tokens == grouped_tokens[g]);
    CHECK(pairs == grouped_pairs[g]);
  }
}

}  // namespace

TEST_CASE("layout totals: the streamed sums equal the plan's and the shards' on seeded random batches", "[partition][totals]") {
  random_generator rng(4242);
  int streamed = 0, not_streamed = 0;
  for (const auto& [nodes, gpus] : {std::pair{1, 4}, std::pair{2, 4}, std::pair{4, 2}, std::pair{3, 8}}) {
    const topology t = make_topology(nodes, gpus);
    for (int trial = 0; trial < 8; ++trial) {
      const batch b = random_batch(rng, rng.between(1, 300) * t.num_ranks());
      const token_count capacity = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks() * 2 + 64;
      for (const std::int32_t cp : {0, t.num_ranks() / gpus, gpus}) {
        const partitioner_settings s{.capacity = capacity, .cp_size = cp, .metric = attention_cost_metric{}};
        for (const std::string_view name : partitioner_names) {
          INFO(name << " cp " << cp << " on " << nodes << "x" << gpus << " trial " << trial);
          const any_partitioner p = partitioner_by_name(name, s);
          plan laid_out;
          try {
            laid_out = partition(p, b, t);
          } catch (const infeasible&) {
            CHECK_THROWS_AS(partition_totals(p, b, t), infeasible);  // the same checks, or none streamed
            continue;
          }
          const layout_totals of_plan = layout_totals_of(laid_out);
          check_counts(laid_out, of_plan);
          const std::optional<layout_totals> sums = partition_totals(p, b, t);
          if (!sums) {
            ++not_streamed;
            continue;
          }
          ++streamed;
          check_same(*sums, of_plan);
        }
      }
    }
  }
  CHECK(streamed > 100);
  CHECK(not_streamed > 100);  // hierarchical, hybrid_dp and micro_batched build their plans
}

TEST_CASE("layout totals: the stream refuses what the plan refuses, with the same message", "[partition][totals]") {
  const topology t = make_topology(2, 4);
  const batch b({5000, 300, 20});
  for (const std::string_view name : {"even_split", "allgather", "ulysses", "per_document"}) {
    INFO(name);
    const any_partitioner p = partitioner_by_name(name, {.capacity = 100});  // 800 tokens fit, 5320 come
    std::string planned, streamed;
    try {
      (void)partition(p, b, t);
    } catch (const infeasible& e) {
      planned = e.what();
    }
    try {
      (void)partition_totals(p, b, t);
    } catch (const infeasible& e) {
      streamed = e.what();
    }
    CHECK_THAT(planned, Catch::Contains("more tokens than nodes * gpus_per_node * capacity"));
    CHECK(streamed == planned);
  }
  // a CP size that does not divide the ranks: the same invalid_argument
  const any_partitioner three = partitioner_by_name("ulysses", {.capacity = 6000, .cp_size = 3});
  CHECK_THROWS_WITH(partition_totals(three, b, t), Catch::Contains("cp_size must be 0 (all ranks) or divide"));
  CHECK_THROWS_AS(partition(three, b, t), invalid_argument);
}

TEST_CASE("layout totals: even_split, allgather and ulysses lay out alike but for the collective", "[partition][totals]") {
  random_generator rng(77);
  const topology t = make_topology(2, 4);
  const batch b = random_batch(rng, 50 * t.num_ranks());
  const partitioner_settings whole{.capacity = b.total_tokens()}, halves{.capacity = b.total_tokens(), .cp_size = 4};
  const any_partitioner ring = partitioner_by_name("even_split", whole), gathered = partitioner_by_name("allgather", whole),
                        lanes = partitioner_by_name("ulysses", whole), gathered_halves = partitioner_by_name("allgather", halves),
                        lanes_halves = partitioner_by_name("ulysses", halves), zeppelin = partitioner_by_name("hierarchical", whole);
  CHECK(same_layout_but_collective(ring, gathered));
  CHECK(same_layout_but_collective(ring, lanes));
  CHECK(same_layout_but_collective(gathered_halves, lanes_halves));
  CHECK_FALSE(same_layout_but_collective(ring, gathered_halves));
  CHECK_FALSE(same_layout_but_collective(ring, zeppelin));
  CHECK(same_layout_but_collective(zeppelin, zeppelin));
  CHECK(collective_of(ring) == collective_kind::ring);
  CHECK(collective_of(gathered) == collective_kind::all_gather);
  CHECK(collective_of(lanes) == collective_kind::all_to_all);
  CHECK_FALSE(collective_of(zeppelin).has_value());

  const auto alike = [&](const any_partitioner& x, const any_partitioner& y) {
    plan a = partition(x, b, t), c = partition(y, b, t);
    for (ring_group& g : c.groups) g.collective = *collective_of(x);
    CHECK(a.placements == c.placements);
    CHECK(a.groups == c.groups);
  };
  alike(ring, gathered);
  alike(ring, lanes);
  alike(gathered_halves, lanes_halves);
}

TEST_CASE("layout totals refuse a shard of an unknown group or of a rank outside its group", "[partition][totals]") {
  layout_totals t(1, 4, 4);
  t.add_group(ring_group{0, zone_kind::intra_node, {0, 1}, collective_kind::ring});
  CHECK_THROWS_WITH(t.add_group(ring_group{5, zone_kind::intra_node, {2, 3}, collective_kind::ring}),
                    Catch::Contains("groups must come in id order"));
  CHECK_THROWS_WITH(t.add(0, -1, shard{0, {0, 4}, 3, 0}), Catch::Contains("a shard names an unknown group"));
  CHECK_THROWS_WITH(t.add(2, -1, shard{0, {0, 4}, 0, 0}), Catch::Contains("a shard's rank is not a member of its group"));
  CHECK_THROWS_WITH(t.add(4, -1, shard{0, {0, 4}, no_group, 0}), Catch::Contains("a shard's rank must be below the ranks"));
  CHECK(t.held == std::vector<double>(4, 0.0));  // the refused shards changed nothing
  t.add(1, -1, shard{0, {4, 8}, 0, 1});
  t.add(3, -1, shard{1, {0, 3}, no_group, 0});
  CHECK(t.micro_batches == 2);
  CHECK(t.held == std::vector<double>{0, 0, 0, 3, 0, 4, 0, 0});
  CHECK(t.loose_pairs == std::vector<double>{0, 0, 0, 6, 0, 0, 0, 0});
  REQUIRE(t.serves[0].size() == 1);
  CHECK(t.member_tokens == std::vector<double>{0, 4});
  CHECK(t.member_pairs == std::vector<double>{0, 36 - 10});
}
