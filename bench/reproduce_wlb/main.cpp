// bench/reproduce_wlb: the WLB-LLM evaluation (OSDI '25) on the packers and the one step
// simulator (every iteration a step plan: TP, CP, PP and DP traffic priced with the compute).
//   reproduce_wlb [--smoke | --quick | --full] [--iterations N] [--seed S]
// Prints, beside the numbers the paper reports, ours:
//   Table 2   7B-128K (TP 8, CP 2, PP 4, DP 1: N = 4 micro-batches of the 128K context per
//             iteration): imbalance degree (Max_Latency x PP / Total_Latency of the
//             forward, section 6.4) and packing time per global batch of original packing,
//             fixed-length greedy over 1 / 2 / 4 / 8 global batches, the fixed-length solver
//             (Eq. 1, our branch and bound with a node limit) over 1 / 2 / 4, and WLB-LLM
//             with 1 / 2 / 3 outlier queues;
//   ablation  7B-128K step time of Plain-4D and of each technique alone, all together, and
//             Fixed-4D (pack/packing_methods.hpp), as speedups over Plain-4D;
//   configs   every (model, context) of Table 1 with its (TP, CP, PP, DP): WLB-LLM's
//             speedup over Plain-4D and Fixed-4D (--quick: the 7B and 550M rows).
// Documents: the paper's data is internal and unpublished ("majority short, some extremely
// long, the longest reaching the context window", Fig. 3). We draw lengths from the power
// law of data/power_law.hpp over [1, context]: document shares halve per doubling of length
// (density ~ 1/d^2), so every octave from 1K to the context holds the same number of
// tokens: half the documents are under 1K tokens, one in 256 is over C/2. The same seeded
// stream feeds every method.
// Modes: --smoke (a few iterations, for ctest), --quick (64 iterations, ~1 min in a
// Release build), --full (512 iterations); --iterations overrides. Nothing is fitted to the
// paper: the workload and step times come from cost/ (LLaMA shapes, H100 tables) and the
// topology from core/topology_presets.hpp (wlb_h100_roce).
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/power_law.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/pack.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/pack/packed_stream.hpp>
#include <zeppelin/pack/packing_methods.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

