// zeppelin/cost/stage_time.hpp
// The time of one forward and one backward of a micro-batch on one model chunk of one
// pipeline stage, whose GPUs form a TP x CP group.
//   in : micro_batch (core/micro_batch.hpp: document lengths, optional per-CP-rank shares),
//        stage_slice (cost/layer_split.hpp: layers, embedding, LM head)
//   out: stage_times: forward and backward seconds, one layer's forward (what recomputing a
//        layer in backward costs) and the seconds CP ranks spend waiting for each other
// Two models of the concept stage_time_model:
//   analytic_stage_time  FLOPs over the attention and GEMM time models (cost/attention_time_
//                        model.hpp, cost/linear_time_model.hpp), per CP rank from its share;
//   fitted_stage_time    profiled quadratics a l^2 + b l + c (cost/quadratic_fit.hpp): the
//                        latency model of Hydraulis (Appendix C.2) and WLB-LLM's W_a + W_l.
// Neither prices communication: TP collectives, CP ring exchanges and pipeline sends are
// transfers of the execution program, which the simulator prices on the link model.
// Errors: invalid_argument for an invalid micro-batch or model, explicit CP shares whose
// count is not cp, tp or cp < 1, heads not divisible by tp, slice layers outside
// [0, model.layers], a negative or non-finite constant, or profile layers < 1.
// Host-only (model_config holds a string); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/adaptive_cp_sharding.hpp>
#include <zeppelin/cost/cp_shares.hpp>
#include <zeppelin/cost/cp_sharding.hpp>
#include <zeppelin/cost/varlen_attention_time.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/cost/linear_time_model.hpp>
#include <zeppelin/cost/quadratic_fit.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <initializer_list>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Seconds of one micro-batch on one model chunk of one pipeline stage.
struct stage_times {
  double forward = 0;        //!< the forward pass of the chunk (slowest CP rank)
  double backward = 0;       //!< the backward pass, without recomputation
  double layer_forward = 0;  //!< one layer's forward of this micro-batch: what recomputing one layer costs
  double cp_wait = 0;        //!< forward + backward seconds the average CP rank waits for the slowest
  friend constexpr bool operator==(const stage_times&, const stage_times&) = default;
};

//! A stage time model: the stage_times of a micro-batch on a model chunk.
template <class M>
concept stage_time_model = requires(const M& m, const micro_batch& mb, const stage_slice& slice) {
  { m.times(mb, slice) } -> std::same_as<stage_times>;
};

//! Stage time from FLOPs: per CP rank, its share's attention (query tokens, causal pairs)
//! on attention_time_model with heads / tp query heads, and its tokens' linear FLOPs / tp on
//! linear_time_model, times the slice's layers; the LM head's GEMM on the chunk holding it
//! (the embedding is a lookup: 0). CP ranks synchronise every layer (each layer's ring
//! exchange), so a layer takes the slowest rank's time: forward, backward and layer_forward
//! are the slowest rank's, and cp_wait = sum over ranks of (slowest - own) / cp, forward
//! plus backward. Each rank's attention is ONE varlen call over its segments
//! (cost/varlen_attention_time.hpp: every segment padded to the tile on its own): the
//! micro-batch's explicit cp_shares, one segment each, or else the segments of `sharding`
//! (per-document zigzag by default; per-sequence; or WLB-LLM's adaptive choice,
//! with_adaptive_sharding()).
struct analytic_stage_time {
  model_config model;
  gpu_spec gpu;
  int tp = 1;  //!< tensor-parallel degree: splits the heads and the GEMM columns
  int cp = 1;  //!< context-parallel degree: the micro-batch's shares, one per CP rank
  attention_time_model attention;
  linear_time_model linear;
  //! Fixed seconds the forward pays once per micro-batch, and the backward once too
  //! (not per document, not per layer). 0 by default: the pipeline sends and the TP / CP
  //! collectives that would make up most of a fixed cost are program transfers priced by
  //! the link model, and CUDA kernel launches are asynchronous, so their latency hides
  //! behind the previous kernel for training-sized micro-batches; the small-launch loss
  //! that remains is in attention_time_model's low-row, launch-bound table entries. Set it
  //! from a measured profile's intercept (fit_quadratic's c) to model host overheads.
  double micro_batch_seconds = 0;
  //! How the CP group shares a micro-batch without explicit cp_shares (cost/cp_sharding.hpp).
  any_cp_sharding sharding{per_document_sharding{}};

  //! This model with WLB-LLM's adaptive CP sharding, priced by this model's own tile model
  //! and per-rank heads.
  [[nodiscard]] analytic_stage_time with_adaptive_sharding() const {
    analytic_stage_time t = *this;
    t.sharding = {adaptive_sharding{.attention = attention, .heads = model.heads / std::max(tp, 1), .head_dim = model.head_dim}};
    return t;
  }

  //! The FlashAttention-2 tables of `gpu` (attention_time_model::for_gpu), the default
  //! GEMM efficiency and no fixed cost.
  [[nodiscard]] static analytic_stage_time for_gpu(const model_config& model, const gpu_spec& gpu, int tp = 1, int cp = 1) {
    return {.model = model, .gpu = gpu, .tp = tp, .cp = cp, .attention = attention_time_model::for_gpu(gpu), .linear = {}};
  }

