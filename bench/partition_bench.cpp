// bench/partition_bench.cpp
// Planning latency of the partitioners (issue 3, deliverable 6): one plan of a batch sampled
// from a Table 2 dataset (data/sampler.hpp, seed 1), 64K .. 4M tokens, 16 .. 1024 GPUs
// (8 per node), capacity L = ceil(tokens / GPUs) * 9 / 8 (12.5 % above the even share: the
// balanced layouts need a little room for uneven chunks and whole local sequences; see
// bench/README.md). The batch is built outside the timed loop; the timed region is
// partition() alone. Arguments: dataset (0 arxiv, 1 github, 2 prolong64k), tokens, GPUs.
//   bench_partition --benchmark_filter='hierarchical/1/262144/32'
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

template <class Method>
void bench_plan(benchmark::State& state) {
  const auto dataset = static_cast<std::size_t>(state.range(0));
  const token_count tokens = state.range(1);
  const int gpus = static_cast<int>(state.range(2));
  const topology t({"bench", gpus / 8, 8, 8, {}, links::nvlink_h100(), links::nic_400g(), gpus::h200()});
  const batch b = sample_batch(dataset_by_name(dataset_list[dataset]), tokens, 1);
  const token_count even = (tokens + gpus - 1) / gpus;
  const Method method{.capacity = even + even / 8};
  for (auto _ : state) {
    plan p = method.partition(b, t);
    benchmark::DoNotOptimize(p);
  }
  state.counters["sequences"] = static_cast<double>(b.size());
  state.SetLabel(std::string(dataset_list[dataset]));
}

void full_grid(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"dataset", "tokens", "gpus"})->Unit(benchmark::kMicrosecond);
  for (int d = 0; d < 3; ++d)
    for (const std::int64_t tokens : {64 << 10, 256 << 10, 1 << 20, 4 << 20})
      for (const std::int64_t gpus : {16, 32, 128, 256, 1024}) bench->Args({d, tokens, gpus});
}

void target_points(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"dataset", "tokens", "gpus"})->Unit(benchmark::kMicrosecond);
  for (int d = 0; d < 3; ++d) {
    bench->Args({d, 256 << 10, 32});
    bench->Args({d, 4 << 20, 1024});
  }
}

}  // namespace

BENCHMARK_TEMPLATE(bench_plan, zeppelin::hierarchical<>)->Name("hierarchical")->Apply(full_grid);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::hierarchical<zeppelin::attention_cost_metric>)
    ->Name("hierarchical_attention")
    ->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::even_split)->Name("even_split")->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::allgather)->Name("allgather")->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::hybrid_dp)->Name("hybrid_dp")->Apply(target_points);
BENCHMARK_TEMPLATE(bench_plan, zeppelin::per_document)->Name("per_document")->Apply(target_points);

BENCHMARK_MAIN();
