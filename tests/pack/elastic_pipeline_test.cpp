// tests/pack/elastic_pipeline_test.cpp
// InfiniPipe's planner end to end (pack/elastic_pipeline.hpp) on seeded random batches:
// every chunk in exactly one pipeline, each pipeline a contiguous range of chain lengths in
// longest-first order whose chunk-level 1F1B schedule validates, checkpoint plans that fit
// every window of their pipeline, seconds that add up; the chosen slice count the best of
// all, and the ones the lower bound skips could not have won; deterministic; infeasible and
// bad options refused with the numbers.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/schedule/pipeline/validate.hpp>

#include <algorithm>
#include <optional>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

namespace {
std::vector<token_count> random_batch(random_generator& g) {
  std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 48)));
  for (auto& l : lengths) l = g.below(10) == 0 ? g.between(20000, 131072) : g.between(64, 8192);
  return lengths;
}

elastic_pipeline_options options_for(double usable_gib, int max_slices) {
  elastic_pipeline_options o =
      elastic_pipeline_options::for_model(models::gpt_13b(), clusters::infinipipe_a800_ib(4), 8, 4, usable_gib * (1ull << 30));
  o.processor.max_slices = max_slices;
  return o;
}
}  // namespace

TEST_CASE("elastic pipeline plans: every chunk once, valid schedules, checkpointing that fits", "[pack][infinipipe]") {
  random_generator g(17);
  for (int trial = 0; trial < 25; ++trial) {
    const std::vector<token_count> lengths = random_batch(g);
    const elastic_pipeline_options o = options_for(static_cast<double>(g.between(20, 70)), 6);
    CAPTURE(trial, lengths.size());
    elastic_plan plan;
    try {
      plan = plan_elastic_pipeline(lengths, o);
    } catch (const infeasible& e) {
      REQUIRE(e.value("longest").has_value());
      continue;
    }
    REQUIRE(plan == plan_elastic_pipeline(lengths, o));
    validate_chunks(plan.chunks.chunks, lengths);
    const chunk_order order = forward_order_of(plan.chunks.chunks, lengths);
    std::vector<int> seen(plan.chunks.chunks.size(), 0);
    double total = 0;
    int previous_last = 0;
    for (const elastic_pipeline& p : plan.pipelines) {
      for (const std::int64_t k : p.forward) ++seen[static_cast<std::size_t>(k)];
      // a contiguous range of chain lengths, above the previous pipeline's
      const int lo = *std::min_element(p.chains.begin(), p.chains.end()), hi = *std::max_element(p.chains.begin(), p.chains.end());
      REQUIRE(lo > previous_last);
      previous_last = hi;
      // the pipeline's chunks: those of `order` whose chain lies in [lo, hi], in that order
      std::vector<std::int64_t> expected;
      std::size_t at = 0;
      for (const int chain : order.chains) {
        if (chain >= lo && chain <= hi)
          for (int i = 0; i < chain; ++i) expected.push_back(order.forward[at + static_cast<std::size_t>(i)]);
        at += static_cast<std::size_t>(chain);
      }
      REQUIRE(p.forward == expected);
      std::vector<token_count> tokens;
      for (const std::int64_t k : p.forward) tokens.push_back(plan.chunks.chunks[static_cast<std::size_t>(k)].tokens());
      const pipeline_schedule s = chunk_one_f_one_b{.chains = p.chains}.build(4, tokens);
      REQUIRE(validate(s).max_in_flight == s.in_flight_bound);
      // the checkpoint plan fits every window of this pipeline's problem
      std::vector<chunk> own;
      for (const std::int64_t k : p.forward) own.push_back(plan.chunks.chunks[static_cast<std::size_t>(k)]);
      const std::vector<std::int64_t> f2b = chunk_one_f_one_b{.chains = p.chains}.backward_positions(static_cast<int>(p.forward.size()));
      const stage_aware_problem problem{.stages = 4,
                                        .max_layers = o.memory.layers / 4,
                                        .prefill_chunks = hi,
                                        .budget_bytes = o.budget_bytes,
                                        .chunks = stage_aware_chunks(own, lengths, f2b, o.memory)};
      REQUIRE(checkpoint_problem_of(p, plan.chunks.chunks, lengths, o) == problem);  // built here on its own
      REQUIRE(fits(problem, p.checkpoint.diagonal_layers));
      // searched, never worse than the greedy estimate, never below the proven bound
      REQUIRE(p.checkpoint.total_layers <= greedy_stage_aware_checkpointing(problem).total_layers);
      REQUIRE(p.checkpoint.total_layers >= p.checkpoint.lower_bound);
      REQUIRE(p.checkpoint.backward_position == f2b);
      REQUIRE(p.seconds > 0);
      total += p.seconds;
    }
    for (const int s : seen) REQUIRE(s == 1);
    REQUIRE(plan.seconds == Approx(total).epsilon(1e-12));
  }
}

