// bench/reproduce_hydraulis: the Hydraulis evaluation (strategy/) on the one step simulator
// (every iteration a step plan, strategy/iteration_step_plan.hpp, priced by
// sim/simulate_step.hpp: TP, CP, pipeline and switching traffic with the compute).
//   reproduce_hydraulis [--smoke | --quick | --full] [--iterations N] [--seed S] [--cp] [--every-op]
// Prints, beside the numbers the paper reports:
//   speedup   Hydraulis (proposal + per-iteration greedy dispatch and packing) over the best
//             homogeneous baseline (one scheme for every pipeline, Megatron-LM-like
//             fixed-length packing; the best scheme over the whole run, as the paper picks
//             its baselines' best configuration), LLaMA-2 7B / 13B / 32B shapes on A800
//             clusters, 32K context. Both are step plans with switching sync (the fp32
//             states sharded over every GPU, parameters pulled and gradients pushed as
//             mutual slices), 1F1B, no recomputation; seconds summed over the run, the
//             planner's in brackets; "switching h / b" the busiest stage's seconds with
//             switching traffic in flight, Hydraulis / baseline (the step runs a rank's pull
//             before its first block and its push after its last backward); "hidden:
//             speedup" the speedup were the switching hidden behind propagation, as
//             Hydraulis overlaps it (each iteration its slowest replica's propagation);
//   gap       1 - fastest / slowest replica of an iteration, a replica's time being its
//             propagation (its first block's start to its last block's end), mean over
//             iterations (paper: Megatron-LM 0.36-0.65, Hydraulis 0.02-0.10);
//   greedy / ideal  the iteration latency of greedy dispatch (Algorithm 1, 100 trials) over
//             exact dispatch (Eq. 3, our branch and bound) on instances small enough to
//             solve, planned and simulated (paper: 0.9-1.1 end to end);
//   switching a heterogeneous and the homogeneous candidate of 32B on 64 GPUs: the simulated
//             iteration, the seconds the busiest stage spends in switching traffic (the dp
//             class) and its bytes, the planner's per-GPU bound of the pull and the push,
//             and the overlap threshold (paper: 7.91 s homogeneous, 5.49 s heterogeneous).
// Documents: the paper publishes no histograms. "CommonCrawl-like" is the power law of
// data/power_law.hpp over [1, 32K] (short-heavy, mean ~1.9K); "GitHub-like" is Zeppelin's
// GitHub distribution (data/datasets.hpp) clamped at 32K, far heavier. Modes: --smoke (one
// configuration, 2 iterations, for ctest), --quick (8 iterations), --full (32); --cp adds
// CP 2 and 4 to every method's schemes (the authors' code leaves CP out); --every-op prices
// every block's ops in the one engine (block_pricing::every_op; default per_shape, whose
// blocks' TP and CP traffic does not contend with other blocks'); --per-port prices each
// exchange of the switching whole (exchange_pricing::per_port; default flow by flow). Planner times beside the
// paper's Table 2 are in bench/strategy_bench.cpp.
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/power_law.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/sim/step_backend.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/strategy.hpp>
#include <zeppelin/strategy/homogeneous_baseline.hpp>
#include <zeppelin/strategy/iteration_step_plan.hpp>
#include <zeppelin/strategy/switching.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace {
using namespace zeppelin;
using clock_type = std::chrono::steady_clock;

constexpr token_count context = 32768;

struct mode {
  int iterations = 8;
  std::uint64_t seed = 1;
  bool smoke = false;
  scheme_space space{};  // --cp: CP 2 and 4 as well (beyond the paper, whose code leaves CP out)
  block_pricing pricing = block_pricing::per_shape;
  exchange_pricing exchanges = exchange_pricing::per_flow;
};

struct data_kind {
  const char* name;
  length_histogram lengths;
};

struct config {
  const char* model_name;
  model_config model;
  long long gpus;
  token_count tokens_per_iteration;
};

// <TP,PP>, or <TP,PP,CP> when CP > 1
std::string scheme_name(const parallel_scheme& s) {
  return "<" + std::to_string(s.tp) + "," + std::to_string(s.pp) + (s.cp > 1 ? "," + std::to_string(s.cp) : "") + ">";
}

std::string strategy_name(const strategy& s) {
  std::string name;
  for (const strategy_part& part : s.parts) name += (name.empty() ? "" : "+") + std::to_string(part.pipelines) + scheme_name(part.profile.scheme);
  return name;
}

topology cluster(long long gpus) { return clusters::hydraulis_a800_ib(static_cast<int>(std::max<long long>(1, (gpus + 7) / 8))); }

std::vector<std::vector<token_count>> iterations_of(const length_histogram& h, token_count tokens, int count, random_generator& rng) {
  std::vector<std::vector<token_count>> out;
  for (int i = 0; i < count; ++i) out.push_back(sample_lengths(h, tokens, rng, {.max_length = context}));
  return out;
}

