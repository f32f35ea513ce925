// examples/zeppelin/step.cpp
// `zeppelin step`: plan one training iteration with the step planner (planner/plan_step.hpp):
// every candidate composition (each paper's own, Megatron-LM-, TransformerEngine- and Ulysses-like
// baselines, and compositions across papers) planned and priced on the one step simulator,
// the fastest kept.
// In:  --lengths FILE (one document length per line, data/length_file.hpp), --nodes N,
//      --gpus-per-node P, --model M (a preset: 7b, 13b, 32b, ...), --cluster C (the links
//      and GPU of a preset: a, b, c, wlb, hydraulis, infinipipe; default c, nodes of 8 H200s with
//      a 400G NIC per GPU), --context T (the loader's window; default the longest document),
//      --margin-gib G (GPU memory kept free; default 8), --candidates a,b,... (a subset of
//      the default candidates, by name), --threads K (block shapes priced at once in each
//      simulation; default the machine's hardware threads, nothing printed depends on it),
//      --complete (price every candidate to the end; by default a candidate's simulation
//      stops once it passes the best price so far, which cannot change the choice),
//      --exchanges per_port|per_flow (how Hydraulis' switching is priced; default per_port,
//      which prices at any number of GPUs), --json, --explain.
// Out: the chosen composition, its predicted iteration seconds, the lower bound and the
//      efficiency, and every candidate's predicted seconds (or why it refused, or the best
//      price its simulation stopped past); --explain
//      adds each candidate's policies and the chosen plan's replicas with their
//      micro-batches (document indices of the file, "d[b:e)" for a slice); --json prints
//      the decision in the zeppelin.step format (planner/step_decision_json.hpp,
//      docs/formats.md).
// Bad input (an unknown model, cluster or candidate name; a length outside [1, 2^31];
// N or P < 1) is an error on stderr with exit status 1, and so is a step no candidate can
// plan (naming the first refusal).
#include "commands.hpp"
#include "exchanges_option.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/planner/plan_step.hpp>
#include <zeppelin/planner/step_candidate.hpp>
#include <zeppelin/planner/step_decision_json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace zeppelin_tool {
namespace {

struct step_options {
  std::string lengths_file;
  int nodes = 1;
  int gpus_per_node = 8;
  std::string model = "7b";
  std::string cluster = "c";
  std::int64_t context = 0;
  double margin_gib = 8;
  std::string candidates;
  int threads = hardware_threads();
  bool json = false;
  bool explain = false;
  bool complete = false;
  std::optional<zeppelin::exchange_pricing> exchanges;  // empty: per_port
};

//! The default candidates named in `names` ("a,b,..."), in the order named; all when empty.
std::vector<zeppelin::step_candidate> chosen_candidates(const zeppelin::step_request& r, const std::string& names) {
  std::vector<zeppelin::step_candidate> all = zeppelin::default_step_candidates(r);
  if (names.empty()) return all;
  std::vector<zeppelin::step_candidate> out;
  std::stringstream list(names);
  for (std::string name; std::getline(list, name, ',');) {
    bool found = false;
    std::string valid;
    for (const zeppelin::step_candidate& c : all) {
      if (c.name == name) out.push_back(c), found = true;
      valid += (valid.empty() ? "" : ", ") + c.name;
    }
    ZEPPELIN_EXPECTS(found, "--candidates: unknown candidate '" + name + "' (valid: " + valid + ")", {});
  }
  return out;
}

//! "d" for a whole document, "d[b:e)" for a slice, d the file's index.
std::string piece_text(const zeppelin::sequence_step_plan& part, const zeppelin::step_piece& x) {
  const std::int64_t d = part.sequences[static_cast<std::size_t>(x.document)];
  const zeppelin::token_count length = part.plan.documents[static_cast<std::size_t>(x.document)];
  if (x.begin == 0 && x.end == length) return std::to_string(d);
  return std::to_string(d) + "[" + std::to_string(x.begin) + ":" + std::to_string(x.end) + ")";
}

void print_plan(const zeppelin::step_decision& d) {
  for (std::size_t p = 0; p < d.parts.size(); ++p) {
    const zeppelin::sequence_step_plan& part = d.parts[p];
    std::printf("part %zu (%s sync):\n", p, std::string(to_string(part.plan.sync)).c_str());
    for (std::size_t i = 0; i < part.plan.replicas.size(); ++i) {
      const zeppelin::step_replica& r = part.plan.replicas[i];
      std::printf("  replica %zu <TP %d, CP %d, PP %d> on GPUs %d..%d, %s:", i, r.tp, r.cp, r.pp, static_cast<int>(r.ranks.front()),
                  static_cast<int>(r.ranks.back()), std::string(to_string(r.schedule.kind())).c_str());
      for (const zeppelin::step_micro_batch& mb : r.micro_batches) {
        std::printf(" [");
        for (std::size_t k = 0; k < mb.pieces.size(); ++k) std::printf("%s%s", k ? " " : "", piece_text(part, mb.pieces[k]).c_str());
        std::printf("]");
      }
      std::printf("\n");
    }
  }
}

void run_step(const step_options& o) {
  using namespace zeppelin;
  ZEPPELIN_EXPECTS(o.nodes >= 1 && o.gpus_per_node >= 1, "--nodes and --gpus-per-node must be >= 1",
                   {{"nodes", double(o.nodes)}, {"gpus_per_node", double(o.gpus_per_node)}});
  step_request r;
  r.documents = read_lengths_file(o.lengths_file);
  r.cluster = cluster_by_name(o.cluster, o.nodes, o.gpus_per_node);
  r.model = model_by_name(o.model);
  r.context = o.context;
  r.margin_bytes = o.margin_gib * double(1ull << 30);
  validate(r);
  const std::vector<step_candidate> candidates = chosen_candidates(r, o.candidates);
  step_planner_options planning{.threads = o.threads, .pricing = o.complete ? candidate_pricing::complete : candidate_pricing::until_beaten};
  planning.simulation.exchanges = o.exchanges.value_or(exchange_pricing::per_port);
  const step_decision d = plan_step(r, candidates, planning);
  if (o.json) {
    write_step_decision_json(std::cout, d);
    return;
  }
  std::printf("%s on %d x %d GPUs (%s): %zu documents, %lld tokens, longest %lld\n", r.model.name.c_str(), o.nodes, o.gpus_per_node,
              o.cluster.c_str(), r.documents.size(), static_cast<long long>(total_tokens(r)), static_cast<long long>(longest_document(r)));
  std::printf("chosen: %s, predicted %.4f s (lower bound %.4f s, efficiency %.3f)\n", d.chosen_name().c_str(), d.predicted_s, d.lower_bound_s,
              d.efficiency());
  std::printf("candidates:\n");
  for (std::size_t i = 0; i < d.candidates.size(); ++i) {
    const priced_step_candidate& c = d.candidates[i];
    if (c.stopped())
      std::printf("  %-20s  > %.4f s  (stopped once past the best)\n", c.name.c_str(), c.stopped_after_s);
    else if (c.planned())
      std::printf("  %-20s %10.4f s  %6.3fx the chosen%s\n", c.name.c_str(), c.seconds, c.seconds / d.predicted_s, i == d.chosen ? "  <- chosen" : "");
    else
      std::printf("  %-20s    refused  %s\n", c.name.c_str(), o.explain ? c.refusal.c_str() : c.refusal.substr(0, c.refusal.find(" (")).c_str());
    if (o.explain) std::printf("  %-20s %s\n", "", candidates[i].about.c_str());
  }
  if (o.explain) print_plan(d);
}

void add_step_command(CLI::App& app) {
  auto options = std::make_shared<step_options>();
  CLI::App* cmd = app.add_subcommand("step", "plan one iteration: every paper's composition and their mixes priced on the step simulator, the fastest kept");
  cmd->add_option("--lengths", options->lengths_file, "file with one document length per line")->required()->check(CLI::ExistingFile);
  add_integer_option(cmd, "--nodes", options->nodes, "nodes of the cluster")->capture_default_str();
  add_integer_option(cmd, "--gpus-per-node", options->gpus_per_node, "GPUs per node")->capture_default_str();
  cmd->add_option("--model", options->model, "model preset: 7b, 13b, 32b, ...")->capture_default_str();
  cmd->add_option("--cluster", options->cluster, "cluster preset (links, GPU): a, b, c, wlb, hydraulis, infinipipe")->capture_default_str();
  add_size_option(cmd, "--context", options->context, "the loader's window in tokens (0: the longest document)")->capture_default_str();
  cmd->add_option("--margin-gib", options->margin_gib, "GPU memory kept free per GPU, GiB")->capture_default_str()->check(example_cli::non_negative());
  cmd->add_option("--candidates", options->candidates, "a subset of the candidates, by name (a,b,...); default: all");
  add_threads_option(cmd, options->threads, "block shapes priced at once in each simulation");
  cmd->add_flag("--json", options->json, "print the decision as JSON (zeppelin.step, docs/formats.md)");
  cmd->add_flag("--complete", options->complete, "price every candidate to the end (default: stop a simulation once it passes the best)");
  add_exchanges_option(cmd, options->exchanges);
  cmd->add_flag("--explain", options->explain, "print each candidate's policies and the chosen plan's replicas and micro-batches");
  cmd->callback([options] { run_step(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(57, add_step_command);

}  // namespace zeppelin_tool
