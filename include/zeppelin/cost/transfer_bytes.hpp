// zeppelin/cost/transfer_bytes.hpp
// Bytes per token of the tensors the distributed parts move, for ONE layer.
//   in:  model_config (core/model.hpp)
//   out: bytes per token (double)
//   - KV ring traffic (forward): K and V, 2 * kv_heads * head_dim * bytes_per_element;
//     the backward ring moves dK and dV of the same shape (plus the KV itself again);
//   - remap / token dispatch: one hidden state, hidden * bytes_per_element.
// Every function validates the model and throws zeppelin::invalid_argument for a malformed
// one. Host-only functions; nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>

ZEPPELIN_NAMESPACE_BEGIN

//! Bytes of one token's K and V in one layer: 2 * kv_heads * head_dim * bytes_per_element.
//! GQA models move kv_heads, not heads (LLaMA-3-8B: 4 KiB/token/layer, not 16 KiB).
[[nodiscard]] inline double kv_bytes_per_token(const model_config& m) {
  validate(m);
  return 2.0 * static_cast<double>(m.kv_width()) * static_cast<double>(m.bytes_per_element);
}

//! Bytes of one token's query in one layer: heads * head_dim * bytes_per_element (what
//! query-moving schemes, e.g. all-gather-Q variants, send).
[[nodiscard]] inline double q_bytes_per_token(const model_config& m) {
  validate(m);
  return static_cast<double>(m.q_width()) * static_cast<double>(m.bytes_per_element);
}

//! Bytes of one token's hidden state: hidden * bytes_per_element (remap between the
//! attention layout and the token-balanced layout moves this, forward and backward).
[[nodiscard]] inline double hidden_bytes_per_token(const model_config& m) {
  validate(m);
  return static_cast<double>(m.hidden) * static_cast<double>(m.bytes_per_element);
}

ZEPPELIN_NAMESPACE_END
