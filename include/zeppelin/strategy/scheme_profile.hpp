// zeppelin/strategy/scheme_profile.hpp
// Hydraulis' cost models of a parallel scheme P (Appendix C): MaxLen(P), the longest
// micro-batch a pipeline of P holds; UtilLen(P), the shortest that uses its GPUs well; and
// T(l, P) = a l^2 + b l + c, one pipeline stage's forward + backward of l tokens.
//   in : schemes, the model, the GPU, the cluster's GPU count N, scheme_profile_options
//   out: scheme_profile per scheme that can hold at least one token
// MaxLen, through the pipeline memory model (cost/pipeline_memory.hpp): under 1F1B with at
// least PP micro-batches, stage p keeps PP - p micro-batches' activations; its peak is
//   states_p + (PP - p) x l x activation bytes per token_p,
// linear in l (Hydraulis C.1: the first stage accumulates PP micro-batches, L l H / (TP CP) A).
// MaxLen is the largest l whose peak stays within capacity - margin on every stage. Model
// states follow Hydraulis' optimization / propagation split: bf16 parameters and gradients
// per pipeline stage, fp32 master weights and Adam states (12 bytes) sharded over all N GPUs
// (its alpha = 3/4; memory_settings::zero_shards = N / (tp pp)). The authors keep 6 / 8 / 10
// GiB of margin for 7B / 13B / 32B on 80 GB A800s.
// T(l, P): the analytic stage time (cost/stage_time.hpp) of the slowest stage of P for a
// micro-batch of one sequence of l tokens, forward + backward, plus its tensor-parallel
// collectives, which the stage model leaves to the simulator but a profile measures: with
// sequence parallelism every layer runs 4 all-gathers / reduce-scatters forward and 4
// backward, each moving (tp - 1) / tp x (l / cp) x H x 2 bytes per GPU over the node's link
// (ring cost, bandwidth and latency of scheme_profile_options::tp_link), and with CP > 1 its
// K/V all-gathers and dK/dV reduce-scatters (cp_collective_seconds; over NVLink while
// tp x cp GPUs fit in a node, else over inter_node_link). Fitted by least squares at
// l = 128, 256, ..., up to 2 MaxLen (at least 1K, at most 4M); a packed micro-batch costs sum (a l^2 + b l) over its
// sequences plus c once. A negative fitted intercept is refitted without one. The authors
// profile T on their cluster (e.g. 32B <8, 1> on A800: a = 2.125e-6, b = 0.1414,
// c = 122.9 ms); a profile of your own replaces `latency`.
// UtilLen: the length at which the per-micro-batch constant c is (1 - util_efficiency) of a
// micro-batch's time (efficiency 0.85 as in the paper); 1 when c = 0, capped at MaxLen. The
// authors measured (A800, tokens/s reaching 0.85 of the best): 7B / 32B 384, 512, 768, 1024,
// 1280 tokens for TP 1, 2, 4, 8, 16; 13B 640, 896, 1280, 1536 for TP 1 to 8.
// Errors: invalid_argument for an invalid model, GPU, or options (capacity <= 0 after the
// default, negative margin, util_efficiency outside (0, 1), a TP link without bandwidth,
// N < the scheme's GPUs).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/cost/quadratic_fit.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/strategy/parallel_scheme.hpp>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A scheme with its cost models.
struct scheme_profile {
  parallel_scheme scheme;
  token_count max_len = 0;    //!< MaxLen(P): tokens of the longest micro-batch
  token_count util_len = 1;   //!< UtilLen(P): micro-batches shorter than this waste the GPUs
  quadratic_profile latency;  //!< T(l, P) in seconds (a, b per sequence; c per micro-batch)

  //! a l^2 + b l: a sequence's share of a micro-batch's stage time.
  [[nodiscard]] double sequence_seconds(token_count l) const noexcept {
    const auto x = static_cast<double>(l);
    return (latency.a * x + latency.b) * x;
  }
  //! T of a micro-batch holding `lengths`: sum of sequence_seconds + c (0 when empty).
  [[nodiscard]] double micro_batch_seconds(std::span<const token_count> lengths) const noexcept {
    if (lengths.empty()) return 0;
    double t = latency.c;
    for (const token_count l : lengths) t += sequence_seconds(l);
    return t;
  }
  friend bool operator==(const scheme_profile&, const scheme_profile&) = default;
};

