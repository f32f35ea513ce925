// train_gpt: a small GPT trained end to end with the library, on N x P host thread ranks (the
// host loopback world), and the same training on one rank as the reference.
//   train_gpt [--method M] [--cluster c] [--nodes N] [--gpus-per-node P] [--steps S]
//             [--tokens T] [--min-length a] [--max-length b] [--corpus FILE] [--seed s]
//             [--vocab V] [--dim D] [--heads H] [--kv-heads K] [--layers L] [--hidden F]
//             [--lr x] [--fp32] [--checkpoint none|full|selective:K] [--gradient-check N]
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
// The reference is the same code with one rank. Prints a progress bar on a terminal (plain
// lines otherwise) and, last,
//   loss parity: max |loss - reference| = X over S steps
// Exit status 0 when X <= 1e-10 (fp64) or 1e-4 (fp32, a relative bound times the loss), 1
// otherwise, 2 on bad input. --gradient-check N instead compares the distributed gradient of
// the first step's loss with central differences of the distributed loss at N coordinates
// spread over every tensor (exit status 0 when the largest relative error is <= 1e-5 in fp64).
#include "corpus.hpp"
#include "gpt.hpp"

#include "../common/cli_integers.hpp"
#include "../common/priced_model.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/comm.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/program.hpp>
#include <zeppelin/sim/methods.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

using namespace zeppelin;
using train_gpt::gpt_config;
using train_gpt::gpt_params;

namespace {

struct options {
  std::string method = "zeppelin";
  std::string cluster = "c";
  int nodes = 1;
  int gpus_per_node = 4;
  int steps = 20;
  std::int64_t tokens = 512;
  std::int64_t min_length = 8;
  std::int64_t max_length = 160;
  std::string corpus_file;
  std::uint64_t seed = 1;
  gpt_config model{};
  double lr = 1e-2;
  bool fp32 = false;
  int gradient_check = 0;  //!< coordinates to check; 0: train
  std::string checkpoint = "none";  //!< checkpoint/any_checkpoint_policy.hpp text form
};

struct run_result {
  std::vector<double> loss;  //!< per step
  double tokens = 0, seconds = 0;
  double kept = 0;           //!< most activation values a rank held between forward and backward
  std::string executed;      //!< the candidate of the last step (for zeppelin)
};

// One rank's forward activations of one layer, kept for its backward.
template <class T>
struct layer_cache {
  std::vector<T> x, inv1, h1, q, k, v;          // linear layout; q, k after the rotary embedding
  std::vector<T> aq, ak, av, ao, lse;           // attention layout
  std::vector<T> o, x1, inv2, h2, z, act;       // linear layout
};

template <class T>
void add(std::vector<T>& into, const std::vector<T>& x) {
  for (std::size_t i = 0; i < into.size(); ++i) into[i] += x[i];
}

// Columns [from, from + width) of rows of `w` elements.
template <class T>
std::vector<T> columns(const std::vector<T>& rows, std::size_t n, std::size_t w, std::size_t from, std::size_t width) {
  std::vector<T> out(n * width);
  for (std::size_t r = 0; r < n; ++r)
    std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(r * w + from), width, out.begin() + static_cast<std::ptrdiff_t>(r * width));
  return out;
}

template <class T>
std::vector<T> concat_columns(const std::vector<const std::vector<T>*>& parts, const std::vector<std::size_t>& widths, std::size_t n) {
  std::size_t w = 0;
  for (const std::size_t x : widths) w += x;
  std::vector<T> out(n * w);
  for (std::size_t r = 0; r < n; ++r) {
    std::size_t at = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      std::copy_n(parts[i]->begin() + static_cast<std::ptrdiff_t>(r * widths[i]), widths[i],
                  out.begin() + static_cast<std::ptrdiff_t>(r * w + at));
      at += widths[i];
    }
  }
  return out;
}

