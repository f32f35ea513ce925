// examples/zeppelin/pack.cpp
// `zeppelin pack`: pack a stream of documents into micro-batches, iteration by iteration
// (pack/stream.hpp), with one of the packers of WLB-LLM's Table 2.
// In:  --method original | fixed_greedy | fixed_exact | wlb, --lengths FILE (one document
//      length per line, data/length_file.hpp), --micro-batches N, --max-tokens L,
//      --queues K (wlb: outlier queues at 1/2, 3/4, 7/8 ... of L; default 2),
//      --window W (fixed_greedy: global batches packed together; default 1),
//      --max-wait M (wlb: the longest a document waits, iterations; default 32),
//      --keep-pending (do not flush at the end of data), --json; and, to price every
//      iteration on the step simulator (sim/simulate_step.hpp), --simulate with --model,
//      --cluster, --tp, --cp, --stages P (the iteration's N micro-batches run on N / P
//      data-parallel replicas of P stages) and --layout (each micro-batch's CP layout: a
//      partitioner name, or "adaptive": WLB-LLM's per-micro-batch choice between
//      per_document and per_sequence).
// Arrivals: N x L tokens of documents per iteration, in file order.
// Out: per iteration its micro-batches (documents as file indices, tokens, workload), the
//      documents left pending, the mean workload imbalance (max / mean of W = W_a + W_l over
//      an iteration's micro-batches, pack/workload.hpp's default model, averaged over the
//      iterations holding documents) and the token-weighted mean delay; with --json
//      {"iterations":[{"micro_batches":[{"docs":[...],"tokens":t}]}],"pending":[...],"imbalance":x}
//      (with --simulate each iteration also has "step_s", and the object "seconds": their sum).
// Bad input (a document longer than L, N or L below 1, an unknown method) is an error: a
// message on stderr and exit status 1.
#include "commands.hpp"


#include <zeppelin/checkpoint/basic_policies.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/pack.hpp>
#include <zeppelin/pack/packed_stream.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace zeppelin_tool {
namespace {

struct pack_options {
  std::string method = "wlb";
  std::string lengths_file;
  int micro_batches = 4;
  std::int64_t max_tokens = 131072;
  int queues = 2;
  int window = 1;
  std::int64_t max_wait = zeppelin::wlb{}.max_wait;
  bool keep_pending = false;
  bool json = false;
  bool simulate = false;
  std::string model = "7b";
  std::string cluster = "wlb";
  int tp = 1;
  int cp = 1;
  int stages = 0;  // 0: the micro-batches (one replica)
  std::string layout = "per_document";
};

// Each iteration's step on the one simulator (see the file comment): seconds per iteration,
// 0 for one without documents.
std::vector<double> simulate_iterations(const pack_options& o, const zeppelin::packing_run& run, std::span<const zeppelin::token_count> lengths) {
  using namespace zeppelin;
  const model_config model = model_by_name(o.model);
  const int stages = o.stages == 0 ? o.micro_batches : o.stages;
  ZEPPELIN_EXPECTS(stages >= 1 && o.micro_batches % stages == 0, "--stages must divide --micro-batches (N = stages x replicas)",
                   {{"stages", double(stages)}, {"micro_batches", double(o.micro_batches)}});
  step_shape shape;
  shape.layout = {.tp = o.tp, .cp = o.cp, .pp = stages, .dp = o.micro_batches / stages};
  validate(shape.layout);
  shape.schedule = make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b);
  shape.tp_mode = tp_collectives::sequence_parallel;
  shape.sync = gradient_sync::sharded_optimizer;
  const int per_node = cluster_by_name(o.cluster, 1).gpus_per_node();
  const topology cluster = cluster_by_name(o.cluster, static_cast<int>((shape.layout.gpus() + per_node - 1) / per_node));
  packing_method method;
  if (o.layout == "adaptive")
    method.layout = packing_methods::wlb_4d({model, cluster.gpu(), shape.layout}, o.max_tokens, 1.0).layout;
  else
    method.layout = {partitioner_by_name(o.layout, {.capacity = o.max_tokens})};
  const sim_cost_model cost = sim_cost_model::for_topology(cluster);
  std::vector<double> out;
  for (const packed_iteration& it : run.iterations) {
    const auto plan = packed_iteration_step_plan(it, lengths, method, shape, full_recompute{}, model, cluster);
    out.push_back(plan ? simulate_step(make_step_program(*plan, cluster, model), cluster, cost, {.pricing = block_pricing::per_shape}).iteration_s : 0.0);
  }
  return out;
}