struct scheme_profile_options {
  double capacity_bytes = 0;                 //!< per GPU; 0: the GPU's memory
  double margin_bytes = 8.0 * (1ull << 30);  //!< kept free (the authors: 6 / 8 / 10 GiB for 7B / 13B / 32B)
  double util_efficiency = 0.85;             //!< UtilLen's threshold
  //! bytes per state; zero_shards is set per scheme to N / (tp pp)
  memory_settings memory{.zero_stage = 1, .parameter_bytes = 2, .gradient_bytes = 2, .optimizer_bytes = 12};
  link_spec tp_link{200e9, 3e-6};  //!< the link TP collectives use (A800 NVLink, core/topology_presets.hpp)
  //! The link CP collectives use when a scheme's tp x cp GPUs span nodes (one A800 GPU's
  //! share of Hydraulis' InfiniBand, two GPUs per 400 Gb/s port); within a node, tp_link.
  link_spec inter_node_link{24e9, 10e-6};
  int gpus_per_node = 8;
};

//! Seconds of one stage's context-parallel collectives for l tokens, forward + backward:
//! Llama-3-style CP all-gathers K and V in forward and reduce-scatters dK and dV in
//! backward, each (cp - 1) / cp x l x 2 kv_width / tp x 2 bytes per GPU, per layer (ring
//! cost); 0 for cp = 1.
[[nodiscard]] inline double cp_collective_seconds(const parallel_scheme& scheme, const model_config& model, int stage_layers,
                                                  token_count l, const link_spec& link) {
  if (scheme.cp == 1) return 0;
  const double bytes = (scheme.cp - 1.0) / scheme.cp * static_cast<double>(l) * 2.0 * static_cast<double>(model.kv_width()) / scheme.tp *
                       model.bytes_per_element;
  return stage_layers * 2.0 * (bytes / link.bandwidth + (scheme.cp - 1) * link.latency);
}

//! Seconds of one stage's tensor-parallel collectives for l tokens, forward + backward
//! (see the file comment); 0 for tp = 1.
[[nodiscard]] inline double tp_collective_seconds(const parallel_scheme& scheme, const model_config& model, int stage_layers,
                                                  token_count l, const link_spec& link) {
  if (scheme.tp == 1) return 0;
  const double bytes = (scheme.tp - 1.0) / scheme.tp * (static_cast<double>(l) / scheme.cp) * model.hidden * model.bytes_per_element;
  return stage_layers * 8.0 * (bytes / link.bandwidth + (scheme.tp - 1) * link.latency);
}

//! The memory model of `scheme` in a cluster of `cluster_gpus` GPUs (see the file comment).
[[nodiscard]] inline pipeline_memory_model scheme_memory_model(const parallel_scheme& scheme, const model_config& model,
                                                               long long cluster_gpus, const memory_settings& settings) {
  ZEPPELIN_EXPECTS(cluster_gpus >= scheme.gpus(), "the cluster has fewer GPUs than the scheme needs",
                   {{"cluster_gpus", double(cluster_gpus)}, {"scheme_gpus", double(scheme.gpus())}});
  memory_settings s = settings;
  s.zero_shards = static_cast<double>(cluster_gpus) / (static_cast<double>(scheme.tp) * scheme.pp);
  return {model, parallel_layout{.tp = scheme.tp, .cp = scheme.cp, .pp = scheme.pp, .dp = 1}, s};
}

//! MaxLen(P): the largest l whose 1F1B peak fits `usable_bytes` on every stage; 0 if none.
[[nodiscard]] inline token_count max_len_of(const pipeline_memory_model& memory, double usable_bytes) {
  const int pp = memory.layout.pp;
  const std::vector<stage_slice> slices = split_model(memory.model, pp);
  double best = static_cast<double>(max_sequence_length);
  for (int p = 0; p < pp; ++p) {
    const stage_slice& slice = slices[static_cast<std::size_t>(p)];
    const double room = usable_bytes - memory.model_state_bytes(slice);
    const double per_token = (pp - p) * memory.activation_bytes_per_token(slice, 0);
    if (room < per_token) return 0;
    best = std::min(best, std::floor(room / per_token));
  }
  return static_cast<token_count>(best);
}

