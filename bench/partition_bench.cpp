// bench/partition_bench.cpp
// Planning latency and capacity behaviour of the partitioners (bench/README.md).
// bench_plan: one plan of a batch sampled from a Table 2 dataset (data/sampler.hpp, seed 1),
//   64K .. 4M tokens, 16 .. 1024 GPUs (8 per node), capacity L = ceil(tokens / GPUs) *
//   (1 + slack), slack in permille: 0 is exact fill (the paper's 4K tokens per GPU), 125 the
//   12.5 % the previous planners needed. The batch is built outside the timed loop; the timed
//   region is partition() alone. Arguments: dataset (0 arxiv, 1 github, 2 prolong64k),
//   tokens, GPUs, slack.
//     bench_partition_bench --benchmark_filter='hierarchical/dataset:1/tokens:262144/gpus:32/slack:0'
// capacity_sweep: 40 seeded batches of 4096 x GPUs tokens on cluster C (8 GPUs per node) at a
//   capacity 4096 * (1 + slack): how many batches took each hierarchical fallback or split
//   (counters contiguous, inter_spill, intra_spill, streamed), how many even_split and
//   allgather refused, and max / mean causal pairs per rank (mean over the batches) of
//   hierarchical and of even_split. One iteration; the time is that of the whole sweep.
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/partition.hpp>

#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <string_view>

namespace {

using namespace zeppelin;

constexpr std::array<std::string_view, 3> dataset_list = {"arxiv", "github", "prolong64k"};

token_count with_slack(token_count even, std::int64_t permille) { return even + even * permille / 1000; }

template <class Method>
void bench_plan(benchmark::State& state) {
  const auto dataset = static_cast<std::size_t>(state.range(0));
  const token_count tokens = state.range(1);
  const int gpus = static_cast<int>(state.range(2));
  const topology t({"bench", gpus / 8, 8, 8, {}, links::nvlink_h100(), links::nic_400g(), gpus::h200()});
  const batch b = sample_batch(dataset_by_name(dataset_list[dataset]), tokens, 1);
  const Method method{.capacity = with_slack((tokens + gpus - 1) / gpus, state.range(3))};
  for (auto _ : state) {
    plan p = method.partition(b, t);
    benchmark::DoNotOptimize(p);
  }
  state.counters["sequences"] = static_cast<double>(b.size());
  state.SetLabel(std::string(dataset_list[dataset]));
}

void full_grid(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"dataset", "tokens", "gpus", "slack"})->Unit(benchmark::kMicrosecond);
  for (const std::int64_t slack : {0, 125})
    for (int d = 0; d < 3; ++d)
      for (const std::int64_t tokens : {64 << 10, 256 << 10, 1 << 20, 4 << 20})
        for (const std::int64_t gpus : {16, 32, 128, 256, 1024}) bench->Args({d, tokens, gpus, slack});
}

void target_points(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"dataset", "tokens", "gpus", "slack"})->Unit(benchmark::kMicrosecond);
  for (const std::int64_t slack : {0, 125})
    for (int d = 0; d < 3; ++d) {
      bench->Args({d, 256 << 10, 32, slack});
      bench->Args({d, 4 << 20, 1024, slack});
    }
}

void capacity_sweep(benchmark::State& state) {
  const auto dataset = static_cast<std::size_t>(state.range(0));
  const topology t = clusters::cluster_c(static_cast<int>(state.range(1)));
  const token_count tokens = 4096 * t.num_ranks(), L = with_slack(4096, state.range(2));
  constexpr int seeds = 40;
  double contiguous = 0, inter = 0, intra = 0, streamed = 0, es_refused = 0, ag_refused = 0, h_imb = 0, e_imb = 0;
  for (auto _ : state) {
    for (int seed = 0; seed < seeds; ++seed) {
      const batch b = sample_batch(dataset_by_name(dataset_list[dataset]), tokens, static_cast<std::uint64_t>(seed));
      const auto [h, trace] = hierarchical<>{.capacity = L}.solve(b, t);
      contiguous += trace.contiguous;
      inter += !trace.inter_spilled.empty();
      intra += !trace.intra_spilled.empty();
      streamed += trace.streamed;
      h_imb += compute_stats(h, b, t).pair_imbalance();
      try {
        e_imb += compute_stats(even_split{.capacity = L}.partition(b, t), b, t).pair_imbalance();
      } catch (const infeasible&) {
        ++es_refused;
        e_imb += compute_stats(even_split{.capacity = tokens}.partition(b, t), b, t).pair_imbalance();
      }
      try {
        benchmark::DoNotOptimize(allgather{.capacity = L}.partition(b, t));
      } catch (const infeasible&) {
        ++ag_refused;
      }
    }
  }
  const double runs = static_cast<double>(state.iterations());
  state.counters["contiguous"] = contiguous / runs;
  state.counters["inter_spill"] = inter / runs;
  state.counters["intra_spill"] = intra / runs;
  state.counters["streamed"] = streamed / runs;
  state.counters["even_split_refused"] = es_refused / runs;
  state.counters["allgather_refused"] = ag_refused / runs;
  state.counters["hier_max_over_mean_pairs"] = h_imb / (runs * seeds);
  state.counters["even_max_over_mean_pairs"] = e_imb / (runs * seeds);
  state.SetLabel(std::string(dataset_list[dataset]));
}

void sweep_grid(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"dataset", "nodes", "slack"})->Unit(benchmark::kMillisecond)->Iterations(1);
  for (const std::int64_t slack : {0, 10, 50, 125})
    for (int d = 0; d < 3; ++d)
      for (const std::int64_t nodes : {2, 4, 8}) bench->Args({d, nodes, slack});
}

}  // namespace

BENCHMARK_TEMPLATE(bench_plan, zeppelin::hierarchical<>)->Name("hierarchical")->Apply(full_grid);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::hierarchical<zeppelin::attention_cost_metric>)
    ->Name("hierarchical_attention")
    ->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::hierarchical<zeppelin::attention_cost_metric, zeppelin::metric_allocation>)
    ->Name("hierarchical_attention_allocation")
    ->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::hierarchical<zeppelin::cost_model_metric<>, zeppelin::metric_allocation>)
    ->Name("hierarchical_cost_model_allocation")
    ->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::even_split)->Name("even_split")->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::allgather)->Name("allgather")->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::hybrid_dp)->Name("hybrid_dp")->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::per_document)->Name("per_document")->Apply(target_points);
BENCHMARK(capacity_sweep)->Apply(sweep_grid);

BENCHMARK_MAIN();
