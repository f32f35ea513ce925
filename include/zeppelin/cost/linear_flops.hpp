// zeppelin/cost/linear_flops.hpp
// FLOPs per token of the linear (GEMM) modules of ONE transformer layer, and of the LM head.
//   in:  model_config (core/model.hpp)
//   out: FLOPs per token (double), or the per-module breakdown
// Conventions (Megatron-LM's accounting, Narayanan et al. SC'21, Appendix "FLOPs"):
//   - 2 FLOPs per multiply-accumulate; weight x activation GEMMs only (norms, rotary,
//     activation functions, residual adds, softmax are element-wise and left out);
//   - QKV projection: H -> heads*head_dim + 2*kv_heads*head_dim (GQA shrinks K and V);
//   - output projection: heads*head_dim -> H;
//   - MLP: gated (SwiGLU: gate, up, down = 3 matrices of H x F) or plain (up, down = 2);
//   - MoE: router H -> experts, plus experts_per_token experts of the MLP shape per token
//     (each token's FLOPs; capacity-factor padding and dropped tokens are not modelled);
//   - backward = 2 x forward (gradient w.r.t. the input and w.r.t. the weights, one GEMM
//     each of the forward's size); recomputation is the checkpoint policy's business;
//   - the LM head (H -> vocab logits) runs once per token, not per layer; the embedding is
//     a lookup (0 FLOPs). Attention's own FLOPs are in cost/attention_flops.hpp.
// Every function validates the model (core/model.hpp validate()) and throws
// zeppelin::invalid_argument for a malformed one. Host-only (model_config holds a string);
// nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>

ZEPPELIN_NAMESPACE_BEGIN

//! Forward FLOPs per token of one layer's linear modules, by module. Sum with total().
struct linear_flops_breakdown {
  double qkv = 0;     //!< 2 * H * (heads + 2 * kv_heads) * head_dim
  double output = 0;  //!< 2 * heads * head_dim * H
  double mlp = 0;     //!< dense MLP, or the experts_per_token experts of a MoE layer
  double router = 0;  //!< 2 * H * experts (MoE only, else 0)

  [[nodiscard]] constexpr double total() const noexcept { return qkv + output + mlp + router; }
  friend constexpr bool operator==(const linear_flops_breakdown&, const linear_flops_breakdown&) = default;
};

//! Forward FLOPs per token of one layer of `m`, module by module.
[[nodiscard]] inline linear_flops_breakdown linear_forward_flops_breakdown(const model_config& m) {
  validate(m);
  const double h = m.hidden;
  const double f = m.ffn_hidden;
  const double mlp_matrices = m.gated_mlp ? 3.0 : 2.0;
  const double one_mlp = 2.0 * mlp_matrices * h * f;
  linear_flops_breakdown b;
  b.qkv = 2.0 * h * static_cast<double>(m.q_width() + 2 * m.kv_width());
  b.output = 2.0 * static_cast<double>(m.q_width()) * h;
  b.mlp = m.is_moe() ? static_cast<double>(m.experts_per_token) * one_mlp : one_mlp;
  b.router = m.is_moe() ? 2.0 * h * static_cast<double>(m.experts) : 0.0;
  return b;
}

//! Forward FLOPs per token of ONE layer's linear modules (QKV, output, MLP or MoE + router).
[[nodiscard]] inline double linear_forward_flops_per_token(const model_config& m) {
  return linear_forward_flops_breakdown(m).total();
}

//! Backward FLOPs per token of ONE layer's linear modules: 2 x forward.
[[nodiscard]] inline double linear_backward_flops_per_token(const model_config& m) {
  return 2.0 * linear_forward_flops_per_token(m);
}

//! Forward FLOPs per token of the LM head (once per model): 2 * H * vocab.
[[nodiscard]] inline double lm_head_flops_per_token(const model_config& m) {
  validate(m);
  return 2.0 * static_cast<double>(m.hidden) * static_cast<double>(m.vocab);
}

//! Backward FLOPs per token of the LM head: 2 x forward.
[[nodiscard]] inline double lm_head_backward_flops_per_token(const model_config& m) {
  return 2.0 * lm_head_flops_per_token(m);
}

ZEPPELIN_NAMESPACE_END
