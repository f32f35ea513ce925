// bench/strategy_bench.cpp
// Hydraulis' planner times (strategy/, docs/hydraulis.md) beside the paper's Table 2
// (32B, CommonCrawl, Python with PuLP/CBC; per 10 iterations, 10 processes):
//   64 GPUs / 200K tokens:   proposal 2.03 s, greedy dispatch 5.46 s, packing 10.15 s
//   1024 GPUs / 3.2M tokens: proposal 107.21 s, greedy dispatch 38.56 s, packing 13.46 s
// Ours, one thread: the 32B preset (llama-32b, 60 layers), A800 schemes (TP <= 8 per node),
// lengths from the power law of data/power_law.hpp over [1, 32K] (the paper's context; it
// publishes no histogram), seed 1.
//   propose    profile_schemes + propose_strategies over 10 iterations' lengths (length
//              step 128 at 64 GPUs, 1024 at 1024 GPUs, as the authors)
//   dispatch   greedy_dispatch with 100 trials of one iteration on every candidate that
//              holds its longest sequence
//   packing    greedy_pipeline_packing of every pipeline of those candidates' dispatch
//   plan_iteration  the per-iteration choice as it runs: candidates in order of their lower
//              bound, dispatch and packing only for those that can still win
// Counters: per_10_iterations (seconds, the paper's unit) and candidates.
//     bench_strategy_bench --benchmark_filter=gpus:64
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/power_law.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/strategy.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

using namespace zeppelin;

constexpr token_count context = 32768;

struct setting {
  long long gpus;
  std::vector<scheme_profile> profiles;
  std::vector<token_count> sample;     // 10 iterations
  std::vector<token_count> iteration;  // the first of them
  token_count step;
  token_count longest = 0;  // of `iteration`: candidates that cannot hold it are not dispatched
};

setting make_setting(long long gpus) {
  const token_count per_iteration = gpus == 64 ? 200'000 : 3'200'000;
  setting s{gpus, {}, {}, {}, gpus == 64 ? 128 : 1024};
  const model_config m = models::llama_32b();
  s.profiles = profile_schemes(enumerate_schemes(m, gpus, 8), m, gpus::a800_80g(), gpus);
  random_generator rng(1);
  for (int it = 0; it < 10; ++it) {
    const auto l = sample_lengths(power_law_lengths(context), per_iteration, rng, {.max_length = context});
    s.sample.insert(s.sample.end(), l.begin(), l.end());
    if (it == 0) s.iteration = l;
  }
  s.longest = *std::max_element(s.iteration.begin(), s.iteration.end());
  return s;
}

const setting& setting_for(long long gpus) {
  static const setting small = make_setting(64);
  static const setting large = make_setting(1024);
  return gpus == 64 ? small : large;
}

void report(benchmark::State& state, double per_run_iterations) {
  state.counters["per_10_iterations"] =
      benchmark::Counter(per_run_iterations / 10.0, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void bench_propose(benchmark::State& state) {
  const setting& s = setting_for(state.range(0));
  const model_config m = models::llama_32b();
  std::size_t candidates = 0;
  for (auto _ : state) {
    const auto profiles = profile_schemes(enumerate_schemes(m, s.gpus, 8), m, gpus::a800_80g(), s.gpus);
    const auto c = propose_strategies(profiles, s.gpus, s.sample, {.length_step = s.step, .sample_iterations = 10});
    candidates = c.size();
    benchmark::DoNotOptimize(c);
  }
  state.counters["candidates"] = static_cast<double>(candidates);
  state.counters["seconds"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void bench_dispatch(benchmark::State& state) {
  const setting& s = setting_for(state.range(0));
  const auto candidates = propose_strategies(s.profiles, s.gpus, s.sample, {.length_step = s.step, .sample_iterations = 10});
  for (auto _ : state)
    for (const strategy& c : candidates) {
      const auto pipelines = pipelines_of(c);
      if (pipelines.front().max_len < s.longest) continue;
      benchmark::DoNotOptimize(greedy_dispatch{.trials = 100, .seed = 1}.dispatch(pipelines, s.iteration));
    }
  state.counters["candidates"] = static_cast<double>(candidates.size());
  report(state, 1);
}

void bench_packing(benchmark::State& state) {
  const setting& s = setting_for(state.range(0));
  const auto candidates = propose_strategies(s.profiles, s.gpus, s.sample, {.length_step = s.step, .sample_iterations = 10});
  std::vector<std::pair<std::vector<scheme_profile>, dispatch_result>> dispatched;
  for (const strategy& c : candidates) {
    auto pipelines = pipelines_of(c);
    if (pipelines.front().max_len < s.longest) continue;
    dispatch_result d = greedy_dispatch{.trials = 100, .seed = 1}.dispatch(pipelines, s.iteration);
    dispatched.emplace_back(std::move(pipelines), std::move(d));
  }
  std::vector<token_count> own;
  for (auto _ : state)
    for (const auto& [pipelines, d] : dispatched)
      for (std::size_t j = 0; j < pipelines.size(); ++j) {
        if (d.sequences[j].empty()) continue;
        own.clear();
        for (const std::int64_t i : d.sequences[j]) own.push_back(s.iteration[static_cast<std::size_t>(i)]);
        benchmark::DoNotOptimize(greedy_pipeline_packing{}.pack(pipelines[j], own));
      }
  state.counters["candidates"] = static_cast<double>(dispatched.size());
  report(state, 1);
}

// The whole per-iteration choice: candidates by lower bound, greedy dispatch (100 trials)
// and greedy packing of those that can still win.
void bench_plan_iteration(benchmark::State& state) {
  const setting& s = setting_for(state.range(0));
  const auto candidates = propose_strategies(s.profiles, s.gpus, s.sample, {.length_step = s.step, .sample_iterations = 10});
  double seconds = 0;
  for (auto _ : state) {
    const iteration_plan plan = plan_iteration(candidates, s.iteration, greedy_dispatch{.trials = 100, .seed = 1}, greedy_pipeline_packing{});
    seconds = plan.seconds;
    benchmark::DoNotOptimize(plan);
  }
  state.counters["candidates"] = static_cast<double>(candidates.size());
  state.counters["iteration_s"] = seconds;
  report(state, 1);
}

}  // namespace

BENCHMARK(bench_plan_iteration)->ArgName("gpus")->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(bench_propose)->ArgName("gpus")->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(bench_dispatch)->ArgName("gpus")->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(bench_packing)->ArgName("gpus")->Arg(64)->Arg(1024)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
