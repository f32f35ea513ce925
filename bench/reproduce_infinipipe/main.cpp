// bench/reproduce_infinipipe: the InfiniPipe evaluation (pack/elastic_pipeline.hpp, its step
// plans priced by the step simulator: pack/infinipipe_methods.hpp) beside the paper's numbers.
//   reproduce_infinipipe [--smoke | --quick | --full] [--seed S]
// Prints:
//   Table 3   a 13B Ulysses step of one sequence (batch 1) at SP 8, 16, 32 (one, two, four
//             nodes of A800 + 400 Gb/s InfiniBand, clusters::infinipipe_a800_ib: one 400 Gb/s
//             port per node): its simulated time and the share of it during which CP traffic
//             (the all-to-alls; with 40 heads, SP 16 and 32 run Ulysses 8 x ring) is in
//             flight; a step plan of one replica (TP 1, CP = SP, PP 1, ulysses layout, ZeRO-3
//             over the group, no recomputation) on the step simulator;
//   Table 2   relative standard deviation (RSD) of the chunks' backward time and length for
//             the sequence processor on a GitHub-like global batch (the chunk cost model the
//             planner balances; paper, balancing time and length: 6.2 % / 5.5 %);
//   speedup   InfiniPipe (sequence processor, grouping, stage-aware checkpointing) over its
//             baselines, every method's step plans (pack/elastic_step_plan.hpp,
//             pack/flexsp_step_plan.hpp) simulated by the one step simulator: all-to-alls,
//             K/V context of slices, pipeline sends and ZeRO-3's per-layer gathers and
//             reduce-scatters as flows on the links; 32 GPUs, GPT 7B / 13B / 30B:
//             Seq1F1B-like (fixed 16K chunks through SP 8 x PP 4; paper: up to 1.27x at 48K,
//             1.40x at 96K context), Megatron-like (sequences packed whole into micro-batches
//             of the context through the same SP x PP; paper: up to 2.60x over Megatron-LM),
//             DeepSpeed-Ulysses-like (the same packing, Ulysses over all 32 GPUs, ZeRO-3 over
//             all of them, no pipeline; paper: up to 2.07x) (pack/fixed_chunk_pipeline.hpp,
//             each with the least uniform recompute that fits), and FlexSP-like
//             (pack/flexsp_assignment.hpp: per-sequence Ulysses groups per micro-batch, the
//             groups of a micro-batch one step plan; paper: up to 1.69x).
// Documents: "GitHub-like" is Zeppelin's GitHub distribution (data/datasets.hpp) clamped at
// the context; the paper's GitHub set has 91.5 % of sequences <= 8K and 0.6 % >= 64K.
// Modes: --smoke (one model, 24 sequences, for ctest), --quick (128 sequences), --full (512,
// the paper's global batch).
#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/pack/chunk_order.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/elastic_step_plan.hpp>
#include <zeppelin/pack/infinipipe_methods.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/partition/ulysses.hpp>
#include <zeppelin/step/make_plan.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

