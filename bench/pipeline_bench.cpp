// bench/pipeline_bench.cpp
// Pipeline planning and simulation speed (bench/README.md, "Pipelines").
// 1024 micro-batches of variable length (seeded, 1K .. 32K tokens, 1 .. 4 documents each)
// through 16 stages of LLaMA-7B x 2 (64 layers) on cluster C; the micro-batches are built
// outside the timed loop.
//   build/<schedule>:    the schedule policy's build() alone (ops with their sends/receives)
//   validate/<schedule>: validate() of that schedule (deadlock-freedom by execution)
//   simulate/<schedule>/links:<0|1>: simulate_pipeline(): build + peak memory + the task
//                        DAG timed with shared links (0: the event engine, fair-shared ports)
//                        or dedicated links (1: one pass), with the fitted stage model
//                        (Hydraulis-style a l^2 + b l + c per 4 layers, LLaMA-7B-like numbers);
//                        the policies' schedules are valid by construction, so no validate()
//   simulate_analytic/links:<0|1>: the same for 1F1B with the FLOP-based stage model
// Target (issue): building and simulating 1024 micro-batches over 16 stages in <= 5 ms.
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/pipeline_simulator.hpp>

#include <benchmark/benchmark.h>

#include <limits>
#include <zeppelin/sim/link_sharing.hpp>
#include <vector>

namespace {

using namespace zeppelin;

constexpr int stages = 16;
constexpr int micro_batches = 1024;

std::vector<micro_batch> variable_micro_batches() {
  random_generator g(2026);
  std::vector<micro_batch> out(micro_batches);
  for (auto& mb : out) {
    const auto docs = g.between(1, 4);
    for (std::int64_t d = 0; d < docs; ++d) mb.documents.push_back(g.between(256, 8192));
  }
  return out;
}

std::vector<token_count> tokens_of(const std::vector<micro_batch>& mbs) {
  std::vector<token_count> t;
  for (const auto& mb : mbs) t.push_back(mb.tokens());
  return t;
}

model_config deep_model() {
  model_config m = models::llama_7b();
  m.layers = 64;
  return m;
}

const any_pipeline_schedule schedule_of[3] = {{gpipe{}}, {one_f_one_b{}}, {interleaved_one_f_one_b{.virtual_stages = 2}}};

void bench_build(benchmark::State& state) {
  const auto tokens = tokens_of(variable_micro_batches());
  const auto& policy = schedule_of[state.range(0)];
  for (auto _ : state) benchmark::DoNotOptimize(policy.build(stages, tokens));
}

void bench_validate(benchmark::State& state) {
  const auto s = schedule_of[state.range(0)].build(stages, tokens_of(variable_micro_batches()));
  for (auto _ : state) benchmark::DoNotOptimize(validate(s));
}

template <class TimeModel, class Links>
void run_simulation(benchmark::State& state, const any_pipeline_schedule& policy, const TimeModel& time, const Links& links) {
  const std::vector<std::vector<micro_batch>> replicas{variable_micro_batches()};
  const pipeline_memory_model memory{deep_model(), {1, 1, stages, 1}, {}};
  const topology t = clusters::cluster_c(2);
  const pipeline_sim_options o{.memory_capacity_bytes = std::numeric_limits<double>::infinity()};
  double iteration = 0;
  for (auto _ : state) {
    const auto r = simulate_pipeline(replicas, policy, no_recompute{}, time, memory, t, o, links);
    benchmark::DoNotOptimize(r);  // (not the double: DoNotOptimize's "+m,r" on a double miscompiles with GCC 12)
    iteration = r.iteration_s;
  }
  state.counters["iteration_s"] = iteration;
}

template <class TimeModel>
void simulate_with(benchmark::State& state, const any_pipeline_schedule& policy, const TimeModel& time) {
  if (state.range(1) == 0) run_simulation(state, policy, time, shared_links{});
  else run_simulation(state, policy, time, dedicated_links{});
}

void bench_simulate(benchmark::State& state) {
  // LLaMA-7B-like stage profile over 4 layers: seconds = a l^2 + b l + c per document
  const fitted_stage_time time{{8e-11, 3.2e-6, 2e-4}, {1.6e-10, 6.4e-6, 2e-4}, 4};
  simulate_with(state, schedule_of[state.range(0)], time);
}

void bench_simulate_analytic(benchmark::State& state) {
  simulate_with(state, schedule_of[1], analytic_stage_time::for_gpu(deep_model(), gpus::h200()));
}

}  // namespace

BENCHMARK(bench_build)->Name("build")->ArgName("schedule")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK(bench_validate)->Name("validate")->ArgName("schedule")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK(bench_simulate)->Name("simulate")->ArgNames({"schedule", "links"})->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK(bench_simulate_analytic)->Name("simulate_analytic")->ArgNames({"schedule", "links"})->ArgsProduct({{1}, {0, 1}})->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