TEST_CASE("elastic pipeline plans: searching more slice counts never does worse", "[pack][infinipipe]") {
  random_generator g(18);
  for (int trial = 0; trial < 10; ++trial) {
    const std::vector<token_count> lengths = random_batch(g);
    const elastic_pipeline_options o = options_for(60, 5);
    CAPTURE(trial);
    elastic_plan plan;
    try {
      plan = plan_elastic_pipeline(lengths, o);
    } catch (const infeasible&) {
      for (int n = 1; n <= 5; ++n) {  // then no slice count fits on its own
        elastic_pipeline_options only = o;
        only.processor.max_slices = n;
        REQUIRE_THROWS_AS(plan_elastic_pipeline(lengths, only), infeasible);
      }
      continue;
    }
    // the search over 1 .. 5 picks a slice count n*; searching 1 .. n* picks it too
    elastic_pipeline_options prefix = o;
    prefix.processor.max_slices = static_cast<int>(plan.chunks.mesh.size());
    REQUIRE(plan_elastic_pipeline(lengths, prefix) == plan);
  }
}

TEST_CASE("elastic pipeline plans refuse what cannot fit and inconsistent options", "[pack][infinipipe]") {
  const std::vector<token_count> lengths = {131072, 4096, 2048};
  // 1 GiB per GPU: not even the model states fit
  REQUIRE(zeppelin_test::expect_error<infeasible>([&] { (void)plan_elastic_pipeline(lengths, options_for(1, 4)); }).value("longest") == 131072);
  elastic_pipeline_options o = options_for(60, 4);
  o.budget_bytes.pop_back();
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)plan_elastic_pipeline(lengths, o); }).value("budgets") == 3);
  o = options_for(60, 4);
  o.memory.sp_degree = 4;
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)plan_elastic_pipeline(lengths, o); }).value("memory_sp") == 4);
  REQUIRE_THROWS_AS(plan_elastic_pipeline(std::vector<token_count>{}, options_for(60, 4)), invalid_argument);
}

TEST_CASE("elastic pipeline plans: the slice counts the bound skips could not have won", "[pack][infinipipe]") {
  random_generator g(19);
  int bounded = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<token_count> lengths = random_batch(g);
    if (trial % 2 == 0)  // many short documents: the batches where the bound skips most
      for (int i = 0; i < 200; ++i) lengths.push_back(g.between(64, 2048));
    const elastic_pipeline_options o = options_for(60, 6);
    CAPTURE(trial);
    // every slice count planned, as before the bound: the least seconds, ties the smaller n
    std::optional<elastic_plan> best;
    const token_count longest = *std::max_element(lengths.begin(), lengths.end());
    std::vector<chunking> tried;
    for (int n = 1; n <= std::min<token_count>(6, longest); ++n) tried.push_back(o.processor.process(lengths, n));
    tried.push_back(chunking{{longest}, fixed_size_chunks(lengths, longest)});
    for (const chunking& c : tried) {
      const std::optional<elastic_plan> plan = detail::schedule_chunking(c, lengths, o);
      if (!plan) continue;
      // the bound holds: no plan of these chunks is faster than their forward and backward
      REQUIRE(detail::busy_seconds_bound(c.chunks, o) <= plan->seconds * (1 + 1e-12));
      if (best && detail::busy_seconds_bound(c.chunks, o) >= best->seconds) ++bounded;
      if (!best || plan->seconds < best->seconds) best = plan;
    }
    if (!best) {
      REQUIRE_THROWS_AS(plan_elastic_pipeline(lengths, o), infeasible);
      continue;
    }
    REQUIRE(plan_elastic_pipeline(lengths, o).chunks == best->chunks);
  }
  CHECK(bounded > 0);  // the bound skipped some slice count, so the comparison was not idle
}
