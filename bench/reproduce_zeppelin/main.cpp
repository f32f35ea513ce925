// bench/reproduce_zeppelin: the Zeppelin evaluation (EuroSys '26) on the step simulator.
//   reproduce_zeppelin [--smoke | --quick | --full] [--seeds N] [--slack S] [--no-contention] [--per-group]
// Prints, beside the numbers the paper reports, our simulated:
//   Fig. 8   speedup over TE CP of LLaMA CP, Hybrid DP, Zeppelin as published
//            (zeppelin_paper) and the library's cost-driven planner (zeppelin): 7B (clusters A, C),
//            13B (A, TP 2), 30B (C, TP 2), 8x550M (A, C) x ArXiv / GitHub / ProLong64k x
//            64K / 128K / 256K tokens at 4K per GPU (16 / 32 / 64 GPUs);
//   Fig. 9   throughput of every method, 3B on cluster A, 16 / 32 / 64 GPUs;
//   Fig. 11  the ablation, 3B, 32 GPUs, cluster A: TE CP, + routing, + partitioner and
//            engine, + remapping;
//   Fig. 12  the case study, 3B, 16 GPUs, 64K: per-round transfer and compute times.
// Modes: --smoke (a few configurations, for ctest), --quick (2 seeds, ~10 s in a Release
// build), --full (8 seeds); --seeds N overrides. --slack S plans with S x 4K tokens of
// headroom per GPU (default: method_setup's), --no-contention turns the SM contention model
// (sim/sm_contention.hpp) off to show what it moves, --per-group makes every method launch
// one attention kernel per ring group and round (sim_options::launch; by default Zeppelin's
// engine fuses round k of all the rings of a queue into one launch per GPU, planner/methods.hpp)
// to show what fusing moves. Nothing is fitted to the paper: the
// constants are those of core/topology_presets.hpp, cost/ and sim/sm_contention.hpp (public
// sources named there).
#include <zeppelin/planner.hpp>
#include <zeppelin/sim.hpp>
#include <zeppelin/zeppelin.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {
using namespace zeppelin;

struct mode {
  bool smoke = false;
  int seeds = 1;
};

method_setup g_setup;  // slack and contention from the command line

int paper_tp(const std::string& cluster, const std::string& model) {
  return (cluster == "a" && model == "13b") || (cluster == "c" && model == "30b") ? 2 : 1;
}

method_setup setup_for(const topology& t, int tp) {
  method_setup s = g_setup;
  s.tensor_parallel = tp;
  if (g_setup.cost) {  // the contention switch on the cost model of this topology's CP view
    sim_cost_model c = sim_cost_model::for_topology(tensor_parallel_view(t, tp));
    c.contention = g_setup.cost->contention;
    s.cost = c;
  }
  return s;
}

double step(const std::string& method, const batch& b, const topology& t, const model_config& m, int tp) {
  const method_setup s = setup_for(t, tp);
  return run_method(method, b, t, m, s).result.step_time_s;
}

void fig8(const mode& md) {
  std::printf("== Fig. 8: end-to-end speedup over TE CP (paper: Zeppelin average 2.80x, up to 6.60x) ==\n");
  std::printf("%-8s %-2s %-3s %-11s %5s %9s %9s %9s %9s %9s\n", "model", "cl", "tp", "dataset", "ctx", "te_cp s", "llama_cp",
              "hybrid_dp", "zep_paper", "zeppelin");
  struct cfg {
    const char* model;
    const char* cluster;
  };
  std::vector<cfg> cfgs = {{"7b", "a"}, {"7b", "c"}, {"13b", "a"}, {"30b", "c"}, {"8x550m", "a"}, {"8x550m", "c"}};
  std::vector<const char*> data = {"arxiv", "github", "prolong64k"};
  std::vector<int> contexts = {64, 128, 256};
  if (md.smoke) cfgs = {{"7b", "c"}}, data = {"github"}, contexts = {64};
  double sum = 0, best = 0, planner_sum = 0, planner_best = 0;
  int n = 0;
  for (const cfg& c : cfgs)
    for (const char* d : data)
      for (const int k : contexts) {
        const int nodes = k * 1024 / 4096 / 8;
        const topology t = cluster_by_name(c.cluster, nodes);
        const model_config m = model_by_name(c.model);
        const int tp = paper_tp(c.cluster, c.model);
        double te = 0, sp[4] = {0, 0, 0, 0};
        for (int seed = 1; seed <= md.seeds; ++seed) {
          const batch b = sample_batch(dataset_by_name(d), static_cast<token_count>(k) * 1024, static_cast<std::uint64_t>(seed));
          const double base = step("te_cp", b, t, m, tp);
          te += base / md.seeds;
          const char* others[] = {"llama_cp", "hybrid_dp", "zeppelin_paper", "zeppelin"};
          for (int i = 0; i < 4; ++i) sp[i] += base / step(others[i], b, t, m, tp) / md.seeds;
        }
        std::printf("%-8s %-2s %-3d %-11s %4dK %9.3f %8.2fx %8.2fx %8.2fx %8.2fx\n", c.model, c.cluster, tp, d, k, te, sp[0], sp[1],
                    sp[2], sp[3]);
        sum += sp[2];
        best = std::max(best, sp[2]);
        planner_sum += sp[3];
        planner_best = std::max(planner_best, sp[3]);
        ++n;
      }
  std::printf("Zeppelin (as published) over TE CP: average %.2fx (paper 2.80x), max %.2fx (paper 6.60x)\n", sum / n, best);
  std::printf("zeppelin (cost-driven planner, which also considers Ulysses) over TE CP: average %.2fx, max %.2fx\n\n",
              planner_sum / n, planner_best);
}

