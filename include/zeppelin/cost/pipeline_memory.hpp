// zeppelin/cost/pipeline_memory.hpp
// Per-GPU memory of a pipeline stage: model states (parameters, gradients, optimizer
// states) and the activations a micro-batch keeps between its forward and its backward.
//   in : model_config, parallel_layout (TP with or without sequence parallelism, CP, PP, DP),
//        memory_settings (ZeRO stage, bytes per parameter of each state), a stage_slice
//        (cost/layer_split.hpp), micro-batch tokens, the layers recomputed in backward
//   out: bytes per GPU (double)
//
// Model states. One layer holds H (heads + 2 kv_heads) head_dim + heads head_dim H
// attention weights, 3 H F (gated) or 2 H F (plain) MLP weights (x experts, + the H x
// experts router, for MoE) and two norm vectors of H. TP splits every matrix; the norms and
// the router are replicated. The first chunk adds the V x H embedding / tp, the last the
// (untied) V x H LM head / tp and the final norm. ZeRO (Rajbhandari et al., "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", SC'20) shards, over the dp x cp
// GPUs that hold the same parameters (Megatron-LM's distributed optimizer shards over the
// data-parallel group, which includes CP):
//   stage 0: nothing       P (p + g + o)
//   stage 1: optimizer     P (p + g) + P o / (dp cp)      (Megatron-LM's distributed optimizer)
//   stage 2: + gradients   P p + P (g + o) / (dp cp)
//   stage 3: + parameters  P (p + g + o) / (dp cp)
// with P the parameters per GPU and p, g, o the bytes per parameter of each state;
// memory_settings::zero_shards replaces dp cp where states are sharded over other GPUs
// (Hydraulis: over the whole cluster).
//
// Activations, per token and layer, bf16, FlashAttention (no s^2 score matrix), no dropout:
//   attention: norm input H, QKV GEMM input H, Q K V (heads + 2 kv_heads) head_dim, attention
//              output (the output projection's input) heads head_dim, and FlashAttention's
//              softmax log-sum-exp: heads fp32 numbers;
//   MLP:       norm input H, first GEMM input H, its output (gate and up: 2F; plain: F), the
//              activation's output F (the second GEMM's input); MoE: each of the top-k
//              experts keeps its own copy of the input H and its F-wide tensors.
// For a GPT shape (MHA, plain 4H MLP) that is 2 (4H + 3H + H + 4H + 4H) = 32 H bytes + the
// log-sum-exp. Korthikanti et al. ("Reducing Activation Recomputation in Large Transformer
// Models", MLSys 2023, section 4.1) count 34 s b H + 5 a s^2 b per layer: the same tensors,
// the s^2 terms that FlashAttention does not store, and two dropout masks of s b H bytes
// (after the attention output projection and after the MLP) that LLaMA-style training,
// without dropout, does not keep. Tensor parallelism with sequence parallelism divides
// everything by tp (their Table 2: 34 s b H / t); without it the four H-wide tensors around
// the norms (both norm inputs, the QKV and first-MLP GEMM inputs) are replicated, the rest
// divided (their Table 2: s b H (10 + 24 / t), of which 2 are the masks). CP divides the
// tokens by cp.
// A fully recomputed layer keeps only its input (H, / tp with sequence parallelism), as in
// Megatron-LM's full recomputation and InfiniPipe, Eq. 9 (the e D l_ckpt / d_s term). The
// chunk holding the LM head also keeps the final norm's input and output and the logits
// (tokens / cp x vocab / tp x logits_bytes) for the loss backward.
// Errors: invalid_argument for an invalid model or layout, zero_stage outside 0..3, negative
// or non-finite byte counts, zero_shards neither 0 nor a finite number >= 1, negative tokens, slice layers outside [0, model.layers], or
// recomputed layers outside [0, slice.layers].
// Host-only (model_config holds a string); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/layer_split.hpp>

#include <cmath>

ZEPPELIN_NAMESPACE_BEGIN

