// examples/zeppelin/pipeline.cpp
// `zeppelin pipeline`: build the step plan of a list of micro-batches on a TP x CP x PP x DP
// layout, and simulate one iteration of its step program (sim/simulate_step.hpp): the
// pipeline schedule, the tensor-, context- and data-parallel traffic and the recomputation,
// all priced in one event engine.
// In:  --schedule gpipe | 1f1b | interleaved | chunk-1f1b, --stages P, --virtual-stages V
//      (interleaved), --micro-batch-tokens a,b,c,... (one entry per micro-batch, in pipeline
//      order, dealt round-robin to the --dp replicas; "x+y+z" packs documents x, y, z into one
//      micro-batch, a plain "x" is one document), --model M, --cluster C, --tp, --cp, --dp,
//      --partitioner NAME (each micro-batch's CP layout), --tp-collectives all_reduce |
//      sequence_parallel, --sync all_reduce | sharded_optimizer | fully_sharded | switching,
//      --checkpoint none | full | selective:K[,K1,...] | stage_aware:S:B...:C..., --pricing every_op | per_shape,
//      --trace FILE (Chrome / Perfetto JSON), --record FILE (the step record), --json;
//      or --job FILE (a step job, examples/common/step_job.hpp: what train_gpt --write-job
//      wrote) instead of the flags that build the plan: its cluster, model, step program
//      options and step plan are simulated as they are, so --record writes the very record
//      of the trainer's run of the same step (partitioner and checkpoint then read "job").
// Out: per stage busy, bubble and recompute seconds, the seconds TP, CP, PP and DP transfers
//      were in flight, peak memory; the iteration time and bubble ratio; with --json
//      {"format":"zeppelin.pipeline","version":1,"stages":P,"schedule":"1f1b","virtual_stages":V,
//       "checkpoint":"none","layout":{"tp","cp","pp","dp"},"partitioner":..,"tp_collectives":..,
//       "sync":..,"pricing":..,
//       "ops":[[{"op":"F","mb":k,"chunk":c},...] one list per stage of replica 0, in order],
//       "iteration_s":..,"bubble_ratio":..,"peak_memory_gib":[per stage],
//       "recompute_s":[per stage],"attention_imbalance":..,"latency_imbalance":..,
//       "stage_reports":[{"replica","stage","busy_s","bubble_s","peak_memory_gib",
//         "classes":{"compute":{"seconds"},"recompute":{"seconds"},"tp":{"seconds","bytes"},
//                    "cp":{..},"pp":{..},"dp":{..}}}]}  (docs/formats.md).
// Bad input (0 stages, more stages than layers, a micro-batch that does not fit in memory, an
// unknown schedule or policy) is an error: a message on stderr and exit status 1; so is an
// output that cannot be written.
#include "commands.hpp"

#include "../common/step_job.hpp"

#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/output_file.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/sim/step_trace.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/step/record.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <system_error>
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
  int dp = 1;
  std::string partitioner = "per_document";
  std::string tp_collectives = "sequence_parallel";
  std::string sync = "sharded_optimizer";
  std::string checkpoint = "none";
  std::string pricing = "every_op";
  std::string trace_file;
  std::string record_file;
  std::string job_file;
  bool json = false;
};

//! "a,b+c,d" -> micro-batches {a}, {b, c}, {d} of document lengths.
std::vector<std::vector<zeppelin::token_count>> parse_micro_batches(const std::string& text) {
  std::vector<std::vector<zeppelin::token_count>> out(1);
  const char* at = text.data();
  const char* const end = text.data() + text.size();
  while (true) {
    long long v = 0;
    const auto [ptr, ec] = std::from_chars(at, end, v);
    ZEPPELIN_EXPECTS(ec == std::errc{} && ptr != at && v >= 1 && v <= zeppelin::max_sequence_length,
                     "--micro-batch-tokens must be positive integers separated by ',' (micro-batches) or '+' (documents)",
                     {{"micro_batch", double(out.size() - 1)}, {"document", double(out.back().size())}});
    out.back().push_back(v);
    if (ptr == end) break;
    ZEPPELIN_EXPECTS(*ptr == ',' || *ptr == '+', "--micro-batch-tokens: unexpected character after a length",
                     {{"micro_batch", double(out.size() - 1)}});
    if (*ptr == ',') out.emplace_back();
    at = ptr + 1;
  }
  return out;
}

template <class Enum, std::size_t N>
Enum by_name(const std::string& text, const Enum (&values)[N], const char* what) {
  std::string valid;
  for (const Enum v : values) {
    if (to_string(v) == text) return v;
    valid += (valid.empty() ? "" : ", ") + std::string(to_string(v));
  }
  ZEPPELIN_THROW(invalid_argument, std::string("unknown ") + what + " '" + text + "' (valid: " + valid + ")", {});
}