// The world's gradients summed in rank order: the same bits on every rank.
template <class T, communicator C>
void sum_over_ranks(C& c, gpt_params<T>& grads, double& loss) {
  std::vector<T> flat;
  grads.for_each([&](std::vector<T>& t) { flat.insert(flat.end(), t.begin(), t.end()); });
  flat.push_back(static_cast<T>(loss));
  const auto R = static_cast<std::size_t>(c.size());
  std::vector<rank_index> group(R);
  for (std::size_t r = 0; r < R; ++r) group[r] = static_cast<rank_index>(r);
  std::vector<token_count> counts(R, static_cast<token_count>(flat.size()));
  std::vector<T> all(flat.size() * R);
  all_gather_v(c, std::span<const rank_index>(group), std::span<const T>(flat), std::span<T>(all), std::span<const token_count>(counts),
               "gradient all-reduce");
  std::fill(flat.begin(), flat.end(), T(0));
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t i = 0; i < flat.size(); ++i) flat[i] += all[r * flat.size() + i];
  std::size_t at = 0;
  grads.for_each([&](std::vector<T>& t) {
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), t.size(), t.begin());
    at += t.size();
  });
  loss = static_cast<double>(flat.back());
}

// A method of `zeppelin simulate` by name, or a partitioner (partition/registry.hpp) run with
// the baselines' execution: direct routing, in-order engine, a launch per group, no remapping.
method_spec method_or_partitioner(const std::string& name) {
  for (const method_spec& s : method_specs)
    if (s.name == name) return s;
  for (const std::string_view p : partitioner_names)
    if (p == name) return {method_kind::candidate, p, "a partitioner with the baselines' execution", p, false, engine_policy::in_order, false};
  return method_by_name(name);  // throws, listing the methods
}

// One step's plan and data movement, the same on every rank.
template <class T>
struct planned_step {
  train_gpt::step_batch data;
  std::vector<std::int64_t> target, position;  //!< packed stream order; target -1: last token of a document
  double targets = 0;                          //!< tokens with a target: the loss is their mean
  method_spec executed;
  plan layout;
  std::vector<placement> loader;
  relayout_plan dispatch;
  attention_engine<T> engine;
};

template <class T>
planned_step<T> plan_step(train_gpt::step_batch sb, const topology& t, const method_spec& requested, const gpt_config& cfg) {
  const batch& b = sb.lengths;
  std::vector<std::int64_t> target(sb.tokens.size(), -1), position(sb.tokens.size());
  double targets = 0;
  for (sequence_index s = 0; s < b.size(); ++s)
    for (token_count i = 0; i < b.length(s); ++i) {
      const auto g = static_cast<std::size_t>(b.offset(s) + i);
      position[g] = i;
      if (i + 1 < b.length(s)) target[g] = sb.tokens[g + 1], targets += 1;
    }
  const model_config priced = example_cli::priced_model(cfg.heads, cfg.kv_heads, cfg.head_dim(), static_cast<int>(sizeof(T)));
  method_setup setup;
  setup.tokens_per_gpu = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
  auto [spec, p] = plan_method(requested, b, t, priced, setup);
  const attention_dims dims{.heads = cfg.heads, .kv_heads = cfg.kv_heads, .head_dim = cfg.head_dim()};
  attention_engine<T> engine(p, b, t, dims, to_program_options(options_for(spec, setup), {}));
  std::vector<placement> loader = loader_layout(b, t.num_ranks());
  relayout_plan dispatch = make_dispatch_plan(loader, linear_layout(p, engine.program()));
  return {std::move(sb), std::move(target), std::move(position), targets, spec, std::move(p), std::move(loader), std::move(dispatch),
          std::move(engine)};
}

