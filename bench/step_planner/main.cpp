// bench/step_planner: the step planner (planner/plan_step.hpp) against its targets.
//   1. Planning time, one thread: a 1M-token iteration on 128 GPUs (target <= 50 ms) and a
//      4M-token iteration on 1,024 GPUs (target <= 500 ms; --full), GitHub-like documents,
//      LLaMA-7B on nodes of 8 H200s (cluster preset c). Per candidate its planning and
//      pricing seconds, so a miss names who misses.
//   2. The sweep: iterations drawn from the GitHub, CommonCrawl-like (power law), ArXiv and
//      ProLong-64K length mixes (8K tokens per GPU, documents up to 128K) on 16 and 32 GPUs
//      (--smoke: 16; --full: 16 to 1,024). Per iteration the composed choice, the best single
//      paper's or baseline's composition (megatron, te, ulysses, wlb, zeppelin, hydraulis,
//      infinipipe) and their
//      ratio (never above 1: each is a candidate), and the efficiency (lower bound /
//      predicted). The summary: the worst ratio, the median gain over the best single
//      composition, the median efficiency.
// Usage: step_planner [--smoke | --full] [--seed S] [--sweep-gpus a,b,...] (--sweep-gpus: the
// sweep alone, on these GPU counts)
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/power_law.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/planner/plan_step.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace zeppelin;