//! The smallest cluster of the preset that holds the flags' layout.
zeppelin::topology flags_cluster(const pipeline_options& o, const zeppelin::step_shape& shape) {
  using namespace zeppelin;
  const int per_node = cluster_by_name(o.cluster, 1).gpus_per_node();
  return cluster_by_name(o.cluster, static_cast<int>((shape.layout.gpus() + per_node - 1) / per_node));
}

//! The step plan the flags describe on `cluster`: the micro-batches of whole documents, dealt
//! round-robin to the replicas.
zeppelin::step_plan plan_from_flags(const pipeline_options& o, const zeppelin::topology& cluster, const zeppelin::model_config& model,
                                    const zeppelin::step_shape& shape, const zeppelin::any_checkpoint_policy& checkpoint) {
  using namespace zeppelin;
  const std::vector<std::vector<token_count>> micro_batches = parse_micro_batches(o.micro_batch_tokens);
  ZEPPELIN_EXPECTS(micro_batches.size() >= static_cast<std::size_t>(o.dp), "every data-parallel replica needs a micro-batch",
                   {{"micro_batches", double(micro_batches.size())}, {"dp", double(o.dp)}});
  std::vector<token_count> documents;
  std::vector<std::vector<std::vector<step_piece>>> pieces(static_cast<std::size_t>(o.dp));
  token_count largest = 1;
  for (std::size_t k = 0; k < micro_batches.size(); ++k) {
    auto& mb = pieces[k % static_cast<std::size_t>(o.dp)].emplace_back();
    token_count tokens = 0;
    for (const token_count d : micro_batches[k]) {
      mb.push_back({static_cast<std::int64_t>(documents.size()), 0, d});
      documents.push_back(d);
      tokens += d;
    }
    largest = std::max(largest, tokens);
  }
  const any_partitioner layout = partitioner_by_name(o.partitioner, {.capacity = largest});
  return make_step_plan(cluster, model, documents, std::move(pieces), shape, layout, checkpoint);
}

//! The step job of file `path`.
example_cli::step_job read_job(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZEPPELIN_EXPECTS(in.is_open(), "cannot open the --job file: " + path, {});
  std::ostringstream text;
  text << in.rdbuf();
  ZEPPELIN_EXPECTS(!in.bad(), "reading the --job file failed: " + path, {});
  return example_cli::read_step_job(text.str());
}