namespace {
using namespace zeppelin;
using clock_type = std::chrono::steady_clock;

struct mode {
  int sequences = 128;
  std::uint64_t seed = 1;
  bool smoke = false;
};

constexpr int sp_degree = 8, pp_degree = 4;
constexpr double usable_bytes = 72.0 * (1ull << 30);  // an A800's 80 GB less 8 GiB for the framework

std::vector<token_count> github_batch(int sequences, token_count context, std::uint64_t seed) {
  random_generator rng(seed);
  const length_histogram h = datasets::github();
  std::vector<token_count> out(static_cast<std::size_t>(sequences));
  for (token_count& l : out) l = std::min(context, h.sample(rng));
  return out;
}

// One sequence of `length` tokens on `sp` GPUs: one replica, TP 1, CP sp, PP 1, no recomputation.
sequence_step_plan one_sequence_step(const topology& topo, const model_config& m, int sp, token_count length) {
  std::vector<rank_index> ranks(static_cast<std::size_t>(sp));
  for (int c = 0; c < sp; ++c) ranks[static_cast<std::size_t>(c)] = c;
  step_plan p{topo.nodes(), topo.gpus_per_node(), {length}, {}, gradient_sync::fully_sharded};
  p.replicas.push_back(make_replica(topo, m, 1, sp, 1, std::move(ranks), tp_collectives::all_reduce, any_pipeline_schedule{one_f_one_b{}},
                                    {{{0, 0, length}}}, ulysses{.capacity = length, .cp_size = 0}, no_recompute{}));
  return {std::move(p), {0}};
}

void table3() {
  std::printf("\n## Table 3: all-to-all share of a 13B Ulysses step (batch 1), ours (paper)\n");
  std::printf("| SP | 32K | 48K | 72K | 108K | 162K |\n|---|---|---|---|---|---|\n");
  const model_config m = models::gpt_13b();
  const token_count lengths[] = {32768, 49152, 73728, 110592, 165888};
  const double paper_s[3][5] = {{1.128, 2.101, 4.202, 8.793, 18.922}, {1.188, 1.936, 3.378, 6.262, 12.207}, {0.854, 1.307, 2.147, 3.766, 7.005}};
  const double paper_share[3][5] = {{7.4, 5.9, 4.5, 3.2, 2.2}, {47.5, 43.7, 37.6, 30.4, 23.4}, {51.5, 50.5, 46.1, 39.4, 31.8}};
  const int degrees[] = {8, 16, 32};
  for (int d = 0; d < 3; ++d) {
    const topology topo = clusters::infinipipe_a800_ib(std::max(1, degrees[d] / 8));
    std::printf("| %d |", degrees[d]);
    for (int l = 0; l < 5; ++l) {
      const sequence_step_plan step = one_sequence_step(topo, m, degrees[d], lengths[l]);
      const back_to_back_result r = simulate_back_to_back(std::span<const sequence_step_plan>(&step, 1), topo, m);
      const double total = r.iteration_s, a2a = r.parts.front().stages.front().traffic_s[static_cast<std::size_t>(traffic_class::cp)];
      std::printf(" %.2f s, %.1f %% (%.2f s, %.1f %%) |", total, 100 * a2a / total, paper_s[d][l], paper_share[d][l]);
    }
    std::printf("\n");
  }
}

double rsd(const std::vector<double>& v) {
  double mean = 0, var = 0;
  for (const double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (const double x : v) var += (x - mean) * (x - mean);
  return std::sqrt(var / static_cast<double>(v.size())) / mean;
}

void table2(const mode& md) {
  std::printf("\n## Table 2: RSD of chunk backward time and chunk length (GitHub-like, 128K context, %d sequences, GPT-13B, SP 8 x PP 4)\n",
              md.sequences);
  const std::vector<token_count> lengths = github_batch(md.sequences, 131072, md.seed);
  const elastic_pipeline_options o =
      elastic_pipeline_options::for_model(models::gpt_13b(), clusters::infinipipe_a800_ib(pp_degree), sp_degree, pp_degree, usable_bytes);
  const elastic_plan plan = plan_elastic_pipeline(lengths, o);
  std::printf("| | time RSD | length RSD |\n|---|---|---|\n");
  for (const int n : {2, 4, 8, static_cast<int>(plan.chunks.mesh.size())}) {
    const chunking c = o.processor.process(lengths, n);
    std::vector<double> time, length;
    for (const chunk& k : c.chunks) {
      time.push_back(o.processor.cost.seconds(o.processor.cost.backward, k));
      length.push_back(static_cast<double>(k.tokens()));
    }
    std::printf("| sequence processor, %d slices (%zu chunks)%s | %.1f %% | %.1f %% |\n", n, c.chunks.size(),
                n == static_cast<int>(plan.chunks.mesh.size()) ? ", the planner's choice" : "", 100 * rsd(time), 100 * rsd(length));
  }
  std::printf("| paper, balancing time and length | 6.2 %% | 5.5 %% |\n| paper, balancing time only | 5.9 %% | 35.2 %% |\n");
}

void speedups(const mode& md) {
  std::printf("\n## Speedup over the Seq1F1B-like baseline (GitHub-like, %d sequences, 32 GPUs: SP 8 x PP 4, simulated)\n", md.sequences);
  std::printf("| model | context | InfiniPipe s (planned) | pipelines | slices | Seq1F1B-like s | speedup | DeepSpeed-Ulysses-like s | speedup "
              "| Megatron-like s | speedup | FlexSP-like s | speedup |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  const topology topo = clusters::infinipipe_a800_ib(pp_degree);
  const std::vector<model_config> models_run = md.smoke ? std::vector<model_config>{models::gpt_7b()}
                                                        : std::vector<model_config>{models::gpt_7b(), models::gpt_13b(), models::gpt_30b()};
  const token_count contexts[] = {49152, 98304};
  for (const model_config& m : models_run)
    for (const token_count context : contexts) {
      if (md.smoke && context != 98304) continue;
      const std::vector<token_count> lengths = github_batch(md.sequences, context, md.seed);
      elastic_pipeline_options o =
          elastic_pipeline_options::for_model(m, topo, sp_degree, pp_degree, usable_bytes);
      if (md.smoke) o.processor.max_slices = 4;
      const elastic_plan plan = plan_elastic_pipeline(lengths, o);
      const double ours = simulate_back_to_back(elastic_step_plans(plan, lengths, m, o, topo), topo, m).iteration_s;
      const infinipipe_setting setting{.sp_degree = sp_degree, .pp_degree = pp_degree, .usable_bytes = usable_bytes, .fixed_chunk_tokens = 16384,
                                       .context = context};
      const auto baseline = [&](infinipipe_method method) { return simulate_infinipipe_method(method, lengths, m, topo, setting); };
      const double base = baseline(infinipipe_method::seq1f1b_like);
      const double deepspeed = baseline(infinipipe_method::deepspeed_like);
      const double megatron = baseline(infinipipe_method::megatron_like);
      const double flexsp = baseline(infinipipe_method::flexsp_like);
      std::printf("| %s | %lldK | %.2f (%.2f) | %zu | %zu | %.2f | %.2fx | %.2f | %.2fx | %.2f | %.2fx | %.2f | %.2fx |\n", m.name.c_str(),
                  static_cast<long long>(context / 1024), ours, plan.seconds, plan.pipelines.size(), plan.chunks.mesh.size(), base, base / ours,
                  deepspeed, deepspeed / ours, megatron, megatron / ours, flexsp, flexsp / ours);
    }
  std::printf("paper: up to 1.27x (48K) and 1.40x (96K) over Seq1F1B; 1.69x over FlexSP, 2.07x over DeepSpeed-Ulysses, 2.60x over Megatron-LM\n");
}

}  // namespace

int main(int argc, char** argv) {
  mode md;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--smoke")) md.smoke = true, md.sequences = 24;
    else if (!std::strcmp(argv[i], "--quick")) md.sequences = 128;
    else if (!std::strcmp(argv[i], "--full")) md.sequences = 512;
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) md.seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: reproduce_infinipipe [--smoke | --quick | --full] [--seed S]\n");
      return 2;
    }
  }
  try {
    std::printf("# InfiniPipe reproduction (seed %llu)\n", static_cast<unsigned long long>(md.seed));
    const auto t0 = clock_type::now();
    table3();
    table2(md);
    speedups(md);
    std::printf("\n(%.1f s)\n", std::chrono::duration<double>(clock_type::now() - t0).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reproduce_infinipipe: %s\n", e.what());
    return 1;
  }
  return 0;
}
