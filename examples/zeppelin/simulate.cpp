// examples/zeppelin/simulate.cpp
// `zeppelin simulate` (and `zeppelin` with no arguments): the main job.
// In:  a batch (sampled from a Table 2 dataset, or read from a lengths file), a cluster
//      preset with its node and GPU counts, a model preset, the methods to compare.
// Out: for every method, the plan it makes and the simulated training step (sim/): step
//      time, tokens/s, speedup over TE CP, efficiency against the perfectly balanced lower
//      bound, compute imbalance across ranks, bytes through the NICs; as a table or JSON.
//      --trace writes the Chrome trace (Perfetto) of one method's simulated layers.
//      --slack sets the planners' capacity headroom (method_setup::capacity_slack),
//      --no-contention turns the SM contention model off (sim/sm_contention.hpp),
//      --launch per_group|fused_round overrides every method's attention launch policy
//      (sim_options::launch; default: each method's own, planner/methods.hpp).
//      --method M simulates one method; --record FILE (with one method) writes the execution
//      record of one simulated layer (program/record.hpp): every transfer and launch priced,
//      the same file examples/host_ring_attention --record writes when it executes that
//      method on the same batch, cluster and shape.
//      --heads, --kv-heads, --head-dim, --dtype override the model's attention shape and
//      element type (e.g. a small fp64 shape to compare with the host engine).
// A method whose execution program is too large to build (program_options::
// max_member_rounds, max_shard_pairs: TE CP's global ring over thousands of GPUs, or its
// zigzag shards of many short documents) is priced from two smaller runs over what is
// identical in it, the members of its groups or its documents (sim/step_extrapolation.hpp),
// marked with * and a note naming the two runs (JSON: "extrapolated":{"over":"members" or
// "documents","from":[s1,s2]}, null when simulated whole). One neither covers is listed as
// refused, with the reason, and the others still run; exit status 1 only when every method
// was refused.
// Defaults: GitHub, cluster C (4 nodes x 8 H200), 128K tokens, LLaMA-7B, every method.
#include "commands.hpp"

#include <zeppelin/core/output_file.hpp>
#include <zeppelin/planner.hpp>
#include <zeppelin/sim.hpp>
#include <zeppelin/zeppelin.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

