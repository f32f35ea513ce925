// tests/pack/packed_stream_test.cpp
// WLB-LLM's 4D methods on the step simulator (pack/packing_methods.hpp,
// pack/packed_stream.hpp): every token trained once, each iteration priced as the simulator
// prices its step plan, the methods equal where there is nothing to balance, WLB-LLM faster
// than Plain-4D on long-tail streams, DP replicas dealt in order, and clear errors.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/power_law.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/pack/packed_stream.hpp>
#include <zeppelin/schedule/pipeline.hpp>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;
using zeppelin_test::expect_invalid;

namespace {

constexpr token_count context = 16384;

struct setup {
  packing_target target;
  step_shape shape;
  topology topo;
};

setup make_setup(parallel_layout layout) {
  const model_config m = models::llama_550m();
  step_shape shape;
  shape.layout = layout;
  shape.schedule = make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b);
  shape.tp_mode = tp_collectives::sequence_parallel;
  shape.sync = gradient_sync::sharded_optimizer;
  return {{m, gpus::h100_sxm(), layout}, shape, clusters::wlb_h100_roce(static_cast<int>((layout.gpus() + 7) / 8))};
}

packed_stream_result train(const packing_method& method, std::span<const token_count> lengths, const setup& s, const step_sim_options& options = {
                                                                                                                   .pricing = block_pricing::per_shape}) {
  return simulate_packed_stream(method, lengths, context, s.shape, no_recompute{}, s.target.model, s.topo, sim_cost_model::for_topology(s.topo),
                                options);
}

std::vector<packing_method> presets(const setup& s) {
  std::vector<packing_method> out;
  for (const auto name : packing_method_names) out.push_back(packing_method_by_name(name, s.target, context));
  return out;
}

}  // namespace

TEST_CASE("replicas_of deals the non-empty micro-batches in order over the DP replicas", "[pack][step]") {
  const std::vector<token_count> lengths = {10, 20, 30, 40, 50};
  packed_iteration it;
  it.micro_batches = {{{0, 1}, 30, 0}, {{}, 0, 0}, {{2}, 30, 0}, {{3, 4}, 90, 0}};
  const auto two = replicas_of(it, lengths, 2);
  REQUIRE(two.size() == 2);
  REQUIRE(two[0].size() == 1);
  REQUIRE(two[0][0] == std::vector<step_piece>{{0, 0, 10}, {1, 0, 20}});
  REQUIRE(two[1].size() == 2);
  REQUIRE(two[1][0] == std::vector<step_piece>{{2, 0, 30}});
  REQUIRE(two[1][1] == std::vector<step_piece>{{3, 0, 40}, {4, 0, 50}});
  REQUIRE(replicas_of(it, lengths, 1).front().size() == 3);
  REQUIRE(replicas_of(it, lengths, 8).size() == 3);  // fewer micro-batches than replicas
  REQUIRE(replicas_of(packed_iteration{{{}, {}}}, lengths, 2).empty());
  it.micro_batches[0].documents = {7};
  REQUIRE(expect_invalid([&] { (void)replicas_of(it, lengths, 2); }).value("index") == 7);
  REQUIRE(expect_invalid([&] { (void)replicas_of(it, lengths, 0); }).value("dp") == 0);
}

TEST_CASE("a packed stream trains every token once and prices each iteration's step plan as the simulator does", "[pack][step]") {
  const setup s = make_setup({1, 2, 2, 2});
  const std::vector<token_count> lengths = sample_lengths(power_law_lengths(context), 6 * 4 * context, 3, {.max_length = context});
  const token_count total = std::accumulate(lengths.begin(), lengths.end(), token_count{0});
  const sim_cost_model cost = sim_cost_model::for_topology(s.topo);
  for (const packing_method& method : presets(s)) {
    const packed_stream_result r = train(method, lengths, s);
    REQUIRE(r.tokens == total);
    REQUIRE(r.packing.pending.empty());
    REQUIRE(r.iteration_seconds.size() == r.packing.iterations.size());
    double sum = 0;
    for (std::size_t i = 0; i < r.packing.iterations.size(); ++i) {
      const packed_iteration& it = r.packing.iterations[i];
      REQUIRE(it.micro_batches.size() == 4);  // PP x DP
      for (const packed_micro_batch& mb : it.micro_batches) REQUIRE(mb.tokens <= max_tokens_of(method, context));
      const auto plan = packed_iteration_step_plan(it, lengths, method, s.shape, no_recompute{}, s.target.model, s.topo);
      if (!plan) {
        REQUIRE(r.iteration_seconds[i] == 0);
        continue;
      }
      // one replica per run of micro-batches, every document of the iteration once
      REQUIRE(plan->replicas.size() == replicas_of(it, lengths, 2).size());
      const step_sim_result ref = simulate_step(make_step_program(*plan, s.topo, s.target.model), s.topo, cost, {.pricing = block_pricing::per_shape});
      REQUIRE(r.iteration_seconds[i] == ref.iteration_s);
      REQUIRE(r.latency_imbalance[i] == ref.latency_imbalance);
      sum += ref.iteration_s;
    }
    REQUIRE(r.seconds == Approx(sum).epsilon(1e-12));
    REQUIRE(r.tokens_per_second() == Approx(double(total) / sum));
  }
}