// The calling rank's share of one step: its loader rows dispatched to the linear layout, the
// forward pass, and (when `grads` is given) the backward pass into `grads` (zeroed first),
// recomputing the layers `recompute` names; `kept`, when given, receives the activation values
// the rank held between its forward and backward.
// Returns the rank's summed cross-entropy; the gradients are those of the MEAN loss of the
// whole batch (its rows scaled by 1 / step.targets), not yet summed over the ranks.
template <class T, communicator C>
double forward_backward(C& c, const gpt_config& cfg, const any_checkpoint_policy& recompute, const planned_step<T>& step,
                        const gpt_params<T>& w, gpt_params<T>* grads, double* kept = nullptr) {
  const auto D = static_cast<std::size_t>(cfg.dim), F = static_cast<std::size_t>(cfg.hidden), V = static_cast<std::size_t>(cfg.vocab);
  const auto H = static_cast<std::size_t>(cfg.heads), KV = static_cast<std::size_t>(cfg.kv_heads), hd = static_cast<std::size_t>(cfg.head_dim());
  const std::size_t kvw = KV * hd, qkv = D + 2 * kvw;
  const attention_engine<T>& engine = step.engine;
  const plan& p = step.layout;
  const batch& b = step.data.lengths;
  const rank_index me = c.rank();
  const auto ri = static_cast<std::size_t>(me);
  // the loader's rows -> the linear layout: (token, target, position) per row
  std::vector<std::int64_t> mine;
  for (const shard& s : step.loader[ri].shards)
    for (token_count i = s.range.begin; i < s.range.end; ++i) {
      const auto g = static_cast<std::size_t>(b.offset(s.seq) + i);
      mine.insert(mine.end(), {step.data.tokens[g], step.target[g], step.position[g]});
    }
  const auto n = static_cast<std::size_t>(step.dispatch.ranks[ri].target_tokens);
  std::vector<std::int64_t> rows(n * 3);
  execute_relayout(c, step.dispatch, std::span<const std::int64_t>(mine), std::span<std::int64_t>(rows), 3, "dispatch");
  std::vector<std::int64_t> tok(n), tgt(n), pos(n);
  for (std::size_t r = 0; r < n; ++r) tok[r] = rows[3 * r], tgt[r] = rows[3 * r + 1], pos[r] = rows[3 * r + 2];
  const auto na = static_cast<std::size_t>(engine.rows(me));

  // forward
  std::vector<T> x(n * D);
  for (std::size_t r = 0; r < n; ++r)
    std::copy_n(w.embed.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(tok[r]) * D), D,
                x.begin() + static_cast<std::ptrdiff_t>(r * D));
  // one layer's forward from its input k.x, filling the rest of its cache; returns its output
  const auto layer_forward = [&](int l, layer_cache<T>& k) {
    const auto& lw = w.layers[static_cast<std::size_t>(l)];
    train_gpt::rmsnorm(k.x, lw.norm1, k.h1, k.inv1, n, D, cfg.eps);
    train_gpt::matmul(k.h1, lw.wq, k.q, n, D, D);
    train_gpt::matmul(k.h1, lw.wk, k.k, n, D, kvw);
    train_gpt::matmul(k.h1, lw.wv, k.v, n, D, kvw);
    train_gpt::rope(k.q, pos, H, hd, cfg.rope_base, 1);
    train_gpt::rope(k.k, pos, KV, hd, cfg.rope_base, 1);
    const std::vector<T> packed = concat_columns<T>({&k.q, &k.k, &k.v}, {D, kvw, kvw}, n);
    std::vector<T> att(na * qkv);
    to_attention_layout(engine, c, p, pass_kind::forward, std::span<const T>(packed), std::span<T>(att), static_cast<std::int64_t>(qkv));
    k.aq = columns(att, na, qkv, 0, D), k.ak = columns(att, na, qkv, D, kvw), k.av = columns(att, na, qkv, D + kvw, kvw);
    k.ao.assign(na * D, T(0)), k.lse.assign(na * H, T(0));
    engine.forward(c, std::span<const T>(k.aq), std::span<const T>(k.ak), std::span<const T>(k.av), std::span<T>(k.ao),
                   std::span<T>(k.lse));
    k.o.assign(n * D, T(0));
    to_linear_layout(engine, c, p, pass_kind::forward, std::span<const T>(k.ao), std::span<T>(k.o), static_cast<std::int64_t>(D));
    std::vector<T> y;
    train_gpt::matmul(k.o, lw.wo, y, n, D, D);
    k.x1 = k.x;
    add(k.x1, y);
    train_gpt::rmsnorm(k.x1, lw.norm2, k.h2, k.inv2, n, D, cfg.eps);
    train_gpt::matmul(k.h2, lw.w1, k.z, n, D, F);
    k.act.resize(k.z.size());
    for (std::size_t i = 0; i < k.z.size(); ++i) k.act[i] = k.z[i] * train_gpt::sigmoid(k.z[i]);
    train_gpt::matmul(k.act, lw.w2, y, n, F, D);
    std::vector<T> out = k.x1;
    add(out, y);
    return out;
  };
  // the first `recomputed` layers keep only their input until their backward (checkpoint
  // policy, whole-layer recomputation)
  const int recomputed =
      std::clamp(recompute.recomputed_layers({.stage = 0, .chunk = 0, .micro_batch = 0, .layers = cfg.layers}), 0, cfg.layers);
  std::vector<layer_cache<T>> caches(static_cast<std::size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    layer_cache<T>& k = caches[static_cast<std::size_t>(l)];
    k.x = x;
    x = layer_forward(l, k);
    if (l < recomputed) {  // keep the input only
      layer_cache<T> input_only;
      input_only.x = std::move(k.x);
      k = std::move(input_only);
    }
  }
  if (kept) {
    double values = 0;
    for (const auto& k : caches)
      for (const std::vector<T>* t : {&k.x, &k.inv1, &k.h1, &k.q, &k.k, &k.v, &k.aq, &k.ak, &k.av, &k.ao, &k.lse, &k.o, &k.x1, &k.inv2,
                                      &k.h2, &k.z, &k.act})
        values += static_cast<double>(t->size());
    *kept = values;
  }
  std::vector<T> hf, inv_f, logits, dlogits;
  train_gpt::rmsnorm(x, w.norm_final, hf, inv_f, n, D, cfg.eps);
  train_gpt::matmul(hf, w.lm_head, logits, n, D, V);
  const double loss = train_gpt::cross_entropy(logits, tgt, dlogits, V, 1.0 / step.targets);
  if (!grads) return loss;

  // backward
  gpt_params<T>& g = *grads;
  g = train_gpt::zero_params<T>(cfg);
  std::vector<T> dh, dx;
  train_gpt::matmul_backward(hf, w.lm_head, dlogits, dh, g.lm_head, n, D, V);
  train_gpt::rmsnorm_backward(x, w.norm_final, inv_f, dh, dx, g.norm_final, n, D);
  for (int l = cfg.layers - 1; l >= 0; --l) {
    const auto& lw = w.layers[static_cast<std::size_t>(l)];
    auto& gl = g.layers[static_cast<std::size_t>(l)];
    layer_cache<T>& k = caches[static_cast<std::size_t>(l)];
    if (l < recomputed) (void)layer_forward(l, k);  // the same values, bit for bit
    // MLP: x_out = x1 + silu(norm2(x1) W1) W2
    std::vector<T> dact, dz, dh2, dx1;
    train_gpt::matmul_backward(k.act, lw.w2, dx, dact, gl.w2, n, F, D);
    dz.resize(dact.size());
    for (std::size_t i = 0; i < dz.size(); ++i) {
      const T sg = train_gpt::sigmoid(k.z[i]);
      dz[i] = dact[i] * sg * (T(1) + k.z[i] * (T(1) - sg));
    }
    train_gpt::matmul_backward(k.h2, lw.w1, dz, dh2, gl.w1, n, D, F);
    train_gpt::rmsnorm_backward(k.x1, lw.norm2, k.inv2, dh2, dx1, gl.norm2, n, D);
    add(dx1, dx);
    // attention: x1 = x + attention(rope(norm1(x) Wq), rope(norm1(x) Wk), norm1(x) Wv) Wo
    std::vector<T> d_o, dxq, dxk, dxv, dxn;
    train_gpt::matmul_backward(k.o, lw.wo, dx1, d_o, gl.wo, n, D, D);
    std::vector<T> a_do(na * D), adq(na * D), adk(na * kvw), adv(na * kvw);
    to_attention_layout(engine, c, p, pass_kind::backward, std::span<const T>(d_o), std::span<T>(a_do), static_cast<std::int64_t>(D));
    engine.backward(c, std::span<const T>(k.aq), std::span<const T>(k.ak), std::span<const T>(k.av), std::span<const T>(k.ao),
                    std::span<const T>(a_do), std::span<const T>(k.lse), std::span<T>(adq), std::span<T>(adk), std::span<T>(adv));
    const std::vector<T> agrad = concat_columns<T>({&adq, &adk, &adv}, {D, kvw, kvw}, na);
    std::vector<T> grad(n * qkv);
    to_linear_layout(engine, c, p, pass_kind::backward, std::span<const T>(agrad), std::span<T>(grad), static_cast<std::int64_t>(qkv));
    std::vector<T> dq = columns(grad, n, qkv, 0, D), dk = columns(grad, n, qkv, D, kvw), dv = columns(grad, n, qkv, D + kvw, kvw);
    train_gpt::rope(dq, pos, H, hd, cfg.rope_base, -1);
    train_gpt::rope(dk, pos, KV, hd, cfg.rope_base, -1);
    train_gpt::matmul_backward(k.h1, lw.wq, dq, dxq, gl.wq, n, D, D);
    train_gpt::matmul_backward(k.h1, lw.wk, dk, dxk, gl.wk, n, D, kvw);
    train_gpt::matmul_backward(k.h1, lw.wv, dv, dxv, gl.wv, n, D, kvw);
    add(dxq, dxk);
    add(dxq, dxv);
    train_gpt::rmsnorm_backward(k.x, lw.norm1, k.inv1, dxq, dxn, gl.norm1, n, D);
    add(dxn, dx1);
    dx = std::move(dxn);
  }
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < D; ++i) g.embed[static_cast<std::size_t>(tok[r]) * D + i] += dx[r * D + i];
  return loss;
}