//! T(l, P) fitted to the analytic stage time of the slowest stage (see the file comment).
[[nodiscard]] inline quadratic_profile stage_latency_of(const parallel_scheme& scheme, const model_config& model, const gpu_spec& gpu,
                                                        token_count max_len, const link_spec& tp_link, const link_spec& cp_link) {
  ZEPPELIN_EXPECTS(cp_link.bandwidth > 0 && cp_link.latency >= 0, "the CP link needs a positive bandwidth and a latency >= 0",
                   {{"bandwidth", cp_link.bandwidth}, {"latency", cp_link.latency}});
  ZEPPELIN_EXPECTS(tp_link.bandwidth > 0 && tp_link.latency >= 0, "the TP link needs a positive bandwidth and a latency >= 0",
                   {{"bandwidth", tp_link.bandwidth}, {"latency", tp_link.latency}});
  const analytic_stage_time time = analytic_stage_time::for_gpu(model, gpu, scheme.tp, scheme.cp);
  const std::vector<stage_slice> slices = split_model(model, scheme.pp);
  std::vector<profile_point> points;
  const token_count top = std::clamp<token_count>(2 * max_len, 1024, token_count{1} << 22);
  for (token_count l = 128; l <= top; l *= 2) {
    double slowest = 0;
    for (const stage_slice& s : slices) {
      const stage_times t = time.times(micro_batch{{l}, {}}, s);
      slowest = std::max(slowest, t.forward + t.backward + tp_collective_seconds(scheme, model, s.layers, l, tp_link) +
                                      cp_collective_seconds(scheme, model, s.layers, l, cp_link));
    }
    points.push_back({static_cast<double>(l), slowest});
  }
  const quadratic_profile fit = fit_quadratic(points);
  return fit.c >= 0 ? fit : fit_quadratic_no_intercept(points);
}

//! UtilLen(P) from T(l, P) (see the file comment), in [1, max_len].
[[nodiscard]] inline token_count util_len_of(const quadratic_profile& t, token_count max_len, double efficiency) {
  ZEPPELIN_EXPECTS(efficiency > 0 && efficiency < 1, "UtilLen's efficiency must lie in (0, 1)", {{"util_efficiency", efficiency}});
  if (t.c <= 0 || max_len < 1) return 1;
  // a l^2 + b l = c (1 / (1 - efficiency) - 1)
  const double rhs = t.c * (1 / (1 - efficiency) - 1);
  const double l = t.a > 0 ? (-t.b + std::sqrt(t.b * t.b + 4 * t.a * rhs)) / (2 * t.a) : (t.b > 0 ? rhs / t.b : static_cast<double>(max_len));
  return std::clamp<token_count>(static_cast<token_count>(std::ceil(l)), 1, max_len);
}

//! The profiles of the schemes that hold at least one token, in the order given.
[[nodiscard]] inline std::vector<scheme_profile> profile_schemes(std::span<const parallel_scheme> schemes, const model_config& model,
                                                                 const gpu_spec& gpu, long long cluster_gpus,
                                                                 const scheme_profile_options& options = {}) {
  validate(model);
  const double capacity = options.capacity_bytes > 0 ? options.capacity_bytes : gpu.memory_bytes;
  ZEPPELIN_EXPECTS(capacity > 0 && std::isfinite(capacity), "the GPU memory capacity must be positive and finite",
                   {{"capacity_bytes", capacity}});
  ZEPPELIN_EXPECTS(options.margin_bytes >= 0 && std::isfinite(options.margin_bytes), "the memory margin must be >= 0 bytes",
                   {{"margin_bytes", options.margin_bytes}});
  std::vector<scheme_profile> out;
  for (const parallel_scheme& s : schemes) {
    const token_count max_len = max_len_of(scheme_memory_model(s, model, cluster_gpus, options.memory), capacity - options.margin_bytes);
    if (max_len < 1) continue;
    scheme_profile p{.scheme = s, .max_len = max_len, .util_len = 1, .latency = stage_latency_of(s, model, gpu, max_len, options.tp_link,
                                                   s.tp * s.cp <= options.gpus_per_node ? options.tp_link : options.inter_node_link)};
    p.util_len = util_len_of(p.latency, max_len, options.util_efficiency);
    out.push_back(p);
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
