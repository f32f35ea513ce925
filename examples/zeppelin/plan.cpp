// examples/zeppelin/plan.cpp
// `zeppelin plan`: partition one batch of sequence lengths over a cluster and print the plan.
// In:  --method hierarchical|even_split|allgather|hybrid_dp|per_document|ulysses|micro_batched, --lengths FILE (one
//      length per line, data/length_file.hpp), --nodes N, --gpus-per-node P, --capacity L
//      (tokens per GPU per micro-batch; default partition/capacity.hpp's balanced_capacity: the
//      batch's mean tokens per GPU plus 1/8); optional --metric tokens|attention|cost_model (the
//      hierarchical load metric), --cp-size C (allgather / per_document CP group size, 0 = all),
//      --micro-batches K (micro_batched: at least K micro-batches; 0 = the fewest that plan).
// Out: --json prints the plan in the format of core/plan_json.hpp (docs/formats.md):
//        {"format":"zeppelin.plan","version":1,"fingerprint","method","topology":{"nodes",
//         "gpus_per_node"},"capacity","micro_batches","lengths":[...],
//         "ranks":[{"rank","node","shards":[{"seq","begin","end","group","micro_batch"}]}],
//         "groups":[{"id","zone","collective","ranks":[...]}],"notes":[...]}
//      (seq indexes "lengths"; "group" is null for a sequence held by one rank);
//      otherwise a per-rank summary: tokens, causal pairs, tokens per zone, cross-node KV
//      tokens sent per forward pass (partition/plan_stats.hpp), then the totals and notes.
//      --explain (instead of --method) plans with the cost-driven planner of the `zeppelin`
//      method (planner/cost_driven_planner.hpp) for --model M (default 7b) on these GPUs with
//      cluster C's links: it prints every candidate's bound and simulated step (or why it was
//      pruned or refused), the chosen candidate and its execution, and per sequence its
//      micro-batch, group, zone, collective and ranks; with --json the plan's JSON gains
//      "explain":{"model","chosen","options":{...},"candidates":[{"name","outcome","bound_s",
//      "step_s","upper_s","reason"}]} (upper_s: plan_step_upper_bound where the planner asked for
//      it). Without --capacity it plans with the simulate command's capacity (the batch's mean
//      tokens per GPU plus 1/8). --threads N simulates the candidates on N
//      threads (default: every hardware thread; the choice does not depend on it).
//      --rank R prints rank R's view instead of the summary (core/rank_view.hpp): its shards, and
//      per group its zone, collective, position, previous and next member, tokens, sequences.
//      --read FILE (instead of --lengths and --method) reads such a file back, checks its
//      format, fingerprint and plan (against its lengths), and prints it like a fresh plan.
// Errors (bad file, infeasible batch) go to stderr with exit status 1 (main.cpp).
//   zeppelin plan --method hierarchical --lengths batch.txt --nodes 4 --gpus-per-node 8 --capacity 4608
//   zeppelin plan --explain --lengths batch.txt --nodes 4
#include "commands.hpp"

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/plan_json.hpp>
#include <zeppelin/core/rank_view.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/partition.hpp>
#include <zeppelin/planner/cost_driven_planner.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace zeppelin_tool {
namespace {

struct plan_arguments {
  std::string method;
  std::string lengths_file;
  int nodes = 1;
  int gpus_per_node = 8;
  zeppelin::token_count capacity = 0;  // 0: balanced_capacity of the batch
  std::string metric = "tokens";
  std::int32_t cp_size = 0;
  std::int32_t micro_batches = 0;
  bool json = false;
  bool explain = false;
  std::string model = "7b";
  int threads = hardware_threads();  // --explain: the simulator's
  std::string read_file;
  zeppelin::rank_index rank = -1;  // >= 0: print this rank's view (core/rank_view.hpp)
};

// The partitioner the arguments name, through the one registry (partition/registry.hpp).
zeppelin::any_partitioner make_partitioner(const plan_arguments& a, const zeppelin::topology& t) {
  using namespace zeppelin;
  const partitioner_settings settings{.capacity = a.capacity,
                                      .cp_size = a.cp_size,
                                      .metric = make_load_metric(load_metric_kind_by_name(a.metric), t.gpu()),
                                      .micro_batches = a.micro_batches};
  return partitioner_by_name(a.method, settings);
}

template <class Names>
std::vector<std::string> as_strings(const Names& names) {
  return {names.begin(), names.end()};
}

void print_summary(const zeppelin::plan& p, const zeppelin::batch& b, const zeppelin::topology& t) {
  const zeppelin::plan_stats st = zeppelin::compute_stats(p, b, t);
  std::printf("method %s: %d sequences, %lld tokens on %d x %d GPUs, capacity %lld, %d micro-batch(es)\n",
              p.method.c_str(), b.size(), static_cast<long long>(b.total_tokens()), p.nodes, p.gpus_per_node,
              static_cast<long long>(p.capacity), p.micro_batches());
  std::printf("%6s %5s %9s %16s %9s %9s %9s %12s\n", "rank", "node", "tokens", "causal_pairs", "local", "intra",
              "inter", "x-node_sent");
  for (zeppelin::rank_index r = 0; r < p.num_ranks(); ++r) {
    const auto& s = st.ranks[static_cast<std::size_t>(r)];
    std::printf("%6d %5d %9lld %16lld %9lld %9lld %9lld %12lld\n", r, t.node_of(r), static_cast<long long>(s.tokens),
                static_cast<long long>(s.causal_pairs), static_cast<long long>(s.zone_tokens[0]),
                static_cast<long long>(s.zone_tokens[1]), static_cast<long long>(s.zone_tokens[2]),
                static_cast<long long>(s.cross_node_tokens));
  }
  int zones[3] = {0, 0, 0};
  for (const auto& g : p.groups) ++zones[static_cast<int>(g.zone)];
  std::printf("causal pairs per rank: max %lld, mean %.1f, max/mean %.4f\n", static_cast<long long>(st.max_pairs()),
              st.mean_pairs(), st.pair_imbalance());
  std::printf("cross-node KV tokens sent per forward pass: max per rank %lld, total %lld\n",
              static_cast<long long>(st.max_cross_node_tokens()), static_cast<long long>(st.total_cross_node_tokens()));
  std::printf("groups: %d intra-node, %d inter-node\n", zones[1], zones[2]);
  for (const auto& n : p.notes) std::printf("note (%s): %s\n", std::string(zeppelin::to_string(n.kind)).c_str(), n.text.c_str());
}

// --rank R: what rank R holds and, per group, where it sits and whom it talks to.
void print_rank_view(const zeppelin::plan& p, const zeppelin::batch& b, zeppelin::rank_index r) {
  const zeppelin::rank_view v = zeppelin::rank_view_of(p, r);
  std::printf("rank %d (node %d, GPU %d): %lld tokens in %zu shard(s)", v.rank, v.node, v.local_gpu,
              static_cast<long long>(v.tokens()), v.shards.size());
  for (std::size_t mb = 0; mb < v.tokens_per_micro_batch.size() && v.tokens_per_micro_batch.size() > 1; ++mb)
    std::printf("%s%lld", mb ? ", " : "; per micro-batch ", static_cast<long long>(v.tokens_per_micro_batch[mb]));
  std::printf("\n%6s %10s %10s %10s %6s %6s\n", "seq", "length", "begin", "end", "group", "micro");
  for (const zeppelin::shard& s : v.shards)
    std::printf("%6d %10lld %10lld %10lld %6s %6d\n", s.seq, static_cast<long long>(b.length(s.seq)),
                static_cast<long long>(s.range.begin), static_cast<long long>(s.range.end),
                s.group == zeppelin::no_group ? "-" : std::to_string(s.group).c_str(), s.micro_batch);
  std::printf("%6s %6s %-11s %9s %9s %9s %10s  %s\n", "group", "zone", "collective", "position", "previous", "next", "tokens",
              "sequences");
  for (const zeppelin::group_membership& m : v.groups) {
    std::string seqs;
    for (const zeppelin::sequence_index q : m.sequences) seqs += (seqs.empty() ? "" : ",") + std::to_string(q);
    std::printf("%6d %6s %-11s %4d of %-2d %9d %9d %10lld  %s\n", m.group, std::string(zeppelin::to_string(m.zone)).c_str(),
                std::string(zeppelin::to_string(m.collective)).c_str(), m.position, m.size, m.previous, m.next,
                static_cast<long long>(m.tokens), seqs.c_str());
  }
}

// "0-3,8,10-11": the sorted ranks as runs.
std::string rank_runs(std::vector<zeppelin::rank_index> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) out += '-', out += std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

nlohmann::json explain_json(const zeppelin::cost_driven_choice& c, const zeppelin::model_config& m) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const auto& p : c.candidates) {
    nlohmann::json j{{"name", p.name}, {"outcome", zeppelin::to_string(p.outcome)}, {"bound_s", p.bound_s}};
    j["step_s"] = p.outcome == zeppelin::candidate_outcome::simulated ? nlohmann::json(p.step_s) : nlohmann::json();
    j["upper_s"] = p.upper_s > 0 ? nlohmann::json(p.upper_s) : nlohmann::json();
    j["reason"] = p.reason.empty() ? nlohmann::json() : nlohmann::json(p.reason);
    candidates.push_back(std::move(j));
  }
  const auto& e = c.execution;
  return {{"model", m.name},
          {"chosen", c.chosen.candidate},
          {"step_s", c.chosen.result.step_time_s},
          {"efficiency", c.chosen.result.efficiency},
          {"options",
           {{"partitioner", std::string(e.partitioner)},
            {"routing", e.routing},
            {"engine", std::string(zeppelin::to_string(e.engine))},
            {"launch", std::string(zeppelin::to_string(c.options.launch))},
            {"remap", e.remap}}},
          {"candidates", std::move(candidates)}};
}

