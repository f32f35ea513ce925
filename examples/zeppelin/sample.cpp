// examples/zeppelin/sample.cpp
// `zeppelin sample`: draw a batch of sequence lengths that fills a token budget exactly.
// In:  a distribution (--dataset arxiv|github|prolong64k from Zeppelin Table 2, or
//      --histogram FILE with `lo hi weight` lines), --tokens N (K/M/G suffixes are powers of
//      1024), --seed S, optional --min-length / --max-length and --rule clamp|condition.
// Out: one length per line; --stats prints summary statistics instead (with the Table 2
//      shares of the sample next to the distribution's); --json prints one JSON object with
//      the options, the lengths and, with --stats, the statistics.
//   zeppelin sample --dataset github --tokens 1M --seed 7 --max-length 64K --stats
#include "commands.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/data.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zeppelin_tool {
namespace {

struct sample_arguments {
  std::string dataset;
  std::string histogram_file;
  zeppelin::token_count tokens = 0;
  std::uint64_t seed = 1;
  zeppelin::token_count min_length = 1;
  zeppelin::token_count max_length = 0;
  std::string rule = "clamp";
  bool stats = false;
  bool json = false;
};

nlohmann::ordered_json stats_json(const zeppelin::length_stats& s, const std::optional<zeppelin::length_histogram>& table2) {
  nlohmann::ordered_json columns = nlohmann::ordered_json::array();
  for (std::size_t c = 0; c < zeppelin::table2_columns; ++c) {
    nlohmann::ordered_json column = {{"bin", std::string(zeppelin::table2_labels[c])},
                             {"lo", zeppelin::table2_edges[c]},
                             {"hi", zeppelin::table2_edges[c + 1]},
                             {"sample_share", s.table2_share[c]}};
    if (table2) column["table2_share"] = table2->probability(c);
    columns.push_back(std::move(column));
  }
  return {{"count", s.count},
          {"total_tokens", s.total_tokens},
          {"min", s.min_length},
          {"max", s.max_length},
          {"mean", s.mean},
          {"median", s.median},
          {"p90", s.p90},
          {"p99", s.p99},
          {"sum_of_squares", s.sum_of_squares},
          {"token_share_ge_4k", s.token_share_4k},
          {"token_share_ge_16k", s.token_share_16k},
          {"token_share_ge_64k", s.token_share_64k},
          {"table2_columns", std::move(columns)},
          {"beyond_table2_share", s.beyond_table2_share}};
}

void print_stats(const zeppelin::length_stats& s, const std::optional<zeppelin::length_histogram>& table2) {
  std::printf("sequences        %zu\n", s.count);
  std::printf("total tokens     %lld\n", static_cast<long long>(s.total_tokens));
  std::printf("min / max        %lld / %lld\n", static_cast<long long>(s.min_length), static_cast<long long>(s.max_length));
  std::printf("mean             %.1f\n", s.mean);
  std::printf("median p90 p99   %lld %lld %lld (nearest rank)\n", static_cast<long long>(s.median),
              static_cast<long long>(s.p90), static_cast<long long>(s.p99));
  std::printf("sum of squares   %.6g\n", s.sum_of_squares);
  std::printf("token share      >=4K %.4f  >=16K %.4f  >=64K %.4f\n", s.token_share_4k, s.token_share_16k,
              s.token_share_64k);
  std::printf("%-10s %12s%s\n", "bin (K)", "sample", table2 ? "      table 2" : "");
  for (std::size_t c = 0; c < zeppelin::table2_columns; ++c) {
    std::printf("%-10s %12.4f", std::string(zeppelin::table2_labels[c]).c_str(), s.table2_share[c]);
    if (table2) std::printf(" %12.4f", table2->probability(c));
    std::printf("\n");
  }
  if (s.beyond_table2_share > 0) std::printf("%-10s %12.4f\n", ">=256", s.beyond_table2_share);
}

void run_sample(const sample_arguments& args) {
  const bool from_dataset = !args.dataset.empty();
  if (from_dataset == !args.histogram_file.empty())
    ZEPPELIN_THROW(invalid_argument, "give exactly one of --dataset and --histogram", {});
  const zeppelin::length_histogram distribution =
      from_dataset ? zeppelin::dataset_by_name(args.dataset) : zeppelin::read_histogram_file(args.histogram_file);
  const zeppelin::sampler_options options{
      .min_length = args.min_length,
      .max_length = args.max_length,
      .limit_rule = args.rule == "condition" ? zeppelin::length_limit_rule::condition
                                             : zeppelin::length_limit_rule::clamp};
  const zeppelin::token_count total = args.tokens;
  const auto lengths = zeppelin::sample_lengths(distribution, total, args.seed, options);
  // The Table 2 row to compare with, when the distribution is one.
  const std::optional<zeppelin::length_histogram> table2 =
      from_dataset ? std::optional<zeppelin::length_histogram>(distribution) : std::nullopt;

  if (args.json) {
    nlohmann::ordered_json out = with_format<nlohmann::ordered_json>("sample");
    out.update(nlohmann::ordered_json{{"source", from_dataset ? args.dataset : "histogram:" + args.histogram_file},
                          {"total_tokens", total},
                          {"seed", args.seed},
                          {"min_length", options.min_length},
                          {"max_length", options.max_length},
                          {"rule", args.rule},
                          {"count", lengths.size()}});
    if (args.stats) out["stats"] = stats_json(zeppelin::summarize(lengths), table2);
    out["lengths"] = lengths;
    std::cout << out.dump(2) << '\n';
  } else if (args.stats) {
    print_stats(zeppelin::summarize(lengths), table2);
  } else {
    std::string text;
    for (const auto l : lengths) (text += std::to_string(l)) += '\n';
    std::cout << text;
  }
}

}  // namespace

void add_sample_command(CLI::App& app) {
  auto args = std::make_shared<sample_arguments>();
  CLI::App* sub = app.add_subcommand(
      "sample", "Sample sequence lengths from a dataset distribution until a token budget is filled exactly");
  std::vector<std::string> names;
  for (const auto n : zeppelin::dataset_names()) names.emplace_back(n);
  auto* dataset = sub->add_option("--dataset", args->dataset, "Zeppelin Table 2 distribution")
                      ->check(CLI::IsMember(names, CLI::ignore_case));
  auto* histogram = sub->add_option("--histogram", args->histogram_file, "histogram file of `lo hi weight` lines")
                        ->check(CLI::ExistingFile);
  dataset->excludes(histogram);
  histogram->excludes(dataset);
  add_size_option(sub, "--tokens", args->tokens, "token budget, filled exactly (e.g. 262144, 256K, 1M)")->required();
  add_integer_option(sub, "--seed", args->seed, "random seed (same seed, same lengths on every machine)")->capture_default_str();
  add_size_option(sub, "--min-length", args->min_length, "shortest drawn length")->capture_default_str();
  add_size_option(sub, "--max-length", args->max_length, "longest drawn length, e.g. the context window; 0: no cap")
      ->capture_default_str();
  sub->add_option("--rule", args->rule, "out-of-range draws: clamp (truncate/raise) or condition (redistribute)")
      ->capture_default_str()
      ->check(CLI::IsMember({"clamp", "condition"}));
  sub->add_flag("--stats", args->stats, "print summary statistics instead of the lengths");
  sub->add_flag("--json", args->json, "print JSON (lengths, and statistics with --stats)");
  sub->callback([args] { run_sample(*args); });
}

ZEPPELIN_TOOL_COMMAND(40, add_sample_command);

}  // namespace zeppelin_tool
