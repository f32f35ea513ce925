// examples/zeppelin/chunk.cpp
// `zeppelin chunk`: InfiniPipe's elastic pipeline for one global batch (pack/elastic_pipeline.hpp).
// In:  --lengths FILE (one sequence length per line, data/length_file.hpp), --sp Ds (Ulysses
//      degree inside a node), --pp Dp (pipeline stages), --model 7b | 13b | 30b (the paper's
//      GPT shapes; any preset's full name also works), --gpu-memory-gib G (default 80, an
//      A800's), --margin-gib M (kept free; default 8), --max-slices N (default 16), --json,
//      --compare (also simulate the plan and the paper's baselines as step plans on the step
//      simulator: pack/infinipipe_methods.hpp)
//      with --context T (the packing baselines' micro-batch; default 0: the longest sequence)
//      and --fixed-chunk-tokens S (the Seq1F1B-like chunk; default 16384).
// Runs: the sequence processor for every slice count up to N, the longest-first chunk order,
//      the grouping into back-to-back chunk-level 1F1B pipelines and each pipeline's
//      stage-aware checkpointing, keeping the plan of least predicted seconds.
// Out: the mesh (slice lengths of the longest sequence), the chunks, the forward order (the
//      pipelines' orders one after the other), per stage the layers each chunk recomputes
//      (in that order) and the predicted iteration seconds; with --json
//      {"mesh":[...],"chunks":[{"context":C,"slices":[{"seq":i,"begin":b,"end":e}]}],
//       "order":[chunk ids],"checkpoint":[[layers per chunk in order] per stage],
//       "pipelines":[chunks per pipeline],"iteration_s":x}, with --compare also
//       "simulated":{"infinipipe":s,"seq1f1b_like":s,"megatron_like":s,"deepspeed_like":s,
//       "flexsp_like":s} (simulated iteration seconds: the sum of simulate_step over each
//       method's step plans; null where a method does not fit)
// Bad input is an error on stderr with exit status 1: degrees < 1, a batch that fits no
// plan even with full recomputation (naming the longest sequence), an unknown model.
#include "commands.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/elastic_step_plan.hpp>
#include <zeppelin/pack/infinipipe_methods.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace zeppelin_tool {
namespace {

// Bounds of the size options, refused by name beyond them: every slice count up to
// --max-slices is a whole plan search (1,024 of them take a minute on ten documents), and
// --sp x --pp is computed in 64 bits and kept to clusters the A800 preset builds.
constexpr int max_slices_tried = 256;
constexpr std::int64_t max_chunk_gpus = std::int64_t{1} << 20;

struct chunk_options {
  std::string lengths_file;
  int sp = 8;
  int pp = 4;
  std::string model = "13b";
  double gpu_memory_gib = 80;
  double margin_gib = 8;
  int max_slices = 16;
  bool json = false;
  bool compare = false;
  std::int64_t context = 0;
  std::int64_t fixed_chunk_tokens = 16384;
};

// --compare: per method its simulated iteration seconds (+infinity: does not fit), the
// elastic plan itself for InfiniPipe
std::vector<std::pair<zeppelin::infinipipe_method, double>> simulate_methods(const chunk_options& o, const zeppelin::elastic_plan& plan,
                                                                              std::span<const zeppelin::token_count> lengths,
                                                                              const zeppelin::model_config& model, const zeppelin::topology& topo,
                                                                              const zeppelin::elastic_pipeline_options& options) {
  using namespace zeppelin;
  const infinipipe_setting setting{.sp_degree = o.sp, .pp_degree = o.pp, .usable_bytes = (o.gpu_memory_gib - o.margin_gib) * double(1ull << 30),
                                   .fixed_chunk_tokens = o.fixed_chunk_tokens, .context = o.context, .max_slices = o.max_slices};
  std::vector<std::pair<infinipipe_method, double>> out;
  for (const infinipipe_method m : infinipipe_methods)
    out.emplace_back(m, m == infinipipe_method::infinipipe
                            ? simulate_back_to_back(elastic_step_plans(plan, lengths, model, options, topo), topo, model).iteration_s
                            : simulate_infinipipe_method(m, lengths, model, topo, setting));
  return out;
}

void run_chunk(const chunk_options& o) {
  using namespace zeppelin;
  ZEPPELIN_EXPECTS(o.sp >= 1 && o.pp >= 1, "the SP and PP degrees must be at least 1", {{"sp", double(o.sp)}, {"pp", double(o.pp)}});
  const std::int64_t gpus = std::int64_t{o.sp} * o.pp;
  ZEPPELIN_EXPECTS(gpus <= max_chunk_gpus, "--sp x --pp GPUs must be at most " + std::to_string(max_chunk_gpus),
                   {{"sp", double(o.sp)}, {"pp", double(o.pp)}, {"gpus", double(gpus)}});
  const model_config model = model_by_name(o.model.find('-') == std::string::npos ? "gpt-" + o.model : o.model);
  const std::vector<token_count> lengths = read_lengths_file(o.lengths_file);
  const topology topo = clusters::infinipipe_a800_ib(static_cast<int>((gpus + 7) / 8));  // A800 nodes, NVLink, one 400 Gb/s port each
  elastic_pipeline_options options = elastic_pipeline_options::for_model(model, topo, o.sp, o.pp, (o.gpu_memory_gib - o.margin_gib) * double(1ull << 30));
  options.processor.max_slices = o.max_slices;
  const elastic_plan plan = plan_elastic_pipeline(lengths, options);
  const auto simulated = o.compare ? simulate_methods(o, plan, lengths, model, topo, options)
                                   : std::vector<std::pair<infinipipe_method, double>>{};

  std::vector<std::int64_t> order;
  std::vector<std::vector<int>> checkpoint(static_cast<std::size_t>(o.pp));
  for (const elastic_pipeline& p : plan.pipelines) {
    order.insert(order.end(), p.forward.begin(), p.forward.end());
    for (int s = 0; s < o.pp; ++s)
      for (std::size_t k = 0; k < p.forward.size(); ++k)
        checkpoint[static_cast<std::size_t>(s)].push_back(p.checkpoint.recomputed_layers(s, static_cast<std::int64_t>(k)));
  }
  if (o.json) {
    auto j = with_format<nlohmann::ordered_json>("chunk");
    j["mesh"] = plan.chunks.mesh;
    j["chunks"] = nlohmann::ordered_json::array();
    for (const chunk& c : plan.chunks.chunks) {
      nlohmann::ordered_json slices = nlohmann::ordered_json::array();
      for (const chunk_slice& s : c.slices) slices.push_back({{"seq", s.sequence}, {"begin", s.begin}, {"end", s.end}});
      j["chunks"].push_back({{"context", c.context}, {"slices", slices}});
    }
    j["order"] = order;
    j["checkpoint"] = checkpoint;
    j["pipelines"] = nlohmann::ordered_json::array();
    for (const elastic_pipeline& p : plan.pipelines) j["pipelines"].push_back(p.forward.size());
    j["iteration_s"] = plan.seconds;
    if (o.compare) {
      j["simulated"] = nlohmann::ordered_json::object();
      for (const auto& [m, seconds] : simulated) j["simulated"][std::string(to_string(m))] = std::isfinite(seconds) ? nlohmann::ordered_json(seconds) : nullptr;
    }
    std::cout << j.dump() << '\n';
    return;
  }
  std::printf("%s on %d GPUs (SP %d x PP %d): %zu sequences, longest %lld tokens\n", model.name.c_str(), o.sp * o.pp, o.sp, o.pp,
              lengths.size(), static_cast<long long>(*std::max_element(lengths.begin(), lengths.end())));
  std::printf("mesh: %zu slices:", plan.chunks.mesh.size());
  for (const token_count m : plan.chunks.mesh) std::printf(" %lld", static_cast<long long>(m));
  std::printf("\n%zu chunks in %zu pipeline(s)\n", plan.chunks.chunks.size(), plan.pipelines.size());
  for (std::size_t k = 0; k < plan.pipelines.size(); ++k) {
    const elastic_pipeline& p = plan.pipelines[k];
    std::printf("pipeline %zu: %zu chunks, longest chain %d, %lld layers recomputed%s, %.4f s\n", k, p.forward.size(),
                *std::max_element(p.chains.begin(), p.chains.end()), static_cast<long long>(p.checkpoint.total_layers),
                p.checkpoint.proven_optimal() ? " (optimal)" : "", p.seconds);
  }
  std::printf("iteration %.4f s (predicted)\n", plan.seconds);
  if (!o.compare) return;
  std::printf("simulated iteration (step simulator, ZeRO-3 traffic included):\n");
  const double ours = simulated.front().second;
  for (const auto& [m, seconds] : simulated) {
    if (!std::isfinite(seconds)) {
      std::printf("  %-15s does not fit\n", std::string(to_string(m)).c_str());
    } else {
      std::printf("  %-15s %.4f s", std::string(to_string(m)).c_str(), seconds);
      if (m != infinipipe_method::infinipipe) std::printf("  (InfiniPipe %.2fx faster)", seconds / ours);
      std::printf("\n");
    }
  }
}

void add_chunk_command(CLI::App& app) {
  auto options = std::make_shared<chunk_options>();
  CLI::App* cmd = app.add_subcommand("chunk", "chunk a batch into elastic pipelines with stage-aware checkpointing (InfiniPipe)");
  cmd->add_option("--lengths", options->lengths_file, "file with one sequence length per line")->required()->check(CLI::ExistingFile);
  add_integer_option(cmd, "--sp", options->sp, "Ulysses sequence-parallel degree Ds (inside a node)")->capture_default_str();
  add_integer_option(cmd, "--pp", options->pp, "pipeline stages Dp")->capture_default_str();
  cmd->add_option("--model", options->model, "model: 7b, 13b, 30b (GPT shapes) or a preset's full name")->capture_default_str();
  cmd->add_option("--gpu-memory-gib", options->gpu_memory_gib, "GPU memory, GiB")->capture_default_str()->check(example_cli::positive());
  cmd->add_option("--margin-gib", options->margin_gib, "memory kept free per GPU, GiB")->capture_default_str()->check(example_cli::non_negative());
  add_integer_option(cmd, "--max-slices", options->max_slices, "most slices of the longest sequence tried (1 .. " + std::to_string(max_slices_tried) + ")")
      ->capture_default_str()
      ->check(CLI::Range(1, max_slices_tried));
  cmd->add_flag("--json", options->json,
                "print {\"mesh\":[...],\"chunks\":[...],\"order\":[...],\"checkpoint\":[[...]],\"pipelines\":[...],\"iteration_s\":x}");
  cmd->add_flag("--compare", options->compare,
                "also simulate the plan and the Seq1F1B-, Megatron-, DeepSpeed- and FlexSP-like baselines on the same batch");
  add_size_option(cmd, "--context", options->context, "the packing baselines' micro-batch tokens, e.g. 96K (0: the longest sequence)")
      ->capture_default_str();
  add_size_option(cmd, "--fixed-chunk-tokens", options->fixed_chunk_tokens, "the Seq1F1B-like baseline's chunk tokens, e.g. 16K")
      ->capture_default_str();
  cmd->callback([options] { run_chunk(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(55, add_chunk_command);

}  // namespace zeppelin_tool
