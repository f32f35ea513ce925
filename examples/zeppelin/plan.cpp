// examples/zeppelin/plan.cpp
// `zeppelin plan`: partition one batch of sequence lengths over a cluster and print the plan.
// In:  --method hierarchical|even_split|allgather|hybrid_dp|per_document, --lengths FILE (one
//      length per line, data/length_file.hpp), --nodes N, --gpus-per-node P, --capacity L
//      (tokens per GPU per micro-batch; default partition/capacity.hpp's balanced_capacity: the
//      batch's mean tokens per GPU plus 1/8); optional --metric tokens|attention|cost_model (the
//      hierarchical load metric), --cp-size C (allgather / per_document CP group size, 0 = all).
// Out: --json prints
//        {"method", "topology":{"nodes","gpus_per_node"}, "capacity", "micro_batches",
//         "ranks":[{"rank","node","shards":[{"seq","begin","end","group","micro_batch"}]}],
//         "groups":[{"id","zone":"local|intra|inter","collective":"ring|all_gather|all_to_all","ranks":[...]}], "notes":[...]}
//      (seq indexes the lengths file; "group" is null for a sequence held by one rank);
//      otherwise a per-rank summary: tokens, causal pairs, tokens per zone, cross-node KV
//      tokens sent per forward pass (partition/plan_stats.hpp), then the totals and notes.
//      --explain (instead of --method) plans with the cost-driven planner of the `zeppelin`
//      method (sim/cost_driven_planner.hpp) for --model M (default 7b) on these GPUs with
//      cluster C's links: it prints every candidate's bound and simulated step (or why it was
//      pruned or refused), the chosen candidate and its execution, and per sequence its
//      micro-batch, group, zone, collective and ranks; with --json the plan's JSON gains
//      "explain":{"model","chosen","options":{...},"candidates":[{"name","outcome","bound_s",
//      "step_s","reason"}]}. Without --capacity it plans with the simulate command's capacity
//      (the batch's mean tokens per GPU plus 1/8).
// Errors (bad file, infeasible batch) go to stderr with exit status 1 (main.cpp).
//   zeppelin plan --method hierarchical --lengths batch.txt --nodes 4 --gpus-per-node 8 --capacity 4608
//   zeppelin plan --explain --lengths batch.txt --nodes 4
#include "commands.hpp"

#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/partition.hpp>
#include <zeppelin/sim/cost_driven_planner.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <iostream>
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
  bool json = false;
  bool explain = false;
  std::string model = "7b";
};

// The partitioner the arguments name, through the one registry (partition/registry.hpp).
zeppelin::any_partitioner make_partitioner(const plan_arguments& a, const zeppelin::topology& t) {
  using namespace zeppelin;
  const partitioner_settings settings{.capacity = a.capacity,
                                      .cp_size = a.cp_size,
                                      .metric = make_load_metric(load_metric_kind_by_name(a.metric), t.gpu())};
  return partitioner_by_name(a.method, settings);
}

template <class Names>
std::vector<std::string> as_strings(const Names& names) {
  return {names.begin(), names.end()};
}