// One iteration on the step simulator.
struct step_figures {
  double iteration_s = 0;
  double propagation_s = 0;  // the slowest replica's propagation: the iteration were the switching hidden
  double gap = 0;            // 1 - fastest / slowest replica propagation
  double switch_s = 0;       // the busiest stage's seconds with switching (dp) traffic in flight
  double switch_bytes = 0;   // every switching transfer's bytes, idle GPUs' (owners only) included
};

step_figures simulate(const iteration_plan& plan, std::span<const token_count> lengths, const config& c, const mode& md) {
  const topology topo = cluster(c.gpus);
  const step_program prog = make_step_program(step_plan_of(plan, lengths, topo, c.model), topo, c.model, hydraulis_program_options());
  // Hydraulis' states (bf16 parameters and gradients, fp32 master and Adam sharded over every
  // GPU), as MaxLen assumes
  const step_sim_result r = simulate_step(prog, topo, sim_cost_model::for_topology(topo),
                                          {.pricing = md.pricing, .exchanges = md.exchanges, .memory = scheme_profile_options{}.memory, .keep_run = true});
  step_figures out;
  out.iteration_s = r.iteration_s;
  const auto dp = static_cast<std::size_t>(traffic_class::dp);
  for (const step_stage_report& s : r.stages) out.switch_s = std::max(out.switch_s, s.traffic_s[dp]);
  out.switch_bytes = r.traffic_bytes[dp];
  // each replica's propagation: its first block's start to its last block's end
  std::vector<double> first(prog.plan.replicas.size(), std::numeric_limits<double>::infinity()), last(prog.plan.replicas.size(), 0);
  for (std::size_t id = 0; id < r.block_of_task.size() && id < r.run.start.size(); ++id) {
    if (r.block_of_task[id] < 0 || r.run.start[id] < 0) continue;
    const auto replica = static_cast<std::size_t>(prog.blocks[static_cast<std::size_t>(r.block_of_task[id])].replica);
    first[replica] = std::min(first[replica], r.run.start[id]);
    last[replica] = std::max(last[replica], r.run.end[id]);
  }
  double fastest = std::numeric_limits<double>::infinity(), slowest = 0;
  for (std::size_t k = 0; k < first.size(); ++k) {
    fastest = std::min(fastest, last[k] - first[k]);
    slowest = std::max(slowest, last[k] - first[k]);
  }
  out.propagation_s = slowest;
  out.gap = slowest > 0 ? 1 - fastest / slowest : 0;
  return out;
}

// A run's totals: the sums of its iterations' figures.
step_figures& operator+=(step_figures& a, const step_figures& b) {
  a.iteration_s += b.iteration_s, a.propagation_s += b.propagation_s, a.gap += b.gap, a.switch_s += b.switch_s, a.switch_bytes += b.switch_bytes;
  return a;
}