namespace {
using namespace zeppelin;
using clock_type = std::chrono::steady_clock;

struct mode {
  std::int64_t iterations = 64;
  std::uint64_t seed = 1;
  bool smoke = false;
  bool all_configs = false;
};

std::vector<token_count> stream(token_count context, int n, const mode& md) {
  return sample_lengths(power_law_lengths(context), md.iterations * n * context, md.seed, {.max_length = context});
}

struct wlb_config {
  const char* name;
  model_config model;
  token_count context;
  parallel_layout layout;  // tp, cp, pp, dp
};

// WLB-LLM's 30B: "the other models retain the [LLaMA-2-7B] architecture while proportionally
// adjusting the number of layers and model dimension size" (section 6.1). LLaMA-30B's 52 heads
// do not split over its TP 8, so: 48 layers of width 7168 (56 heads of 128), FFN 19200,
// 29.7B parameters.
model_config wlb_30b() { return {"wlb-30b", 48, 7168, 56, 56, 128, 19200, 32000, true, 0, 0, 2}; }

std::vector<wlb_config> configs(bool all) {
  std::vector<wlb_config> out = {
      {"550M-64K", models::llama_550m(), 65536, {2, 2, 4, 2}},
      {"550M-128K", models::llama_550m(), 131072, {2, 4, 4, 1}},
      {"7B-64K", models::llama_7b(), 65536, {4, 2, 4, 1}},
      {"7B-128K", models::llama_7b(), 131072, {8, 2, 4, 1}},
  };
  if (all) {
    out.push_back({"30B-64K", wlb_30b(), 65536, {8, 2, 4, 1}});
    out.push_back({"30B-128K", wlb_30b(), 131072, {8, 4, 4, 1}});
    out.push_back({"70B-128K", models::llama_70b(), 131072, {16, 4, 4, 1}});
  }
  return out;
}

packing_target target_of(const wlb_config& c) { return {c.model, gpus::h100_sxm(), c.layout}; }

topology topology_of(const parallel_layout& l) { return clusters::wlb_h100_roce(std::max<long long>(1, (l.gpus() + 7) / 8)); }

// ---------------------------------------------------------------- Table 2

struct packing_row {
  double imbalance = 1;      // mean over iterations with documents of max / mean W
  double attention = 1;      // the same of sum d^2
  double ms_per_batch = 0;   // packing time per global batch
  double delay = 0;          // token-weighted mean delay, iterations
  std::string note;
};

double mean_attention_imbalance(std::span<const packed_iteration> its, std::span<const token_count> lengths) {
  double sum = 0;
  int counted = 0;
  for (const packed_iteration& it : its) {
    const bool any = std::any_of(it.micro_batches.begin(), it.micro_batches.end(), [](const auto& mb) { return !mb.documents.empty(); });
    if (!any) continue;
    sum += attention_imbalance(it, lengths);
    ++counted;
  }
  return counted > 0 ? sum / counted : 1.0;
}

template <packer P>
packing_row run_packer(const P& p, std::span<const token_count> lengths, const packing_limits& limits, token_count per_iteration) {
  const auto t0 = clock_type::now();
  const packing_run run = pack_stream(p, lengths, limits, {.tokens_per_iteration = per_iteration});
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  const auto arrivals = static_cast<std::size_t>(run.arrived_in.back() + 1);
  const std::span<const packed_iteration> steady(run.iterations.data(), std::min(arrivals, run.iterations.size()));
  return {mean_workload_imbalance(steady), mean_attention_imbalance(steady, lengths), 1e3 * seconds / double(arrivals),
          mean_token_delay(run, lengths), ""};
}

// The fixed-length solver over `window` global batches: Eq. 1 on window x N micro-batches,
// best within the node limit (an ILP solver with a time limit returns its incumbent too).
packing_row run_solver(std::span<const token_count> lengths, int n, token_count context, int window, std::int64_t node_limit,
                       const document_workload& workload, int max_windows) {
  const auto batches = arrival_batches(lengths, n * context);  // as pack_stream cuts the stream
  packing_row row;
  double imbalance = 0, attention = 0, seconds = 0;
  int iterations = 0, solved = 0, windows = 0, proven = 0;
  for (std::size_t b = 0; b + static_cast<std::size_t>(window) <= batches.size() && windows < max_windows; b += window, ++windows) {
    std::vector<std::int64_t> docs;
    for (int w = 0; w < window; ++w)
      for (std::size_t i = batches[b + w].first; i < batches[b + w].second; ++i) docs.push_back(static_cast<std::int64_t>(i));
    std::vector<token_count> lens;
    for (const std::int64_t i : docs) lens.push_back(lengths[static_cast<std::size_t>(i)]);
    const auto t0 = clock_type::now();
    const exact_packing e = fixed_exact{.node_limit = node_limit}.best_within_limit(lens, {.micro_batches = n * window, .max_tokens = context});
    seconds += std::chrono::duration<double>(clock_type::now() - t0).count();
    proven += e.optimal ? 1 : 0;
    if (e.assignment.empty()) continue;  // no packing found within the limit
    ++solved;
    std::vector<packed_micro_batch> mbs(static_cast<std::size_t>(n * window));
    for (std::size_t k = 0; k < docs.size(); ++k) {
      packed_micro_batch& mb = mbs[static_cast<std::size_t>(e.assignment[k])];
      mb.documents.push_back(docs[k]);
      mb.tokens += lens[k];
      mb.workload += workload(lens[k]);
    }
    for (int w = 0; w < window; ++w) {
      packed_iteration it;
      it.micro_batches.assign(mbs.begin() + w * n, mbs.begin() + (w + 1) * n);
      imbalance += workload_imbalance(it);
      attention += attention_imbalance(it, lengths);
      ++iterations;
    }
  }
  if (iterations > 0) row.imbalance = imbalance / iterations, row.attention = attention / iterations;
  row.ms_per_batch = windows > 0 ? 1e3 * seconds / (double(windows) * window) : 0;
  row.note = std::to_string(proven) + "/" + std::to_string(windows) + " proven optimal";
  if (solved < windows) row.note += ", " + std::to_string(windows - solved) + " without a packing";
  return row;
}

void print_row(const char* method, const char* config, const packing_row& r, const char* paper) {
  std::printf("| %-17s | %-30s | %9.2f | %9.2f | %10.3f | %5.2f | %-22s | %s\n", method, config, r.imbalance, r.attention, r.ms_per_batch,
              r.delay, paper, r.note.c_str());
}

void table2(const mode& md) {
  const wlb_config c = configs(false)[3];  // 7B-128K
  const int n = c.layout.pp * c.layout.dp;
  const token_count context = c.context;
  const std::vector<token_count> lengths = stream(context, n, md);
  const document_workload workload = target_of(c).workload();
  const packing_limits fixed{.micro_batches = n, .max_tokens = context};
  std::printf("\n## Table 2: packing imbalance and time per global batch (7B-128K, N = %d, %zu documents, %lld iterations)\n\n", n,
              lengths.size(), static_cast<long long>(md.iterations));
  std::printf("| %-17s | %-30s | %9s | %9s | %10s | %5s | %-22s | notes\n", "method", "config", "imbalance", "attention", "ms / batch",
              "delay", "paper: imbalance / ms");
  std::printf("|-------------------|--------------------------------|-----------|-----------|------------|-------|------------------------|\n");
  print_row("original", "-", run_packer(original{.workload = workload}, lengths, fixed, n * context), "1.44 / 0");
  const char* greedy_paper[] = {"1.41 / 4", "1.22 / 5", "1.11 / 5", "1.08 / 5"};
  int k = 0;
  for (const int window : {1, 2, 4, 8}) {
    const std::string cfg = std::to_string(window) + " global batch" + (window > 1 ? "es" : "");
    print_row("fixed-len greedy", cfg.c_str(), run_packer(fixed_greedy{.window = window, .workload = workload}, lengths, fixed, n * context),
              greedy_paper[k++]);
  }
  const char* solver_paper[] = {"1.40 / 467", "1.18 / 1488", "1.09 / 25313"};
  const std::int64_t node_limit = md.smoke ? 20'000 : 2'000'000;
  const int max_windows = md.smoke ? 2 : 16;
  k = 0;
  for (const int window : {1, 2, 4}) {
    const std::string cfg = std::to_string(window) + " global batch" + (window > 1 ? "es" : "") + ", " +
                            std::to_string(node_limit / 1000) + "K nodes";
    print_row("fixed-len solver", cfg.c_str(), run_solver(lengths, n, context, window, node_limit, workload, max_windows), solver_paper[k++]);
  }
  const char* wlb_paper[] = {"1.24 / 8", "1.05 / 20", "1.05 / 23"};
  for (const double ratio : {1.5, 1.0}) {
    k = 0;
    for (const int queues : {1, 2, 3}) {
      wlb w = wlb::with_queues(queues);
      w.workload = workload;
      w.context_window = context;
      const token_count lmax = static_cast<token_count>(ratio * static_cast<double>(context));
      char cfg[64];
      std::snprintf(cfg, sizeof cfg, "%d queue%s, L_max %.1f x context", queues, queues > 1 ? "s" : "", ratio);
      print_row("WLB-LLM", cfg, run_packer(w, lengths, {.micro_batches = n, .max_tokens = lmax}, n * context),
                ratio > 1 ? wlb_paper[k] : "-");
      ++k;
    }
  }
  std::printf("\nimbalance: mean over iterations of max / mean forward latency W = W_a + W_l of the N micro-batches\n"
              "(section 6.4's Max_Latency x PP / Total_Latency with DP = 1); attention: the same of sum d^2 (section 3.3);\n"
              "delay: token-weighted mean iterations between arrival and training (paper: 0.5 for WLB-LLM).\n");
}

// ---------------------------------------------------------------- step time

struct step_result {
  double seconds = 0;
  double latency_imbalance = 1;
};

// Megatron-LM's 4D: 1F1B, sequence parallelism with TP, the distributed optimizer, full
// recomputation; each block priced once per shape (the step simulator's per_shape pricing).
step_result train(const packing_method& m, const wlb_config& c, std::span<const token_count> lengths) {
  step_shape shape;
  shape.layout = c.layout;
  shape.schedule = make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b);
  shape.tp_mode = tp_collectives::sequence_parallel;
  shape.sync = gradient_sync::sharded_optimizer;
  const topology topo = topology_of(c.layout);
  const packed_stream_result r = simulate_packed_stream(m, lengths, c.context, shape, full_recompute{}, c.model, topo,
                                                        sim_cost_model::for_topology(topo), {.pricing = block_pricing::per_shape});
  return {r.seconds, r.mean_latency_imbalance()};
}