//! How model states are stored and sharded, and what the activations keep.
struct memory_settings {
  //! ZeRO stage 0..3 over the dp x cp GPUs of the same parameters. 1 = Megatron-LM's
  //! distributed optimizer (optimizer states sharded, parameters and gradients not).
  int zero_stage = 1;
  //! bf16 parameters (ZeRO paper: 2 bytes of fp16 parameters).
  double parameter_bytes = 2;
  //! fp32 main gradients: Megatron-LM accumulates and reduces gradients in fp32 (its
  //! distributed-optimizer guide: "bf16/fp16 param, fp32 grads: 18 bytes, 6 + 12/d
  //! distributed"). The ZeRO paper's 2 + 2 + 12 = 16 counts fp16 gradients: set 2.
  double gradient_bytes = 4;
  //! fp32 master weights + Adam momentum and variance: 4 + 4 + 4 (ZeRO paper, K = 12).
  double optimizer_bytes = 12;
  //! Megatron-LM sequence parallelism with TP (Korthikanti et al.): the activations around
  //! the norms are split over TP too.
  bool sequence_parallel = true;
  //! fp32 logits kept for the cross-entropy backward (Megatron-LM's vocab-parallel cross
  //! entropy computes the softmax in fp32).
  double logits_bytes = 4;
  //! The GPUs one stage's ZeRO-sharded states are spread over; 0: the dp x cp GPUs that hold
  //! the same parameters (ZeRO, Megatron-LM's distributed optimizer). Hydraulis shards the
  //! fp32 states of every layer over all N GPUs of the cluster, whatever their scheme: each
  //! GPU then holds 1/N of the model's, i.e. a stage's / (N / (tp pp)); not an integer in
  //! general.
  double zero_shards = 0;
  friend constexpr bool operator==(const memory_settings&, const memory_settings&) = default;
};

//! Throws invalid_argument for zero_stage outside 0..3, a byte count that is negative or
//! not finite, or zero_shards neither 0 nor a finite number >= 1.
inline void validate(const memory_settings& s) {
  ZEPPELIN_EXPECTS(s.zero_stage >= 0 && s.zero_stage <= 3, "the ZeRO stage must be 0, 1, 2 or 3", {{"zero_stage", double(s.zero_stage)}});
  const auto ok = [](double b) { return std::isfinite(b) && b >= 0; };
  ZEPPELIN_EXPECTS(ok(s.parameter_bytes) && ok(s.gradient_bytes) && ok(s.optimizer_bytes) && ok(s.logits_bytes),
                   "bytes per element must be finite and non-negative",
                   {{"parameter_bytes", s.parameter_bytes}, {"gradient_bytes", s.gradient_bytes},
                    {"optimizer_bytes", s.optimizer_bytes}, {"logits_bytes", s.logits_bytes}});
  ZEPPELIN_EXPECTS(s.zero_shards == 0 || (std::isfinite(s.zero_shards) && s.zero_shards >= 1),
                   "ZeRO shards must be 0 (the dp x cp group) or a finite number >= 1", {{"zero_shards", s.zero_shards}});
}

//! Per-GPU memory of a pipeline stage; see the file header for the formulas.
struct pipeline_memory_model {
  model_config model;
  parallel_layout layout;
  memory_settings settings;

  //! Parameters stored on one GPU of the stage holding `slice` (before ZeRO-3 sharding).
  [[nodiscard]] double parameters(const stage_slice& slice) const {
    check(slice);
    const double h = model.hidden, f = model.ffn_hidden, v = model.vocab, tp = layout.tp;
    const double q = static_cast<double>(model.q_width()), kv = static_cast<double>(model.kv_width());
    const double one_mlp = (model.gated_mlp ? 3.0 : 2.0) * h * f;
    const double split = h * (q + 2 * kv) + q * h + (model.is_moe() ? model.experts * one_mlp : one_mlp);
    double p = slice.layers * (split / tp + replicated_per_layer());
    if (slice.embedding) p += v * h / tp;
    if (slice.lm_head) p += v * h / tp + h;
    return p;
  }

  //! Of parameters(slice), those every TP rank holds whole: the two norms of each layer (and
  //! the MoE router), the final norm with the LM head.
  [[nodiscard]] double replicated_parameters(const stage_slice& slice) const {
    check(slice);
    return slice.layers * replicated_per_layer() + (slice.lm_head ? static_cast<double>(model.hidden) : 0.0);
  }

  //! Parameters, gradients and optimizer states on one GPU of the stage, after ZeRO
  //! sharding over dp x cp (see the file header).
  [[nodiscard]] double model_state_bytes(const stage_slice& slice) const {
    const double p = parameters(slice);
    const double shard = settings.zero_shards > 0 ? settings.zero_shards : static_cast<double>(layout.dp) * layout.cp;
    const int z = settings.zero_stage;
    const auto part = [&](double bytes, int sharded_from) { return p * bytes / (z >= sharded_from ? shard : 1.0); };
    return part(settings.parameter_bytes, 3) + part(settings.gradient_bytes, 2) + part(settings.optimizer_bytes, 1);
  }

