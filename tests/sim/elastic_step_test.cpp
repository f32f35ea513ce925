// tests/sim/elastic_step_test.cpp
// InfiniPipe's iteration on the 4D simulator (sim/elastic_step.hpp): the pipelines add up;
// with one stage a pipeline takes exactly its chunks' forward, backward and recompute when
// links are free (ZeRO-3's gathers cost nothing), and at least that otherwise; with several
// it takes at least every stage's work and at least the planner's 1F1B work; every stage
// runs each chunk once; ZeRO-3 moves each layer three times per chunk; deterministic.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/sim/elastic_step.hpp>

#include <algorithm>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

TEST_CASE("an elastic step on the simulator: pipelines add up, stages do all their work", "[sim][infinipipe]") {
  random_generator g(23);
  const model_config model = models::gpt_13b();
  for (int trial = 0; trial < 12; ++trial) {
    const int dp = trial % 3 == 0 ? 1 : 4;
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(2, 40)));
    for (auto& l : lengths) l = g.below(8) == 0 ? g.between(20000, 100000) : g.between(64, 8192);
    elastic_pipeline_options o = elastic_pipeline_options::for_model(model, clusters::infinipipe_a800_ib(dp), 8, dp,
                                                                     static_cast<double>(g.between(30, 70)) * (1ull << 30));
    o.processor.max_slices = 5;
    CAPTURE(trial, dp, lengths.size());
    elastic_plan plan;
    try {
      plan = plan_elastic_pipeline(lengths, o);
    } catch (const infeasible&) {
      continue;
    }
    const topology topo = clusters::hydraulis_a800_ib(dp);
    const elastic_step_result r = simulate_elastic_step(plan, model, o, topo);
    topology_config free_links = topo.config();
    free_links.intra_node = {1e30, 0};
    free_links.nic = {1e30, 0};
    const elastic_step_result free = simulate_elastic_step(plan, model, o, topology(free_links));
    REQUIRE(r.pipelines.size() == plan.pipelines.size());
    double total = 0;
    for (std::size_t i = 0; i < r.pipelines.size(); ++i) {
      const pipeline_sim_result& s = r.pipelines[i];
      const elastic_pipeline& p = plan.pipelines[i];
      total += s.iteration_s;
      // each stage's own work: every chunk's forward and backward plus its recompute
      const chunk_cost_model& cost = o.processor.cost;
      for (int stage = 0; stage < dp; ++stage) {
        double work = 0;
        for (std::size_t k = 0; k < p.forward.size(); ++k) {
          const chunk& c = plan.chunks.chunks[static_cast<std::size_t>(p.forward[k])];
          const stage_times t = chunk_stage_time{cost}.times(micro_batch_of_chunk(c, 8), split_model(model, dp)[static_cast<std::size_t>(stage)]);
          work += t.forward + t.backward + p.checkpoint.recomputed_layers(stage, static_cast<std::int64_t>(k)) * t.layer_forward;
        }
        const pipeline_stage_report& report = s.stages[0][static_cast<std::size_t>(stage)];
        REQUIRE(report.busy_s == Approx(work).epsilon(1e-9));
        REQUIRE(s.iteration_s >= work * (1 - 1e-12));
        if (dp == 1) REQUIRE(free.pipelines[i].iteration_s == Approx(work).epsilon(1e-9));
      }
      // ZeRO-3 over each stage's 8 GPUs: per chunk and layer two gathers and a reduce-scatter
      double gathered = 0, expected = 0;
      for (const flow_record& f : s.run.flows) {
        const task_kind kind = s.run.tags[static_cast<std::size_t>(f.task)].kind;
        if (kind == task_kind::parameter_gather || kind == task_kind::gradient_scatter) gathered += f.bytes;
      }
      const pipeline_memory_model states{model, {.tp = 1, .cp = 8, .pp = dp, .dp = 1}, {.zero_stage = 3}};
      for (const stage_slice& slice : split_model(model, dp)) expected += 3.0 * static_cast<double>(p.forward.size()) * states.parameters(slice) * 2 * 7;
      REQUIRE(gathered == Approx(expected).epsilon(1e-9));
    }
    REQUIRE(r.iteration_s == Approx(total).epsilon(1e-12));
    REQUIRE(simulate_elastic_step(plan, model, o, topo).iteration_s == r.iteration_s);
  }
  REQUIRE_THROWS_AS(simulate_elastic_step(elastic_plan{}, model, elastic_pipeline_options{}, clusters::hydraulis_a800_ib(1)), invalid_argument);
}

TEST_CASE("the elastic planner's price is the simulated step when sends between stages are free", "[sim][infinipipe]") {
  // pack/elastic_pipeline.hpp prices a pipeline by the makespan of its chunk-level 1F1B
  // schedule (schedule/pipeline/makespan.hpp); the simulator runs the same schedule with the
  // same durations and adds only the sends and ZeRO-3's collectives, which cost nothing on
  // these links
  random_generator g(29);
  const model_config model = models::gpt_13b();  // 40 layers: 10 per stage
  int compared = 0;
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(2, 60)));
    for (auto& l : lengths) l = g.below(6) == 0 ? g.between(20000, 100000) : g.between(64, 8192);
    topology_config free_links = clusters::infinipipe_a800_ib(4).config();
    free_links.intra_node = {1e30, 0};
    free_links.nic = {1e30, 0};
    const topology free(free_links);
    const elastic_pipeline_options o = elastic_pipeline_options::for_model(model, free, 8, 4, static_cast<double>(g.between(30, 70)) * (1ull << 30));
    elastic_plan plan;
    try {
      plan = plan_elastic_pipeline(lengths, o);
    } catch (const infeasible&) {
      continue;
    }
    const elastic_step_result r = simulate_elastic_step(plan, model, o, free);
    CAPTURE(trial, lengths.size(), plan.pipelines.size());
    for (std::size_t i = 0; i < plan.pipelines.size(); ++i) CHECK(plan.pipelines[i].seconds == Approx(r.pipelines[i].iteration_s).epsilon(1e-9));
    CHECK(plan.seconds == Approx(r.iteration_s).epsilon(1e-9));
    ++compared;
  }
  CHECK(compared >= 5);
}
