// examples/zeppelin/strategy.cpp
// `zeppelin strategy`: Hydraulis' heterogeneous strategy for one iteration (strategy/).
// In:  --lengths FILE (one sequence length per line, data/length_file.hpp), --gpus N,
//      --gpus-per-node P, --model 7b | 13b | 32b (or any preset name), --gpu-memory-gib G
//      (default 80, an A800's), --margin-gib M (kept free; default 8), --trials T (greedy
//      dispatch; default 100), --placement-budget B (trials x sequences at most, at least
//      one trial; default 2^20), --seed S, --threads K (dispatch trials, pipeline packings
//      and the simulation's block shapes at once; default the machine's hardware threads,
//      nothing printed depends on it), --exchanges per_port | per_flow (how the simulation
//      prices the switching: each exchange whole at its busiest port, the default, or flow
//      by flow; sim/step_backend.hpp), --json.
// Runs: the schemes <TP, PP, CP> the model and cluster allow with their MaxLen, UtilLen and
//      T(l, P) (A800 tables), the strategy-proposal DP over the file's lengths, then for
//      every candidate greedy dispatch and greedy packing, keeping the fastest; then the
//      chosen plan as a step plan (strategy/iteration_step_plan.hpp: 1F1B, switching sync)
//      on the one step simulator (per_shape pricing, --exchanges), on A800 nodes of P GPUs with
//      InfiniBand (clusters::hydraulis_a800_ib, the GPU memory given).
// Out: the chosen strategy (schemes and pipeline counts), every pipeline's MaxLen and
//      micro-batches (sequence indices into the file), the predicted iteration seconds and
//      the simulated ones (the planner's T(l, P) leaves out the switching of parameters and
//      gradients, pipeline sends and unequal micro-batches' bubbles); with --json
//      {"strategy":[{"tp":..,"pp":..,"cp":..,"count":d}],
//       "pipelines":[{"tp":..,"pp":..,"cp":..,"max_len":..,"micro_batches":[[...]]}],
//       "iteration_s":x,"simulated_iteration_s":y}
// Bad input is an error on stderr with exit status 1: a sequence no scheme can hold
// (naming it and the largest MaxLen), a model that fits no scheme on the GPUs, N < 1; a
// plan the simulator finds over the GPU memory (naming stage and bytes). Per port the
// program holds each GPU's switching traffic (exchange_detail::traffic_only), at any size;
// per flow it lists the transfers, and a plan whose program would pass the library's limits
// (step_program_options::max_switching_transfers: the switching at thousands of GPUs) is
// still printed, with the simulation refused and the reason (JSON:
// "simulated_iteration_s":null,"simulation_refused":"...").
#include "commands.hpp"
#include "exchanges_option.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/strategy.hpp>
#include <zeppelin/strategy/iteration_step_plan.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
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
  std::int64_t placement_budget = zeppelin::greedy_dispatch{}.placement_budget;
  std::uint64_t seed = 1;
  int threads = hardware_threads();
  std::optional<zeppelin::exchange_pricing> exchanges;  // empty: per_port
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
                                                .dispatch = {.trials = o.trials, .seed = o.seed, .threads = o.threads, .placement_budget = o.placement_budget}},
                                               lengths);
  const iteration_plan& plan = choice.plan;
  const strategy& chosen = choice.chosen();
  // the plan on the one step simulator, with Hydraulis' model states (as MaxLen assumes)
  topology_config cluster_config =
      cluster_by_name("hydraulis", static_cast<int>((o.gpus + o.gpus_per_node - 1) / o.gpus_per_node), o.gpus_per_node).config();
  cluster_config.gpu = gpu;
  const topology cluster(std::move(cluster_config));
  // a plan too large for the step program (the switching at thousands of GPUs) keeps its
  // strategy and assignment; the simulation is reported as refused, naming the numbers
  std::optional<double> simulated_s;
  std::string simulation_refused;
  try {
    // priced per port, the switching needs each GPU's traffic only, not its ~N^2 / TP transfers
    const exchange_pricing exchanges = o.exchanges.value_or(exchange_pricing::per_port);
    step_program_options program_options = hydraulis_program_options();
    if (exchanges == exchange_pricing::per_port) program_options.exchanges = exchange_detail::traffic_only;
    const step_program prog = make_step_program(step_plan_of(plan, lengths, cluster, model), cluster, model, program_options);
    simulated_s = simulate_step(prog, cluster, sim_cost_model::for_topology(cluster),
                                {.pricing = block_pricing::per_shape,
                                 .exchanges = exchanges,
                                 .memory = scheme_profile_options{}.memory,
                                 .threads = o.threads})
                      .iteration_s;
  } catch (const resource_limit& e) {
    simulation_refused = e.what();
  }
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
    if (simulated_s)
      j["simulated_iteration_s"] = *simulated_s;
    else
      j["simulated_iteration_s"] = nullptr, j["simulation_refused"] = simulation_refused;
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
  if (simulated_s)
    std::printf("simulated iteration %.4f s (step simulator: switching, TP, CP and pipeline traffic with the compute)\n", *simulated_s);
  else
    std::printf("simulated iteration: refused: %s\n", simulation_refused.c_str());
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
  add_integer_option(cmd, "--placement-budget", options->placement_budget, "greedy dispatch: trials x sequences at most (at least one trial)")
      ->capture_default_str()
      ->check(example_cli::positive());
  add_integer_option(cmd, "--seed", options->seed, "seed of the dispatch trials")->capture_default_str();
  add_threads_option(cmd, options->threads, "greedy dispatch trials, pipeline packings and simulated block shapes run at once");
  add_exchanges_option(cmd, options->exchanges);
  cmd->add_flag("--json", options->json,
                "print {\"strategy\":[...],\"pipelines\":[{...,\"micro_batches\":[[...]]}],\"iteration_s\":x,\"simulated_iteration_s\":y}");
  cmd->callback([options] { run_strategy(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(50, add_strategy_command);

}  // namespace zeppelin_tool