  //! Bytes per token per layer one GPU keeps for backward without recomputation (tokens
  //! counted before CP: divide by cp for a rank's tokens; see the file header).
  [[nodiscard]] double activation_bytes_per_token_layer() const {
    check();
    const double h = model.hidden, f = model.ffn_hidden, tp = layout.tp, e = model.bytes_per_element;
    const double q = static_cast<double>(model.q_width()), kv = static_cast<double>(model.kv_width());
    const double fc1 = model.gated_mlp ? 2 * f : f;
    const double experts = model.is_moe() ? model.experts_per_token : 1;
    // Around the norms: both norm inputs and the GEMM inputs they feed (replicated over TP
    // without sequence parallelism).
    const double norm_side = 4 * h;
    // Split over TP: Q, K, V, the attention output, the MLP's inner tensors (and a MoE
    // expert's own input copy).
    const double split = q + 2 * kv + q + experts * (fc1 + f + (model.is_moe() ? h : 0.0));
    const double lse_bytes = 4.0 * model.heads;  // FlashAttention's fp32 log-sum-exp per head
    return e * (norm_side / norm_divisor() + split / tp) + lse_bytes / tp;
  }

  //! Bytes per token a fully recomputed layer keeps: its input, H elements (/ tp with
  //! sequence parallelism).
  [[nodiscard]] double checkpoint_bytes_per_token_layer() const {
    check();
    return static_cast<double>(model.bytes_per_element) * model.hidden / norm_divisor();
  }

  //! Bytes one micro-batch of `tokens` tokens keeps on one GPU of the stage holding `slice`
  //! between its forward and its backward, when `recomputed_layers` of the slice's layers
  //! are recomputed in backward (they keep only their input); on the LM-head chunk plus the
  //! final norm's input and output and the logits.
  [[nodiscard]] double activation_bytes(token_count tokens, const stage_slice& slice, int recomputed_layers) const {
    ZEPPELIN_EXPECTS(tokens >= 0, "token counts must be non-negative", {{"tokens", double(tokens)}});
    return static_cast<double>(tokens) * activation_bytes_per_token(slice, recomputed_layers);
  }

  //! activation_bytes() per token of the micro-batch (it is linear in tokens): what a
  //! schedule walk computes once per (chunk, recomputed layers) and scales by tokens.
  [[nodiscard]] double activation_bytes_per_token(const stage_slice& slice, int recomputed_layers) const {
    check(slice);
    ZEPPELIN_EXPECTS(recomputed_layers >= 0 && recomputed_layers <= slice.layers, "recomputed layers must lie in [0, slice layers]",
                     {{"recomputed_layers", double(recomputed_layers)}, {"slice_layers", double(slice.layers)}});
    double per_token = (slice.layers - recomputed_layers) * activation_bytes_per_token_layer() +
                       recomputed_layers * checkpoint_bytes_per_token_layer();
    if (slice.lm_head)
      per_token += 2 * checkpoint_bytes_per_token_layer() + settings.logits_bytes * model.vocab / layout.tp;
    return per_token / layout.cp;
  }

  //! The transient of recomputing one layer in backward: one layer's full activations of a
  //! micro-batch of `tokens` tokens on one GPU.
  [[nodiscard]] double recompute_buffer_bytes(token_count tokens) const {
    ZEPPELIN_EXPECTS(tokens >= 0, "token counts must be non-negative", {{"tokens", double(tokens)}});
    return static_cast<double>(tokens) / layout.cp * activation_bytes_per_token_layer();
  }

  friend bool operator==(const pipeline_memory_model&, const pipeline_memory_model&) = default;

 private:
  void check() const {
    validate(model);
    validate(layout);
    validate(settings);
  }
  void check(const stage_slice& slice) const {
    check();
    ZEPPELIN_EXPECTS(slice.layers >= 0 && slice.layers <= model.layers, "a model chunk holds 0 .. model layers",
                     {{"slice_layers", double(slice.layers)}, {"model_layers", double(model.layers)}});
  }
  [[nodiscard]] double replicated_per_layer() const noexcept {
    const double h = model.hidden;
    return 2 * h + (model.is_moe() ? h * model.experts : 0.0);
  }
  [[nodiscard]] double norm_divisor() const noexcept { return settings.sequence_parallel ? layout.tp : 1.0; }
};

ZEPPELIN_NAMESPACE_END
