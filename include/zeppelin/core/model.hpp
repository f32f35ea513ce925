// zeppelin/core/model.hpp
// A decoder-only transformer's shape as the cost models need it: layers, widths, attention
// heads (GQA: kv_heads divides heads), MLP (gated SwiGLU or plain 4h GELU), optional MoE.
// Presets for the models in the specs live in core/model_presets.hpp. nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <string>

ZEPPELIN_NAMESPACE_BEGIN

struct model_config {
  std::string name = "custom";
  int layers = 0;
  int hidden = 0;          //!< model width H
  int heads = 0;           //!< query heads
  int kv_heads = 0;        //!< key/value heads (== heads for MHA)
  int head_dim = 0;        //!< usually hidden / heads
  int ffn_hidden = 0;      //!< MLP inner width (per expert for MoE)
  int vocab = 0;
  bool gated_mlp = true;   //!< SwiGLU (3 matrices) vs plain MLP (2 matrices)
  int experts = 0;         //!< 0 = dense MLP; > 0 = MoE with this many experts
  int experts_per_token = 0;  //!< top-k routing (MoE only)
  int bytes_per_element = 2;  //!< bf16 activations

  [[nodiscard]] bool is_moe() const noexcept { return experts > 0; }
  //! Width of one token's K (or V) for one layer: kv_heads * head_dim.
  [[nodiscard]] long long kv_width() const noexcept { return static_cast<long long>(kv_heads) * head_dim; }
  //! Width of one token's Q for one layer: heads * head_dim.
  [[nodiscard]] long long q_width() const noexcept { return static_cast<long long>(heads) * head_dim; }

  friend bool operator==(const model_config&, const model_config&) = default;
};

//! Throws invalid_argument for a count < 1, kv_heads not dividing heads, a MoE with
//! experts_per_token outside [1, experts], or a dense model with experts_per_token != 0.
inline void validate(const model_config& m) {
  ZEPPELIN_EXPECTS(m.layers >= 1 && m.hidden >= 1 && m.heads >= 1 && m.kv_heads >= 1 && m.head_dim >= 1 &&
                       m.ffn_hidden >= 1 && m.vocab >= 1 && m.bytes_per_element >= 1,
                   "model dimensions must be positive",
                   {{"layers", double(m.layers)}, {"hidden", double(m.hidden)}, {"heads", double(m.heads)},
                    {"kv_heads", double(m.kv_heads)}, {"head_dim", double(m.head_dim)},
                    {"ffn_hidden", double(m.ffn_hidden)}, {"vocab", double(m.vocab)},
                    {"bytes_per_element", double(m.bytes_per_element)}});
  ZEPPELIN_EXPECTS(m.heads % m.kv_heads == 0, "kv_heads must divide heads (GQA)",
                   {{"heads", double(m.heads)}, {"kv_heads", double(m.kv_heads)}});
  if (m.is_moe())
    ZEPPELIN_EXPECTS(m.experts_per_token >= 1 && m.experts_per_token <= m.experts, "MoE top-k must be in [1, experts]",
                     {{"experts", double(m.experts)}, {"experts_per_token", double(m.experts_per_token)}});
  else
    ZEPPELIN_EXPECTS(m.experts == 0 && m.experts_per_token == 0, "a dense model has no experts",
                     {{"experts", double(m.experts)}, {"experts_per_token", double(m.experts_per_token)}});
}

ZEPPELIN_NAMESPACE_END