// Writes the plan as one line of compact JSON (the format of the file comment), shard by
// shard: memory stays O(1) beyond the plan, so a plan of a million sequences streams out
// instead of building gigabytes of JSON values first. Strings go through nlohmann's escaping.
// `explain`, when given, is a JSON object written as the plan's "explain" member.
void write_plan_json(std::ostream& out, const zeppelin::plan& p, const nlohmann::json* explain = nullptr) {
  const auto str = [](std::string_view s) { return nlohmann::json(std::string(s)).dump(); };
  out << "{\"method\":" << str(p.method) << ",\"topology\":{\"nodes\":" << p.nodes << ",\"gpus_per_node\":" << p.gpus_per_node
      << "},\"capacity\":" << p.capacity << ",\"micro_batches\":" << p.micro_batches() << ",\"ranks\":[";
  for (zeppelin::rank_index r = 0; r < p.num_ranks(); ++r) {
    out << (r ? "," : "") << "{\"rank\":" << r << ",\"node\":" << r / p.gpus_per_node << ",\"shards\":[";
    bool first = true;
    for (const auto& s : p.placements[static_cast<std::size_t>(r)].shards) {
      out << (first ? "" : ",") << "{\"seq\":" << s.seq << ",\"begin\":" << s.range.begin << ",\"end\":" << s.range.end
          << ",\"group\":";
      if (s.group == zeppelin::no_group) out << "null";
      else out << s.group;
      out << ",\"micro_batch\":" << s.micro_batch << "}";
      first = false;
    }
    out << "]}";
  }
  out << "],\"groups\":[";
  for (std::size_t i = 0; i < p.groups.size(); ++i) {
    const auto& g = p.groups[i];
    out << (i ? "," : "") << "{\"id\":" << g.id << ",\"zone\":" << str(zeppelin::to_string(g.zone))
        << ",\"collective\":" << str(zeppelin::to_string(g.collective)) << ",\"ranks\":[";
    for (std::size_t k = 0; k < g.ranks.size(); ++k) out << (k ? "," : "") << g.ranks[k];
    out << "]}";
  }
  out << "],\"notes\":[";
  for (std::size_t i = 0; i < p.notes.size(); ++i) out << (i ? "," : "") << str(p.notes[i]);
  out << "]";
  if (explain) out << ",\"explain\":" << explain->dump();
  out << "}\n";
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
  for (const auto& n : p.notes) std::printf("note: %s\n", n.c_str());
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
  std::printf("%-22s %-10s %10s %10s %9s  %s\n", "candidate", "outcome", "bound ms", "step ms", "x chosen", "reason");
  std::optional<std::size_t> runner_up;
  for (std::size_t i = 0; i < c.candidates.size(); ++i) {
    const auto& x = c.candidates[i];
    const bool simulated = x.outcome == candidate_outcome::simulated;
    char bound[32] = "-", step[32] = "-", ratio[32] = "-";
    if (x.outcome != candidate_outcome::infeasible) std::snprintf(bound, sizeof bound, "%.1f", x.bound_s * 1e3);
    if (simulated) std::snprintf(step, sizeof step, "%.1f", x.step_s * 1e3), std::snprintf(ratio, sizeof ratio, "%.3f", x.step_s / chosen);
    if (x.outcome == candidate_outcome::pruned) std::snprintf(ratio, sizeof ratio, ">=%.3f", x.bound_s / chosen);
    std::printf("%-22s %-10s %10s %10s %9s  %s\n", x.name.c_str(), zeppelin::to_string(x.outcome), bound, step, ratio,
                x.reason.c_str());
    if (simulated && i != c.chosen_index && (!runner_up || x.step_s < c.candidates[*runner_up].step_s)) runner_up = i;
  }
  const auto& e = c.execution;
  std::printf("chosen: %s (partitioner %s, routing %s, engine %s, launches %s, remapping %s): step %.1f ms, efficiency %.3f",
              c.chosen.candidate.c_str(), std::string(e.partitioner).c_str(), e.routing ? "proxy" : "direct",
              std::string(zeppelin::to_string(e.engine)).c_str(), std::string(zeppelin::to_string(c.options.launch)).c_str(),
              e.remap ? "on" : "off", chosen * 1e3, c.chosen.result.efficiency);
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

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<plan_arguments>();
  CLI::App* cmd = app.add_subcommand("plan", "partition a batch of sequence lengths over a cluster and print the plan");
  auto* method = cmd->add_option("--method", args->method, "partitioner (or --explain)")
                     ->check(CLI::IsMember(as_strings(zeppelin::partitioner_names)));
  cmd->add_option("--lengths", args->lengths_file, "file with one sequence length per line")->required()->check(CLI::ExistingFile);
  add_integer_option(cmd, "--nodes", args->nodes, "number of nodes N")->check(CLI::PositiveNumber);
  add_integer_option(cmd, "--gpus-per-node", args->gpus_per_node, "GPUs per node P")->check(CLI::PositiveNumber);
  add_size_option(cmd, "--capacity", args->capacity,
                  "tokens per GPU per micro-batch L (e.g. 4608, 8K)")
      ->check(CLI::PositiveNumber)
      ->default_str("the batch's mean per GPU + 1/8");
  cmd->add_option("--metric", args->metric, "hierarchical load metric for local sequences")
      ->check(CLI::IsMember([] {
        std::vector<std::string> names;
        for (const auto k : zeppelin::load_metric_kinds) names.emplace_back(zeppelin::to_string(k));
        return names;
      }()));
  add_integer_option(cmd, "--cp-size", args->cp_size, "allgather / per_document CP group size (0: all GPUs)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", args->json, "print the plan as JSON");
  cmd->add_flag("--explain", args->explain,
                "plan with the cost-driven planner (the zeppelin method) and show every candidate's price")
      ->excludes(method);
  cmd->add_option("--model", args->model, "model preset the --explain planner prices (3b, 7b, 13b, ...)")->capture_default_str();
  cmd->callback([args] {
    const zeppelin::batch b(zeppelin::read_lengths_file(args->lengths_file));
    // Partitioning reads only the shape; the links (cluster C: H200, NVLink, one 400G NIC
    // per GPU) matter for the cost model metric.
    const zeppelin::topology t({"plan", args->nodes, args->gpus_per_node, args->gpus_per_node, {},
                                zeppelin::links::nvlink_h100(), zeppelin::links::nic_400g(), zeppelin::gpus::h200()});
    plan_arguments a = *args;
    if (a.capacity == 0) a.capacity = zeppelin::balanced_capacity(b, t);
    if (a.explain) {
      const zeppelin::model_config m = zeppelin::model_by_name(args->model);
      zeppelin::method_setup setup;
      setup.metric = zeppelin::load_metric_kind_by_name(args->metric);
      setup.tokens_per_gpu = a.capacity;
      setup.capacity_slack = 0;
      const zeppelin::cost_driven_choice choice = zeppelin::plan_by_cost(b, t, m, setup);
      zeppelin::validate(choice.chosen.layout, b, t);
      if (args->json) {
        const nlohmann::json explain = explain_json(choice, m);
        write_plan_json(std::cout, choice.chosen.layout, &explain);
      } else {
        print_explanation(choice, b, m);
      }
      return;
    }
    if (args->method.empty()) throw CLI::RequiredError("--method (or --explain)");
    const zeppelin::plan p = zeppelin::partition(make_partitioner(a, t), b, t);
    zeppelin::validate(p, b, t);
    if (args->json) write_plan_json(std::cout, p);
    else print_summary(p, b, t);
  });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(20, add_plan_command);

}  // namespace zeppelin_tool
