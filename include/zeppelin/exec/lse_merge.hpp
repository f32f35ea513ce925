// zeppelin/exec/lse_merge.hpp
// Merging partial attention outputs by their log-sum-exp (as ring-flash-attention's update_out_and_lse):
//   in : an accumulator (O_a, LSE_a) and a block result (O_b, LSE_b) of the same query rows,
//        each O normalised within its own keys, LSE natural log
//   out: LSE = max(a, b) + log1p(exp(min(a, b) - max(a, b)));
//        O   = exp(LSE_a - LSE) O_a + exp(LSE_b - LSE) O_b
// -inf guards: a side with LSE = -inf (no key seen) contributes nothing; both -inf leaves
// (O_a, -inf) untouched, so fully masked rows never produce NaN. Accumulators stay in the
// element type (fp32 merges for fp32, never bf16). nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

ZEPPELIN_NAMESPACE_BEGIN

//! ln(e^a + e^b) with -inf guards.
template <class T>
[[nodiscard]] T merged_lse(T a, T b) noexcept {
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  if (a == neg_inf) return b;
  if (b == neg_inf) return a;
  const T hi = a > b ? a : b, lo = a > b ? b : a;
  return hi + std::log1p(std::exp(lo - hi));
}

//! Merges one row: o_acc[0..n) and lse_acc absorb (o_b, lse_b).
template <class T>
void merge_row(T* o_acc, T& lse_acc, const T* o_b, T lse_b, std::int64_t n) noexcept {
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  if (lse_b == neg_inf) return;
  if (lse_acc == neg_inf) {
    for (std::int64_t i = 0; i < n; ++i) o_acc[i] = o_b[i];
    lse_acc = lse_b;
    return;
  }
  const T lse = merged_lse(lse_acc, lse_b);
  const T wa = std::exp(lse_acc - lse), wb = std::exp(lse_b - lse);
  for (std::int64_t i = 0; i < n; ++i) o_acc[i] = wa * o_acc[i] + wb * o_b[i];
  lse_acc = lse;
}

//! Merges a block result of `rows` query rows and `heads` heads of head_dim D into an
//! accumulator. O layouts [rows][heads][D]; LSE layouts [heads][stride] (accumulator stride
//! acc_lse_stride, block stride blk_lse_stride).
template <class T>
void merge_block(T* o_acc, T* lse_acc, std::int64_t acc_lse_stride, const T* o_blk, const T* lse_blk,
                 std::int64_t blk_lse_stride, std::int64_t rows, std::int32_t heads, std::int32_t head_dim) noexcept {
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int32_t h = 0; h < heads; ++h) {
      const std::int64_t off = (i * heads + h) * head_dim;
      merge_row(o_acc + off, lse_acc[h * acc_lse_stride + i], o_blk + off, lse_blk[h * blk_lse_stride + i], head_dim);
    }
}

ZEPPELIN_NAMESPACE_END
