// examples/zeppelin/strategy.cpp
// `zeppelin strategy`: Hydraulis' heterogeneous strategy for one iteration (strategy/).
// In:  --lengths FILE (one sequence length per line, data/length_file.hpp), --gpus N,
//      --gpus-per-node P, --model 7b | 13b | 32b (or any preset name), --gpu-memory-gib G
//      (default 80, an A800's), --margin-gib M (kept free; default 8), --trials T (greedy
//      dispatch; default 100), --seed S, --json.
// Runs: the schemes <TP, PP, CP> the model and cluster allow with their MaxLen, UtilLen and
//      T(l, P) (A800 tables), the strategy-proposal DP over the file's lengths, then for
//      every candidate greedy dispatch and greedy packing, keeping the fastest.
// Out: the chosen strategy (schemes and pipeline counts), every pipeline's MaxLen and
//      micro-batches (sequence indices into the file) and the predicted iteration seconds;
//      with --json
//      {"strategy":[{"tp":..,"pp":..,"cp":..,"count":d}],
//       "pipelines":[{"tp":..,"pp":..,"cp":..,"max_len":..,"micro_batches":[[...]]}],
//       "iteration_s":x}
// Bad input is an error on stderr with exit status 1: a sequence no scheme can hold
// (naming it and the largest MaxLen), a model that fits no scheme on the GPUs, N < 1.
#include "commands.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/strategy.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace zeppelin_tool {
namespace {

struct strategy_options {
  std::string lengths_file;
  std::int64_t gpus = 8;
  int gpus_per_node = 8;
  std::string model = "7b";
  double gpu_memory_gib = 80;
  double margin_gib = 8;
  int trials = 100;
  std::uint64_t seed = 1;
  bool json = false;
};

void run_strategy(const strategy_options& o) {
  using namespace zeppelin;
  const model_config model = model_by_name(o.model);
  const std::vector<token_count> lengths = read_lengths_file(o.lengths_file);
  gpu_spec gpu = gpus::a800_80g();
  gpu.memory_bytes = o.gpu_memory_gib * double(1ull << 30);
  const strategy_choice choice = plan_strategy(model,
                                               {.gpus = o.gpus,
                                                .gpus_per_node = o.gpus_per_node,
                                                .gpu = gpu,
                                                .margin_bytes = o.margin_gib * double(1ull << 30),
                                                .dispatch = {.trials = o.trials, .seed = o.seed}},
                                               lengths);
  const iteration_plan& plan = choice.plan;
  const strategy& chosen = choice.chosen();
  if (o.json) {
    auto j = with_format<nlohmann::ordered_json>("strategy");
    j["strategy"] = nlohmann::ordered_json::array();
    for (const strategy_part& p : chosen.parts)
      j["strategy"].push_back({{"tp", p.profile.scheme.tp}, {"pp", p.profile.scheme.pp}, {"cp", p.profile.scheme.cp}, {"count", p.pipelines}});
    j["pipelines"] = nlohmann::ordered_json::array();
    for (const pipeline_plan& p : plan.pipelines)
      j["pipelines"].push_back({{"tp", p.profile.scheme.tp},
                                {"pp", p.profile.scheme.pp},
                                {"cp", p.profile.scheme.cp},
                                {"max_len", p.profile.max_len},
                                {"micro_batches", p.packing.micro_batches}});
    j["iteration_s"] = plan.seconds;
    std::cout << j.dump() << '\n';
    return;
  }
  std::printf("%s on %lld GPUs (%d per node): %zu sequences, %zu candidate strategies\n", model.name.c_str(),
              static_cast<long long>(o.gpus), o.gpus_per_node, lengths.size(), choice.candidates.size());
  std::printf("strategy:");
  for (const strategy_part& p : chosen.parts)
    std::printf(" %d x <TP %d, PP %d, CP %d>", p.pipelines, p.profile.scheme.tp, p.profile.scheme.pp, p.profile.scheme.cp);
  std::printf(" (%lld GPUs)\n", chosen.gpus());
  for (std::size_t k = 0; k < plan.pipelines.size(); ++k) {
    const pipeline_plan& p = plan.pipelines[k];
    std::printf("pipeline %zu <TP %d, PP %d, CP %d>: MaxLen %lld, %zu sequences, %d micro-batches, %.4f s\n", k, p.profile.scheme.tp,
                p.profile.scheme.pp, p.profile.scheme.cp, static_cast<long long>(p.profile.max_len), p.sequences.size(),
                p.packing.count(), p.packing.seconds);
  }
  std::printf("iteration %.4f s (predicted)\n", plan.seconds);
}

void add_strategy_command(CLI::App& app) {
  auto options = std::make_shared<strategy_options>();
  CLI::App* cmd = app.add_subcommand("strategy", "choose a heterogeneous parallel strategy and assign an iteration's sequences (Hydraulis)");
  cmd->add_option("--lengths", options->lengths_file, "file with one sequence length per line")->required()->check(CLI::ExistingFile);
  add_integer_option(cmd, "--gpus", options->gpus, "GPUs of the cluster N")->capture_default_str();
  add_integer_option(cmd, "--gpus-per-node", options->gpus_per_node, "GPUs per node (TP stays within a node)")->capture_default_str();
  cmd->add_option("--model", options->model, "model preset: 7b, 13b, 32b, ...")->capture_default_str();
  cmd->add_option("--gpu-memory-gib", options->gpu_memory_gib, "GPU memory, GiB")->capture_default_str()->check(example_cli::positive());
  cmd->add_option("--margin-gib", options->margin_gib, "memory kept free per GPU, GiB")->capture_default_str()->check(example_cli::non_negative());
  add_integer_option(cmd, "--trials", options->trials, "greedy dispatch trials")->capture_default_str();
  add_integer_option(cmd, "--seed", options->seed, "seed of the dispatch trials")->capture_default_str();
  cmd->add_flag("--json", options->json,
                "print {\"strategy\":[...],\"pipelines\":[{...,\"micro_batches\":[[...]]}],\"iteration_s\":x}");
  cmd->callback([options] { run_strategy(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(50, add_strategy_command);

}  // namespace zeppelin_tool
