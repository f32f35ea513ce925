// examples/zeppelin/remap.cpp
// `zeppelin remap`: solve one remap instance (Zeppelin 3.4).
// In:  --tokens a,b,c,... (tokens each rank holds, node-major), --gpus-per-node P,
//      --intra-cost X and --inter-cost Y (cost of one token inside / across nodes, any unit;
//      without them, the physical costs: seconds per token of one hidden state of --model
//      (default 7b) over the links of --cluster (default c; remap/layout.hpp remap_token_costs)),
//      --objective max-send (the paper, default) | max-send-receive | min-inter-volume,
//      --solver exact (default) | greedy.
// Out: the transfer matrix towards the balanced layout (floor or ceil of the mean per rank)
//      and the objective value: max_i sum_j T_ij M_ij for max-send, the largest send or
//      receive cost for max-send-receive, the inter-node token count for min-inter-volume.
//      --json prints {"format":"zeppelin.remap","version":1,"gpus_per_node","intra_cost",
//      "inter_cost","solver","objective_kind","holds":[...],"target":[...],"matrix":[[...]],
//      "objective","max_send","max_receive","moved_tokens","inter_node_tokens"}: every figure
//      of the table; otherwise a table.
// Bad input (a negative count, a rank count not divisible by P, a cost <= 0) is an error.
#include "commands.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/transfer_bytes.hpp>
#include <zeppelin/remap.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <tuple>
#include <vector>

