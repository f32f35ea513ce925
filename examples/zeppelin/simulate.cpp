// examples/zeppelin/simulate.cpp
// `zeppelin simulate` (and `zeppelin` with no arguments): the main job.
// In:  a batch (sampled from a Table 2 dataset, or read from a lengths file), a cluster
//      preset and node count, a model preset.
// Out: the batch's cost breakdown by Table 2 length bin (sequences, tokens, attention and
//      linear FLOPs of one forward + backward step) and the perfectly balanced lower bound
//      of the step on the cluster, as a table or JSON.
#include "commands.hpp"

#include <zeppelin/zeppelin.hpp>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

namespace zeppelin_tool {
namespace {

struct simulate_options {
  std::string dataset = "github";
  std::string lengths_file;
  long long tokens = 128 * 1024;
  unsigned long long seed = 1;
  std::string cluster = "c";
  int nodes = 4;
  std::string model = "7b";
  bool json = false;
};

struct bin_cost {
  long long sequences = 0;
  long long tokens = 0;
  double attention_flops = 0;
  double linear_flops = 0;
};

void run_simulate(const simulate_options& o) {
  using namespace zeppelin;
  const batch b = o.lengths_file.empty() ? sample_batch(dataset_by_name(o.dataset), o.tokens, o.seed)
                                         : batch(read_lengths_file(o.lengths_file));
  const topology cluster = cluster_by_name(o.cluster, o.nodes);
  const model_config model = model_by_name(o.model);
  const step_work total = estimate_step_work(b, model, cluster.gpu());

  std::array<bin_cost, table2_columns + 1> bins{};  // the last one collects lengths >= 256K
  for (const token_count len : b.lengths()) {
    const step_work w = estimate_step_work(batch({len}), model, cluster.gpu());
    bin_cost& bin = bins[table2_column(len)];
    ++bin.sequences;
    bin.tokens += len;
    bin.attention_flops += w.attention_flops();
    bin.linear_flops += w.linear_flops();
  }
  const double bound = total.balanced_lower_bound(cluster.num_ranks());
  const std::string source = o.lengths_file.empty() ? o.dataset + " (seed " + std::to_string(o.seed) + ")" : o.lengths_file;

  if (o.json) {
    nlohmann::json j;
    j["batch"] = {{"source", source}, {"sequences", b.size()}, {"tokens", b.total_tokens()}, {"max_length", b.max_length()}};
    j["cluster"] = {{"name", cluster.name()}, {"nodes", cluster.nodes()}, {"gpus_per_node", cluster.gpus_per_node()}};
    j["model"] = model.name;
    j["bins"] = nlohmann::json::array();
    for (std::size_t i = 0; i < bins.size(); ++i) {
      if (bins[i].sequences == 0) continue;
      j["bins"].push_back({{"bin", i < table2_columns ? std::string(table2_labels[i]) : std::string(">=256")},
                           {"sequences", bins[i].sequences}, {"tokens", bins[i].tokens},
                           {"attention_flops", bins[i].attention_flops}, {"linear_flops", bins[i].linear_flops}});
    }
    j["attention_flops"] = total.attention_flops();
    j["linear_flops"] = total.linear_flops();
    j["single_gpu_seconds"] = total.single_gpu_seconds();
    j["lower_bound_s"] = bound;
    std::cout << j.dump(2) << '\n';
    return;
  }
  std::printf("batch   %s: %d sequences, %lld tokens, longest %lld\n", source.c_str(), b.size(),
              static_cast<long long>(b.total_tokens()), static_cast<long long>(b.max_length()));
  std::printf("cluster %s: %d nodes x %d %s, %d NICs per node\n", cluster.name().c_str(), cluster.nodes(),
              cluster.gpus_per_node(), cluster.gpu().name.c_str(), cluster.nics_per_node());
  std::printf("model   %s (%d layers, hidden %d)\n\n", model.name.c_str(), model.layers, model.hidden);
  std::printf("%-10s %6s %9s %8s %14s %14s %10s\n", "length(K)", "seqs", "tokens", "tokens%", "attn PFLOP", "linear PFLOP",
              "attn share");
  for (std::size_t i = 0; i < bins.size(); ++i) {
    const bin_cost& c = bins[i];
    if (c.sequences == 0) continue;
    std::printf("%-10s %6lld %9lld %7.1f%% %14.3f %14.3f %9.1f%%\n",
                i < table2_columns ? std::string(table2_labels[i]).c_str() : ">=256", c.sequences, c.tokens,
                100.0 * static_cast<double>(c.tokens) / static_cast<double>(b.total_tokens()), c.attention_flops / 1e15,
                c.linear_flops / 1e15, 100.0 * c.attention_flops / (c.attention_flops + c.linear_flops));
  }
  std::printf("%-10s %6d %9lld %7.1f%% %14.3f %14.3f %9.1f%%\n\n", "total", b.size(), static_cast<long long>(b.total_tokens()),
              100.0, total.attention_flops() / 1e15, total.linear_flops() / 1e15,
              100.0 * total.attention_flops() / total.total_flops());
  std::printf("one forward + backward step: %.3f s on one GPU; perfectly balanced over %d GPUs: >= %.2f ms\n",
              total.single_gpu_seconds(), cluster.num_ranks(), bound * 1e3);
}

void add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<simulate_options>();
  CLI::App* cmd = app.add_subcommand("simulate", "price a training step of a batch on a cluster (the main job)");
  auto* dataset = cmd->add_option("--dataset", options->dataset, "Table 2 length distribution: arxiv, github, prolong64k")
                      ->capture_default_str();
  cmd->add_option("--lengths", options->lengths_file, "file of sequence lengths, one per line")
      ->check(CLI::ExistingFile)
      ->excludes(dataset);
  cmd->add_option("--tokens", options->tokens, "total tokens of the sampled batch")->capture_default_str();
  cmd->add_option("--seed", options->seed, "sampler seed")->capture_default_str();
  cmd->add_option("--cluster", options->cluster, "cluster preset: a, b, c, wlb, hydraulis")->capture_default_str();
  cmd->add_option("--nodes", options->nodes, "number of nodes")->capture_default_str();
  cmd->add_option("--model", options->model, "model preset: 3b, 7b, 13b, 30b, 70b, 550m, 8x550m, llama3-8b, gpt-7b, ...")
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "print JSON");
  cmd->callback([options] { run_simulate(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(10, add_simulate_command);

}  // namespace zeppelin_tool
