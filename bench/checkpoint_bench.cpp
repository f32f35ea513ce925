// bench/checkpoint_bench.cpp
// Stage-aware checkpointing (checkpoint/stage_aware.hpp, docs/stage-aware-checkpointing.md)
// on one InfiniPipe pipeline of a full global batch, beside GLPK's MIP on the same program
// (the paper solves it with SCIP at a 2 % gap in under 5 s).
// Instance: 32 GPUs (d_s = 8, d_p = 4), llama-30b (60 layers: 15 per stage), 512 sequences
// drawn from the power law of data/power_law.hpp over [1, context] (context 64K or 128K,
// seed 1). Chunks: fixed 16K-token chunks (pack/fixed_chunks.hpp, the Seq1F1B-like
// baseline's), in the longest-first forward order of pack/chunk_order.hpp; backward order
// that of chunk-level 1F1B (each sequence's chunks reversed); N_P = chunks of the longest
// sequence.
// Memory: I, F from stage_aware_chunks with M_token = L x the per-token-layer activations of
// cost/pipeline_memory.hpp; budget = 0.9 x the GPU's memory (80 GB at 128K, 40 GB at 64K)
// minus each stage's model states (ZeRO-3 over the d_s = 8 GPUs of a stage, bf16
// parameters, fp32 gradients and Adam states).
// Counters: chunks, windows (constraint rows), layers (sum C), lower_bound, proven, nodes,
// full (the layers of full recomputation, (n + d_p - 1) L / d_p). best_stage_aware_
// checkpointing under three node budgets: 1 (the root alone), 200 (a planner's budget) and
// 100K (the default).
//     bench_checkpoint_bench --benchmark_filter=stage_aware
#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/pack/chunk_order.hpp>
#include <zeppelin/pack/fixed_chunks.hpp>
#include <zeppelin/schedule/pipeline/chunk_one_f_one_b.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/data/power_law.hpp>

#include <benchmark/benchmark.h>
#include <glpk.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

