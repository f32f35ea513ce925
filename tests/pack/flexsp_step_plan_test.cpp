// tests/pack/flexsp_step_plan_test.cpp
// The FlexSP-like micro-batches as step plans (pack/flexsp_step_plan.hpp), on seeded random
// batches: one plan per micro-batch, each validating against its cluster and model, its
// replicas the micro-batch's groups (TP 1, CP = degree on the group's GPUs, PP 1, one
// micro-batch of the group's sequences whole, ulysses layouts), every layer recomputed
// exactly in the groups that recompute, ZeRO-3; every sequence once over the plans; the
// iteration the sum of simulate_step over them, each at least its slowest group's busy time;
// errors named.
#include <catch2/catch.hpp>
#include "../support/sim_fixtures.hpp"
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack/flexsp_step_plan.hpp>
#include <zeppelin/step/validate.hpp>

#include <cstddef>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

}  // namespace

TEST_CASE("FlexSP-like step plans: one per micro-batch, its groups as replicas, the micro-batches' sum", "[pack][flexsp][step]") {
  random_generator g(67);
  const model_config model = gpt_7b_layers(4);
  int recomputing = 0, mixed = 0, plans = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const topology topo = clusters::infinipipe_a800_ib(trial % 2 == 0 ? 1 : 2);
    const double usable = static_cast<double>(trial % 3 == 2 ? g.between(1, 2) : g.between(4, 40)) * gib;
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 24)));
    for (auto& l : lengths) l = g.below(6) == 0 ? g.between(16384, 120000) : g.between(16, 4096);
    CAPTURE(trial, topo.num_ranks(), usable, lengths.size());
    const flexsp_assignment a = assign_flexsp_groups(lengths, model, topo, usable);
    const std::vector<sequence_step_plan> parts = flexsp_step_plans(a, lengths, model, topo);
    REQUIRE(parts.size() == a.micro_batches.size());
    std::vector<int> seen(lengths.size(), 0);
    double sum = 0;
    for (std::size_t m = 0; m < parts.size(); ++m) {
      const step_plan& p = parts[m].plan;
      const std::vector<flexsp_group>& groups = a.micro_batches[m];
      ++plans;
      validate(p, topo, model);
      REQUIRE(p.sync == gradient_sync::fully_sharded);
      REQUIRE(p.replicas.size() == groups.size());
      for (std::size_t d = 0; d < p.documents.size(); ++d) {
        REQUIRE(p.documents[d] == lengths[static_cast<std::size_t>(parts[m].sequences[d])]);
        ++seen[static_cast<std::size_t>(parts[m].sequences[d])];
      }
      bool degrees_differ = false;
      for (std::size_t i = 0; i < groups.size(); ++i) {
        const flexsp_group& grp = groups[i];
        const step_replica& r = p.replicas[i];
        degrees_differ = degrees_differ || grp.degree != groups.front().degree;
        REQUIRE((r.tp == 1 && r.cp == grp.degree && r.pp == 1));
        for (int c = 0; c < grp.degree; ++c) REQUIRE(r.rank_of(0, c, 0) == grp.first_gpu + c);
        REQUIRE(r.micro_batches.size() == 1);
        const step_micro_batch& mb = r.micro_batches.front();
        REQUIRE(mb.layout.method == "ulysses");
        REQUIRE(mb.pieces.size() == grp.sequences.size());
        for (std::size_t j = 0; j < grp.sequences.size(); ++j) {
          const step_piece& x = mb.pieces[j];
          REQUIRE(parts[m].sequences[static_cast<std::size_t>(x.document)] == grp.sequences[j]);
          REQUIRE((x.begin == 0 && x.end == lengths[static_cast<std::size_t>(grp.sequences[j])]));
        }
        REQUIRE(r.recomputed(0, 0) == (grp.recompute ? model.layers : 0));
        recomputing += grp.recompute;
      }
      mixed += degrees_differ;
      const step_sim_result one =
          simulate_step(make_step_program(p, topo, model, step_options_of(model)), topo, sim_cost_model::for_topology(topo), back_to_back_sim_options());
      for (std::size_t i = 0; i < groups.size(); ++i) {
        REQUIRE(one.iteration_s >= one.stage(static_cast<std::int32_t>(i), 0).busy_s);
        REQUIRE((one.stage(static_cast<std::int32_t>(i), 0).recompute_s > 0) == groups[i].recompute);
      }
      sum += one.iteration_s;
    }
    for (const int n : seen) REQUIRE(n == 1);
    REQUIRE(simulate_back_to_back(parts, topo, model).iteration_s == sum);
  }
  CHECK(recomputing >= 1);
  CHECK(mixed >= 2);
  CHECK(plans >= 12);
}

TEST_CASE("FlexSP-like step plans: errors name the value", "[pack][flexsp][step]") {
  const model_config model = gpt_7b_layers(4);
  const topology topo = clusters::infinipipe_a800_ib(1);
  const std::vector<token_count> lengths{4000, 300};
  zeppelin_test::expect_invalid([&] { (void)flexsp_step_plans(flexsp_assignment{}, lengths, model, topo); });
  const flexsp_assignment outside{{{flexsp_group{4, 8, false, {0}}}}};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)flexsp_step_plans(outside, lengths, model, topo); }).value("first_gpu") == 8);
  const flexsp_assignment unknown{{{flexsp_group{2, 0, false, {0, 5}}}}};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)flexsp_step_plans(unknown, lengths, model, topo); }).value("sequence") == 5);
  const flexsp_assignment empty{{{flexsp_group{2, 0, false, {}}}}};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)flexsp_step_plans(empty, lengths, model, topo); }).value("group") == 0);
}