void run_pack(const pack_options& o) {
  using namespace zeppelin;
  any_packer chosen = make_packer(packer_kind_by_name(o.method));
  if (auto* w = std::get_if<wlb>(&chosen.policy)) {
    *w = wlb::with_queues(o.queues);
    w->max_wait = o.max_wait;
  }
  if (auto* g = std::get_if<fixed_greedy>(&chosen.policy)) g->window = o.window;
  const std::vector<token_count> lengths = read_lengths_file(o.lengths_file);
  const packing_limits limits{.micro_batches = o.micro_batches, .max_tokens = o.max_tokens};
  const packing_run run = pack_stream(chosen, lengths, limits,
                                      {.at_end = o.keep_pending ? stream_end::keep_pending : stream_end::flush});
  const double imbalance = mean_workload_imbalance(run.iterations);
  const std::vector<double> step_s = o.simulate ? simulate_iterations(o, run, lengths) : std::vector<double>{};
  double seconds = 0;
  for (const double s : step_s) seconds += s;
  if (o.json) {
    auto j = with_format<nlohmann::ordered_json>("pack");
    j["iterations"] = nlohmann::ordered_json::array();
    for (std::size_t t = 0; t < run.iterations.size(); ++t) {
      nlohmann::ordered_json mbs = nlohmann::ordered_json::array();
      for (const packed_micro_batch& mb : run.iterations[t].micro_batches) mbs.push_back({{"docs", mb.documents}, {"tokens", mb.tokens}});
      nlohmann::ordered_json iteration{{"micro_batches", std::move(mbs)}};
      if (o.simulate) iteration["step_s"] = step_s[t];
      j["iterations"].push_back(std::move(iteration));
    }
    j["pending"] = run.pending;
    j["imbalance"] = imbalance;
    if (o.simulate) j["seconds"] = seconds;
    std::cout << j.dump() << '\n';
    return;
  }
  std::printf("%s: %zu documents, %d micro-batches x %lld tokens per iteration -> %zu iterations, %zu pending\n",
              std::string(to_string(chosen.kind())).c_str(), lengths.size(), o.micro_batches,
              static_cast<long long>(o.max_tokens), run.iterations.size(), run.pending.size());
  for (std::size_t t = 0; t < run.iterations.size(); ++t) {
    const packed_iteration& it = run.iterations[t];
    if (o.simulate)
      std::printf("iteration %zu: imbalance %.4f, step %.4f s\n", t, workload_imbalance(it), step_s[t]);
    else
      std::printf("iteration %zu: imbalance %.4f\n", t, workload_imbalance(it));
    for (std::size_t m = 0; m < it.micro_batches.size(); ++m) {
      const packed_micro_batch& mb = it.micro_batches[m];
      std::printf("  mb %zu: %8lld tokens, workload %.6g, docs", m, static_cast<long long>(mb.tokens), mb.workload);
      for (const std::int64_t d : mb.documents) std::printf(" %lld", static_cast<long long>(d));
      std::printf("\n");
    }
  }
  std::printf("mean imbalance %.4f; mean delay %.4f iterations per token\n", imbalance, mean_token_delay(run, lengths));
  if (o.simulate) std::printf("simulated: %.4f s for the stream (model %s on cluster %s)\n", seconds, o.model.c_str(), o.cluster.c_str());
}

void add_pack_command(CLI::App& app) {
  auto options = std::make_shared<pack_options>();
  CLI::App* cmd = app.add_subcommand("pack", "pack a stream of documents into micro-batches per iteration (WLB-LLM)");
  cmd->add_option("--method", options->method, "original, fixed_greedy, fixed_exact or wlb")->capture_default_str();
  cmd->add_option("--lengths", options->lengths_file, "file with one document length per line")->required()->check(CLI::ExistingFile);
  add_integer_option(cmd, "--micro-batches", options->micro_batches, "micro-batches per iteration N")->capture_default_str();
  add_size_option(cmd, "--max-tokens", options->max_tokens, "tokens per micro-batch at most, L (e.g. 16384, 16K)")->capture_default_str();
  add_integer_option(cmd, "--queues", options->queues, "wlb: outlier queues (thresholds 1/2, 3/4, 7/8, ... of L)")
      ->capture_default_str();
  add_integer_option(cmd, "--window", options->window, "fixed_greedy: global batches packed together")->capture_default_str();
  add_integer_option(cmd, "--max-wait", options->max_wait, "wlb: iterations a document may wait at most")->capture_default_str();
  cmd->add_flag("--keep-pending", options->keep_pending, "leave what the packer holds at the end of data unemitted");
  cmd->add_flag("--json", options->json,
                "print {\"iterations\":[{\"micro_batches\":[{\"docs\":[...],\"tokens\":t}]}],\"pending\":[...],\"imbalance\":x}");
  cmd->add_flag("--simulate", options->simulate, "price every iteration's step on the step simulator");
  cmd->add_option("--model", options->model, "--simulate: model preset")->capture_default_str();
  cmd->add_option("--cluster", options->cluster, "--simulate: cluster preset")->capture_default_str();
  add_integer_option(cmd, "--tp", options->tp, "--simulate: tensor-parallel degree")->capture_default_str();
  add_integer_option(cmd, "--cp", options->cp, "--simulate: context-parallel degree")->capture_default_str();
  add_integer_option(cmd, "--stages", options->stages, "--simulate: pipeline stages (0: one stage per micro-batch)")->capture_default_str();
  cmd->add_option("--layout", options->layout, "--simulate: CP layout, a partitioner name or adaptive")->capture_default_str();
  cmd->callback([options] { run_pack(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(35, add_pack_command);

}  // namespace zeppelin_tool