void fig9(const mode& md) {
  std::printf("== Fig. 9: scalability, 3B on cluster A, 4K tokens per GPU (tokens/s; paper: TE CP flat, LLaMA CP better,\n"
              "   Hybrid DP not above LLaMA CP at 16-32 GPUs, Zeppelin best) ==\n");
  std::printf("%-11s %5s %10s %10s %10s %10s %10s\n", "dataset", "GPUs", "te_cp", "llama_cp", "hybrid_dp", "zep_paper", "zeppelin");
  const model_config m = models::llama_3b();
  std::vector<const char*> data = {"arxiv", "github", "prolong64k"};
  std::vector<int> gpus = {16, 32, 64};
  if (md.smoke) data = {"arxiv"}, gpus = {16};
  for (const char* d : data)
    for (const int g : gpus) {
      const topology t = clusters::cluster_a(g / 8);
      double tps[5] = {0, 0, 0, 0, 0};
      const char* names[] = {"te_cp", "llama_cp", "hybrid_dp", "zeppelin_paper", "zeppelin"};
      for (int seed = 1; seed <= md.seeds; ++seed) {
        const batch b = sample_batch(dataset_by_name(d), static_cast<token_count>(g) * 4096, static_cast<std::uint64_t>(seed));
        for (int i = 0; i < 5; ++i) tps[i] += static_cast<double>(b.total_tokens()) / step(names[i], b, t, m, 1) / md.seeds;
      }
      std::printf("%-11s %5d %10.0f %10.0f %10.0f %10.0f %10.0f\n", d, g, tps[0], tps[1], tps[2], tps[3], tps[4]);
    }
  std::printf("\n");
}

void fig11(const mode& md) {
  std::printf("== Fig. 11: ablation, 3B, 32 GPUs, cluster A (speedup over TE CP) ==\n");
  std::printf("%-11s %14s %22s %14s   %s\n", "dataset", "te_cp+routing", "te_cp+routing+engine", "zeppelin_paper", "paper");
  const model_config m = models::llama_3b();
  const topology t = clusters::cluster_a(4);
  std::vector<const char*> data = {"arxiv", "github", "prolong64k"};
  if (md.smoke) data = {"github"};
  for (const char* d : data) {
    double sp[3] = {0, 0, 0};
    for (int seed = 1; seed <= md.seeds; ++seed) {
      const batch b = sample_batch(dataset_by_name(d), 32 * 4096, static_cast<std::uint64_t>(seed));
      const double base = step("te_cp", b, t, m, 1);
      const char* names[] = {"te_cp+routing", "te_cp+routing+engine", "zeppelin_paper"};
      for (int i = 0; i < 3; ++i) sp[i] += base / step(names[i], b, t, m, 1) / md.seeds;
    }
    const char* paper = std::strcmp(d, "arxiv") == 0 ? "~1.6x / up to 3.2x (3.51x with routing) / 3.64x"
                                                     : "~1.6x / - / remap adds little on GitHub";
    std::printf("%-11s %13.2fx %21.2fx %13.2fx   %s\n", d, sp[0], sp[1], sp[2], paper);
  }
  std::printf("\n");
}

