// train_gpt: a small GPT trained end to end with the library, on N x P host thread ranks (the
// host loopback world), and the same training on one rank as the reference.
//   train_gpt [--method M] [--cluster c] [--nodes N] [--gpus-per-node P] [--steps S]
//             [--tokens T] [--min-length a] [--max-length b] [--corpus FILE] [--seed s]
//             [--vocab V] [--dim D] [--heads H] [--kv-heads K] [--layers L] [--hidden F]
//             [--lr x] [--fp32] [--checkpoint none|full|selective:K] [--gradient-check N]
//             [--stages S] [--micro-batches M] [--schedule gpipe|1f1b|interleaved] [--virtual-stages V]
//             [--world host|device|nccl] [--device d] [--rank r] [--id-file F]
// Each step, on every rank:
//   1. the step's documents (corpus.hpp) are planned with method M (any method of
//      `zeppelin simulate`, sim/methods.hpp; `zeppelin`, the default, lets the cost-driven
//      planner choose the layout and execution, priced for LLaMA-7B with this attention shape;
//      or a partitioner name, run with the baselines' execution);
//   2. each rank takes its slice of the packed stream (the data loader's layout) and dispatches
//      its (token, target, position) rows to the layout of the linear modules (exec/relayout.hpp,
//      exec/linear_layout.hpp: the token-balanced layout where the method remaps);
//   3. forward: embedding, then per layer RMSNorm, Q/K/V, rotary embedding at the token's
//      position in its document, Q|K|V to the attention layout, the library's attention engine
//      (exec/attention_engine.hpp: rings, all-gather or all-to-all as planned), O back to the
//      linear layout, output projection, MLP; the LM head and the next-token cross-entropy
//      (gpt.hpp);
//   4. backward through the same path (dO to the attention layout, the engine's backward,
//      dQ|dK|dV back), gradients summed over the ranks (all-gather in rank order, so every rank
//      gets the same bits), AdamW. --checkpoint (checkpoint/any_checkpoint_policy.hpp) makes the
//      ranks keep only the input of the first K layers and run their forward, attention
//      included, again right before their backward; the reference keeps everything, so parity
//      also proves the recomputation exact.
// --stages S (pipeline_stage.hpp) runs S x N x P ranks: the layers split over S stages (S x V
// virtual stages with the interleaved schedule), each stage a group of N x P ranks running
// the plan's attention, the step's documents cut into M micro-batches of whole documents
// (default M = S) driven through the schedule by the library's pipeline runner
// (exec/pipeline_runner.hpp); --micro-batches alone accumulates gradients over micro-batches.
// The reference is the same code with one rank. Prints a progress bar on a terminal (plain
// lines otherwise) and, last,
//   loss parity: max |loss - reference| = X over S steps
// Exit status 0 when X <= 1e-10 (fp64) or 1e-4 (fp32, a relative bound times the loss), 1
// otherwise, 2 on bad input. --gradient-check N instead compares the distributed gradient of
// the first step's loss with central differences of the distributed loss at N coordinates
// spread over every tensor (exit status 0 when the largest relative error is <= 1e-5 in fp64).
// --world device and --world nccl run the same loop on GPUs (device_main.cpp: the CUDA engine
// in bf16, the device loopback world or one process per GPU over NCCL).
#include "corpus.hpp"
#include "gpt.hpp"
#include "pipeline_stage.hpp"
#include "device_world.hpp"
#include "options.hpp"
#include "step.hpp"
#include "train_loop.hpp"

#include "../common/cli_integers.hpp"
#include "../common/priced_model.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/comm.hpp>
#include <zeppelin/comm/sub_communicator.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/program.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/sim/methods.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

using namespace zeppelin;
using train_gpt::gpt_config;
using train_gpt::gpt_params;
using train_gpt::layer_cache;
using train_gpt::planned_step;