void run_pipeline(const pipeline_options& o) {
  using namespace zeppelin;
  const model_config model = model_by_name(o.model);
  step_shape shape;
  shape.layout = {.tp = o.tp, .cp = o.cp, .pp = o.stages, .dp = o.dp};
  validate(shape.layout);
  shape.schedule = make_pipeline_schedule(pipeline_schedule_kind_by_name(o.schedule), o.virtual_stages);
  constexpr tp_collectives tp_modes[] = {tp_collectives::all_reduce, tp_collectives::sequence_parallel};
  constexpr gradient_sync syncs[] = {gradient_sync::all_reduce, gradient_sync::sharded_optimizer, gradient_sync::fully_sharded,
                                     gradient_sync::switching};
  constexpr block_pricing pricings[] = {block_pricing::every_op, block_pricing::per_shape};
  shape.tp_mode = by_name(o.tp_collectives, tp_modes, "TP collective mode");
  shape.sync = by_name(o.sync, syncs, "gradient sync");
  const block_pricing pricing = by_name(o.pricing, pricings, "block pricing");
  const any_checkpoint_policy checkpoint = checkpoint_policy_by_name(o.checkpoint);
  const bool from_job = !o.job_file.empty();
  const example_cli::step_job job =
      from_job ? read_job(o.job_file)
               : example_cli::step_job{.cluster = o.cluster, .nodes = 1, .gpus_per_node = 1, .model = model, .options = {}, .plan = {}};
  const topology cluster = from_job ? job.topology() : flags_cluster(o, shape);
  const step_plan plan = from_job ? job.plan : plan_from_flags(o, cluster, model, shape, checkpoint);
  if (from_job) {
    const step_replica& r = plan.replicas.front();
    shape = {{.tp = r.tp, .cp = r.cp, .pp = r.pp, .dp = static_cast<int>(job.plan.replicas.size())}, r.tp_mode, r.schedule, job.plan.sync};
  }
  // the job's own options, or what the flags give: activations and parameters in the model's
  // element size
  step_program_options po = job.options;
  if (!from_job) po.activation_bytes = po.parameter_bytes = model.bytes_per_element;
  const std::string partitioner = from_job ? "job" : o.partitioner;
  const std::string checkpoint_name = from_job ? "job" : to_string(checkpoint);
  std::size_t micro_batch_count = 0;
  for (const step_replica& r : plan.replicas) micro_batch_count += r.micro_batches.size();
  const step_program prog = make_step_program(plan, cluster, job.model, po);

  step_sim_options so;
  so.pricing = pricing;
  so.record = !o.record_file.empty();
  so.keep_run = !o.trace_file.empty();
  ZEPPELIN_EXPECTS(!so.record || pricing == block_pricing::every_op, "--record needs --pricing every_op (every op priced)", {});
  const step_sim_result r = simulate_step(prog, cluster, sim_cost_model::for_topology(cluster), so);
  constexpr double gib = double(1ull << 30);

  if (!o.trace_file.empty())
    write_output_file(o.trace_file, [&](std::ostream& out) { write_step_trace(out, prog, r); }, "--trace");
  if (!o.record_file.empty())
    write_output_file(o.record_file, [&](std::ostream& out) { write_step_record_json(out, r.record); }, "--record");

  const step_replica& first = plan.replicas.front();
  if (o.json) {
    auto j = with_format<nlohmann::json>("pipeline");
    j["stages"] = first.pp;
    j["schedule"] = std::string(to_string(first.schedule.kind()));
    j["virtual_stages"] = first.virtual_stages();
    j["checkpoint"] = checkpoint_name;
    j["layout"] = {{"tp", shape.layout.tp}, {"cp", shape.layout.cp}, {"pp", shape.layout.pp}, {"dp", shape.layout.dp}};
    j["partitioner"] = partitioner;
    j["tp_collectives"] = std::string(to_string(shape.tp_mode));
    j["sync"] = std::string(to_string(shape.sync));
    j["pricing"] = std::string(to_string(pricing));
    // replica 0's blocks, per stage, in the order its first rank runs them
    j["ops"] = nlohmann::json::array();
    for (int s = 0; s < first.pp; ++s) {
      nlohmann::json stage = nlohmann::json::array();
      for (const step_op& op : prog.ranks[static_cast<std::size_t>(first.rank_of(0, 0, s))]) {
        if (op.kind != step_op_kind::block) continue;
        const step_block& b = prog.blocks[static_cast<std::size_t>(op.index)];
        stage.push_back({{"op", b.pass == step_pass::forward ? "F" : "B"}, {"mb", b.micro_batch}, {"chunk", b.virtual_stage / first.pp}});
      }
      j["ops"].push_back(std::move(stage));
    }
    j["iteration_s"] = r.iteration_s;
    j["bubble_ratio"] = r.bubble_ratio;
    j["peak_memory_gib"] = nlohmann::json::array();
    j["recompute_s"] = nlohmann::json::array();
    for (int s = 0; s < first.pp; ++s) {
      const step_stage_report& st = r.stage(0, s);
      j["peak_memory_gib"].push_back(st.memory.peak_bytes / gib);
      j["recompute_s"].push_back(st.recompute_s);
    }
    j["attention_imbalance"] = r.attention_imbalance;
    j["latency_imbalance"] = r.latency_imbalance;
    j["stage_reports"] = nlohmann::json::array();
    for (const step_stage_report& st : r.stages) {
      nlohmann::json classes{{"compute", {{"seconds", st.compute_s}}}, {"recompute", {{"seconds", st.recompute_s}}}};
      for (int k = 0; k < traffic_classes; ++k)
        classes[std::string(to_string(static_cast<traffic_class>(k)))] = {{"seconds", st.traffic_s[static_cast<std::size_t>(k)]},
                                                                        {"bytes", st.traffic_bytes[static_cast<std::size_t>(k)]}};
      j["stage_reports"].push_back({{"replica", st.replica},
                                    {"stage", st.stage},
                                    {"busy_s", st.busy_s},
                                    {"bubble_s", st.bubble_s},
                                    {"peak_memory_gib", st.memory.peak_bytes / gib},
                                    {"classes", std::move(classes)}});
    }
    std::cout << j.dump() << '\n';
    return;
  }
  std::ostream& out = std::cout;
  {
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s, %d stages x %d chunks, %zu micro-batches; model %s, TP %d, CP %d, DP %d on cluster %s (%s, %.0f GiB); checkpoint %s\n",
                  std::string(to_string(first.schedule.kind())).c_str(), first.pp, first.virtual_stages(), micro_batch_count,
                  job.model.name.c_str(), shape.layout.tp, shape.layout.cp, shape.layout.dp, job.cluster.c_str(), cluster.gpu().name.c_str(),
                  cluster.gpu().memory_bytes / gib, checkpoint_name.c_str());
    out << line;
    std::snprintf(line, sizeof line, "layouts %s, TP collectives %s, gradient sync %s, %s pricing\n", partitioner.c_str(),
                  std::string(to_string(shape.tp_mode)).c_str(), std::string(to_string(shape.sync)).c_str(),
                  std::string(to_string(pricing)).c_str());
    out << line;
    std::snprintf(line, sizeof line, "%7s %6s %9s %9s %9s %9s %9s %9s %9s %9s\n", "replica", "stage", "busy_s", "bubble_s", "recomp_s", "tp_s",
                  "cp_s", "pp_s", "dp_s", "peak_GiB");
    out << line;
    for (const step_stage_report& st : r.stages) {
      std::snprintf(line, sizeof line, "%7d %6d %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.4f %9.2f\n", st.replica, st.stage, st.busy_s, st.bubble_s,
                    st.recompute_s, st.traffic_s[0], st.traffic_s[1], st.traffic_s[2], st.traffic_s[3], st.memory.peak_bytes / gib);
      out << line;
    }
    std::snprintf(line, sizeof line, "iteration %.4f s, bubble ratio %.4f; imbalance: attention %.3f, latency %.3f\n", r.iteration_s,
                  r.bubble_ratio, r.attention_imbalance, r.latency_imbalance);
    out << line;
  }
}