void ablation(const mode& md) {
  const wlb_config c = configs(false)[3];  // 7B-128K
  const packing_target target = target_of(c);
  const std::vector<token_count> lengths = stream(c.context, c.layout.pp * c.layout.dp, md);
  const packing_method plain = packing_methods::plain_4d(target, c.context);
  const packing_method all = packing_methods::wlb_4d(target, c.context);
  struct row {
    const char* name;
    packing_method method;
    const char* paper;
  };
  packing_method per_document = plain, adaptive = plain, packing = all, fixed = packing_methods::fixed_4d(target, c.context);
  per_document.layout = packing_methods::fixed_4d(target, c.context).layout;
  // the adaptive choice within the plain packer's micro-batches (at most the context each)
  adaptive.layout = packing_methods::wlb_4d(target, c.context, 1.0).layout;
  packing.layout = {partitioner_by_name("per_sequence", {.capacity = max_tokens_of(all, c.context)})};
  const row rows[] = {{"Plain-4D", plain, "1.00x"},
                      {"+ per-document CP sharding", per_document, "1.02x"},
                      {"+ adaptive CP sharding", adaptive, "1.05x"},
                      {"+ var-len packing + outlier delay", packing, "1.28x"},
                      {"WLB-LLM (all)", all, "1.33x"},
                      {"Fixed-4D", fixed, "-"}};
  std::printf("\n## Ablation: 7B-128K step time (TP 8, CP 2, PP 4, DP 1; 1F1B, full recompute; %lld iterations)\n\n",
              static_cast<long long>(md.iterations));
  std::printf("| %-34s | %10s | %9s | %8s | %s\n", "method", "seconds", "imbalance", "speedup", "paper");
  std::printf("|------------------------------------|------------|-----------|----------|-------|\n");
  double base = 0;
  for (const row& r : rows) {
    const step_result s = train(r.method, c, lengths);
    if (base == 0) base = s.seconds;
    std::printf("| %-34s | %10.2f | %9.3f | %7.3fx | %s\n", r.name, s.seconds, s.latency_imbalance, base / s.seconds, r.paper);
  }
  std::printf("\nseconds: the whole stream trained (every token once, flush included); imbalance: mean per-iteration\n"
              "max / mean micro-batch forward latency of the simulator; speedup: Plain-4D seconds / method seconds.\n");
}

