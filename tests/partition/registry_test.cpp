// The partitioner registry (partition/registry.hpp) and the run-time load metric
// (partition/any_load_metric.hpp): every name gives the model it names, configured by the
// settings, and plans exactly as that model does; unknown names are refused with the list.
#include "partition_test_support.hpp"

#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/partition/registry.hpp>

#include <catch2/catch.hpp>

#include <string>

using namespace zeppelin;
using namespace zeppelin_test;

TEST_CASE("registry: every name plans exactly as its model, on seeded random batches", "[partition][registry]") {
  random_generator rng(2026);
  int cases = 0;
  for (const auto& [nodes, gpus] : {std::pair{1, 4}, std::pair{2, 4}, std::pair{4, 2}}) {
    const topology t = make_topology(nodes, gpus);
    for (int trial = 0; trial < 10; ++trial) {
      const batch b = random_batch(rng, rng.between(20, 400) * t.num_ranks());
      const token_count capacity = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks() * 2;
      const std::int32_t cp = t.num_ranks() / 2;
      const partitioner_settings s{.capacity = capacity, .cp_size = cp, .metric = attention_cost_metric{}};
      const auto same = [&](std::string_view name, const plan& direct) {
        INFO(name << " on " << nodes << "x" << gpus << " trial " << trial);
        const any_partitioner p = partitioner_by_name(name, s);
        CHECK(name_of(p) == name);
        const plan got = partition(p, b, t);
        CHECK(got.method == std::string(name));
        CHECK(fingerprint(got) == fingerprint(direct));
        ++cases;
      };
      same("hierarchical", hierarchical<attention_cost_metric>{capacity, {}}.partition(b, t));
      same("even_split", even_split{capacity}.partition(b, t));
      same("allgather", allgather{capacity, cp}.partition(b, t));
      same("hybrid_dp", hybrid_dp{capacity}.partition(b, t));
      same("per_document", per_document{capacity, cp}.partition(b, t));
    }
  }
  CHECK(cases == 3 * 10 * 5);
}

TEST_CASE("registry: the settings reach the model they configure", "[partition][registry]") {
  const partitioner_settings tokens{.capacity = 77, .cp_size = 4, .metric = token_metric{}};
  CHECK(std::get<hierarchical<token_metric>>(partitioner_by_name("hierarchical", tokens)).capacity == 77);
  CHECK(std::get<allgather>(partitioner_by_name("allgather", tokens)).cp_size == 4);
  CHECK(std::get<per_document>(partitioner_by_name("per_document", tokens)).cp_size == 4);
  CHECK(std::get<even_split>(partitioner_by_name("even_split", tokens)).capacity == 77);
  const partitioner_settings cost{.metric = make_load_metric(load_metric_kind::cost_model, gpus::h100_sxm(), 8, 64)};
  const any_partitioner held = partitioner_by_name("hierarchical", cost);
  const auto& h = std::get<hierarchical<cost_model_metric<>>>(held);
  CHECK(h.metric.heads == 8);
  CHECK(h.metric.head_dim == 64);
  CHECK(partitioner_names.size() == std::variant_size_v<any_partitioner> - 4);  // hierarchical and micro_batched hold 3 metrics each
}

TEST_CASE("registry: unknown names are refused with the valid ones", "[partition][registry]") {
  try {
    (void)partitioner_by_name("zigzag");
    FAIL("an unknown partitioner was accepted");
  } catch (const invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("unknown partitioner 'zigzag'") != std::string::npos);
    for (const std::string_view n : partitioner_names) CHECK(what.find(std::string(n)) != std::string::npos);
  }
  for (const load_metric_kind k : load_metric_kinds) CHECK(load_metric_kind_by_name(to_string(k)) == k);
  CHECK_THROWS_AS(load_metric_kind_by_name("flops"), invalid_argument);
  CHECK_THROWS_AS(make_load_metric(load_metric_kind::cost_model, gpu_spec{}), invalid_argument);  // no peak
  CHECK_THROWS_AS(make_load_metric(load_metric_kind::cost_model, gpus::h100_sxm(), 0, 128), invalid_argument);
}

TEST_CASE("registry: a micro-batched partitioner whose batch fits one pass plans with its inner partitioner", "[partition][registry]") {
  random_generator rng(77);
  int one_pass = 0, more = 0;
  for (const auto& [nodes, gpus] : {std::pair{1, 4}, std::pair{2, 4}, std::pair{4, 2}}) {
    const topology t = make_topology(nodes, gpus);
    for (int trial = 0; trial < 12; ++trial) {
      const batch b = random_batch(rng, rng.between(20, 400) * t.num_ranks());
      // room for the whole batch, or for about half of it
      const token_count fits = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
      const token_count capacity = std::max(b.max_length() / t.num_ranks() + 1, trial % 2 ? fits : fits / 2);
      INFO(nodes << "x" << gpus << " trial " << trial << " capacity " << capacity);
      const any_partitioner micro = micro_batched<hierarchical<attention_cost_metric>>{capacity, {1, {}}, 0};
      const std::optional<any_partitioner> inner = one_pass_partitioner(micro, b, t);
      const plan planned = partition(micro, b, t);
      if (planned.micro_batches() > 1) {
        ++more;
        CHECK_FALSE(inner);
        continue;
      }
      ++one_pass;
      REQUIRE(inner);
      CHECK(*inner == any_partitioner(hierarchical<attention_cost_metric>{capacity, {}}));  // the inner one, at the capacity
      plan direct = partition(*inner, b, t);
      CHECK(direct.method == "hierarchical");
      direct.method = planned.method;
      CHECK(direct == planned);
    }
  }
  CHECK(one_pass >= 10);
  CHECK(more >= 10);
  const topology t = make_topology(2, 2);
  const batch b({300, 200, 100});
  // asked for more micro-batches, a capacity no pass holds, a sequence no micro-batch holds,
  // or not micro-batched: none
  CHECK_FALSE(one_pass_partitioner(micro_batched<hierarchical<attention_cost_metric>>{1000, {}, 2}, b, t));
  CHECK_FALSE(one_pass_partitioner(micro_batched<hierarchical<attention_cost_metric>>{0, {}, 0}, b, t));
  CHECK_FALSE(one_pass_partitioner(micro_batched<hierarchical<attention_cost_metric>>{50, {}, 0}, b, t));
  CHECK_FALSE(one_pass_partitioner(hierarchical<attention_cost_metric>{1000, {}}, b, t));
  CHECK(one_pass_partitioner(micro_batched<hierarchical<attention_cost_metric>>{1000, {}, 1}, b, t));
}
