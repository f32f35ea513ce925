// bench/step_bench.cpp
// Step program speed (bench/README.md, "Step program"): building a step program from a step
// plan and simulating it, at cluster scale.
// The job: DP replicas x PP stages x TP 2 x CP 4 GPUs (8 per stage, one node of cluster C),
// LLaMA-7B (32 layers), M micro-batches per replica of 1 - 4 seeded documents (1K - 16K
// tokens each), each laid out by per_document over its CP group, 1F1B, sequence
// parallelism, the distributed optimizer. The step plans (their CP layouts) are made outside
// the timed loop; what is timed:
//   build/M/P/DP        make_step_program: validation, the attention programs of every
//                       micro-batch, the schedule's one walk, the gradient sync
//   simulate/M/P/DP     simulate_step with per_shape pricing (each block shape once)
//   simulate_every_op/M/P/DP   the same with every op in one engine (smaller jobs)
// Target (issue): a 1,024-GPU iteration (DP 8 x PP 16 x TP 2 x CP 4, 64 micro-batches per
// replica) built and simulated in under 100 ms on one core: build/64/16/8 + simulate/64/16/8.
// The pipeline schedules themselves: build/<schedule> and validate/<schedule> for 1024
// micro-batches over 16 stages.
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/make_plan.hpp>

#include <benchmark/benchmark.h>

#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

namespace {

using namespace zeppelin;

struct job {
  topology cluster;
  model_config model;
  step_plan plan;
};

// The job of the file comment for M micro-batches per replica, P stages, DP replicas.
const job& job_of(int m, int p, int dp) {
  static std::map<std::tuple<int, int, int>, std::unique_ptr<job>> cache;
  auto& slot = cache[{m, p, dp}];
  if (slot) return *slot;
  step_shape shape;
  shape.layout = {.tp = 2, .cp = 4, .pp = p, .dp = dp};
  shape.schedule = make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b);
  shape.tp_mode = tp_collectives::sequence_parallel;
  shape.sync = gradient_sync::sharded_optimizer;
  const topology cluster = clusters::cluster_c(static_cast<int>(shape.layout.gpus() / 8));
  random_generator g(2026);
  std::vector<token_count> documents;
  std::vector<std::vector<std::vector<step_piece>>> pieces(static_cast<std::size_t>(dp));
  for (auto& replica : pieces)
    for (int k = 0; k < m; ++k) {
      auto& mb = replica.emplace_back();
      for (auto d = g.between(1, 4); d > 0; --d) {
        const token_count n = g.between(1024, 16384);
        mb.push_back({static_cast<std::int64_t>(documents.size()), 0, n});
        documents.push_back(n);
      }
    }
  const model_config model = models::llama_7b();
  step_plan plan = make_step_plan(cluster, model, std::move(documents), std::move(pieces), shape,
                                  partitioner_by_name("per_document", {.capacity = 1 << 16}), no_recompute{});
  slot = std::make_unique<job>(job{cluster, model, std::move(plan)});
  return *slot;
}

step_sim_options options(block_pricing p) {
  step_sim_options o;
  o.pricing = p;
  o.memory_capacity_bytes = std::numeric_limits<double>::infinity();
  return o;
}

void bench_build(benchmark::State& state) {
  const job& j = job_of(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  for (auto _ : state) benchmark::DoNotOptimize(make_step_program(j.plan, j.cluster, j.model));
  state.counters["gpus"] = static_cast<double>(j.cluster.num_ranks());
}

void bench_simulate(benchmark::State& state, block_pricing pricing) {
  const job& j = job_of(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), static_cast<int>(state.range(2)));
  const step_program prog = make_step_program(j.plan, j.cluster, j.model);
  const sim_cost_model cost = sim_cost_model::for_topology(j.cluster);
  double tasks = 0;
  for (auto _ : state) {
    const step_sim_result r = simulate_step(prog, j.cluster, cost, options(pricing));
    tasks = static_cast<double>(r.tasks);
    benchmark::DoNotOptimize(r.iteration_s);
  }
  state.counters["gpus"] = static_cast<double>(j.cluster.num_ranks());
  state.counters["tasks"] = tasks;
}

// how the cost grows: micro-batches (M), stages (P), replicas (DP); the target 64 / 16 / 8
void growth(benchmark::internal::Benchmark* b) {
  for (const int m : {16, 32, 64}) b->Args({m, 16, 8});
  for (const int p : {4, 8}) b->Args({64, p, 8});
  for (const int dp : {1, 2, 4}) b->Args({64, 16, dp});
  b->Unit(benchmark::kMillisecond);
}

void small(benchmark::internal::Benchmark* b) {
  for (const int dp : {1, 2}) b->Args({16, 4, dp});
  b->Args({32, 8, 1});
  b->Unit(benchmark::kMillisecond);
}

std::vector<token_count> schedule_tokens() {
  random_generator g(2026);
  std::vector<token_count> out(1024);
  for (token_count& t : out) t = g.between(1024, 32768);
  return out;
}

void bench_schedule_build(benchmark::State& state, any_pipeline_schedule policy) {
  const std::vector<token_count> tokens = schedule_tokens();
  for (auto _ : state) benchmark::DoNotOptimize(policy.build(16, tokens));
}

void bench_schedule_validate(benchmark::State& state, any_pipeline_schedule policy) {
  const pipeline_schedule s = policy.build(16, schedule_tokens());
  for (auto _ : state) benchmark::DoNotOptimize(validate(s));
}

}  // namespace

BENCHMARK(bench_build)->Name("build")->Apply(growth);
BENCHMARK_CAPTURE(bench_simulate, per_shape, block_pricing::per_shape)->Name("simulate")->Apply(growth);
BENCHMARK_CAPTURE(bench_simulate, every_op, block_pricing::every_op)->Name("simulate_every_op")->Apply(small);
BENCHMARK_CAPTURE(bench_schedule_build, gpipe, make_pipeline_schedule(pipeline_schedule_kind::gpipe))->Name("build/gpipe");
BENCHMARK_CAPTURE(bench_schedule_build, one_f_one_b, make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b))->Name("build/1f1b");
BENCHMARK_CAPTURE(bench_schedule_build, interleaved, make_pipeline_schedule(pipeline_schedule_kind::interleaved, 2))->Name("build/interleaved");
BENCHMARK_CAPTURE(bench_schedule_validate, one_f_one_b, make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b))->Name("validate/1f1b");
BENCHMARK_CAPTURE(bench_schedule_validate, interleaved, make_pipeline_schedule(pipeline_schedule_kind::interleaved, 2))
    ->Name("validate/interleaved");

BENCHMARK_MAIN();
