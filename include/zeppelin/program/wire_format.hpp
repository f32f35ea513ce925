// zeppelin/program/wire_format.hpp
// The bytes of one token row of every buffer the execution program moves or computes with.
//   in : the attention shape (query heads, K/V heads, head dim) and the element size of the
//        tensors (2 for bf16 / fp16, 4 for fp32, 8 for fp64)
//   out: row_bytes(kind) for
//          kv   one K (or one V) row              kv_heads x head_dim elements
//          dkv  one dK (or dV) accumulator row    kv_heads x head_dim accumulator elements
//          q    one Q / O / dO / dQ row           heads x head_dim elements
//          qkv  Q, K and V of one token together  (heads + 2 kv_heads) x head_dim elements
//          lse  the LSE of one token               heads accumulator elements (fp32 or wider:
//                                                  the device keeps LSE in fp32)
//        and, for the head-sliced buffers of the all-to-all (Ulysses) collective,
//        row_bytes(kind, n): a row that holds n of the kind's heads (kv, dkv: of the K/V heads;
//        q, lse: of the query heads).
//        The accumulator of dK/dV is fp32, or the element type when that is wider (fp64):
//        partial gradients travel between ring steps without rounding to bf16 (a known
//        precision complaint of ring-flash-attention), so a backward ring moves twice the
//        bytes of the forward's K/V for bf16 models.
// Every executor builds its program with the wire format of its own tensors (the host
// engine: sizeof(T); the device engine: its dtype; the simulator: the model's
// bytes_per_element), so the bytes the program lists are the bytes that move. nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>

#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! What one row of a program buffer holds (see the file comment).
enum class row_kind : std::uint8_t { kv = 0, dkv = 1, q = 2, qkv = 3, lse = 4 };

[[nodiscard]] constexpr std::string_view to_string(row_kind k) noexcept {
  switch (k) {
    case row_kind::kv: return "kv";
    case row_kind::dkv: return "dkv";
    case row_kind::q: return "q";
    case row_kind::qkv: return "qkv";
    case row_kind::lse: return "lse";
  }
  return "?";
}

struct wire_format {
  std::int32_t heads = 1;
  std::int32_t kv_heads = 1;
  std::int32_t head_dim = 1;
  std::int32_t element_bytes = 2;  //!< of Q, K, V, O and the gradients
  std::int32_t accumulator_bytes = 4;  //!< of the dK/dV accumulators that travel

  //! The format of tensors of `element_bytes` bytes: accumulators in fp32, or wider elements.
  //! Throws invalid_argument for a non-positive count or kv_heads not dividing heads.
  [[nodiscard]] static wire_format for_shape(std::int32_t heads, std::int32_t kv_heads, std::int32_t head_dim,
                                             std::int32_t element_bytes) {
    const wire_format w{heads, kv_heads, head_dim, element_bytes, element_bytes > 4 ? element_bytes : 4};
    w.check();
    return w;
  }
  //! for_shape of a model's attention (heads, kv_heads, head_dim, bytes_per_element).
  [[nodiscard]] static wire_format for_model(const model_config& m) {
    validate(m);
    return for_shape(m.heads, m.kv_heads, m.head_dim, m.bytes_per_element);
  }

  //! Throws invalid_argument naming the first bad field.
  void check() const {
    ZEPPELIN_EXPECTS(heads >= 1 && kv_heads >= 1 && head_dim >= 1 && heads % kv_heads == 0,
                     "wire format: heads, kv_heads and head_dim must be positive and kv_heads must divide heads",
                     {{"heads", double(heads)}, {"kv_heads", double(kv_heads)}, {"head_dim", double(head_dim)}});
    ZEPPELIN_EXPECTS(element_bytes >= 1 && accumulator_bytes >= 1, "wire format: element sizes must be positive",
                     {{"element_bytes", double(element_bytes)}, {"accumulator_bytes", double(accumulator_bytes)}});
  }

  //! Heads of a whole row of `kind` (qkv: the query heads plus both K/V head sets).
  [[nodiscard]] constexpr std::int32_t heads_of(row_kind kind) const noexcept {
    switch (kind) {
      case row_kind::kv:
      case row_kind::dkv: return kv_heads;
      case row_kind::q:
      case row_kind::lse: return heads;
      case row_kind::qkv: return heads + 2 * kv_heads;
    }
    return 0;
  }
  //! Elements of one head of a row of `kind`: head_dim, or 1 for lse.
  [[nodiscard]] constexpr std::int64_t head_elements(row_kind kind) const noexcept { return kind == row_kind::lse ? 1 : head_dim; }
  //! Elements of one row of `kind` holding `n` heads (n = 0: all of them).
  [[nodiscard]] constexpr std::int64_t row_elements(row_kind kind, std::int32_t n = 0) const noexcept {
    return std::int64_t{n > 0 ? n : heads_of(kind)} * head_elements(kind);
  }
  //! Bytes of one row of `kind` holding `n` heads (n = 0: all of them).
  [[nodiscard]] constexpr std::int64_t row_bytes(row_kind kind, std::int32_t n = 0) const noexcept {
    return row_elements(kind, n) * (kind == row_kind::dkv || kind == row_kind::lse ? accumulator_bytes : element_bytes);
  }
  friend constexpr bool operator==(const wire_format&, const wire_format&) = default;
};

ZEPPELIN_NAMESPACE_END