// Mean duration of the forward phase's inter-node K/V transfers (per route leg), of a
// round's whole node-crossing communication (first leg of an inter-node edge to its last:
// dispatch -> transfer -> combine when routed) and of a GPU's attention per ring round (the
// launches of one rank, level and round summed: a fused launch covers all its rings of that
// level), from a recorded trace (first simulated layer).
struct round_figures {
  double transfer_s = 0, crossing_s = 0, compute_s = 0;
  int rounds = 0;
};
round_figures figures(const sim_result& r, flow_leg leg) {
  round_figures f;
  const engine_run& run = r.trace.front().run;  // forward mb0
  double tsum = 0, csum = 0;
  int tn = 0, cn = 0, rounds = 0;
  std::map<int, std::pair<double, double>> span;  // round -> first start, last end of its crossing legs
  for (const flow_record& x : run.flows) {
    const task_tag& g = run.tags[static_cast<std::size_t>(x.task)];
    if (g.kind != task_kind::kv || g.layer != 0) continue;
    if (x.link == link_class::inter_node && g.leg == leg) tsum += x.end - x.start, ++tn;
    if (x.link == link_class::inter_node || g.leg != flow_leg::direct) {
      auto [it, fresh] = span.try_emplace(g.round, x.start, x.end);
      if (!fresh) it->second = {std::min(it->second.first, x.start), std::max(it->second.second, x.end)};
    }
  }
  for (const auto& [round, se] : span) f.crossing_s += (se.second - se.first) / static_cast<double>(span.size());
  // a GPU's round may take several launches (a CSR launch cannot hold a query row twice):
  // sum them per (rank, level, round), then average over those
  std::map<std::tuple<rank_index, int, int>, double> per_round;
  for (const compute_segment& s : run.segments) {
    const task_tag& g = run.tags[static_cast<std::size_t>(s.task)];
    if (g.kind != task_kind::attention_forward || g.group < 0) continue;
    per_round[{s.rank, g.group, g.round}] += s.end - s.start;
    rounds = std::max(rounds, g.round + 1);
  }
  for (const auto& [key, seconds] : per_round) csum += seconds, ++cn;
  f.transfer_s = tn ? tsum / tn : 0;
  f.compute_s = cn ? csum / cn : 0;
  f.rounds = rounds;
  return f;
}

void fig12() {
  std::printf("== Fig. 12: case study, 3B, 16 GPUs of cluster A, 64K tokens (one layer, forward) ==\n");
  const model_config m = models::llama_3b();
  const topology t = clusters::cluster_a(2);
  method_setup s = setup_for(t, 1);
  s.record_trace = true;
  const batch one({64 * 1024});
  const method_run te = run_method("te_cp", one, t, m, s);
  const method_run ze = run_method("zeppelin_paper", one, t, m, s);
  const round_figures a = figures(te.result, flow_leg::direct), b = figures(ze.result, flow_leg::transfer);
  std::printf("TE CP, one 64K sequence: inter-node K/V transfer %.3f ms per round (paper 2.18 ms), attention %.3f ms per round "
              "(paper 4.41 ms), %d rounds -> %.2f ms (paper 16 x (2.18 + 4.41) = 105.44 ms)\n",
              a.transfer_s * 1e3, a.compute_s * 1e3, a.rounds, a.rounds * (a.transfer_s + a.compute_s) * 1e3);
  std::printf("Zeppelin, one 64K sequence, routed: per-NIC transfer leg %.3f ms (paper 411 us), a round's node crossing "
              "(dispatch -> combine) %.3f ms (paper 1.3 ms), attention %.3f ms per round\n",
              b.transfer_s * 1e3, b.crossing_s * 1e3, b.compute_s * 1e3);
  const batch many = sample_batch(datasets::arxiv(), 64 * 1024, 1);
  const method_run zm = run_method("zeppelin_paper", many, t, m, s);
  const round_figures c = figures(zm.result, flow_leg::direct);
  std::printf("Zeppelin, ArXiv 64K (%d sequences): ring rounds per layer %d, attention %.3f ms per GPU and round "
              "(paper 8 x (738 us + 1.95 ms) = 21.5 ms)\n\n",
              many.size(), c.rounds, c.compute_s * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  mode md;
  md.seeds = 0;  // 0: the mode's default
  bool full = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--smoke")) md.smoke = true;
    else if (!std::strcmp(argv[i], "--quick")) full = false;
    else if (!std::strcmp(argv[i], "--full")) full = true;
    else if (!std::strcmp(argv[i], "--seeds") && i + 1 < argc) md.seeds = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--slack") && i + 1 < argc) g_setup.capacity_slack = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--per-group")) g_setup.launch = launch_policy::per_group;
    else if (!std::strcmp(argv[i], "--no-contention")) {
      sim_cost_model c;
      c.contention.enabled = false;
      g_setup.cost = c;
    } else {
      std::fprintf(stderr,
                   "usage: reproduce_zeppelin [--smoke | --quick | --full] [--seeds N] [--slack S] [--no-contention] [--per-group]\n");
      return 2;
    }
  }
  if (md.seeds == 0) md.seeds = md.smoke ? 1 : full ? 8 : 2;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    fig8(md);
    fig9(md);
    fig11(md);
    fig12();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reproduce_zeppelin: %s\n", e.what());
    return 1;
  }
  std::printf("(%s, %d seed(s), capacity slack %.4g, SM contention %s, launches %s, %.1f s)\n",
              md.smoke ? "smoke" : full ? "full" : "quick", md.seeds, g_setup.capacity_slack, g_setup.cost ? "off" : "on", g_setup.launch ? "per group" : "the methods'",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
