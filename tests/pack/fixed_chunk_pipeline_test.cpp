// tests/pack/fixed_chunk_pipeline_test.cpp
// The fixed-chunk baselines' plan (pack/fixed_chunk_pipeline.hpp) on seeded random batches:
// one pipeline over every fixed-size chunk in longest-first order, a uniform recompute that
// fits and is the least uniform one that does, the planner's own price; the DeepSpeed-like
// setting (one stage over every GPU) works the same way; infeasible named.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack/fixed_chunk_pipeline.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

TEST_CASE("fixed-chunk plans: every chunk, the least uniform recompute that fits, the planner's price", "[pack][infinipipe]") {
  random_generator g(59);
  int recomputing = 0, planned = 0;
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(1, 60)));
    for (auto& l : lengths) l = g.below(8) == 0 ? g.between(20000, 131072) : g.between(64, 8192);
    const bool everywhere = trial % 3 == 0;  // DeepSpeed-like: Ulysses over all 32 GPUs, no pipeline
    const topology topo = clusters::infinipipe_a800_ib(4);
    const elastic_pipeline_options o = elastic_pipeline_options::for_model(models::gpt_13b(), topo, everywhere ? 32 : 8, everywhere ? 1 : 4,
                                                                         static_cast<double>(g.between(24, 72)) * (1ull << 30));
    const token_count size = g.below(2) == 0 ? 16384 : 131072;
    CAPTURE(trial, everywhere, size, lengths.size());
    elastic_plan plan;
    try {
      plan = fixed_chunk_plan(lengths, o, size);
    } catch (const infeasible& e) {
      REQUIRE(e.value("chunk_tokens") == static_cast<double>(size));
      continue;
    }
    ++planned;
    REQUIRE(plan.chunks.chunks == fixed_size_chunks(lengths, size));
    REQUIRE(plan.pipelines.size() == 1);
    const elastic_pipeline& p = plan.pipelines.front();
    const chunk_order order = forward_order_of(plan.chunks.chunks, lengths);
    REQUIRE(p.forward == order.forward);
    REQUIRE(p.chains == order.chains);
    // uniform, fits, and one layer less does not
    const stage_aware_problem problem = checkpoint_problem_of(p, plan.chunks.chunks, lengths, o);
    const std::vector<int>& c = p.checkpoint.diagonal_layers;
    REQUIRE(c.size() == plan.chunks.chunks.size() + static_cast<std::size_t>(o.processor.cost.d_p) - 1);
    REQUIRE(std::all_of(c.begin(), c.end(), [&](int x) { return x == c.front(); }));
    REQUIRE(fits(problem, c));
    REQUIRE(p.checkpoint.total_layers == std::accumulate(c.begin(), c.end(), std::int64_t{0}));
    if (c.front() > 0) {
      ++recomputing;
      const std::vector<int> less(c.size(), c.front() - 1);
      REQUIRE(!fits(problem, less));
    }
    // the planner's price of the same pipeline
    elastic_pipeline again = p;
    detail::price(again, plan.chunks.chunks, o);
    REQUIRE(again.seconds == p.seconds);
    REQUIRE(plan.seconds == p.seconds);
    REQUIRE(fixed_chunk_plan(lengths, o, size) == plan);
  }
  REQUIRE(recomputing > 0);
  REQUIRE(planned >= 15);
}

TEST_CASE("fixed-chunk plans: a chunk that fits nowhere is refused with its size", "[pack][infinipipe]") {
  const std::vector<token_count> lengths{200000, 1000};
  const elastic_pipeline_options o =
      elastic_pipeline_options::for_model(models::gpt_30b(), clusters::infinipipe_a800_ib(4), 8, 4, 12.0 * (1ull << 30));
  const auto e = zeppelin_test::expect_error<infeasible>([&] { (void)fixed_chunk_plan(lengths, o, 200000); });
  REQUIRE(e.value("chunk_tokens") == 200000);
  zeppelin_test::expect_invalid([&] { (void)fixed_chunk_plan(lengths, o, 0); });
}
