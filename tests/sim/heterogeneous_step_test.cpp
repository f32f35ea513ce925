// tests/sim/heterogeneous_step_test.cpp
// Hydraulis plans on the 4D simulator (sim/heterogeneous_step.hpp) and the homogeneous
// baseline (strategy/homogeneous_baseline.hpp): a one-stage pipeline takes exactly the sum
// of its micro-batches' T, deeper ones the 1F1B time, the gap is 1 - fastest / slowest, an
// idle pipeline takes 0; the baseline deals sequences by tokens in arrival order and packs
// windows of at most L tokens.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/heterogeneous_step.hpp>
#include <zeppelin/strategy/homogeneous_baseline.hpp>

#include <algorithm>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

namespace {
scheme_profile profile(int tp, int pp, token_count max_len, double a, double b, double c) {
  return {.scheme = {tp, pp, 1}, .max_len = max_len, .util_len = 1, .latency = {a, b, c}};
}
}  // namespace

TEST_CASE("a heterogeneous step simulates each pipeline with its profile's T", "[sim][strategy]") {
  const model_config m = models::llama_7b();
  const std::vector<token_count> lengths = {4000, 1000, 2000, 3000, 500};
  const scheme_profile one = profile(2, 1, 8000, 1e-8, 1e-4, 0.01), deep = profile(1, 4, 8000, 2e-8, 2e-4, 0.02);
  iteration_plan plan;
  plan.pipelines.push_back({one, {0, 1}, {{{0}, {1}}, 0, 0}});
  plan.pipelines.push_back({deep, {2, 3, 4}, {{{2}, {3, 4}}, 0, 0}});
  plan.pipelines.push_back({one, {}, {}});
  const heterogeneous_step_result r =
      simulate_heterogeneous_step(plan, lengths, m, 16, clusters::hydraulis_a800_ib(2), one_f_one_b{}, no_recompute{}, {},
                                  {.memory_capacity_bytes = 1e15});
  REQUIRE(r.pipeline_seconds.size() == 3);
  // one stage: the micro-batches run back to back, T each
  const double t0 = one.micro_batch_seconds(std::vector<token_count>{4000}) + one.micro_batch_seconds(std::vector<token_count>{1000});
  REQUIRE(r.pipeline_seconds[0] == Approx(t0).epsilon(1e-9));
  // four stages, two micro-batches: the last stage runs both (a + b) after the first forward
  // crossed three stages and before the last backward crosses them back, at most (PP - 1 + V) x max T
  const double a = deep.micro_batch_seconds(std::vector<token_count>{2000}), b = deep.micro_batch_seconds(std::vector<token_count>{3000, 500});
  REQUIRE(r.pipeline_seconds[1] >= (a + b + 3 * std::min(a, b)) * (1 - 1e-9));
  REQUIRE(r.pipeline_seconds[1] <= 5 * std::max(a, b) * 1.01);
  REQUIRE(r.pipeline_seconds[2] == 0);
  REQUIRE(r.iteration_s == std::max(r.pipeline_seconds[0], r.pipeline_seconds[1]));
  REQUIRE(r.gap == Approx(1 - std::min(r.pipeline_seconds[0], r.pipeline_seconds[1]) / r.iteration_s));
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_heterogeneous_step(iteration_plan{}, lengths, m, 16, clusters::hydraulis_a800_ib(2), one_f_one_b{}, no_recompute{});
          }).what() != nullptr);
}

TEST_CASE("the homogeneous baseline deals by tokens in arrival order and packs windows of L", "[strategy]") {
  random_generator rng(6);
  const scheme_profile p = profile(4, 2, 20000, 1e-9, 1e-4, 0.01);
  std::vector<token_count> lengths(300);
  for (auto& l : lengths) l = rng.between(1, 8000);
  const iteration_plan plan = homogeneous_plan(p, 4, lengths, 16384);
  REQUIRE(plan.pipelines.size() == 4);
  std::vector<token_count> tokens;
  std::vector<int> seen(lengths.size(), 0);
  double slowest = 0;
  for (const pipeline_plan& pl : plan.pipelines) {
    REQUIRE(std::is_sorted(pl.sequences.begin(), pl.sequences.end()));  // arrival order
    token_count t = 0;
    std::vector<std::int64_t> packed;
    for (const auto& mb : pl.packing.micro_batches) {
      token_count in = 0;
      for (const std::int64_t i : mb) in += lengths[static_cast<std::size_t>(i)], ++seen[static_cast<std::size_t>(i)];
      REQUIRE(in <= 16384);
      packed.insert(packed.end(), mb.begin(), mb.end());
    }
    REQUIRE(packed == pl.sequences);
    for (const std::int64_t i : pl.sequences) t += lengths[static_cast<std::size_t>(i)];
    tokens.push_back(t);
    REQUIRE(pl.packing.seconds == Approx((p.scheme.pp - 1 + pl.packing.count()) * pl.packing.slowest_seconds));
    slowest = std::max(slowest, pl.packing.seconds);
  }
  for (const int s : seen) REQUIRE(s == 1);
  REQUIRE(*std::max_element(tokens.begin(), tokens.end()) - *std::min_element(tokens.begin(), tokens.end()) <= 8000);
  REQUIRE(plan.seconds == slowest);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)homogeneous_plan(p, 4, std::vector<token_count>{20001}, 32768); }).value("limit") == 20000);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)homogeneous_plan(p, 0, lengths, 16384); }).value("pipelines") == 0);
}

TEST_CASE("switching on the event engine: one flow takes bytes / bandwidth, a plan at least its per-GPU bound", "[sim][strategy]") {
  const topology topo = clusters::hydraulis_a800_ib(2);
  const std::vector<slice_transfer> one = {{0, 9, 0, 1, 0, 1, 4e9}};  // across nodes
  REQUIRE(simulate_switching(one, topo, {}) >= 4e9 / topo.nic_link().bandwidth);
  REQUIRE(simulate_switching(one, topo, {}) <= 4e9 / topo.nic_link().bandwidth * 1.01 + 1e-3);
  REQUIRE(simulate_switching(std::vector<slice_transfer>{}, topo) == 0);
  const model_config m = models::llama_7b();
  const strategy mixed{{{profile(1, 2, 8000, 0, 1, 0), 2}, {profile(4, 1, 32000, 0, 1, 0), 1}, {profile(2, 4, 16000, 0, 1, 0), 1}}, 0};
  const switching_plan plan = make_switching_plan(mixed, 16, m);
  for (const auto* transfers : {&plan.pull, &plan.push_reduce, &plan.push_link}) {
    const double bound = switching_seconds(*transfers, topo);
    const double simulated = simulate_switching(*transfers, topo);
    REQUIRE(simulated >= bound * (1 - 1e-9));
    REQUIRE(simulated <= 4 * bound + 1e-3);
  }
  const std::vector<slice_transfer> outside = {{0, 99, 0, 1, 0, 1, 1e6}};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)simulate_switching(outside, topo); }).value("dst") == 99);
}