void speedups(const mode& md) {
  const std::vector<data_kind> data = {{"CommonCrawl-like", power_law_lengths(context)}, {"GitHub-like", datasets::github()}};
  std::vector<config> configs = {{"7B", models::llama_7b(), 16, 100'000}, {"7B", models::llama_7b(), 32, 100'000},
                                 {"13B", models::llama_13b(), 32, 100'000}, {"32B", models::llama_32b(), 32, 100'000},
                                 {"32B", models::llama_32b(), 64, 200'000}};
  if (md.smoke) configs.resize(1);
  std::printf("\n## Speedup over the best homogeneous strategy (%d iterations, one step simulator, %s pricing, %s exchanges, A800 + IB)\n\n",
              md.iterations, std::string(to_string(md.pricing)).c_str(), std::string(to_string(md.exchanges)).c_str());
  std::printf("| %-16s | %-5s | %4s | %-26s | %-22s | %-17s | %-17s | %7s | %-15s | %-15s | %-8s | %-8s |\n", "data", "model", "GPUs",
              "Hydraulis (typical strategy)", "baseline <TP,PP> x d", "hyd. s (planned)", "base s (planned)", "speedup", "switching h / b",
              "hidden: speedup", "gap hyd.", "gap base");
  std::printf("|------------------|-------|------|----------------------------|------------------------|-------------------|-------------------|---------|"
              "-----------------|-----------------|----------|----------|\n");
  for (const data_kind& dk : data)
    for (const config& c : configs) {
      random_generator rng(md.seed);
      const auto sample = iterations_of(dk.lengths, c.tokens_per_iteration, 10, rng);
      const auto runs = iterations_of(dk.lengths, c.tokens_per_iteration, md.iterations, rng);
      std::vector<token_count> pooled;
      for (const auto& s : sample) pooled.insert(pooled.end(), s.begin(), s.end());
      const auto profiles = profile_schemes(enumerate_schemes(c.model, c.gpus, 8, md.space), c.model, gpus::a800_80g(), c.gpus);
      const auto candidates = propose_strategies(profiles, c.gpus, pooled, {.sample_iterations = 10});
      step_figures hyd;
      double hyd_planned = 0;
      std::vector<int> chosen(candidates.size(), 0);
      for (const auto& lengths : runs) {
        const iteration_plan plan = plan_iteration(candidates, lengths, greedy_dispatch{.trials = 100, .seed = md.seed}, greedy_pipeline_packing{});
        hyd += simulate(plan, lengths, c, md);
        hyd_planned += plan.seconds;
        ++chosen[plan.candidate];
      }
      // the best static homogeneous strategy over the run, on the simulator
      step_figures base{.iteration_s = std::numeric_limits<double>::infinity()};
      double base_planned = 0;
      std::string base_name = "-";
      for (const scheme_profile& p : profiles) {
        const auto d = static_cast<int>(c.gpus / p.scheme.gpus());
        if (p.max_len < context || d < 1) continue;
        step_figures total;
        double planned = 0;
        for (const auto& lengths : runs) {
          const iteration_plan plan = homogeneous_plan(p, d, lengths, context);
          total += simulate(plan, lengths, c, md);
          planned += plan.seconds;
        }
        if (total.iteration_s < base.iteration_s) {
          base = total, base_planned = planned;
          base_name = scheme_name(p.scheme) + " x " + std::to_string(d);
        }
      }
      const auto typical = static_cast<std::size_t>(std::max_element(chosen.begin(), chosen.end()) - chosen.begin());
      const double n = md.iterations;
      std::printf("| %-16s | %-5s | %4lld | %-26s | %-22s | %7.2f (%7.2f) | %7.2f (%7.2f) | %6.2fx | %7.2f / %-5.2f | %14.2fx | %8.3f | %8.3f |\n",
                  dk.name, c.model_name, c.gpus, strategy_name(candidates[typical]).c_str(), base_name.c_str(), hyd.iteration_s, hyd_planned,
                  base.iteration_s, base_planned, base.iteration_s / hyd.iteration_s, hyd.switch_s, base.switch_s,
                  base.propagation_s / hyd.propagation_s, hyd.gap / n, base.gap / n);
    }
  std::printf("\npaper: 1.32-2.66x over the best of Megatron-LM, DeepSpeed and HotSPa; max / min rank latency gap\n"
              "Megatron-LM 0.36-0.65, Hydraulis 0.02-0.10.\n");
}

void greedy_vs_ideal(const mode& md) {
  const config c{"7B", models::llama_7b(), 16, 40'000};
  const auto profiles = profile_schemes(enumerate_schemes(c.model, c.gpus, 8), c.model, gpus::a800_80g(), c.gpus);
  random_generator rng(md.seed);
  const length_histogram h = power_law_lengths(context);
  const auto sample = iterations_of(h, c.tokens_per_iteration, 10, rng);
  std::vector<token_count> pooled;
  for (const auto& s : sample) pooled.insert(pooled.end(), s.begin(), s.end());
  const auto candidates = propose_strategies(profiles, c.gpus, pooled, {.sample_iterations = 10});
  double planned = 0, simulated = 0, lo = std::numeric_limits<double>::infinity(), hi = 0;
  int solved = 0, tried = 0;
  const int wanted = md.smoke ? 2 : md.iterations;
  for (int it = 0; it < 4 * wanted && solved < wanted; ++it) {
    // an iteration small enough for the exact dispatch: at most 14 sequences
    std::vector<token_count> lengths = sample_lengths(h, c.tokens_per_iteration, rng, {.max_length = context});
    if (lengths.size() > 14) lengths.resize(14);
    ++tried;
    const iteration_plan greedy = plan_iteration(candidates, lengths, greedy_dispatch{.trials = 100, .seed = md.seed}, greedy_pipeline_packing{});
    try {
      const iteration_plan ideal =
          plan_with(candidates[greedy.candidate], lengths, exact_dispatch{.node_limit = 5'000'000}, greedy_pipeline_packing{});
      const double ratio = simulate(greedy, lengths, c, md).iteration_s / simulate(ideal, lengths, c, md).iteration_s;
      planned += greedy.seconds / ideal.seconds;
      simulated += ratio;
      lo = std::min(lo, ratio), hi = std::max(hi, ratio);
      ++solved;
    } catch (const resource_limit&) {
    }
  }
  std::printf("\n## Greedy / ideal dispatch (7B, 16 GPUs, <= 14 sequences per iteration, the greedy plan's strategy)\n\n");
  if (solved == 0) {
    std::printf("no instance solved exactly within the node limit (%d tried)\n", tried);
    return;
  }
  std::printf("solved %d of %d; greedy / ideal: planned %.3f, simulated %.3f (range %.3f - %.3f); paper: 0.9-1.1\n", solved, tried,
              planned / solved, simulated / solved, lo, hi);
}

void switching(const mode& md) {
  const config c{"32B", models::llama_32b(), 64, 200'000};
  const auto profiles = profile_schemes(enumerate_schemes(c.model, c.gpus, 8), c.model, gpus::a800_80g(), c.gpus);
  random_generator rng(md.seed);
  const length_histogram h = power_law_lengths(context);
  const auto sample = iterations_of(h, c.tokens_per_iteration, 10, rng);
  std::vector<token_count> pooled;
  for (const auto& s : sample) pooled.insert(pooled.end(), s.begin(), s.end());
  const auto candidates = propose_strategies(profiles, c.gpus, pooled, {.sample_iterations = 10});
  const auto runs = iterations_of(h, c.tokens_per_iteration, md.smoke ? 1 : std::min(md.iterations, 8), rng);
  const topology topo = cluster(c.gpus);
  std::printf("\n## Switching (section 5): 32B on 64 GPUs, CommonCrawl-like, each strategy fixed for the run (mean per iteration)\n\n");
  std::printf("| %-28s | %10s | %11s | %8s | %10s | %10s | %9s | %9s | %s\n", "strategy", "iteration s", "switching s", "GB moved",
              "pull bound", "push bound", "segments", "copies D", "overlap needs tokens per micro-batch");
  std::printf("|------------------------------|------------|-------------|----------|------------|------------|-----------|-----------|------|\n");
  // a heterogeneous candidate (the one for the longest cells that mixes schemes) and the homogeneous one
  const auto mixed = std::find_if(candidates.rbegin(), candidates.rend(), [](const strategy& s) { return s.parts.size() > 1; });
  for (const strategy& s : {mixed != candidates.rend() ? *mixed : candidates.front(), candidates.back()}) {
    const switching_plan plan = make_switching_plan(s, c.gpus, c.model);
    std::vector<slice_transfer> push = plan.push_reduce;
    push.insert(push.end(), plan.push_link.begin(), plan.push_link.end());
    std::string need;
    for (const strategy_part& part : s.parts)
      need += (need.empty() ? "" : ", ") + std::to_string(static_cast<long long>(overlap_tokens(part.profile.scheme, topo.gpu(), topo.nic_link().bandwidth)));
    step_figures mean;
    int held = 0;
    for (const auto& lengths : runs) {
      const strategy one[] = {s};
      iteration_plan plan_s;
      try {
        plan_s = plan_iteration(std::span<const strategy>(one), lengths, greedy_dispatch{.trials = 100, .seed = md.seed}, greedy_pipeline_packing{});
      } catch (const infeasible&) {
        continue;  // the strategy holds no pipeline for the iteration's longest sequence
      }
      mean += simulate(plan_s, lengths, c, md);
      ++held;
    }
    const double n = std::max(1, held);
    std::printf("| %-28s | %10.3f | %11.3f | %8.1f | %10.3f | %10.3f | %9lld | %9d | %s (%d of %zu iterations held)\n", strategy_name(s).c_str(),
                mean.iteration_s / n, mean.switch_s / n, mean.switch_bytes / n / 1e9, switching_seconds(plan.pull, topo), switching_seconds(push, topo),
                static_cast<long long>(plan.pull_segments), plan.copies, need.c_str(), held, runs.size());
  }
  std::printf("\npaper (32B, CommonCrawl, 64 GPUs): end-to-end 7.91 s with the homogeneous switch, 5.49 s heterogeneous with overlap.\n");
}

}  // namespace

int main(int argc, char** argv) {
  mode md;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--smoke")) md.smoke = true, md.iterations = 2;
    else if (!std::strcmp(argv[i], "--quick")) md.iterations = 8;
    else if (!std::strcmp(argv[i], "--full")) md.iterations = 32;
    else if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) md.iterations = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) md.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--cp")) md.space.cp = {1, 2, 4};
    else if (!std::strcmp(argv[i], "--every-op")) md.pricing = block_pricing::every_op;
    else if (!std::strcmp(argv[i], "--per-port")) md.exchanges = exchange_pricing::per_port;
    else {
      std::fprintf(stderr, "usage: reproduce_hydraulis [--smoke | --quick | --full] [--iterations N] [--seed S] [--cp] [--every-op] [--per-port]\n");
      return 2;
    }
  }
  try {
    std::printf("# Hydraulis reproduction (seed %llu)\n", static_cast<unsigned long long>(md.seed));
    const auto t0 = clock_type::now();
    speedups(md);
    greedy_vs_ideal(md);
    switching(md);
    std::printf("\n(%.1f s)\n", std::chrono::duration<double>(clock_type::now() - t0).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reproduce_hydraulis: %s\n", e.what());
    return 1;
  }
  return 0;
}