void print_explanation(const zeppelin::cost_driven_choice& c, const zeppelin::batch& b, const zeppelin::model_config& m) {
  using zeppelin::candidate_outcome;
  const zeppelin::plan& p = c.chosen.layout;
  const double chosen = c.chosen.result.step_time_s;
  std::printf("cost-driven plan: %d sequences, %lld tokens on %d x %d GPUs, model %s, capacity %lld\n", b.size(),
              static_cast<long long>(b.total_tokens()), p.nodes, p.gpus_per_node, m.name.c_str(),
              static_cast<long long>(p.capacity));
  std::printf("%-28s %-10s %10s %10s %9s  %s\n", "candidate", "outcome", "bound ms", "step ms", "x chosen", "reason");
  std::optional<std::size_t> runner_up;
  for (std::size_t i = 0; i < c.candidates.size(); ++i) {
    const auto& x = c.candidates[i];
    const bool simulated = x.outcome == candidate_outcome::simulated;
    char bound[32] = "-", step[32] = "-", ratio[32] = "-";
    if (x.outcome != candidate_outcome::infeasible) std::snprintf(bound, sizeof bound, "%.1f", x.bound_s * 1e3);
    if (simulated) std::snprintf(step, sizeof step, "%.1f", x.step_s * 1e3), std::snprintf(ratio, sizeof ratio, "%.3f", x.step_s / chosen);
    if (x.outcome == candidate_outcome::pruned) std::snprintf(ratio, sizeof ratio, ">=%.3f", x.bound_s / chosen);
    std::printf("%-28s %-10s %10s %10s %9s  %s\n", x.name.c_str(), zeppelin::to_string(x.outcome), bound, step, ratio,
                x.reason.c_str());
    if (simulated && i != c.chosen_index && (!runner_up || x.step_s < c.candidates[*runner_up].step_s)) runner_up = i;
  }
  const auto& e = c.execution;
  std::printf("chosen: %s (partitioner %s, routing %s, engine %s, launches %s, remapping %s): step %.1f ms, efficiency %.3f",
              c.chosen.candidate.c_str(), std::string(e.partitioner).c_str(), e.routing ? "proxy" : "direct",
              std::string(zeppelin::to_string(e.engine)).c_str(), std::string(zeppelin::to_string(c.options.launch)).c_str(),
              e.remap ? "on" : "off", chosen * 1e3, c.chosen.result.efficiency);
  if (const double upper = c.candidates[c.chosen_index].upper_s; upper > 0)
    std::printf("; upper bound %.1f ms (choose_by_cost chooses without simulating when it beats every other bound)", upper * 1e3);
  if (runner_up)
    std::printf("; the next best, %s, takes %.3fx as long", c.candidates[*runner_up].name.c_str(),
                c.candidates[*runner_up].step_s / chosen);
  std::printf("\n%6s %10s %6s %6s %6s %-11s %s\n", "seq", "length", "micro", "group", "zone", "collective", "ranks");
  std::vector<std::vector<zeppelin::rank_index>> holders(static_cast<std::size_t>(b.size()));
  std::vector<const zeppelin::shard*> first(static_cast<std::size_t>(b.size()), nullptr);
  for (zeppelin::rank_index r = 0; r < p.num_ranks(); ++r)
    for (const auto& s : p.placements[static_cast<std::size_t>(r)].shards) {
      holders[static_cast<std::size_t>(s.seq)].push_back(r);
      if (!first[static_cast<std::size_t>(s.seq)]) first[static_cast<std::size_t>(s.seq)] = &s;
    }
  for (zeppelin::sequence_index q = 0; q < b.size(); ++q) {
    const zeppelin::shard& s = *first[static_cast<std::size_t>(q)];
    const bool grouped = s.group != zeppelin::no_group;
    const zeppelin::ring_group* g = grouped ? &p.groups[static_cast<std::size_t>(s.group)] : nullptr;
    std::printf("%6d %10lld %6d %6s %6s %-11s %s\n", q, static_cast<long long>(b.length(q)), s.micro_batch,
                grouped ? std::to_string(s.group).c_str() : "-", grouped ? std::string(zeppelin::to_string(g->zone)).c_str() : "local",
                grouped ? std::string(zeppelin::to_string(g->collective)).c_str() : "-",
                rank_runs(holders[static_cast<std::size_t>(q)]).c_str());
  }
}