namespace zeppelin_tool {
namespace {

// A plan's notes as in `plan --json` (core/plan_json.hpp): kind, text, sequences, values.
nlohmann::json notes_json(const std::vector<zeppelin::plan_note>& notes) {
  nlohmann::json out = nlohmann::json::array();
  for (const zeppelin::plan_note& n : notes) {
    nlohmann::json values = nlohmann::json::array();
    for (const zeppelin::note_value& v : n.values) values.push_back({{"name", v.name}, {"value", v.value}});
    out.push_back({{"kind", std::string(zeppelin::to_string(n.kind))}, {"text", n.text}, {"sequences", n.sequences}, {"values", values}});
  }
  return out;
}

struct simulate_options {
  std::string dataset = "github";
  std::string lengths_file;
  long long tokens = 128 * 1024;
  unsigned long long seed = 1;
  std::string cluster = "c";
  int nodes = 4;
  int gpus_per_node = 0;  // 0: the preset's
  std::string model = "7b";
  std::string methods = "all";
  std::string method;
  std::string record_file;
  int heads = 0, kv_heads = 0, head_dim = 0;  // 0: the model's
  int element_bytes = 0;                      // 0: the model's (--dtype)
  int tensor_parallel = 0;  // 0: the paper's choice (13B on A, 30B on C: 2)
  int chained_layers = 1;
  int threads = hardware_threads();
  double slack = zeppelin::method_setup{}.capacity_slack;
  bool no_contention = false;
  std::optional<zeppelin::launch_policy> launch;  // empty: each method's own
  std::string trace_file;
  std::string trace_method = "zeppelin";
  bool json = false;
};

std::vector<std::string> split_methods(const simulate_options& o) {
  std::vector<std::string> out;
  if (!o.method.empty()) return {o.method};
  if (o.methods == "all") {
    for (const auto& s : zeppelin::method_specs) out.emplace_back(s.name);
    return out;
  }
  std::stringstream ss(o.methods);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  if (out.empty()) ZEPPELIN_THROW(invalid_argument, "--methods names no method", {{"methods_given", 0.0}});
  return out;
}

//! The model with the shape overrides of `o`.
zeppelin::model_config shaped_model(const simulate_options& o) {
  zeppelin::model_config m = zeppelin::model_by_name(o.model);
  if (o.heads > 0) m.heads = o.heads;
  if (o.kv_heads > 0) m.kv_heads = o.kv_heads;
  if (o.head_dim > 0) m.head_dim = o.head_dim;
  if (o.element_bytes > 0) m.bytes_per_element = o.element_bytes;
  zeppelin::validate(m);
  return m;
}

int paper_tensor_parallel(const std::string& cluster, const zeppelin::model_config& m) {
  if (cluster == "a" && m.name == "llama-13b") return 2;
  if (cluster == "c" && m.name == "llama-30b") return 2;
  return 1;
}

void run_simulate(const simulate_options& o) {
  using namespace zeppelin;
  const batch b = o.lengths_file.empty() ? sample_batch(dataset_by_name(o.dataset), o.tokens, o.seed)
                                         : batch(read_lengths_file(o.lengths_file));
  const topology cluster = cluster_by_name(o.cluster, o.nodes, o.gpus_per_node);
  const model_config model = shaped_model(o);
  method_setup setup;
  setup.tensor_parallel = o.tensor_parallel > 0 ? o.tensor_parallel : paper_tensor_parallel(o.cluster, model);
  setup.tokens_per_gpu = (b.total_tokens() + cluster.num_ranks() - 1) / cluster.num_ranks();
  setup.chained_layers = o.chained_layers;
  setup.threads = o.threads;
  setup.capacity_slack = o.slack;
  setup.launch = o.launch;
  if (o.no_contention) {
    sim_cost_model cost = sim_cost_model::for_topology(tensor_parallel_view(cluster, setup.tensor_parallel));
    cost.contention.enabled = false;
    setup.cost = cost;
  }
  const std::vector<std::string> names = split_methods(o);
  for (const auto& n : names) (void)method_by_name(n);  // reject unknown names before any work
  if (!o.trace_file.empty()) (void)method_by_name(o.trace_method);
  if (!o.record_file.empty() && names.size() != 1)
    ZEPPELIN_THROW(invalid_argument, "--record needs exactly one method (--method M)", {{"methods", double(names.size())}});

  // a method whose program exceeds the library's resource limits is reported and skipped
  // (the others still run); when every method is refused, the command fails with the first
  std::vector<method_run> runs;
  std::vector<std::pair<std::string, std::string>> refused;  // method, reason
  // progress on stderr when it is a terminal: a large batch takes minutes over every method
  const bool progress = isatty(fileno(stderr)) != 0;
  for (const auto& n : names) {
    if (progress) std::fprintf(stderr, "\rsimulating %zu/%zu: %-24s", runs.size() + refused.size() + 1, names.size(), n.c_str());
    method_setup s = setup;
    s.record_trace = !o.trace_file.empty() && n == o.trace_method;
    s.record_execution = !o.record_file.empty();
    try {
      runs.push_back(run_method(n, b, cluster, model, s));
    } catch (const resource_limit& e) {
      if (names.size() == 1) throw;
      refused.emplace_back(n, e.what());
    }
  }
  if (progress) std::fprintf(stderr, "\r%60s\r", "");
  if (runs.empty())
    ZEPPELIN_THROW(resource_limit, "every method was refused; " + refused.front().first + ": " + refused.front().second,
                   {{"methods", double(names.size())}});
  double te = 0;
  for (const auto& r : runs)
    if (r.name == "te_cp") te = r.result.step_time_s;
  const std::string source = o.lengths_file.empty() ? o.dataset + " (seed " + std::to_string(o.seed) + ")" : o.lengths_file;

  if (!o.trace_file.empty()) {
    bool written = false;
    for (const auto& r : runs)
      if (r.name == o.trace_method) {
        write_output_file(o.trace_file, [&](std::ostream& out) { write_chrome_trace(out, r.result, r.view); }, "--trace");
        written = true;
      }
    if (!written) throw std::runtime_error("--trace-method " + o.trace_method + " is not among --methods");
  }

  if (!o.record_file.empty()) {
    write_output_file(o.record_file, [&](std::ostream& out) { write_record_json(out, runs.front().result.record); }, "--record");
  }

  if (o.json) {
    auto j = with_format<nlohmann::json>("simulate");
    j["batch"] = {{"source", source}, {"sequences", b.size()}, {"tokens", b.total_tokens()}, {"max_length", b.max_length()}};
    j["cluster"] = {{"name", cluster.name()}, {"nodes", cluster.nodes()}, {"gpus_per_node", cluster.gpus_per_node()},
                    {"nics_per_node", cluster.nics_per_node()}};
    j["model"] = model.name;
    j["tensor_parallel"] = setup.tensor_parallel;
    j["capacity_slack"] = setup.capacity_slack;
    j["sm_contention"] = !o.no_contention;
    j["launch"] = o.launch ? std::string(to_string(*o.launch)) : std::string("method");
    j["methods"] = nlohmann::json::array();
    for (const auto& r : runs) {
      const sim_result& s = r.result;
      double attention = 0, linear = 0, comm = 0, idle = 0;
      for (const auto& br : s.ranks) attention += br.attention_s, linear += br.linear_s, comm += br.exposed_comm_s, idle += br.idle_s;
      const double n = static_cast<double>(s.ranks.size());
      j["methods"].push_back({{"name", r.name},
                              {"planned_by", r.candidate},
                              {"step_time_s", s.step_time_s},
                              {"tokens_per_s", s.tokens_per_s},
                              {"lower_bound_s", s.lower_bound_s},
                              {"efficiency", s.efficiency},
                              {"speedup_vs_te_cp", te > 0 ? te / s.step_time_s : 0.0},
                              {"imbalance", s.imbalance},
                              {"cross_node_bytes", s.cross_node_bytes},
                              {"intra_node_bytes", s.intra_node_bytes},
                              {"forward_s", s.forward_s},
                              {"backward_s", s.backward_s},
                              {"lm_head_s", s.lm_head_s},
                              {"attention_launches", std::llround(s.attention_launches)},
                              {"attention_flops", s.attention_flops},
                              {"micro_batches", s.micro_batches},
                              {"extrapolated", s.extrapolated.axis == extrapolation_axis::none
                                                   ? nlohmann::json(nullptr)
                                                   : nlohmann::json{{"over", std::string(to_string(s.extrapolated.axis))}, {"from", s.extrapolated.from}}},
                              {"mean_attention_s", attention / n},
                              {"mean_linear_s", linear / n},
                              {"mean_exposed_comm_s", comm / n},
                              {"mean_idle_s", idle / n},
                              {"ring_groups", r.layout.groups.size()},
                              {"notes", notes_json(r.layout.notes)}});
    }
    for (const auto& [name, reason] : refused) j["methods"].push_back({{"name", name}, {"refused", reason}});
    std::cout << j.dump(2) << '\n';
    return;
  }
  std::printf("batch   %s: %d sequences, %lld tokens, longest %lld\n", source.c_str(), b.size(),
              static_cast<long long>(b.total_tokens()), static_cast<long long>(b.max_length()));
  std::printf("cluster %s: %d nodes x %d %s, %d NICs per node; model %s, TP %d; capacity slack %.4g, SM contention %s, "
              "launches %s\n\n",
              cluster.name().c_str(), cluster.nodes(), cluster.gpus_per_node(), cluster.gpu().name.c_str(), cluster.nics_per_node(),
              model.name.c_str(), setup.tensor_parallel, setup.capacity_slack, o.no_contention ? "off" : "on",
              o.launch ? std::string(to_string(*o.launch)).c_str() : "the method's");
  std::printf("%-34s %10s %10s %8s %6s %6s %8s %9s %9s\n", "method (zeppelin: its choice)", "step ms", "tokens/s", "speedup", "eff", "imbal",
              "xnode GB", "comm ms", "idle ms");
  for (const auto& r : runs) {
    const sim_result& s = r.result;
    double comm = 0, idle = 0;
    for (const auto& br : s.ranks) comm += br.exposed_comm_s, idle += br.idle_s;
    const double n = static_cast<double>(s.ranks.size());
    char speedup[16] = "       -";  // no TE CP run to compare with
    if (te > 0) std::snprintf(speedup, sizeof speedup, "%7.2fx", te / s.step_time_s);
    std::string label = r.candidate == r.name ? r.name : r.name + " (" + r.candidate + ")";
    if (s.extrapolated.axis != extrapolation_axis::none) label += " *";
    std::printf("%-34s %10.1f %10.0f %s %6.3f %6.2f %8.1f %9.1f %9.1f\n", label.c_str(), s.step_time_s * 1e3, s.tokens_per_s,
                speedup, s.efficiency, s.imbalance, s.cross_node_bytes / 1e9, comm / n * 1e3, idle / n * 1e3);
  }
  for (const auto& [name, reason] : refused) std::printf("%-34s refused: %s\n", name.c_str(), reason.c_str());
  for (const auto& r : runs) {
    const step_extrapolation& x = r.result.extrapolated;
    if (x.axis == extrapolation_axis::members)
      std::printf("* %s: its one group of every rank is too large to build; priced on %lld and %lld ranks, extrapolated over the "
                  "group's identical rounds\n",
                  r.name.c_str(), static_cast<long long>(x.from[0]), static_cast<long long>(x.from[1]));
    if (x.axis == extrapolation_axis::documents)
      std::printf("* %s: its shards of %d documents are too many to build; priced on %lld and %lld of them, extrapolated over the "
                  "documents\n",
                  r.name.c_str(), b.size(), static_cast<long long>(x.from[0]), static_cast<long long>(x.from[1]));
  }
  std::printf("\nlower bound (perfect balance, no exposed communication): %.1f ms; comm/idle: mean per rank\n",
              runs.empty() ? 0.0 : runs.front().result.lower_bound_s * 1e3);
  if (!o.trace_file.empty()) std::printf("trace of %s written to %s\n", o.trace_method.c_str(), o.trace_file.c_str());
}

void add_simulate_command(CLI::App& app) {
  auto options = std::make_shared<simulate_options>();
  CLI::App* cmd = app.add_subcommand("simulate", "plan and simulate a training step with every method (the main job)");
  auto* dataset = cmd->add_option("--dataset", options->dataset, "Table 2 length distribution: arxiv, github, prolong64k")
                      ->capture_default_str();
  cmd->add_option("--lengths", options->lengths_file, "file of sequence lengths, one per line")
      ->check(CLI::ExistingFile)
      ->excludes(dataset);
  add_size_option(cmd, "--tokens", options->tokens, "total tokens of the sampled batch (e.g. 131072, 128K, 1M)")->capture_default_str();
  add_integer_option(cmd, "--seed", options->seed, "sampler seed")->capture_default_str();
  cmd->add_option("--cluster", options->cluster, "cluster preset: a, b, c, wlb, hydraulis, infinipipe")->capture_default_str();
  add_integer_option(cmd, "--nodes", options->nodes, "number of nodes")->capture_default_str()->check(example_cli::positive());
  add_integer_option(cmd, "--gpus-per-node", options->gpus_per_node, "GPUs per node (default: the preset's 8)")
      ->check(example_cli::positive());
  cmd->add_option("--model", options->model, "model preset: 3b, 7b, 13b, 30b, 70b, 550m, 8x550m, llama3-8b, gpt-7b, ...")
      ->capture_default_str();
  auto* methods = cmd->add_option("--methods", options->methods,
                                  "comma-separated: te_cp, llama_cp, ulysses, hybrid_dp, te_cp+routing, te_cp+routing+engine, "
                                  "zeppelin_paper, zeppelin; or all")
                      ->capture_default_str();
  cmd->add_option("--method", options->method, "one method (see --methods)")->excludes(methods);
  cmd->add_option("--record", options->record_file,
                  "write the execution record (JSON: every transfer and launch of one layer) of the one method simulated");
  add_integer_option(cmd, "--heads", options->heads, "query heads (default: the model's)")->check(CLI::Range(1, 65535));
  add_integer_option(cmd, "--kv-heads", options->kv_heads, "K/V heads (default: the model's)")->check(CLI::Range(1, 65535));
  add_integer_option(cmd, "--head-dim", options->head_dim, "head dimension (default: the model's)")->check(CLI::Range(1, 4096));
  cmd->add_option("--dtype", options->element_bytes, "element type of the activations: bf16, fp16, fp32, fp64 (default: the model's)")
      ->transform(example_cli::one_of({{"bf16", 2}, {"fp16", 2}, {"fp32", 4}, {"fp64", 8}}));
  add_integer_option(cmd, "--tp", options->tensor_parallel, "TP size inside CP (default: 2 for 13B on a and 30B on c, else 1)")
      ->check(example_cli::positive());
  add_integer_option(cmd, "--layers", options->chained_layers, "layers simulated back to back per phase (0 = all)")
      ->capture_default_str()
      ->check(example_cli::non_negative());
  add_threads_option(cmd, options->threads);
  cmd->add_option("--slack", options->slack, "capacity headroom over the average tokens per GPU (0 = exact fill)")
      ->capture_default_str()
      ->check(example_cli::non_negative());
  cmd->add_flag("--no-contention", options->no_contention, "no SM contention between NCCL kernels and compute");
  cmd->add_option("--launch", options->launch,
                  "attention launches: per_group (one per ring group and round) or fused_round (one per GPU, level and round "
                  "over all its rings); default: each method's own")
      ->transform(example_cli::one_of({{"per_group", static_cast<long long>(zeppelin::launch_policy::per_group)},
                                       {"fused_round", static_cast<long long>(zeppelin::launch_policy::fused_round)}}));
  cmd->add_option("--trace", options->trace_file, "write a Chrome trace JSON (Perfetto) of --trace-method");
  cmd->add_option("--trace-method", options->trace_method, "method whose trace --trace writes")->capture_default_str();
  cmd->add_flag("--json", options->json, "print JSON");
  cmd->callback([options] { run_simulate(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(10, add_simulate_command);

}  // namespace zeppelin_tool