namespace {

using train_gpt::method_or_partitioner;
using train_gpt::options;
using train_gpt::run_result;

// The host world's all-gather of every rank's `flat`, rank by rank.
template <class T, communicator C>
std::vector<T> gather_ranks(C& c, const std::vector<T>& flat) {
  const auto R = static_cast<std::size_t>(c.size());
  std::vector<rank_index> group(R);
  for (std::size_t r = 0; r < R; ++r) group[r] = static_cast<rank_index>(r);
  std::vector<token_count> counts(R, static_cast<token_count>(flat.size()));
  std::vector<T> all(flat.size() * R);
  all_gather_v(c, std::span<const rank_index>(group), std::span<const T>(flat), std::span<T>(all), std::span<const token_count>(counts),
               "gradient all-reduce");
  return all;
}

// The world's gradients summed in rank order: the same bits on every rank.
template <class T, communicator C>
void sum_over_ranks(C& c, gpt_params<T>& grads, double& loss) {
  train_gpt::sum_over_ranks(grads, loss, static_cast<std::size_t>(c.size()), [&](const std::vector<T>& flat) { return gather_ranks(c, flat); });
}

// The calling rank's share of one step (train_loop.hpp forward_backward) on host thread ranks:
// its loader rows dispatched to the linear layout, attention through the host engine.
template <class T, communicator C>
double forward_backward(C& c, const gpt_config& cfg, const any_checkpoint_policy& recompute, const planned_step<T>& step,
                        const gpt_params<T>& w, gpt_params<T>* grads, double* kept = nullptr) {
  const train_gpt::linear_rows rows = train_gpt::dispatch_rows(c, step);
  const train_gpt::host_attention<T, C> attention{c, cfg, step, rows};
  return train_gpt::forward_backward(attention, cfg, recompute, rows, 1.0 / step.targets, w, grads, kept);
}

// One pipelined step on a world of o.stages x R ranks (pipeline_stage.hpp): the step's
// documents cut into micro-batches, each planned for the R ranks of a stage, run through the
// schedule; every rank's gradients summed over its stage's group; the loss gathered from the
// last stage. Returns the step's mean loss; `kept` receives the most activation values a rank
// held.
template <class T>
double pipelined_step(const options& o, const topology& t, const any_checkpoint_policy& recompute, const train_gpt::step_batch& sb,
                      const method_spec& requested, host_loopback_world& world, std::vector<gpt_params<T>>& params,
                      std::vector<train_gpt::adamw<T>>& optimizers, double& kept, std::string& executed) {
  const gpt_config& cfg = o.model;
  const rank_index R = t.num_ranks();
  std::vector<planned_step<T>> steps;
  std::vector<token_count> tokens;
  double targets = 0;
  for (train_gpt::step_batch& part : train_gpt::split_documents(sb, o.micro_batch_count())) {
    tokens.push_back(part.lengths.total_tokens());
    steps.push_back(train_gpt::plan_step<T>(std::move(part), t, requested, cfg));
    targets += steps.back().targets;
  }
  executed = std::string(steps.back().executed.name);
  const pipeline_schedule schedule =
      make_pipeline_schedule(o.schedule, o.chunks()).build(o.stages, std::span<const token_count>(tokens));
  double step_loss = 0;
  std::mutex m;
  world.run([&](host_loopback_comm& c) {
    const rank_index stage = c.rank() / R, r = c.rank() % R;
    std::vector<rank_index> group(static_cast<std::size_t>(R)), stage_ranks(static_cast<std::size_t>(o.stages));
    for (rank_index i = 0; i < R; ++i) group[static_cast<std::size_t>(i)] = stage * R + i;
    for (int s = 0; s < o.stages; ++s) stage_ranks[static_cast<std::size_t>(s)] = s * R + r;
    sub_communicator<host_loopback_comm> cp(c, group);
    const auto ri = static_cast<std::size_t>(c.rank());
    gpt_params<T> g = train_gpt::zero_params<T>(cfg);
    train_gpt::gpt_stage<T, sub_communicator<host_loopback_comm>> model(cp, cfg, steps, params[ri], g, recompute, stage, o.stages,
                                                                         o.chunks(), 1.0 / targets);
    (void)run_pipeline_stage(schedule, stage, model, c, std::span<const rank_index>(stage_ranks));
    // the loss of every rank's rows (nonzero on the last stage), summed in rank order
    double loss = 0;
    std::vector<double> losses(static_cast<std::size_t>(c.size()));
    std::vector<rank_index> everyone(static_cast<std::size_t>(c.size()));
    for (rank_index i = 0; i < c.size(); ++i) everyone[static_cast<std::size_t>(i)] = i;
    const double mine = model.loss();
    const std::vector<token_count> ones(everyone.size(), 1);
    all_gather_v(c, std::span<const rank_index>(everyone), std::span<const double>(&mine, 1), std::span<double>(losses),
                 std::span<const token_count>(ones), "loss gather");
    for (const double x : losses) loss += x;
    double unused = 0;
    sum_over_ranks(cp, g, unused);  // the stage's gradients over its group
    optimizers[ri].step(params[ri], g);
    std::lock_guard lock(m);
    kept = std::max(kept, model.peak_kept());
    if (c.rank() == 0) step_loss = loss / targets;
  });
  return step_loss;
}

template <class T>
run_result train(const options& o, const topology& t, const any_checkpoint_policy& recompute, bool progress, const char* label) {
  const gpt_config& cfg = o.model;
  const method_spec requested = method_or_partitioner(o.method);
  train_gpt::corpus data = train_gpt::corpus_of(o);
  const rank_index R = t.num_ranks(), world_ranks = R * o.stages;
  // every rank keeps its own copy of the parameters and optimizer state, as processes would
  // (with pipeline stages a rank uses and updates only its stage's layers)
  std::vector<gpt_params<T>> params(static_cast<std::size_t>(world_ranks), train_gpt::init_params<T>(cfg, o.seed));
  std::vector<train_gpt::adamw<T>> optimizers(static_cast<std::size_t>(world_ranks), train_gpt::fresh_adamw<T>(o));
  host_loopback_world world{.ranks = world_ranks, .gpus_per_node = t.gpus_per_node(), .timeout = std::chrono::seconds(600)};

  run_result result;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    train_gpt::step_batch sb = data.next(step, o.tokens);
    const auto tokens = static_cast<double>(sb.lengths.total_tokens());
    double step_loss = 0;
    if (o.pipelined()) {
      step_loss = pipelined_step<T>(o, t, recompute, sb, requested, world, params, optimizers, result.kept, result.executed);
    } else {
      const planned_step<T> planned = train_gpt::plan_step<T>(std::move(sb), t, requested, cfg);
      result.executed = std::string(planned.executed.name);
      std::mutex m;
      world.run([&](host_loopback_comm& c) {
        const auto ri = static_cast<std::size_t>(c.rank());
        gpt_params<T> g;
        double kept = 0;
        double loss = forward_backward(c, cfg, recompute, planned, params[ri], &g, &kept);
        sum_over_ranks(c, g, loss);
        optimizers[ri].step(params[ri], g);
        std::lock_guard lock(m);
        result.kept = std::max(result.kept, kept);
        if (c.rank() == 0) step_loss = loss / planned.targets;
      });
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    train_gpt::report_step(result, progress, label, step, o.steps, step_loss, tokens, seconds);
  }
  // the ranks of one stage must hold identical parameters, bit for bit
  for (std::size_t r = 0; r < params.size(); ++r)
    ZEPPELIN_EXPECTS(train_gpt::flatten(params[r]) == train_gpt::flatten(params[r - r % static_cast<std::size_t>(R)]),
                     "the ranks of a stage hold different parameters after training", {{"rank", double(r)}});
  return result;
}

// The distributed gradient of the first step's mean loss against central differences of the
// distributed loss, at `samples` coordinates spread over every tensor. Returns the largest
// |analytic - numeric| / max(1e-3, |numeric|).
template <class T>
double gradient_check(const options& o, const topology& t, int samples) {
  const gpt_config& cfg = o.model;
  train_gpt::corpus data = train_gpt::corpus_of(o);
  const planned_step<T> planned = train_gpt::plan_step<T>(data.next(0, o.tokens), t, method_or_partitioner(o.method), cfg);
  const any_checkpoint_policy recompute = checkpoint_policy_by_name(o.checkpoint);
  host_loopback_world world{.ranks = t.num_ranks(), .gpus_per_node = t.gpus_per_node(), .timeout = std::chrono::seconds(600)};
  gpt_params<T> w = train_gpt::init_params<T>(cfg, o.seed), analytic;
  std::mutex m;
  const auto loss_at = [&](const gpt_params<T>& at, gpt_params<T>* grads) {
    double total = 0;
    world.run([&](host_loopback_comm& c) {
      gpt_params<T> g;
      double loss = forward_backward(c, cfg, recompute, planned, at, grads ? &g : nullptr);
      if (!grads) g = train_gpt::zero_params<T>(cfg);
      sum_over_ranks(c, g, loss);
      if (c.rank() == 0) {
        std::lock_guard lock(m);
        total = loss / planned.targets;
        if (grads) *grads = std::move(g);
      }
    });
    return total;
  };
  (void)loss_at(w, &analytic);
  std::vector<std::vector<T>*> tensors, grads;
  w.for_each([&](std::vector<T>& x) { tensors.push_back(&x); });
  analytic.for_each([&](std::vector<T>& x) { grads.push_back(&x); });
  zeppelin::random_generator rng(o.seed, 99);
  double worst = 0;
  const double h = 1e-5;
  for (int i = 0; i < samples; ++i) {
    const std::size_t ti = static_cast<std::size_t>(i) % tensors.size();
    const std::size_t j = rng.below(tensors[ti]->size());
    const T saved = (*tensors[ti])[j];
    (*tensors[ti])[j] = static_cast<T>(saved + h);
    const double up = loss_at(w, nullptr);
    (*tensors[ti])[j] = static_cast<T>(saved - h);
    const double down = loss_at(w, nullptr);
    (*tensors[ti])[j] = saved;
    const double numeric = (up - down) / (2 * h), exact = static_cast<double>((*grads[ti])[j]);
    worst = std::max(worst, std::abs(exact - numeric) / std::max(1e-3, std::abs(numeric)));
  }
  return worst;
}

template <class T>
int run(const options& o) {
  const topology t = cluster_by_name(o.cluster, o.nodes, o.gpus_per_node);
  const topology single = cluster_by_name(o.cluster, 1, 1);
  const bool progress = isatty(fileno(stdout)) != 0;
  std::printf("train_gpt: %s, %d layers, width %d, %d heads (%d K/V), vocab %d; %d steps of %lld tokens; method %s on %d x %d "
              "ranks, %s\n",
              o.corpus_file.empty() ? "synthetic documents" : o.corpus_file.c_str(), o.model.layers, o.model.dim, o.model.heads,
              o.model.kv_heads, o.model.vocab, o.steps, static_cast<long long>(o.tokens), o.method.c_str(), t.nodes(),
              t.gpus_per_node(), o.fp32 ? "fp32" : "fp64");
  if (o.gradient_check > 0) {
    const double worst = gradient_check<T>(o, t, o.gradient_check);
    const double tolerance = o.fp32 ? 5e-2 : 1e-5;
    std::printf("gradient check: max relative error %.3e over %d coordinates (%d ranks, tolerance %.0e)\n", worst, o.gradient_check,
                t.num_ranks(), tolerance);
    return worst <= tolerance ? 0 : 1;
  }
  // the reference keeps every activation; the ranks recompute what --checkpoint says
  options one_rank = o;  // no stages, no micro-batches
  one_rank.stages = 1, one_rank.micro_batches = 1;
  const run_result reference = train<T>(one_rank, single, {no_recompute{}}, progress, "reference");
  const run_result distributed = train<T>(o, t, checkpoint_policy_by_name(o.checkpoint), progress, "ranks");
  const auto [worst, scale] = train_gpt::max_loss_gap(reference, distributed);
  const double tolerance = o.fp32 ? 1e-4 * std::max(1.0, scale) : 1e-10;
  std::printf("loss: %.6f -> %.6f; tokens/s: reference %.0f, %d ranks %.0f (method %s, last step: %s)\n", reference.loss.front(),
              reference.loss.back(), reference.tokens / reference.seconds, t.num_ranks() * o.stages,
              distributed.tokens / distributed.seconds, o.method.c_str(), distributed.executed.c_str());
  if (o.pipelined())
    std::printf("pipeline: %d stage(s) of %d ranks, %s schedule, %d virtual stage(s) per stage, up to %d micro-batches per step\n",
                o.stages, t.num_ranks(), std::string(to_string(o.schedule)).c_str(), o.chunks(), o.micro_batch_count());
  std::printf("activations kept between forward and backward: reference %.0f values, ranks at most %.0f each (checkpoint %s)\n",
              reference.kept, distributed.kept, o.checkpoint.c_str());
  std::printf("loss parity: max |loss - reference| = %.3e over %d steps\n", worst, o.steps);
  return worst <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"A small GPT trained with zeppelin's planning and attention engine on host thread ranks, against one rank"};
  std::vector<std::string> methods;
  for (const method_spec& s : method_specs) methods.emplace_back(s.name);
  for (const std::string_view p : partitioner_names) methods.emplace_back(p);
  app.add_option("--method", o.method, "a method of zeppelin simulate, or a partitioner")
      ->check(CLI::IsMember(methods))
      ->capture_default_str();
  app.add_option("--cluster", o.cluster, "cluster preset")->check(CLI::IsMember({"a", "b", "c", "wlb", "hydraulis", "infinipipe"}));
  using example_cli::add_integer_option;
  add_integer_option(&app, "--nodes", o.nodes, "nodes N")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--gpus-per-node", o.gpus_per_node, "ranks per node P")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--steps", o.steps, "training steps")->check(CLI::Range(1, 100000));
  add_integer_option(&app, "--tokens", o.tokens, "tokens per step")->check(CLI::Range(2, 1 << 20));
  add_integer_option(&app, "--min-length", o.min_length, "shortest synthetic document")->check(CLI::Range(2, 1 << 20));
  add_integer_option(&app, "--max-length", o.max_length, "longest synthetic document")->check(CLI::Range(2, 1 << 20));
  app.add_option("--corpus", o.corpus_file, "documents of token ids, one per line (default: synthetic)")->check(CLI::ExistingFile);
  add_integer_option(&app, "--seed", o.seed, "seed of the data and the initial parameters");
  add_integer_option(&app, "--vocab", o.model.vocab, "vocabulary size")->check(CLI::Range(2, 1 << 16));
  add_integer_option(&app, "--dim", o.model.dim, "model width (heads x head dim)")->check(CLI::Range(2, 4096));
  add_integer_option(&app, "--heads", o.model.heads, "query heads")->check(CLI::Range(1, 256));
  add_integer_option(&app, "--kv-heads", o.model.kv_heads, "key/value heads (divides heads)")->check(CLI::Range(1, 256));
  add_integer_option(&app, "--layers", o.model.layers, "layers")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--hidden", o.model.hidden, "MLP width")->check(CLI::Range(1, 16384));
  app.add_option("--lr", o.lr, "AdamW learning rate")->check(CLI::Range(0.0, 1.0));
  app.add_flag("--fp32", o.fp32, "train in fp32 (default fp64)");
  app.add_option("--checkpoint", o.checkpoint, "layers the ranks recompute in backward: none, full, selective:K")
      ->capture_default_str();
  add_integer_option(&app, "--stages", o.stages, "pipeline stages, each a group of nodes x gpus-per-node ranks")->check(CLI::Range(1, 16));
  add_integer_option(&app, "--micro-batches", o.micro_batches, "micro-batches per step (whole documents; 0: the stage count)")
      ->check(CLI::Range(0, 256));
  std::string schedule = "1f1b";
  app.add_option("--schedule", schedule, "pipeline schedule: gpipe, 1f1b, interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();
  add_integer_option(&app, "--virtual-stages", o.virtual_stages, "model chunks per stage of the interleaved schedule")
      ->check(CLI::Range(1, 16));
  add_integer_option(&app, "--gradient-check", o.gradient_check,
                     "instead of training: check the distributed gradient of the first step at N coordinates against "
                     "central differences")
      ->check(CLI::Range(0, 100000));
  const std::map<std::string, train_gpt::world_kind> worlds{
      {"host", train_gpt::world_kind::host}, {"device", train_gpt::world_kind::device}, {"nccl", train_gpt::world_kind::nccl}};
  app.add_option("--world", o.world,
                 "where the ranks run: host (threads, the host engine), device (threads on one GPU, the CUDA engine in bf16), nccl "
                 "(this process is one rank, one GPU each)")
      ->transform(CLI::CheckedTransformer(worlds))
      ->capture_default_str();
  add_integer_option(&app, "--device", o.device, "--world device: the GPU the ranks share")->check(CLI::Range(0, 1023));
  add_integer_option(&app, "--rank", o.rank, "--world nccl: this process's rank")->check(CLI::Range(0, 1 << 20));
  app.add_option("--id-file", o.id_file, "--world nccl: a path all ranks see, which must not exist yet (rank 0 writes the NCCL id)");
  CLI11_PARSE(app, argc, argv);
  try {
    o.schedule = pipeline_schedule_kind_by_name(schedule);
    ZEPPELIN_EXPECTS(o.model.dim % o.model.heads == 0 && o.model.head_dim() % 2 == 0 && o.model.heads % o.model.kv_heads == 0,
                     "the width must split into heads of an even head dim, and the K/V heads divide the heads",
                     {{"dim", double(o.model.dim)}, {"heads", double(o.model.heads)}, {"kv_heads", double(o.model.kv_heads)}});
    ZEPPELIN_EXPECTS(o.min_length <= o.max_length, "--min-length exceeds --max-length",
                     {{"min_length", double(o.min_length)}, {"max_length", double(o.max_length)}});
    (void)checkpoint_policy_by_name(o.checkpoint);  // a bad policy fails before any training
    ZEPPELIN_EXPECTS(o.model.layers >= o.stages * o.chunks(),
                     "every virtual pipeline stage needs a layer: --layers must be at least --stages (times "
                     "--virtual-stages with the interleaved schedule)",
                     {{"layers", double(o.model.layers)}, {"stages", double(o.stages)}, {"virtual_stages", double(o.chunks())}});
    ZEPPELIN_EXPECTS(o.gradient_check == 0 || !o.pipelined(), "--gradient-check runs without pipeline stages or micro-batches",
                     {{"stages", double(o.stages)}, {"micro_batches", double(o.micro_batch_count())}});
    if (o.world != train_gpt::world_kind::host) return train_gpt::run_on_device(o);
    return o.fp32 ? run<float>(o) : run<double>(o);
  } catch (const std::exception& e) {
    std::cerr << "train_gpt: " << e.what() << '\n';
    return 2;
  }
}