namespace zeppelin_tool {
namespace {

struct remap_options {
  std::string tokens;
  int gpus_per_node = 1;
  std::optional<double> intra_cost;  // both absent: the physical costs of --cluster and --model
  std::optional<double> inter_cost;
  std::string cluster = "c";
  std::string model = "7b";
  std::string objective = "max-send";
  std::string solver = "exact";
  bool json = false;
};

std::vector<zeppelin::token_count> parse_tokens(const std::string& list) {
  std::vector<zeppelin::token_count> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t end = std::min(list.find(',', at), list.size());
    const char* first = list.data() + at;
    const char* last = list.data() + end;
    long long v = 0;
    const auto [ptr, ec] = std::from_chars(first, last, v);
    ZEPPELIN_EXPECTS(ec == std::errc{} && ptr == last && first != last,
                     "--tokens must be a comma-separated list of integers", {{"position", double(out.size())}});
    out.push_back(v);
    at = end + 1;
  }
  return out;
}

zeppelin::remap_objective parse_objective(const std::string& name) {
  using zeppelin::remap_objective;
  for (const auto o : {remap_objective::max_send, remap_objective::max_send_receive, remap_objective::min_inter_volume})
    if (name == zeppelin::to_string(o)) return o;
  ZEPPELIN_THROW(invalid_argument, "unknown --objective '" + name + "' (max-send, max-send-receive, min-inter-volume)", {});
}

void run_remap(const remap_options& o) {
  using namespace zeppelin;
  const remap_objective objective = parse_objective(o.objective);
  ZEPPELIN_EXPECTS(o.solver == "exact" || o.solver == "greedy", "unknown --solver '" + o.solver + "' (exact, greedy)", {});
  const std::vector<token_count> tokens = parse_tokens(o.tokens);
  ZEPPELIN_EXPECTS(o.intra_cost.has_value() == o.inter_cost.has_value(),
                   "give both --intra-cost and --inter-cost, or neither (then the costs are the seconds per token of "
                   "--cluster and --model)",
                   {});
  double intra = 0, inter = 0;
  if (o.intra_cost) {
    intra = *o.intra_cost, inter = *o.inter_cost;
  } else {
    const auto ranks = static_cast<int>(tokens.size());
    ZEPPELIN_EXPECTS(o.gpus_per_node >= 1 && ranks % o.gpus_per_node == 0,
                     "the rank count must be a positive multiple of --gpus-per-node",
                     {{"ranks", double(ranks)}, {"gpus_per_node", double(o.gpus_per_node)}});
    const topology t = cluster_by_name(o.cluster, ranks / o.gpus_per_node, o.gpus_per_node);
    std::tie(intra, inter) = remap_token_costs(t, hidden_bytes_per_token(model_by_name(o.model)));
  }
  const remap_problem p = make_remap_problem(tokens, o.gpus_per_node, intra, inter);
  const remap_matrix m = o.solver == "exact" ? exact_remap{.objective = objective}.solve(p) : greedy_remap{}.solve(p);
  const remap_costs c = evaluate(p, m);
  const double value = c.value(objective);
  ZEPPELIN_EXPECTS(std::isfinite(value), "the remap objective overflows a double: per-token costs x tokens are too large",
                   {{"intra_cost", p.intra_cost}, {"inter_cost", p.inter_cost}});
  if (o.json) {
    auto out = with_format<nlohmann::json>("remap");
    out["gpus_per_node"] = p.gpus_per_node;
    out["intra_cost"] = p.intra_cost;
    out["inter_cost"] = p.inter_cost;
    out["solver"] = o.solver;
    out["objective_kind"] = std::string(to_string(objective));
    out["holds"] = p.current;
    out["target"] = p.target;
    out["matrix"] = m.dense();
    out["objective"] = value;
    out["max_send"] = c.max_send;
    out["max_receive"] = c.max_receive;
    out["moved_tokens"] = c.moved_tokens;
    out["inter_node_tokens"] = c.inter_node_tokens;
    std::cout << out.dump() << '\n';
    return;
  }
  std::printf("%d ranks, %d per node; b_intra %g, b_inter %g; solver %s, objective %s\n", p.num_ranks(), p.gpus_per_node,
              p.intra_cost, p.inter_cost, o.solver.c_str(), std::string(to_string(objective)).c_str());
  std::printf("%6s %10s %10s   sends (to: tokens)\n", "rank", "holds", "target");
  for (rank_index r = 0; r < p.num_ranks(); ++r) {
    std::printf("%6d %10lld %10lld  ", r, static_cast<long long>(p.current[static_cast<std::size_t>(r)]),
                static_cast<long long>(p.target[static_cast<std::size_t>(r)]));
    for (const auto& t : m.entries)
      if (t.from == r) std::printf(" %d:%lld", t.to, static_cast<long long>(t.tokens));
    std::printf("\n");
  }
  std::printf("objective %.17g; max send %.17g, max receive %.17g, moved %lld tokens, %lld across nodes\n", value,
              c.max_send, c.max_receive, static_cast<long long>(c.moved_tokens), static_cast<long long>(c.inter_node_tokens));
}

void add_remap_command(CLI::App& app) {
  auto options = std::make_shared<remap_options>();
  CLI::App* cmd = app.add_subcommand("remap", "solve the remap to the token-balanced layout (Zeppelin 3.4)");
  cmd->add_option("--tokens", options->tokens, "tokens per rank, comma-separated, node-major")->required();
  add_integer_option(cmd, "--gpus-per-node", options->gpus_per_node, "GPUs per node P (divides the rank count)")
      ->capture_default_str();
  cmd->add_option("--intra-cost", options->intra_cost, "cost of one token inside a node (b_intra > 0)")
      ->default_str("seconds per token on --cluster for --model");
  cmd->add_option("--inter-cost", options->inter_cost, "cost of one token across nodes (b_inter > 0)")
      ->default_str("seconds per token on --cluster for --model");
  cmd->add_option("--cluster", options->cluster, "cluster preset whose links price a token without --intra/--inter-cost")
      ->capture_default_str();
  cmd->add_option("--model", options->model, "model preset: a token is one hidden state of it")->capture_default_str();
  cmd->add_option("--objective", options->objective, "max-send (paper), max-send-receive, min-inter-volume")
      ->capture_default_str();
  cmd->add_option("--solver", options->solver, "exact or greedy (baseline)")->capture_default_str();
  cmd->add_flag("--json", options->json, "print JSON (docs/formats.md)");
  cmd->callback([options] { run_remap(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(30, add_remap_command);

}  // namespace zeppelin_tool
