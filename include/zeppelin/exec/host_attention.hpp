// zeppelin/exec/host_attention.hpp
// The host attention kernel: the CPU path of the executors and the reference the device
// kernels are tested against. Plain loops; every dot product, softmax sum and gradient of a
// block is accumulated in double and rounded to T once, so the fp32 path loses no precision
// inside a block (merges across blocks run in T, as on the device).
//   in : attention_forward_args / attention_backward_args (exec/attention_kernel.hpp: layouts,
//        GQA head map, causal mask by absolute position, scale)
//   out: forward: O [q][H][D] and LSE [H][stride] (natural log, -inf for a row that sees no
//        key, whose O is 0); backward: dQ, dK, dV += the block's contribution, computed from
//        the GLOBAL O, dO and LSE (P = exp(s - LSE), D_i = dO_i . O_i,
//        dS = P (dO . V - D_i), dQ += scale dS K, dK += scale dS^T Q, dV += P^T dO)
// Cost O(pairs * H * D). Also: reference_forward / reference_backward, the dense single-rank
// causal attention of one whole sequence (the correctness oracle of the distributed path).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/attention_kernel.hpp>
#include <zeppelin/schedule/block_mask.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct host_attention {
  //! Keys visible to query row i of the block: [0, count).
  [[nodiscard]] static std::int64_t visible_keys(block_mask mask, token_range q, token_range k, std::int64_t i) noexcept {
    switch (mask) {
      case block_mask::full: return k.size();
      case block_mask::causal: return std::clamp<std::int64_t>(q.begin + i - k.begin + 1, 0, k.size());
      case block_mask::none: break;
    }
    return 0;
  }

  template <class T>
  void forward(const attention_forward_args<T>& a) const {
    const auto& d = a.dims;
    const std::int64_t D = d.head_dim, H = d.heads, group = d.heads / d.kv_heads;
    const double scale = d.softmax_scale();
    const std::int64_t rows = a.q.size();
    std::vector<double> s(static_cast<std::size_t>(std::max<std::int64_t>(a.k.size(), 1)));
    std::vector<double> acc(static_cast<std::size_t>(D));
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t n = visible_keys(a.mask, a.q, a.k, i);
      for (std::int64_t h = 0; h < H; ++h) {
        const T* qi = a.query + (i * H + h) * D;
        T* oi = a.out + (i * H + h) * D;
        const std::int64_t kvh = h / group;
        if (n == 0) {
          std::fill(oi, oi + D, T(0));
          if (a.lse) a.lse[h * a.lse_stride + i] = -std::numeric_limits<T>::infinity();
          continue;
        }
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < n; ++j) {
          const T* kj = a.key + (j * d.kv_heads + kvh) * D;
          double dot = 0;
          for (std::int64_t x = 0; x < D; ++x) dot += double(qi[x]) * double(kj[x]);
          s[static_cast<std::size_t>(j)] = scale * dot;
          m = std::max(m, s[static_cast<std::size_t>(j)]);
        }
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (std::int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[static_cast<std::size_t>(j)] - m);
          l += p;
          const T* vj = a.value + (j * d.kv_heads + kvh) * D;
          for (std::int64_t x = 0; x < D; ++x) acc[static_cast<std::size_t>(x)] += p * double(vj[x]);
        }
        for (std::int64_t x = 0; x < D; ++x) oi[x] = static_cast<T>(acc[static_cast<std::size_t>(x)] / l);
        if (a.lse) a.lse[h * a.lse_stride + i] = static_cast<T>(m + std::log(l));
      }
    }
  }

  template <class T>
  void backward(const attention_backward_args<T>& a) const {
    const auto& d = a.dims;
    const std::int64_t D = d.head_dim, H = d.heads, KV = d.kv_heads, group = d.heads / d.kv_heads;
    const double scale = d.softmax_scale();
    const std::int64_t rows = a.q.size(), keys = a.k.size();
    std::vector<double> dk(static_cast<std::size_t>(keys * KV * D), 0.0), dv(dk.size(), 0.0);
    std::vector<double> dq(static_cast<std::size_t>(D));
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t n = visible_keys(a.mask, a.q, a.k, i);
      if (n == 0) continue;
      for (std::int64_t h = 0; h < H; ++h) {
        const double lse = double(a.lse[h * a.lse_stride + i]);
        if (std::isinf(lse) && lse < 0) continue;  // the row sees no key anywhere
        const std::int64_t row = (i * H + h) * D, kvh = h / group;
        const T* qi = a.query + row;
        const T* oi = a.out + row;
        const T* doi = a.grad_out + row;
        double di = 0;
        for (std::int64_t x = 0; x < D; ++x) di += double(doi[x]) * double(oi[x]);
        std::fill(dq.begin(), dq.end(), 0.0);
        for (std::int64_t j = 0; j < n; ++j) {
          const std::int64_t kv = (j * KV + kvh) * D;
          const T* kj = a.key + kv;
          const T* vj = a.value + kv;
          double dot = 0, dp = 0;
          for (std::int64_t x = 0; x < D; ++x) {
            dot += double(qi[x]) * double(kj[x]);
            dp += double(doi[x]) * double(vj[x]);
          }
          const double p = std::exp(scale * dot - lse);
          const double ds = p * (dp - di);
          for (std::int64_t x = 0; x < D; ++x) {
            const auto xi = static_cast<std::size_t>(x);
            dq[xi] += scale * ds * double(kj[x]);
            dk[static_cast<std::size_t>(kv + x)] += scale * ds * double(qi[x]);
            dv[static_cast<std::size_t>(kv + x)] += p * double(doi[x]);
          }
        }
        for (std::int64_t x = 0; x < D; ++x) a.grad_query[row + x] += static_cast<T>(dq[static_cast<std::size_t>(x)]);
      }
    }
    for (std::size_t x = 0; x < dk.size(); ++x) {
      a.grad_key[x] += static_cast<T>(dk[x]);
      a.grad_value[x] += static_cast<T>(dv[x]);
    }
  }
  friend constexpr bool operator==(const host_attention&, const host_attention&) = default;
};
static_assert(attention_kernel<host_attention, float>);
static_assert(attention_kernel<host_attention, double>);