TEST_CASE("the methods agree when every document fills a micro-batch", "[pack][step]") {
  const setup s = make_setup({1, 2, 4, 1});
  const std::vector<token_count> lengths(8, context);
  const std::vector<packing_method> methods = presets(s);
  const double plain = train(methods[0], lengths, s).seconds;
  // one document per micro-batch: per-sequence and per-document layouts are the same zigzag
  for (const packing_method& m : methods) REQUIRE(train(m, lengths, s).seconds == Approx(plain).epsilon(1e-9));
}

TEST_CASE("WLB-LLM trains a long-tail stream faster than Plain-4D and Fixed-4D", "[pack][step]") {
  const setup s = make_setup({1, 2, 4, 1});
  for (const std::uint64_t seed : {1u, 2u}) {
    const std::vector<token_count> lengths = sample_lengths(power_law_lengths(context), 12 * 4 * context, seed, {.max_length = context});
    const packed_stream_result plain = train(packing_methods::plain_4d(s.target, context), lengths, s);
    const double fixed = train(packing_methods::fixed_4d(s.target, context), lengths, s).seconds;
    const packed_stream_result wlb_run = train(packing_methods::wlb_4d(s.target, context), lengths, s);
    INFO("seed " << seed << ": plain " << plain.seconds << " s, fixed " << fixed << " s, wlb " << wlb_run.seconds << " s");
    REQUIRE(wlb_run.seconds < fixed);
    REQUIRE(fixed < plain.seconds);
    REQUIRE(wlb_run.mean_latency_imbalance() < plain.mean_latency_imbalance());
  }
}

TEST_CASE("packing methods: presets, L_max and errors", "[pack][step]") {
  const setup s = make_setup({1, 2, 2, 1});
  const packing_method w = packing_methods::wlb_4d(s.target, context, 2.0);
  REQUIRE(max_tokens_of(w, context) == 2 * context);
  REQUIRE(std::get<wlb>(w.packer.policy).context_window == context);
  const auto* adaptive = std::get_if<cheapest_layout>(&w.layout.policy);
  REQUIRE(adaptive != nullptr);
  REQUIRE(adaptive->candidates.size() == 2);
  REQUIRE(name_of(std::get<any_partitioner>(packing_methods::plain_4d(s.target, context).layout.policy)) == "per_sequence");
  REQUIRE(name_of(std::get<any_partitioner>(packing_methods::fixed_4d(s.target, context).layout.policy)) == "per_document");
  REQUIRE(max_tokens_of(packing_methods::fixed_4d(s.target, context), context) == context);

  const auto e = expect_invalid([&] { (void)packing_method_by_name("magi", s.target, context); });
  REQUIRE(std::string(e.what()).find("valid: plain_4d, fixed_4d, wlb") != std::string::npos);
  REQUIRE(expect_invalid([&] { (void)packing_methods::wlb_4d(s.target, context, 0.5); }).value("variable_ratio") == 0.5);
  REQUIRE(expect_invalid([&] { (void)packing_methods::wlb_4d(s.target, 0); }).value("context") == 0);
  packing_method bad = packing_methods::plain_4d(s.target, context);
  bad.max_tokens_ratio = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_THROWS_AS(max_tokens_of(bad, context), invalid_argument);

  // a document longer than L_max is named; a micro-batch over memory is infeasible
  const std::vector<token_count> too_long = {100, context + 1};
  REQUIRE(expect_invalid([&] { (void)train(packing_methods::plain_4d(s.target, context), too_long, s); }).value("index") == 1);
  REQUIRE_THROWS_AS(train(packing_methods::plain_4d(s.target, context), std::vector<token_count>{context}, s,
                          {.pricing = block_pricing::per_shape, .memory_capacity_bytes = 1e6}),
                    infeasible);
}
