// examples/zeppelin/pipeline.cpp
// `zeppelin pipeline`: build a pipeline schedule for a list of micro-batches and simulate one
// iteration of it (sim/pipeline_simulator.hpp) on a cluster.
// In:  --schedule gpipe | 1f1b | interleaved, --stages P, --virtual-stages V (interleaved),
//      --micro-batch-tokens a,b,c,... (one entry per micro-batch, in pipeline order; an entry
//      "x+y+z" packs documents x, y, z into one micro-batch, a plain "x" is one document),
//      --model M, --cluster C, --tp, --cp, --cp-sharding per_document | padding_free |
//      per_sequence | adaptive (how each CP group shares a micro-batch), --checkpoint none | full |
//      selective:K[,K1,...],
//      --trace FILE (Chrome / Perfetto JSON), --json.
// Out: per stage busy, bubble, recompute time and peak memory, the iteration time and bubble
//      ratio; with --json
//      {"stages":P,"schedule":"1f1b","virtual_stages":V,"checkpoint":"none",
//       "ops":[[{"op":"F","mb":k,"chunk":c},...] one list per stage in execution order],
//       "iteration_s":..,"bubble_ratio":..,"peak_memory_gib":[per stage],
//       "recompute_s":[per stage],"attention_imbalance":..,"latency_imbalance":..}.
// Bad input (0 stages, more stages than layers, a micro-batch that does not fit in memory, an
// unknown schedule or policy) is an error: a message on stderr and exit status 1.
#include "commands.hpp"

#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/adaptive_cp_sharding.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/pipeline_simulator.hpp>
#include <zeppelin/sim/pipeline_trace.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <variant>
#include <vector>

