// zeppelin/exec/attention_kernel.hpp
// The attention-kernel concept: forward and backward of ONE block (query token range x key
// token range of one sequence) under a block mask, with GQA. Executors call kernels only
// through these argument structs, so the host reference kernel (exec/host_attention.hpp) and
// the device kernels of cuda/ are interchangeable.
// Layouts (row-major, element type T = float or double; flashinfer style):
//   query, out, grad_out, grad_query : [q.size()][heads][head_dim]
//   key, value, grad_key, grad_value : [k.size()][kv_heads][head_dim]
//   lse                              : [heads][lse_stride], entry (h, i) at lse[h * lse_stride + i]
//                                      (heads x tokens; natural log; -inf for a row with no key)
// Query head h reads KV head h / (heads / kv_heads) (GQA; heads % kv_heads == 0).
// Scores s = scale * q.k with scale = 1 / sqrt(head_dim) unless set. Mask (block_mask):
// causal = key position <= query position (absolute positions q.begin + i, k.begin + j),
// full = every key, none = nothing (the forward writes O = 0 and LSE = -inf).
// Forward writes O normalised within the block and its LSE (overwrites).
// Backward takes the GLOBAL O, dO and LSE of the query rows (as in FlashAttention's backward) and
// ADDS the block's contribution into dQ, dK and dV.
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/block_mask.hpp>

#include <cmath>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

//! Head configuration of an attention layer.
struct attention_dims {
  std::int32_t heads = 1;     //!< query heads H
  std::int32_t kv_heads = 1;  //!< key/value heads (GQA); divides heads
  std::int32_t head_dim = 1;  //!< D
  double scale = 0;           //!< softmax scale; 0 means 1 / sqrt(head_dim)

  [[nodiscard]] constexpr std::int64_t q_row() const noexcept { return std::int64_t{heads} * head_dim; }
  [[nodiscard]] constexpr std::int64_t kv_row() const noexcept { return std::int64_t{kv_heads} * head_dim; }
  [[nodiscard]] double softmax_scale() const noexcept { return scale != 0 ? scale : 1.0 / std::sqrt(double(head_dim)); }
  friend constexpr bool operator==(const attention_dims&, const attention_dims&) = default;
};

//! Throws invalid_argument unless heads, kv_heads, head_dim are positive, kv_heads divides
//! heads and the scale is finite and non-negative.
inline void validate(const attention_dims& d) {
  ZEPPELIN_EXPECTS(d.heads >= 1 && d.kv_heads >= 1 && d.head_dim >= 1 && d.heads % d.kv_heads == 0,
                   "attention: heads, kv_heads, head_dim must be positive and kv_heads must divide heads",
                   {{"heads", double(d.heads)}, {"kv_heads", double(d.kv_heads)}, {"head_dim", double(d.head_dim)}});
  ZEPPELIN_EXPECTS(std::isfinite(d.scale) && d.scale >= 0, "attention: the scale must be finite and non-negative",
                   {{"scale", d.scale}});
}

//! Arguments of a block forward. Pointers are to the block's first row.
template <class T>
struct attention_forward_args {
  attention_dims dims{};
  block_mask mask = block_mask::none;
  token_range q{};  //!< query positions in the sequence
  token_range k{};  //!< key positions in the sequence
  const T* query = nullptr;
  const T* key = nullptr;
  const T* value = nullptr;
  T* out = nullptr;
  T* lse = nullptr;  //!< nullptr: do not write
  std::int64_t lse_stride = 0;
};

//! Arguments of a block backward (global O, dO, LSE; gradients accumulate).
template <class T>
struct attention_backward_args {
  attention_dims dims{};
  block_mask mask = block_mask::none;
  token_range q{};
  token_range k{};
  const T* query = nullptr;
  const T* key = nullptr;
  const T* value = nullptr;
  const T* out = nullptr;
  const T* grad_out = nullptr;
  const T* lse = nullptr;
  std::int64_t lse_stride = 0;
  T* grad_query = nullptr;
  T* grad_key = nullptr;
  T* grad_value = nullptr;
};

//! A kernel policy for element type T.
template <class K, class T>
concept attention_kernel = requires(const K& k, const attention_forward_args<T>& f, const attention_backward_args<T>& b) {
  k.forward(f);
  k.backward(b);
};

//! The kernel of executors that run no attention (a stand-alone remap): any call throws.
struct no_attention_kernel {
  template <class T>
  void forward(const attention_forward_args<T>&) const {
    ZEPPELIN_THROW(invalid_argument, "no attention kernel: this executor runs no attention", {});
  }
  template <class T>
  void backward(const attention_backward_args<T>&) const {
    ZEPPELIN_THROW(invalid_argument, "no attention kernel: this executor runs no attention", {});
  }
};

ZEPPELIN_NAMESPACE_END