// The cluster `plan` partitions for: N x P GPUs with cluster C's links (H200, NVLink, one 400G
// NIC per GPU). Partitioning reads only the shape; the links matter for the cost-model metric.
zeppelin::topology plan_topology(int nodes, int gpus_per_node) {
  return zeppelin::topology({"plan", nodes, gpus_per_node, gpus_per_node, {}, zeppelin::links::nvlink_h100(),
                             zeppelin::links::nic_400g(), zeppelin::gpus::h200()});
}

// --read: the plan of a `plan --json` file, checked (format, fingerprint, and against its own
// lengths on its cluster shape) and printed as the summary or, with --json, as written.
void read_plan(const plan_arguments& a) {
  std::ifstream in(a.read_file, std::ios::binary);
  ZEPPELIN_EXPECTS(in.good(), "cannot open the --read file " + a.read_file, {});
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const zeppelin::plan_document doc = zeppelin::read_plan_json(text);
  ZEPPELIN_EXPECTS(!doc.lengths.empty(), "the plan file " + a.read_file + " has no \"lengths\": its plan cannot be checked", {});
  const zeppelin::batch b(doc.lengths);
  const zeppelin::plan& p = doc.layout;
  const zeppelin::topology t = plan_topology(p.nodes, p.gpus_per_node);
  zeppelin::validate(p, b, t);
  if (a.json) zeppelin::write_plan_json(std::cout, p, &b);
  else if (a.rank >= 0) print_rank_view(p, b, a.rank);
  else print_summary(p, b, t);
}

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<plan_arguments>();
  CLI::App* cmd = app.add_subcommand("plan", "partition a batch of sequence lengths over a cluster and print the plan");
  auto* method = cmd->add_option("--method", args->method, "partitioner (or --explain)")
                     ->check(CLI::IsMember(as_strings(zeppelin::partitioner_names)));
  auto* lengths = cmd->add_option("--lengths", args->lengths_file, "file with one sequence length per line")->check(CLI::ExistingFile);
  cmd->add_option("--read", args->read_file, "a plan written by --json: check it and print it (summary, or --json again)")
      ->check(CLI::ExistingFile)
      ->excludes(lengths)
      ->excludes(method);
  add_integer_option(cmd, "--nodes", args->nodes, "number of nodes N")->check(example_cli::positive());
  add_integer_option(cmd, "--gpus-per-node", args->gpus_per_node, "GPUs per node P")->check(example_cli::positive());
  add_size_option(cmd, "--capacity", args->capacity,
                  "tokens per GPU per micro-batch L (e.g. 4608, 8K)")
      ->check(example_cli::positive())
      ->default_str("the batch's mean per GPU + 1/8");
  cmd->add_option("--metric", args->metric, "hierarchical load metric for local sequences")
      ->check(CLI::IsMember([] {
        std::vector<std::string> names;
        for (const auto k : zeppelin::load_metric_kinds) names.emplace_back(zeppelin::to_string(k));
        return names;
      }()));
  add_integer_option(cmd, "--cp-size", args->cp_size, "allgather / per_document CP group size (0: all GPUs)")
      ->check(example_cli::non_negative());
  add_integer_option(cmd, "--micro-batches", args->micro_batches, "micro_batched: at least this many micro-batches (0: the fewest that plan)")
      ->check(example_cli::non_negative());
  auto* json = cmd->add_flag("--json", args->json, "print the plan as JSON");
  add_integer_option(cmd, "--rank", args->rank, "print what this rank holds, its groups, positions and neighbours")
      ->check(example_cli::non_negative())
      ->excludes(json);
  cmd->add_flag("--explain", args->explain,
                "plan with the cost-driven planner (the zeppelin method) and show every candidate's price")
      ->excludes(method);
  cmd->add_option("--model", args->model, "model preset the --explain planner prices (3b, 7b, 13b, ...)")->capture_default_str();
  add_threads_option(cmd, args->threads);
  cmd->callback([args] {
    if (!args->read_file.empty()) {
      read_plan(*args);
      return;
    }
    if (args->lengths_file.empty()) throw CLI::RequiredError("--lengths (or --read)");
    const zeppelin::batch b(zeppelin::read_lengths_file(args->lengths_file));
    // Partitioning reads only the shape; the links (cluster C: H200, NVLink, one 400G NIC
    // per GPU) matter for the cost model metric.
    const zeppelin::topology t = plan_topology(args->nodes, args->gpus_per_node);
    plan_arguments a = *args;
    if (a.capacity == 0) a.capacity = zeppelin::balanced_capacity(b, t);
    if (a.explain) {
      const zeppelin::model_config m = zeppelin::model_by_name(args->model);
      zeppelin::method_setup setup;
      setup.metric = zeppelin::load_metric_kind_by_name(args->metric);
      setup.tokens_per_gpu = a.capacity;
      setup.capacity_slack = 0;
      setup.threads = args->threads;
      const zeppelin::cost_driven_choice choice = zeppelin::plan_by_cost(b, t, m, setup);
      zeppelin::validate(choice.chosen.layout, b, t);
      if (args->json) {
        const nlohmann::json explain = explain_json(choice, m);
        zeppelin::write_plan_json(std::cout, choice.chosen.layout, &b, ",\"explain\":" + explain.dump());
      } else {
        print_explanation(choice, b, m);
      }
      return;
    }
    if (args->method.empty()) throw CLI::RequiredError("--method (or --explain)");
    const zeppelin::plan p = zeppelin::partition(make_partitioner(a, t), b, t);
    zeppelin::validate(p, b, t);
    if (args->json) zeppelin::write_plan_json(std::cout, p, &b);
    else if (args->rank >= 0) print_rank_view(p, b, args->rank);
    else print_summary(p, b, t);
  });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(20, add_plan_command);

}  // namespace zeppelin_tool
