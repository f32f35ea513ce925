// examples/zeppelin/pack.cpp
// `zeppelin pack`: pack a stream of documents into micro-batches, iteration by iteration
// (pack/stream.hpp), with one of the packers of WLB-LLM's Table 2.
// In:  --method original | fixed_greedy | fixed_exact | wlb, --lengths FILE (one document
//      length per line, data/length_file.hpp), --micro-batches N, --max-tokens L,
//      --queues K (wlb: outlier queues at 1/2, 3/4, 7/8 ... of L; default 2),
//      --window W (fixed_greedy: global batches packed together; default 1),
//      --max-wait M (wlb: the longest a document waits, iterations; default 32),
//      --keep-pending (do not flush at the end of data), --json.
// Arrivals: N x L tokens of documents per iteration, in file order.
// Out: per iteration its micro-batches (documents as file indices, tokens, workload), the
//      documents left pending, the mean workload imbalance (max / mean of W = W_a + W_l over
//      an iteration's micro-batches, pack/workload.hpp's default model, averaged over the
//      iterations holding documents) and the token-weighted mean delay; with --json
//      {"iterations":[{"micro_batches":[{"docs":[...],"tokens":t}]}],"pending":[...],"imbalance":x}.
// Bad input (a document longer than L, N or L below 1, an unknown method) is an error: a
// message on stderr and exit status 1.
#include "commands.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/pack.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
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
};

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
  if (o.json) {
    auto j = with_format<nlohmann::ordered_json>("pack");
    j["iterations"] = nlohmann::ordered_json::array();
    for (const packed_iteration& it : run.iterations) {
      nlohmann::ordered_json mbs = nlohmann::ordered_json::array();
      for (const packed_micro_batch& mb : it.micro_batches) mbs.push_back({{"docs", mb.documents}, {"tokens", mb.tokens}});
      j["iterations"].push_back({{"micro_batches", std::move(mbs)}});
    }
    j["pending"] = run.pending;
    j["imbalance"] = imbalance;
    std::cout << j.dump() << '\n';
    return;
  }
  std::printf("%s: %zu documents, %d micro-batches x %lld tokens per iteration -> %zu iterations, %zu pending\n",
              std::string(to_string(chosen.kind())).c_str(), lengths.size(), o.micro_batches,
              static_cast<long long>(o.max_tokens), run.iterations.size(), run.pending.size());
  for (std::size_t t = 0; t < run.iterations.size(); ++t) {
    const packed_iteration& it = run.iterations[t];
    std::printf("iteration %zu: imbalance %.4f\n", t, workload_imbalance(it));
    for (std::size_t m = 0; m < it.micro_batches.size(); ++m) {
      const packed_micro_batch& mb = it.micro_batches[m];
      std::printf("  mb %zu: %8lld tokens, workload %.6g, docs", m, static_cast<long long>(mb.tokens), mb.workload);
      for (const std::int64_t d : mb.documents) std::printf(" %lld", static_cast<long long>(d));
      std::printf("\n");
    }
  }
  std::printf("mean imbalance %.4f; mean delay %.4f iterations per token\n", imbalance, mean_token_delay(run, lengths));
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
  cmd->callback([options] { run_pack(*options); });
}

}  // namespace

ZEPPELIN_TOOL_COMMAND(35, add_pack_command);

}  // namespace zeppelin_tool