namespace {

using namespace zeppelin;

constexpr int sp_degree = 8, pp_degree = 4, sequences = 512;
constexpr token_count slice_tokens = 16384;

stage_aware_problem make_problem(token_count context, double gpu_bytes) {
  const model_config model = models::llama_30b();
  random_generator rng(1);
  const length_histogram lengths_of = power_law_lengths(context);
  std::vector<token_count> lengths(sequences);
  for (token_count& l : lengths) l = lengths_of.sample(rng);
  const std::vector<chunk> fixed = fixed_size_chunks(lengths, slice_tokens);
  const chunk_order order = forward_order_of(fixed, lengths);
  std::vector<chunk> chunks;  // in forward order
  for (const std::int64_t k : order.forward) chunks.push_back(fixed[static_cast<std::size_t>(k)]);
  const std::vector<std::int64_t> f2b = chunk_one_f_one_b{.chains = order.chains}.backward_positions(static_cast<int>(chunks.size()));
  const std::int64_t prefill = *std::max_element(order.chains.begin(), order.chains.end());
  stage_aware_problem p;
  p.stages = pp_degree;
  p.max_layers = model.layers / pp_degree;
  p.prefill_chunks = prefill;
  p.chunks = stage_aware_chunks(chunks, lengths, f2b, infinipipe_memory_of(model, sp_degree, pp_degree));
  p.budget_bytes = stage_budgets(model, 0.9 * gpu_bytes, sp_degree, pp_degree);
  return p;
}

// Instances by context: 128K on 80 GB GPUs (A800, the paper's), 64K on 40 GB ones (at 80 GB
// a 64K batch needs no recomputation).
const stage_aware_problem& problem_for(token_count context) {
  static const std::map<token_count, stage_aware_problem> problems{{65536, make_problem(65536, 40e9)}, {131072, make_problem(131072, 80e9)}};
  return problems.at(context);
}

void report(benchmark::State& state, const stage_aware_problem& p, double layers, double nodes) {
  state.counters["chunks"] = double(p.chunks.size());
  state.counters["windows"] = double(stage_aware_windows(p).size());
  state.counters["layers"] = layers;
  state.counters["nodes"] = nodes;
  state.counters["full"] = double((p.chunks.size() + p.stages - 1) * static_cast<std::size_t>(p.max_layers));
}

// The anytime answer within a node budget (second argument; 1: the root alone, 100K: the
// default limit): the best plan found and the proven bound.
void stage_aware(benchmark::State& state) {
  const stage_aware_problem& p = problem_for(state.range(0));
  stage_aware_plan plan;
  for (auto _ : state) {
    plan = best_stage_aware_checkpointing(p, {.max_nodes = state.range(1)});
    benchmark::DoNotOptimize(plan);
  }
  report(state, p, double(plan.total_layers), double(plan.nodes));
  state.counters["lower_bound"] = double(plan.lower_bound);
  state.counters["proven"] = plan.proven_optimal() ? 1 : 0;
}

// GLPK's glp_intopt on Eq. 20 with rows in GB (in bytes its presolve reports a wrong
// "optimum" on the 128K instance), presolve and all its cuts on, 60 s limit; proven = 1
// when it closed the gap.
void glpk(benchmark::State& state) {
  const stage_aware_problem& p = problem_for(state.range(0));
  double layers = -1, proven = 0;
  for (auto _ : state) {
    const int v = static_cast<int>(p.chunks.size()) + p.stages - 1;
    glp_prob* lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_cols(lp, v);
    for (int i = 1; i <= v; ++i) {
      glp_set_col_bnds(lp, i, GLP_DB, 0, p.max_layers);
      glp_set_col_kind(lp, i, GLP_IV);
      glp_set_obj_coef(lp, i, 1);
    }
    std::vector<int> ia{0}, ja{0};
    std::vector<double> ar{0};
    int row = 0;
    for (const checkpoint_window& w : stage_aware_windows(p)) {
      double kept = 0;
      glp_add_rows(lp, 1);
      ++row;
      for (const std::int64_t k : w.chunks) {
        kept += p.chunks[static_cast<std::size_t>(k)].kept_bytes;
        ia.push_back(row);
        ja.push_back(static_cast<int>(diagonal_of(p, w.stage, k)) + 1);
        ar.push_back(p.chunks[static_cast<std::size_t>(k)].freed_bytes_per_layer / 1e9);
      }
      glp_set_row_bnds(lp, row, GLP_LO, (kept - p.budget_bytes[static_cast<std::size_t>(w.stage)]) / 1e9, 0);
    }
    glp_load_matrix(lp, static_cast<int>(ia.size()) - 1, ia.data(), ja.data(), ar.data());
    glp_iocp io;
    glp_init_iocp(&io);
    io.msg_lev = GLP_MSG_OFF;
    io.presolve = GLP_ON;
    io.tm_lim = 60'000;
    io.gmi_cuts = io.mir_cuts = io.cov_cuts = io.clq_cuts = GLP_ON;
    const int rc = glp_intopt(lp, &io);
    const int status = glp_mip_status(lp);
    layers = status == GLP_OPT || status == GLP_FEAS ? glp_mip_obj_val(lp) : -1;
    proven = rc == 0 && status == GLP_OPT ? 1 : 0;
    glp_delete_prob(lp);
  }
  report(state, p, layers, 0);
  state.counters["proven"] = proven;
}

}  // namespace

BENCHMARK(stage_aware)->ArgNames({"context", "max_nodes"})->ArgsProduct({{65536, 131072}, {1, 200, 100'000}})->Unit(benchmark::kMillisecond);
BENCHMARK(glpk)->ArgName("context")->Arg(65536)->Arg(131072)->Unit(benchmark::kMillisecond)->Iterations(1);

BENCHMARK_MAIN();