void configs_table(const mode& md) {
  std::printf("\n## Configurations (Table 1): WLB-LLM's speedup (1F1B, full recompute; %lld iterations)\n\n",
              static_cast<long long>(md.iterations));
  std::printf("| %-10s | %-13s | %12s | %12s | %12s | %12s |\n", "model", "TP,CP,PP,DP", "Plain-4D s", "Fixed-4D s", "WLB-LLM s",
              "vs Plain / Fixed");
  std::printf("|------------|---------------|--------------|--------------|--------------|------------------|\n");
  double sum64 = 0, sum128 = 0;
  int n64 = 0, n128 = 0;
  for (const wlb_config& c : configs(md.all_configs)) {
    const packing_target target = target_of(c);
    const std::vector<token_count> lengths = stream(c.context, c.layout.pp * c.layout.dp, md);
    const double plain = train(packing_methods::plain_4d(target, c.context), c, lengths).seconds;
    const double fixed = train(packing_methods::fixed_4d(target, c.context), c, lengths).seconds;
    const double wlb_s = train(packing_methods::wlb_4d(target, c.context), c, lengths).seconds;
    char layout[32];
    std::snprintf(layout, sizeof layout, "%d,%d,%d,%d", c.layout.tp, c.layout.cp, c.layout.pp, c.layout.dp);
    std::printf("| %-10s | %-13s | %12.2f | %12.2f | %12.2f | %6.2fx / %5.2fx |\n", c.name, layout, plain, fixed, wlb_s, plain / wlb_s,
                fixed / wlb_s);
    (c.context == 65536 ? sum64 : sum128) += plain / wlb_s;
    (c.context == 65536 ? n64 : n128) += 1;
  }
  std::printf("\nmean speedup over Plain-4D: 64K %.2fx (paper 1.15x), 128K %.2fx (paper 1.30x); paper overall 1.23x over\n"
              "Plain-4D and 1.19x over Fixed-4D.\n",
              n64 ? sum64 / n64 : 0.0, n128 ? sum128 / n128 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  mode md;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--smoke")) md.smoke = true, md.iterations = 6;
    else if (!std::strcmp(argv[i], "--quick")) md.iterations = 64, md.all_configs = false;
    else if (!std::strcmp(argv[i], "--full")) md.iterations = 512, md.all_configs = true;
    else if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) md.iterations = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) md.seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: reproduce_wlb [--smoke | --quick | --full] [--iterations N] [--seed S]\n");
      return 2;
    }
  }
  try {
    std::printf("# WLB-LLM reproduction (documents: power law over [1, context], seed %llu)\n",
                static_cast<unsigned long long>(md.seed));
    table2(md);
    ablation(md);
    if (!md.smoke) configs_table(md);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reproduce_wlb: %s\n", e.what());
    return 1;
  }
  return 0;
}