struct mode {
  bool smoke = false;
  bool full = false;
  std::uint64_t seed = 1;
  std::vector<int> sweep_gpus;  //!< --sweep-gpus: these clusters only, the sweep alone
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

step_request request_of(const length_histogram& mix, token_count tokens, int gpus, std::uint64_t seed) {
  step_request r;
  r.documents = sample_lengths(mix, tokens, seed, {.min_length = 1, .max_length = 131072});
  r.cluster = cluster_by_name("c", std::max(1, gpus / 8), std::min(8, gpus));
  r.model = models::llama_7b();
  return r;
}

void planning_time(const mode& md) {
  std::printf("## Planning time (one thread; GitHub-like documents up to 128K; LLaMA-7B; H200 x 8 nodes, preset c)\n\n");
  std::printf("| tokens | GPUs | plan_step s | target s | met | chosen | slowest candidate (plan s + price s) |\n|---|---|---|---|---|---|---|\n");
  struct row {
    token_count tokens;
    int gpus;
    double target_s;
  };
  std::vector<row> rows = {{1 << 20, 128, 0.05}};
  if (md.full) rows.push_back({4 << 20, 1024, 0.5});
  if (md.smoke) rows = {{1 << 18, 32, 0.05}};
  for (const row& x : rows) {
    const step_request r = request_of(datasets::github(), x.tokens, x.gpus, md.seed);
    const auto t0 = std::chrono::steady_clock::now();
    const step_decision d = plan_step(r);
    const double total = seconds_since(t0);
    // who takes the time: each candidate alone
    const std::vector<scheme_profile> profiles = scheme_profiles_of(r);
    std::string slowest = "-";
    double slowest_s = -1;
    for (const step_candidate& c : default_step_candidates(r)) {
      const auto t1 = std::chrono::steady_clock::now();
      std::vector<sequence_step_plan> parts;
      try {
        parts = c.plan(r, profiles);
      } catch (const error&) {
        continue;
      }
      const double plan_s = seconds_since(t1);
      const auto t2 = std::chrono::steady_clock::now();
      (void)simulate_back_to_back(parts, r.cluster, r.model);
      const double price_s = seconds_since(t2);
      if (plan_s + price_s > slowest_s) {
        slowest_s = plan_s + price_s;
        char text[160];
        std::snprintf(text, sizeof text, "%s (%.3f + %.3f)", c.name.c_str(), plan_s, price_s);
        slowest = text;
      }
    }
    std::printf("| %lld | %d | %.3f | %.3f | %s | %s | %s |\n", static_cast<long long>(x.tokens), x.gpus, total, x.target_s,
                total <= x.target_s ? "yes" : "no", d.chosen_name().c_str(), slowest.c_str());
  }
}

void sweep(const mode& md) {
  struct mix {
    const char* name;
    length_histogram lengths;
  };
  const std::vector<mix> mixes = {{"GitHub", datasets::github()},
                                  {"CommonCrawl-like", power_law_lengths(131072)},
                                  {"ArXiv", datasets::arxiv()},
                                  {"ProLong-64K", datasets::prolong64k()}};
  std::vector<int> clusters = {16, 32};
  if (md.smoke) clusters = {16};
  if (md.full) clusters = {16, 32, 64, 128, 256, 512, 1024};
  if (!md.sweep_gpus.empty()) clusters = md.sweep_gpus;
  const std::vector<std::string> singles = {"megatron", "te", "ulysses", "wlb", "zeppelin", "hydraulis", "infinipipe"};
  std::printf("\n## The composed choice against each paper's composition (8K tokens per GPU, seed %llu)\n\n", static_cast<unsigned long long>(md.seed));
  std::printf("| mix | GPUs | documents | chosen | predicted s | best single | its s | ratio | efficiency | plan_step s |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<double> ratios, gains, efficiencies;
  for (const int gpus : clusters)
    for (const mix& m : mixes) {
      const step_request r = request_of(m.lengths, static_cast<token_count>(gpus) * 8192, gpus, md.seed);
      const auto t0 = std::chrono::steady_clock::now();
      step_decision d;
      try {
        d = plan_step(r);
      } catch (const error& e) {
        std::printf("| %s | %d | %zu | refused: %s |\n", m.name, gpus, r.documents.size(), e.what());
        continue;
      }
      const double took = seconds_since(t0);
      double best = std::numeric_limits<double>::infinity();
      std::string best_name = "-";
      for (const priced_step_candidate& c : d.candidates)
        if (std::find(singles.begin(), singles.end(), c.name) != singles.end() && c.seconds < best) best = c.seconds, best_name = c.name;
      const double ratio = d.predicted_s / best;
      ratios.push_back(ratio);
      gains.push_back(best / d.predicted_s);
      efficiencies.push_back(d.efficiency());
      std::printf("| %s | %d | %zu | %s | %.4f | %s | %.4f | %.3f | %.3f | %.2f |\n", m.name, gpus, r.documents.size(), d.chosen_name().c_str(),
                  d.predicted_s, best_name.c_str(), best, ratio, d.efficiency(), took);
    }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  std::printf("\nworst ratio (composed / best single, <= 1 is never slower): %.3f\n",
              ratios.empty() ? 0.0 : *std::max_element(ratios.begin(), ratios.end()));
  std::printf("median gain over the best single composition: %.3fx\n", median(gains));
  std::printf("median efficiency (lower bound / predicted): %.3f\n", median(efficiencies));
  if (!ratios.empty() && *std::max_element(ratios.begin(), ratios.end()) > 1.0) {
    std::printf("FAILED: the composed choice was slower than a single composition it priced\n");
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  mode md;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--smoke"))
      md.smoke = true;
    else if (!std::strcmp(argv[i], "--full"))
      md.full = true;
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc)
      md.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--sweep-gpus") && i + 1 < argc) {
      const std::string list = argv[++i];
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        const std::string item = list.substr(at, comma - at);
        char* end = nullptr;
        const long gpus = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || gpus < 1 || gpus > 65536 || (gpus > 8 && gpus % 8 != 0)) {
          std::fprintf(stderr, "step_planner: --sweep-gpus takes GPU counts a,b,... (1..8, or multiples of 8), not '%s'\n", item.c_str());
          return 2;
        }
        md.sweep_gpus.push_back(static_cast<int>(gpus));
        at = comma + 1;
      }
    } else {
      std::fprintf(stderr, "usage: step_planner [--smoke | --full] [--seed S] [--sweep-gpus a,b,...]\n");
      return 2;
    }
  }
  if (md.sweep_gpus.empty()) planning_time(md);
  sweep(md);
  return 0;
}