//! Dense causal attention of one whole sequence of `length` tokens on one rank: O [L][H][D]
//! and LSE [H][L] (stride L). Throws invalid_argument for bad dims or length < 1.
template <class T, class Kernel = host_attention>
void reference_forward(const attention_dims& dims, token_count length, const T* q, const T* k, const T* v, T* o, T* lse,
                       const Kernel& kernel = {}) {
  validate(dims);
  ZEPPELIN_EXPECTS(length >= 1, "reference attention: the length must be positive", {{"length", double(length)}});
  kernel.forward(attention_forward_args<T>{dims, block_mask::causal, {0, length}, {0, length}, q, k, v, o, lse, length});
}

//! Gradients of the dense causal attention of one sequence (dq, dk, dv are overwritten).
template <class T, class Kernel = host_attention>
void reference_backward(const attention_dims& dims, token_count length, const T* q, const T* k, const T* v, const T* o,
                        const T* d_o, const T* lse, T* dq, T* dk, T* dv, const Kernel& kernel = {}) {
  validate(dims);
  ZEPPELIN_EXPECTS(length >= 1, "reference attention: the length must be positive", {{"length", double(length)}});
  std::fill(dq, dq + length * dims.q_row(), T(0));
  std::fill(dk, dk + length * dims.kv_row(), T(0));
  std::fill(dv, dv + length * dims.kv_row(), T(0));
  kernel.backward(attention_backward_args<T>{dims, block_mask::causal, {0, length}, {0, length}, q, k, v, o, d_o, lse, length,
                                             dq, dk, dv});
}

ZEPPELIN_NAMESPACE_END