template <class T>
run_result train(const options& o, const topology& t, const any_checkpoint_policy& recompute, bool progress, const char* label) {
  const gpt_config& cfg = o.model;
  const method_spec requested = method_or_partitioner(o.method);
  train_gpt::corpus data = o.corpus_file.empty() ? train_gpt::corpus(cfg.vocab, o.min_length, o.max_length, o.seed)
                                                 : train_gpt::corpus(o.corpus_file, cfg.vocab);
  const rank_index R = t.num_ranks();
  // every rank keeps its own copy of the parameters and optimizer state, as processes would
  std::vector<gpt_params<T>> params(static_cast<std::size_t>(R), train_gpt::init_params<T>(cfg, o.seed));
  std::vector<train_gpt::adamw<T>> optimizers(static_cast<std::size_t>(R));
  for (auto& opt : optimizers) opt.lr = o.lr, opt.m = train_gpt::zero_params<T>(cfg), opt.v = train_gpt::zero_params<T>(cfg);
  host_loopback_world world{.ranks = R, .gpus_per_node = t.gpus_per_node(), .timeout = std::chrono::seconds(600)};

  run_result result;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const planned_step<T> planned = plan_step<T>(data.next(step, o.tokens), t, requested, cfg);
    result.executed = std::string(planned.executed.name);
    double step_loss = 0;
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
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto tokens = static_cast<double>(planned.data.lengths.total_tokens());
    result.loss.push_back(step_loss);
    result.tokens += tokens;
    result.seconds += seconds;
    if (progress) {
      const int width = 30, done = (step + 1) * width / o.steps;
      std::printf("\r%-9s [%s%s] step %3d/%d  loss %.6f  %8.0f tokens/s", label, std::string(static_cast<std::size_t>(done), '#').c_str(),
                  std::string(static_cast<std::size_t>(width - done), ' ').c_str(), step + 1, o.steps, step_loss, tokens / seconds);
      if (step + 1 == o.steps) std::printf("\n");
      std::fflush(stdout);
    } else {
      std::printf("%s step %d loss %.12f tokens/s %.0f (%s)\n", label, step + 1, step_loss, tokens / seconds, result.executed.c_str());
    }
  }
  // the ranks' parameters must be identical bit for bit
  std::vector<T> first;
  params[0].for_each([&](std::vector<T>& x) { first.insert(first.end(), x.begin(), x.end()); });
  for (std::size_t r = 1; r < params.size(); ++r) {
    std::vector<T> other;
    params[r].for_each([&](std::vector<T>& x) { other.insert(other.end(), x.begin(), x.end()); });
    ZEPPELIN_EXPECTS(first == other, "train_gpt: the ranks' parameters differ after training", {{"rank", double(r)}});
  }
  return result;
}

