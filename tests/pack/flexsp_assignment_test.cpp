// tests/pack/flexsp_assignment_test.cpp
// The FlexSP-like baseline's greedy assignment (pack/flexsp_assignment.hpp) on seeded random
// batches and memory budgets: every sequence in exactly one group; a micro-batch's groups
// are disjoint aligned blocks of the cluster; a group's degree is the smallest at which its
// sequence fits and its sequences fit together; a sequence that fits nowhere recomputes
// alone on every GPU; no micro-batch could have taken a later one's group; deterministic;
// errors name the value.
#include <catch2/catch.hpp>
#include "../support/sim_fixtures.hpp"
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack/flexsp_assignment.hpp>

#include <algorithm>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;
using namespace zeppelin_test;


TEST_CASE("FlexSP-like assignment: groups, degrees and memory", "[pack][flexsp]") {
  random_generator g(53);
  int recomputing = 0, joined = 0, several = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const model_config model = trial % 2 == 0 ? models::gpt_7b() : models::gpt_13b();
    const topology topo = clusters::infinipipe_a800_ib(trial % 3 == 0 ? 2 : 4);
    // every fourth trial tight on memory: short sequences need groups of several GPUs
    const double usable = static_cast<double>(trial % 4 == 3 ? g.between(14, 18) : g.between(40, 72)) * gib;
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 120)));
    for (auto& l : lengths) l = g.below(10) == 0 ? g.between(32768, 400000) : g.between(16, 8192);
    CAPTURE(trial, model.name, topo.num_ranks(), usable, lengths.size());
    const flexsp_assignment a = assign_flexsp_groups(lengths, model, topo, usable);
    const double budget = stage_budgets(model, usable, topo.num_ranks(), 1).front();
    std::vector<int> seen(lengths.size(), 0);
    REQUIRE(!a.micro_batches.empty());
    several += a.micro_batches.size() > 1;
    for (const std::vector<flexsp_group>& batch : a.micro_batches) {
      REQUIRE(!batch.empty());
      std::vector<int> used(static_cast<std::size_t>(topo.num_ranks()), 0);
      for (const flexsp_group& grp : batch) {
        REQUIRE(grp.degree >= 1);
        REQUIRE(grp.first_gpu % grp.degree == 0);
        REQUIRE(grp.first_gpu + grp.degree <= topo.num_ranks());
        REQUIRE(node_aligned_group(topo, grp.degree));
        for (int k = 0; k < grp.degree; ++k) REQUIRE(++used[static_cast<std::size_t>(grp.first_gpu + k)] == 1);
        REQUIRE(!grp.sequences.empty());
        joined += grp.sequences.size() > 1;
        const chunk_cost_model cost = chunk_cost_model::for_model(model, topo, grp.degree, 1);
        double bytes = 0;
        for (const std::int64_t s : grp.sequences) {
          ++seen[static_cast<std::size_t>(s)];
          const chunk whole{0, {{s, 0, lengths[static_cast<std::size_t>(s)]}}};
          bytes += cost.activation_bytes(whole, lengths);
          if (grp.recompute) {
            REQUIRE(cost.activation_bytes(whole, lengths) > budget);
            continue;
          }
          REQUIRE(cost.activation_bytes(whole, lengths) <= budget);
          // the smallest degree: half of it does not fit (or is no Ulysses group)
          if (grp.degree > 1) {
            const chunk_cost_model half = chunk_cost_model::for_model(model, topo, grp.degree / 2, 1);
            REQUIRE(half.activation_bytes(whole, lengths) > budget);
          }
        }
        if (grp.recompute) {
          ++recomputing;
          REQUIRE(grp.degree == topo.num_ranks());
          REQUIRE(grp.sequences.size() == 1);
        } else {
          REQUIRE(bytes <= budget * (1 + 1e-12));
        }
      }
    }
    for (const int n : seen) REQUIRE(n == 1);
    REQUIRE(assign_flexsp_groups(lengths, model, topo, usable) == a);
  }
  CHECK(recomputing >= 1);
  CHECK(joined >= 10);
  CHECK(several >= 5);
}

TEST_CASE("FlexSP-like assignment: errors name the value", "[pack][flexsp]") {
  const model_config model = models::gpt_7b();
  const topology topo = clusters::infinipipe_a800_ib(2);
  zeppelin_test::expect_invalid([&] { (void)assign_flexsp_groups({}, model, topo, 40 * gib); });
  const std::vector<token_count> zero{100, 0};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)assign_flexsp_groups(zero, model, topo, 40 * gib); }).value("index") == 1);
  const std::vector<token_count> one{100};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)assign_flexsp_groups(one, model, topo, -1); }).value("usable_bytes") == -1);
}
