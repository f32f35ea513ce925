// tests/pack/elastic_step_plan_test.cpp
// InfiniPipe's pipelines as step plans (pack/elastic_step_plan.hpp), on seeded random batches
// and memory budgets: every plan validates against its cluster and model; the pipelines
// together hold every sequence once; micro-batch k of a pipeline is its k-th chunk, each
// slice a piece that keeps its begin as its context, sliced sequences inside one chain of the
// schedule; one replica TP 1 x CP d_s x PP d_p on the first GPUs, ulysses layouts over the
// stage's group, ZeRO-3; recompute is the stage-aware plan, and a stage's simulated
// recomputation is positive exactly where the plan recomputes on it; the iteration is the
// sum of simulate_step over the pipelines' programs; errors named.
#include <catch2/catch.hpp>
#include "../support/sim_fixtures.hpp"
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack/elastic_step_plan.hpp>
#include <zeppelin/step/validate.hpp>

#include <algorithm>
#include <cstddef>
#include <variant>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

// GPT-7B's widths with 8 layers: the same kernels and collectives, a quarter of the blocks' ops.

}  // namespace

TEST_CASE("elastic step plans: coverage, slices, chains, layout, recompute and the pipelines' sum", "[pack][infinipipe][step]") {
  random_generator g(71);
  const model_config model = gpt_7b_layers(8);
  int checked = 0, recomputing = 0, sliced = 0, several = 0;
  for (int trial = 0; trial < 14; ++trial) {
    const int sp = trial % 2 == 0 ? 8 : 4, pp = trial % 3 == 0 ? 1 : 2;
    const topology topo = clusters::infinipipe_a800_ib(sp == 8 ? pp : 1);
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(2, 14)));
    for (auto& l : lengths) l = g.below(5) == 0 ? g.between(12000, 40000) : g.between(64, 6000);
    elastic_pipeline_options o = elastic_pipeline_options::for_model(model, topo, sp, pp, static_cast<double>(g.between(3, 24)) * (1ull << 30));
    o.processor.max_slices = 3;
    CAPTURE(trial, sp, pp, lengths.size());
    elastic_plan plan;
    try {
      plan = plan_elastic_pipeline(lengths, o);
    } catch (const infeasible&) {
      continue;
    }
    ++checked;
    several += plan.pipelines.size() > 1;
    const std::vector<sequence_step_plan> parts = elastic_step_plans(plan, lengths, model, o, topo);
    REQUIRE(parts.size() == plan.pipelines.size());
    std::vector<int> seen(lengths.size(), 0);
    double sum = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const step_plan& sp_plan = parts[i].plan;
      const elastic_pipeline& p = plan.pipelines[i];
      validate(sp_plan, topo, model);
      REQUIRE(sp_plan.sync == gradient_sync::fully_sharded);
      REQUIRE(sp_plan.documents.size() == parts[i].sequences.size());
      for (std::size_t d = 0; d < sp_plan.documents.size(); ++d) {
        const std::int64_t s = parts[i].sequences[d];
        REQUIRE(sp_plan.documents[d] == lengths[static_cast<std::size_t>(s)]);
        ++seen[static_cast<std::size_t>(s)];
      }
      REQUIRE(sp_plan.replicas.size() == 1);
      const step_replica& r = sp_plan.replicas.front();
      REQUIRE((r.tp == 1 && r.cp == sp && r.pp == pp));
      for (std::size_t x = 0; x < r.ranks.size(); ++x) REQUIRE(r.ranks[x] == static_cast<rank_index>(x));
      const auto* schedule = std::get_if<chunk_one_f_one_b>(&r.schedule.policy);
      REQUIRE(schedule != nullptr);
      REQUIRE(schedule->chains == p.chains);
      // micro-batch k is chunk p.forward[k]; its slices keep their contexts
      REQUIRE(r.micro_batches.size() == p.forward.size());
      std::vector<int> chain_of(p.forward.size());
      for (std::size_t c = 0, k = 0; c < p.chains.size(); ++c)
        for (int j = 0; j < p.chains[c]; ++j) chain_of[k++] = static_cast<int>(c);
      std::vector<int> chain_of_sequence(lengths.size(), -1);
      for (std::size_t k = 0; k < p.forward.size(); ++k) {
        const chunk& c = plan.chunks.chunks[static_cast<std::size_t>(p.forward[k])];
        const step_micro_batch& mb = r.micro_batches[k];
        REQUIRE(mb.layout.method == "ulysses");
        REQUIRE(mb.pieces.size() == c.slices.size());
        for (std::size_t j = 0; j < c.slices.size(); ++j) {
          const step_piece& x = mb.pieces[j];
          const chunk_slice& s = c.slices[j];
          REQUIRE(parts[i].sequences[static_cast<std::size_t>(x.document)] == s.sequence);
          REQUIRE((x.begin == s.begin && x.end == s.end));
          if (s.begin > 0 || s.end < lengths[static_cast<std::size_t>(s.sequence)]) {
            ++sliced;
            if (s.begin > 0) REQUIRE(x.context() == c.context);
            int& chain = chain_of_sequence[static_cast<std::size_t>(s.sequence)];
            if (chain < 0) chain = chain_of[k];
            REQUIRE(chain == chain_of[k]);
          }
        }
      }
      // recompute: the stage-aware plan, capped at the stage's layers
      bool recomputes = false;
      for (int s = 0; s < pp; ++s)
        for (std::size_t k = 0; k < p.forward.size(); ++k) {
          const int want = std::min(p.checkpoint.recomputed_layers(s, static_cast<std::int64_t>(k)), r.layers[static_cast<std::size_t>(s)]);
          REQUIRE(r.recomputed(s, static_cast<int>(k)) == want);
          recomputes = recomputes || want > 0;
        }
      recomputing += recomputes;
      // the simulated step: recomputation exactly where the plan puts it
      const step_sim_result one =
          simulate_step(make_step_program(sp_plan, topo, model, step_options_of(model)), topo, sim_cost_model::for_topology(topo), back_to_back_sim_options());
      for (int s = 0; s < pp; ++s) {
        int layers = 0;
        for (std::size_t k = 0; k < p.forward.size(); ++k) layers += r.recomputed(s, static_cast<int>(k));
        CAPTURE(s, layers);
        REQUIRE((one.stage(0, s).recompute_s > 0) == (layers > 0));
        REQUIRE(one.iteration_s >= one.stage(0, s).busy_s);
      }
      sum += one.iteration_s;
    }
    for (const int n : seen) REQUIRE(n == 1);
    REQUIRE(simulate_back_to_back(parts, topo, model).iteration_s == sum);
  }
  CHECK(checked >= 8);
  CHECK(recomputing >= 2);
  CHECK(sliced >= 4);
  CHECK(several >= 1);
}

TEST_CASE("elastic step plans: errors name the value", "[pack][infinipipe][step]") {
  const model_config model = gpt_7b_layers(8);
  const topology topo = clusters::infinipipe_a800_ib(2);
  const std::vector<token_count> lengths{9000, 300, 700};
  const elastic_pipeline_options o = elastic_pipeline_options::for_model(model, topo, 8, 2, 40.0 * (1ull << 30));
  const elastic_plan plan = plan_elastic_pipeline(lengths, o);
  zeppelin_test::expect_invalid([&] { (void)elastic_step_plans(elastic_plan{}, lengths, model, o, topo); });
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)elastic_pipeline_step_plan(plan, plan.pipelines.size(), lengths, model, o, topo); })
              .value("pipeline") == static_cast<double>(plan.pipelines.size()));
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)elastic_step_plans(plan, lengths, model, o, clusters::infinipipe_a800_ib(1)); }).value("gpus") ==
          8);
  const std::vector<token_count> fewer{9000};  // the plan's slices name sequences 1 and 2
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)elastic_step_plans(plan, fewer, model, o, topo); }).value("sequences") == 1);
  zeppelin_test::expect_invalid([&] { (void)simulate_back_to_back({}, topo, model); });
}