// The distributed gradient of the first step's mean loss against central differences of the
// distributed loss, at `samples` coordinates spread over every tensor. Returns the largest
// |analytic - numeric| / max(1e-3, |numeric|).
template <class T>
double gradient_check(const options& o, const topology& t, int samples) {
  const gpt_config& cfg = o.model;
  train_gpt::corpus data = o.corpus_file.empty() ? train_gpt::corpus(cfg.vocab, o.min_length, o.max_length, o.seed)
                                                 : train_gpt::corpus(o.corpus_file, cfg.vocab);
  const planned_step<T> planned = plan_step<T>(data.next(0, o.tokens), t, method_or_partitioner(o.method), cfg);
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
  const run_result reference = train<T>(o, single, {no_recompute{}}, progress, "reference");
  const run_result distributed = train<T>(o, t, checkpoint_policy_by_name(o.checkpoint), progress, "ranks");
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < reference.loss.size(); ++i) {
    worst = std::max(worst, std::abs(reference.loss[i] - distributed.loss[i]));
    scale = std::max(scale, std::abs(reference.loss[i]));
  }
  const double tolerance = o.fp32 ? 1e-4 * std::max(1.0, scale) : 1e-10;
  std::printf("loss: %.6f -> %.6f; tokens/s: reference %.0f, %d ranks %.0f (method %s, last step: %s)\n", reference.loss.front(),
              reference.loss.back(), reference.tokens / reference.seconds, t.num_ranks(), distributed.tokens / distributed.seconds,
              o.method.c_str(), distributed.executed.c_str());
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
  add_integer_option(&app, "--gradient-check", o.gradient_check,
                     "instead of training: check the distributed gradient of the first step at N coordinates against "
                     "central differences")
      ->check(CLI::Range(0, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    ZEPPELIN_EXPECTS(o.model.dim % o.model.heads == 0 && o.model.head_dim() % 2 == 0 && o.model.heads % o.model.kv_heads == 0,
                     "train_gpt: the width must split into heads of an even head dim, and the K/V heads divide the heads",
                     {{"dim", double(o.model.dim)}, {"heads", double(o.model.heads)}, {"kv_heads", double(o.model.kv_heads)}});
    ZEPPELIN_EXPECTS(o.min_length <= o.max_length, "train_gpt: --min-length exceeds --max-length",
                     {{"min_length", double(o.min_length)}, {"max_length", double(o.max_length)}});
    (void)checkpoint_policy_by_name(o.checkpoint);  // a bad policy fails before any training
    return o.fp32 ? run<float>(o) : run<double>(o);
  } catch (const std::exception& e) {
    std::cerr << "train_gpt: " << e.what() << '\n';
    return 2;
  }
}
