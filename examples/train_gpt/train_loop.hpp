// examples/train_gpt/train_loop.hpp
// What every world of train_gpt shares (main.cpp: host thread ranks; device_main.cpp: GPUs):
//   method_or_partitioner  --method: a method of `zeppelin simulate`, or a partitioner run with
//                          the baselines' execution
//   forward_backward       one rank's forward and backward over its dispatched rows, the layers'
//                          attention through an attention object (step.hpp host_attention,
//                          device_attention.hpp device_attention), recomputing what the
//                          checkpoint policy says
//   sum_over_ranks         gradients and loss summed over the ranks in rank order (the same bits
//                          on every rank), from an all-gather the world provides
//   corpus_of / fresh_adamw  the run's documents and a rank's optimizer, from the options
//   run_result / report_step / max_loss_gap   a run's record, its progress line, and the
//                          largest per-step gap between two runs' losses
#pragma once

#include "corpus.hpp"
#include "gpt.hpp"
#include "options.hpp"
#include "step.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/planner/methods.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace train_gpt {

struct run_result {
  std::vector<double> loss;  //!< per step
  double tokens = 0, seconds = 0;
  double kept = 0;           //!< most activation values a rank held between forward and backward
  std::string executed;      //!< the candidate of the last step (for zeppelin)
  std::map<std::string, int> layouts;  //!< micro-batches (passes) per method that laid them out
  int parts = 1;                       //!< most step programs one step ran (InfiniPipe's pipelines)
  std::int64_t slices = 0;             //!< pieces that were slices of longer documents, over the steps
  std::string pipelines;               //!< the last step's replicas, TPxPPxCP each (Hydraulis)
};

// The run's documents: the synthetic stream, or --corpus.
inline corpus corpus_of(const options& o) {
  return o.corpus_file.empty() ? corpus(o.model.vocab, o.min_length, o.max_length, o.seed) : corpus(o.corpus_file, o.model.vocab);
}

// A rank's optimizer before the first step, for the parameters of `shape` (the model's, or a
// TP shard's view of it).
template <class T>
adamw<T> fresh_adamw(const options& o, const gpt_config& shape) {
  adamw<T> opt;
  opt.lr = o.lr, opt.m = zero_params<T>(shape), opt.v = zero_params<T>(shape);
  return opt;
}
template <class T>
adamw<T> fresh_adamw(const options& o) {
  return fresh_adamw<T>(o, o.model);
}

// A method of `zeppelin simulate` by name, or a partitioner (partition/registry.hpp) run with
// the baselines' execution: direct routing, in-order engine, a launch per group, no remapping.
inline method_spec method_or_partitioner(const std::string& name) {
  for (const method_spec& s : method_specs)
    if (s.name == name) return s;
  if (std::find(partitioner_names.begin(), partitioner_names.end(), name) != partitioner_names.end()) return method_of_partitioner(name);
  return method_by_name(name);  // throws, listing the methods
}