namespace zeppelin_tool {
namespace {

struct pipeline_options {
  std::string schedule = "1f1b";
  int stages = 4;
  int virtual_stages = 1;
  std::string micro_batch_tokens = "8192,8192,8192,8192,8192,8192,8192,8192";
  std::string model = "7b";
  std::string cluster = "c";
  int tp = 1;
  int cp = 1;
  std::string cp_sharding = "per_document";
  std::string checkpoint = "none";
  std::string trace_file;
  bool json = false;
};

//! "a,b+c,d" -> micro-batches {a}, {b, c}, {d}.
std::vector<zeppelin::micro_batch> parse_micro_batches(const std::string& text) {
  std::vector<zeppelin::micro_batch> out(1);
  const char* at = text.data();
  const char* const end = text.data() + text.size();
  while (true) {
    long long v = 0;
    const auto [ptr, ec] = std::from_chars(at, end, v);
    ZEPPELIN_EXPECTS(ec == std::errc{} && ptr != at && v >= 1,
                     "--micro-batch-tokens must be positive integers separated by ',' (micro-batches) or '+' (documents)",
                     {{"micro_batch", double(out.size() - 1)}, {"document", double(out.back().documents.size())}});
    out.back().documents.push_back(v);
    if (ptr == end) break;
    ZEPPELIN_EXPECTS(*ptr == ',' || *ptr == '+', "--micro-batch-tokens: unexpected character after a length",
                     {{"micro_batch", double(out.size() - 1)}});
    if (*ptr == ',') out.emplace_back();
    at = ptr + 1;
  }
  return out;
}

void run_pipeline(const pipeline_options& o) {
  using namespace zeppelin;
  const model_config model = model_by_name(o.model);
  const parallel_layout layout{.tp = o.tp, .cp = o.cp, .pp = o.stages, .dp = 1};
  validate(layout);
  const int per_node = cluster_by_name(o.cluster, 1).gpus_per_node();
  const auto gpus = layout.gpus();
  const topology cluster = cluster_by_name(o.cluster, static_cast<int>((gpus + per_node - 1) / per_node));
  const any_pipeline_schedule schedule = make_pipeline_schedule(pipeline_schedule_kind_by_name(o.schedule), o.virtual_stages);
  const any_checkpoint_policy checkpoint = checkpoint_policy_by_name(o.checkpoint);
  const std::vector<std::vector<micro_batch>> replicas{parse_micro_batches(o.micro_batch_tokens)};
  analytic_stage_time time = analytic_stage_time::for_gpu(model, cluster.gpu(), o.tp, o.cp);
  time.sharding = cp_sharding_by_name(o.cp_sharding, std::get<adaptive_sharding>(time.with_adaptive_sharding().sharding.sharding));
  const pipeline_memory_model memory{model, layout, {}};
  const pipeline_sim_result r = simulate_pipeline(replicas, schedule, checkpoint, time, memory, cluster);
  const pipeline_schedule& s = r.schedules.front();
  constexpr double gib = double(1ull << 30);

  if (!o.trace_file.empty()) {
    std::ofstream out(o.trace_file);
    ZEPPELIN_EXPECTS(out.good(), "cannot open the --trace file for writing: " + o.trace_file, {});
    write_pipeline_trace(out, r);
  }
  if (o.json) {
    auto j = with_format<nlohmann::json>("pipeline");
    j["stages"] = s.stages;
    j["schedule"] = std::string(to_string(s.kind));
    j["virtual_stages"] = s.virtual_stages;
    j["checkpoint"] = to_string(checkpoint);
    j["ops"] = nlohmann::json::array();
    for (const auto& ops : s.ops) {
      nlohmann::json stage = nlohmann::json::array();
      for (const pipeline_op& op : ops)
        if (is_compute(op.kind)) stage.push_back({{"op", std::string(to_string(op.kind))}, {"mb", op.micro_batch}, {"chunk", op.chunk}});
      j["ops"].push_back(std::move(stage));
    }
    j["iteration_s"] = r.iteration_s;
    j["bubble_ratio"] = r.bubble_ratio;
    j["peak_memory_gib"] = nlohmann::json::array();
    j["recompute_s"] = nlohmann::json::array();
    for (int p = 0; p < s.stages; ++p) {
      j["peak_memory_gib"].push_back(r.peak_memory_bytes(p) / gib);
      j["recompute_s"].push_back(r.stages[0][static_cast<std::size_t>(p)].recompute_s);
    }
    j["attention_imbalance"] = r.attention_imbalance;
    j["latency_imbalance"] = r.latency_imbalance;
    std::cout << j.dump() << '\n';
    return;
  }
  std::printf("%s, %d stages x %d chunks, %d micro-batches; model %s, TP %d, CP %d on cluster %s (%s, %.0f GiB); checkpoint %s\n",
              std::string(to_string(s.kind)).c_str(), s.stages, s.virtual_stages, s.micro_batches(), model.name.c_str(), o.tp,
              o.cp, o.cluster.c_str(), cluster.gpu().name.c_str(), cluster.gpu().memory_bytes / gib, to_string(checkpoint).c_str());
  std::printf("%6s %10s %10s %10s %12s %10s %10s\n", "stage", "busy_s", "bubble_s", "recomp_s", "peak_GiB", "in_flight", "cp_wait_s");
  for (int p = 0; p < s.stages; ++p) {
    const pipeline_stage_report& st = r.stages[0][static_cast<std::size_t>(p)];
    std::printf("%6d %10.4f %10.4f %10.4f %12.2f %10d %10.4f\n", p, st.busy_s, st.bubble_s, st.recompute_s, st.memory.peak_bytes / gib,
                st.memory.in_flight, st.cp_wait_s);
  }
  std::printf("iteration %.4f s, bubble ratio %.4f; imbalance: attention %.3f, latency x PP %.3f\n", r.iteration_s, r.bubble_ratio,
              r.attention_imbalance, r.latency_imbalance);
}

void add_pipeline_command(CLI::App& app) {
  auto options = std::make_shared<pipeline_options>();
  CLI::App* cmd = app.add_subcommand("pipeline", "build a pipeline schedule and simulate one iteration of it");
  cmd->add_option("--schedule", options->schedule, "gpipe, 1f1b or interleaved")->capture_default_str();
  add_integer_option(cmd, "--stages", options->stages, "pipeline stages P")->capture_default_str();
  add_integer_option(cmd, "--virtual-stages", options->virtual_stages, "model chunks per stage V (interleaved)")
      ->capture_default_str();
  cmd->add_option("--micro-batch-tokens", options->micro_batch_tokens,
                  "tokens of each micro-batch, comma-separated; '+' packs several documents into one (4096+4096,8192)")
      ->capture_default_str();
  cmd->add_option("--model", options->model, "model preset (7b, 13b, 30b, 70b, gpt-7b, ...)")->capture_default_str();
  cmd->add_option("--cluster", options->cluster, "cluster preset (a, b, c, wlb, hydraulis, infinipipe)")->capture_default_str();
  add_integer_option(cmd, "--tp", options->tp, "tensor-parallel degree inside each stage")->capture_default_str();
  add_integer_option(cmd, "--cp", options->cp, "context-parallel degree inside each stage")->capture_default_str();
  cmd->add_option("--cp-sharding", options->cp_sharding, "per_document, padding_free, per_sequence or adaptive (WLB-LLM's per-micro-batch choice)")
      ->capture_default_str();
  cmd->add_option("--checkpoint", options->checkpoint, "none, full, selective:K or selective:K0,K1,... (layers per stage)")
      ->capture_default_str();
  cmd->add_option("--trace", options->trace_file, "write a Chrome / Perfetto trace with one track per stage");
  cmd->add_flag("--json", options->json, "print the schedule's ops and the simulated figures as JSON");
  cmd->callback([options] { run_pipeline(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(45, add_pipeline_command);

}  // namespace zeppelin_tool