void add_pipeline_command(CLI::App& app) {
  auto options = std::make_shared<pipeline_options>();
  CLI::App* cmd = app.add_subcommand("pipeline", "simulate one iteration of a TP x CP x PP x DP step: pipeline schedule, collectives, recomputation");
  cmd->add_option("--schedule", options->schedule, "gpipe, 1f1b, interleaved or chunk-1f1b")->capture_default_str();
  add_integer_option(cmd, "--stages", options->stages, "pipeline stages P")->capture_default_str();
  add_integer_option(cmd, "--virtual-stages", options->virtual_stages, "model chunks per stage V (interleaved)")->capture_default_str();
  cmd->add_option("--micro-batch-tokens", options->micro_batch_tokens,
                  "tokens of each micro-batch, comma-separated, dealt round-robin to the replicas; '+' packs several documents into one "
                  "(4096+4096,8192)")
      ->capture_default_str();
  cmd->add_option("--model", options->model, "model preset (7b, 13b, 30b, 70b, gpt-7b, ...)")->capture_default_str();
  cmd->add_option("--cluster", options->cluster, "cluster preset (a, b, c, wlb, hydraulis, infinipipe)")->capture_default_str();
  add_integer_option(cmd, "--tp", options->tp, "tensor-parallel degree inside each stage")->capture_default_str();
  add_integer_option(cmd, "--cp", options->cp, "context-parallel degree inside each stage")->capture_default_str();
  add_integer_option(cmd, "--dp", options->dp, "data-parallel replicas")->capture_default_str();
  cmd->add_option("--partitioner", options->partitioner,
                  "each micro-batch's CP layout: hierarchical, even_split, allgather, per_document, per_sequence, ulysses, ...")
      ->capture_default_str();
  cmd->add_option("--tp-collectives", options->tp_collectives, "all_reduce or sequence_parallel")->capture_default_str();
  cmd->add_option("--sync", options->sync, "gradient sync: all_reduce, sharded_optimizer, fully_sharded or switching")->capture_default_str();
  cmd->add_option("--checkpoint", options->checkpoint,
                  "none, full, selective:K, selective:K0,K1,... (layers per stage) or stage_aware:S:B0,B1,...:C0,C1,... (a "
                  "stage-aware plan: stages, the micro-batches' backward positions, the diagonal counts)")
      ->capture_default_str();
  cmd->add_option("--pricing", options->pricing,
                  "every_op (every op in one engine) or per_shape (each block shape priced once: for large layouts)")
      ->capture_default_str();
  cmd->add_option("--trace", options->trace_file, "write a Chrome / Perfetto trace: per stage its blocks, kernels and transfers");
  cmd->add_option("--record", options->record_file, "write the step record (zeppelin.step_record): every op and transfer per rank");
  cmd->add_flag("--json", options->json, "print the blocks and the simulated figures as JSON");
  CLI::Option* job = cmd->add_option("--job", options->job_file,
                                     "simulate the step job of FILE (zeppelin.step_job, train_gpt --write-job) instead of the plan the flags "
                                     "describe");
  for (const char* flag : {"--schedule", "--stages", "--virtual-stages", "--micro-batch-tokens", "--model", "--cluster", "--tp", "--cp", "--dp",
                           "--partitioner", "--tp-collectives", "--sync", "--checkpoint"})
    job->excludes(cmd->get_option(flag));
  cmd->callback([options] { run_pipeline(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(45, add_pipeline_command);

}  // namespace zeppelin_tool