  //! See the struct comment. Throws invalid_argument as the file header lists.
  [[nodiscard]] stage_times times(const micro_batch& mb, const stage_slice& slice) const {
    validate(model);
    ZEPPELIN_EXPECTS(tp >= 1 && cp >= 1, "TP and CP degrees must be at least 1", {{"tp", double(tp)}, {"cp", double(cp)}});
    ZEPPELIN_EXPECTS(model.heads % tp == 0, "TP must divide the query heads", {{"heads", double(model.heads)}, {"tp", double(tp)}});
    ZEPPELIN_EXPECTS(slice.layers >= 0 && slice.layers <= model.layers, "a model chunk holds 0 .. model layers",
                     {{"slice_layers", double(slice.layers)}, {"model_layers", double(model.layers)}});
    ZEPPELIN_EXPECTS(std::isfinite(micro_batch_seconds) && micro_batch_seconds >= 0,
                     "the per-micro-batch constant must be finite and non-negative", {{"micro_batch_seconds", micro_batch_seconds}});
    cp_segments segments;
    if (mb.cp_shares.empty()) {
      validate(mb);
      segments = sharding.segments(mb.documents, cp);
    } else {
      for (const cp_share& share : micro_batch_cp_shares(mb, cp)) segments.push_back({{share.tokens, share.pairs}});
    }
    const int heads = model.heads / tp;
    const double layer_flops = linear_forward_flops_per_token(model) / tp;
    const double head_flops = slice.lm_head ? lm_head_flops_per_token(model) / tp : 0.0;
    const double layers = slice.layers;
    struct rank_time {
      double layer_forward, layer_backward, head_forward, head_backward;
    };
    std::vector<rank_time> ranks;
    ranks.reserve(segments.size());
    rank_time slowest{0, 0, 0, 0};
    for (const auto& rank : segments) {
      double tokens = 0;
      for (const attention_segment& seg : rank) tokens += static_cast<double>(seg.rows);
      const rank_time r{
          varlen_forward_seconds(attention, rank, heads, model.head_dim) + linear.seconds(tokens * layer_flops, gpu),
          varlen_backward_seconds(attention, rank, heads, model.head_dim) + linear.seconds(2 * tokens * layer_flops, gpu),
          linear.seconds(tokens * head_flops, gpu), linear.seconds(2 * tokens * head_flops, gpu)};
      ranks.push_back(r);
      slowest = {std::max(slowest.layer_forward, r.layer_forward), std::max(slowest.layer_backward, r.layer_backward),
                 std::max(slowest.head_forward, r.head_forward), std::max(slowest.head_backward, r.head_backward)};
    }
    stage_times t;
    const double forward = layers * slowest.layer_forward + slowest.head_forward;
    const double backward = layers * slowest.layer_backward + slowest.head_backward;
    t.forward = forward + micro_batch_seconds;
    t.backward = backward + micro_batch_seconds;
    t.layer_forward = slowest.layer_forward;
    for (const rank_time& r : ranks)
      t.cp_wait += (forward - (layers * r.layer_forward + r.head_forward)) + (backward - (layers * r.layer_backward + r.head_backward));
    t.cp_wait /= static_cast<double>(ranks.size());
    return t;
  }

  friend bool operator==(const analytic_stage_time&, const analytic_stage_time&) = default;
};
static_assert(stage_time_model<analytic_stage_time>);

//! Stage time from profiled quadratics, Hydraulis' T(l, P) = a l^2 + b l + c (Appendix
//! C.2) split into forward and backward, and WLB-LLM's per-document W_a(d) + W_l(d):
//!   forward  = (slice.layers / layers) * sum over documents (a d^2 + b d) + c
//! and the same for backward: the per-document terms scale with the chunk's layers; the
//! intercept c is paid once per micro-batch and is not scaled (it is the fixed cost of
//! running a micro-batch through a stage, e.g. launch delays). layer_forward is one layer's
//! share of the per-document terms, (forward - c) / slice.layers: recomputing a layer runs
//! inside a backward pass that has already paid its own c. The profile holds whatever the
//! profiled chunk held (LM head included or not): the slice's embedding / lm_head flags
//! are not priced separately, so profile the first and last chunks on their own. The
//! profile is measured on the whole TP x CP group, so cp_wait is 0 (it is inside the fit).
struct fitted_stage_time {
  quadratic_profile forward;
  quadratic_profile backward;
  int layers = 1;  //!< layers the profile was taken over

  //! See the struct comment. Throws invalid_argument for an invalid micro-batch, layers < 1,
  //! negative slice layers, or a coefficient that is not finite.
  [[nodiscard]] stage_times times(const micro_batch& mb, const stage_slice& slice) const {
    validate(mb);
    ZEPPELIN_EXPECTS(layers >= 1, "a profile covers at least one layer", {{"layers", double(layers)}});
    ZEPPELIN_EXPECTS(slice.layers >= 0, "a model chunk cannot hold a negative number of layers",
                     {{"slice_layers", double(slice.layers)}});
    for (const quadratic_profile& p : {forward, backward})
      ZEPPELIN_EXPECTS(std::isfinite(p.a) && std::isfinite(p.b) && std::isfinite(p.c), "profile coefficients must be finite",
                       {{"a", p.a}, {"b", p.b}, {"c", p.c}});
    double f = 0, b = 0;
    for (const token_count d : mb.documents) {
      const double l = static_cast<double>(d);
      f += forward.at(l) - forward.c;
      b += backward.at(l) - backward.c;
    }
    const double per_layer = 1.0 / layers;
    stage_times t;
    t.layer_forward = f * per_layer;
    t.forward = slice.layers * t.layer_forward + forward.c;
    t.backward = slice.layers * (b * per_layer) + backward.c;
    return t;
  }

  friend constexpr bool operator==(const fitted_stage_time&, const fitted_stage_time&) = default;
};
static_assert(stage_time_model<fitted_stage_time>);

ZEPPELIN_NAMESPACE_END