// The calling rank's share of one step over its rows (already in the linear layout): the
// forward pass, and (when `grads` is given) the backward pass into `grads` (zeroed first),
// recomputing the layers `recompute` names; `kept`, when given, receives the activation values
// the rank held between its forward and backward. Every layer's attention goes through
// `attention` (collective: every rank of the plan runs the same layers in the same order).
// Returns the rank's summed cross-entropy; the gradients are those of the loss times
// `loss_scale` (1 / the batch's targets: the MEAN loss), not yet summed over the ranks.
template <class T, class Attention>
double forward_backward(const Attention& attention, const gpt_config& cfg, const any_checkpoint_policy& recompute, const linear_rows& rows,
                        double loss_scale, const gpt_params<T>& w, gpt_params<T>* grads, double* kept = nullptr) {
  std::vector<T> x = embed(cfg, w, rows);
  // the first `recomputed` layers keep only their input until their backward (checkpoint
  // policy, whole-layer recomputation)
  const int recomputed =
      std::clamp(recompute.recomputed_layers({.stage = 0, .chunk = 0, .micro_batch = 0, .layers = cfg.layers}), 0, cfg.layers);
  std::vector<layer_cache<T>> caches(static_cast<std::size_t>(cfg.layers));
  for (int l = 0; l < cfg.layers; ++l) {
    layer_cache<T>& k = caches[static_cast<std::size_t>(l)];
    k.x = x;
    x = layer_forward(attention, cfg, rows, w.layers[static_cast<std::size_t>(l)], k);
    if (l < recomputed) {  // keep the input only
      layer_cache<T> input_only;
      input_only.x = std::move(k.x);
      k = std::move(input_only);
    }
  }
  if (kept) {
    *kept = 0;
    for (const auto& k : caches) *kept += cached_values(k);
  }
  head_cache<T> head;
  const double loss = head_forward(cfg, w, rows, std::move(x), head, loss_scale);
  if (!grads) return loss;

  gpt_params<T>& g = *grads;
  g = zero_params<T>(cfg);
  std::vector<T> dx = head_backward(cfg, w, g, rows, head);
  for (int l = cfg.layers - 1; l >= 0; --l) {
    const auto li = static_cast<std::size_t>(l);
    layer_cache<T>& k = caches[li];
    if (l < recomputed) (void)layer_forward(attention, cfg, rows, w.layers[li], k);  // the same values, bit for bit
    dx = layer_backward(attention, cfg, rows, w.layers[li], g.layers[li], k, dx);
  }
  embed_backward(cfg, g, rows, dx);
  return loss;
}

// The world's gradients and loss summed in rank order: the same bits on every rank.
// gather(flat) returns every rank's `flat` (the rank's gradients, then its loss), rank by rank.
template <class T, class Gather>
void sum_over_ranks(gpt_params<T>& grads, double& loss, std::size_t ranks, Gather&& gather) {
  std::vector<T> flat = flatten(grads);
  flat.push_back(static_cast<T>(loss));
  const std::vector<T> all = gather(flat);
  std::fill(flat.begin(), flat.end(), T(0));
  for (std::size_t r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < flat.size(); ++i) flat[i] += all[r * flat.size() + i];
  std::size_t at = 0;
  grads.for_each([&](std::vector<T>& t) {
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), t.size(), t.begin());
    at += t.size();
  });
  loss = static_cast<double>(flat.back());
}

// Records step `step` (0-based) of `steps` in `result` and prints it under `label`: a progress
// bar that redraws one line on a terminal, a plain line per step otherwise; nothing without a
// label (a rank that does not speak).
inline void report_step(run_result& result, bool progress, const char* label, int step, int steps, double loss, double tokens,
                        double seconds) {
  result.loss.push_back(loss);
  result.tokens += tokens;
  result.seconds += seconds;
  if (label == nullptr) return;
  if (progress) {
    const int width = 30, done = (step + 1) * width / steps;
    std::printf("\r%-9s [%s%s] step %3d/%d  loss %.6f  %8.0f tokens/s", label, std::string(static_cast<std::size_t>(done), '#').c_str(),
                std::string(static_cast<std::size_t>(width - done), ' ').c_str(), step + 1, steps, loss, tokens / seconds);
    if (step + 1 == steps) std::printf("\n");
    std::fflush(stdout);
  } else {
    std::printf("%s step %d loss %.12f tokens/s %.0f (%s)\n", label, step + 1, loss, tokens / seconds, result.executed.c_str());
  }
}

// The largest |a - b| over the steps, and the largest |reference loss| (for relative bounds).
struct loss_gap {
  double worst = 0, scale = 0;
};
inline loss_gap max_loss_gap(const run_result& reference, const run_result& other) {
  loss_gap g;
  for (std::size_t i = 0; i < reference.loss.size() && i < other.loss.size(); ++i) {
    g.worst = std::max(g.worst, std::abs(reference.loss[i] - other.loss[i]));
    g.scale = std::max(g.scale, std::abs(reference.loss[i]));
  }
  return g;
}

}  // namespace train_gpt
