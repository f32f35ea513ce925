// tests/gpu/attention_fixture.hpp
// A random attention problem with its host data and device copies, and the calls that run
// the device kernels on it (forward, preprocess + backward) through the public facades.
#pragma once

#include "gpu_support.hpp"
#include "reference.hpp"

#include <zeppelin/core/random.hpp>
#include <zeppelin/cuda/attention.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace zeppelin_test {

using zeppelin::block_mask;
using zeppelin::device::dtype;

struct attention_case {
  attention_problem problem;
  dtype type = dtype::bf16;
  std::vector<std::uint16_t> q_bits, k_bits, v_bits, do_bits;
  std::vector<float> q, k, v, dout;  // the same values as floats (rounded to the dtype)
};

//! Blocks b = (q length, k length, q position, k position, mask).
struct block_spec {
  std::int32_t q_len;
  std::int32_t k_len;
  std::int64_t q_pos;
  std::int64_t k_pos;
  block_mask mask;
};

inline void fill_random(std::vector<std::uint16_t>& bits, std::vector<float>& values, std::size_t n, dtype t,
                        zeppelin::random_generator& rng, double amplitude) {
  bits.resize(n);
  values.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    bits[i] = to_bits(static_cast<float>((2.0 * rng.uniform() - 1.0) * amplitude), t);
    values[i] = from_bits(bits[i], t);
  }
}

inline attention_case make_case(const std::vector<block_spec>& blocks, int heads, int kv_heads, int head_dim, dtype t,
                                std::uint64_t seed) {
  attention_case c;
  c.type = t;
  auto& p = c.problem;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.scale = 1.0 / std::sqrt(double(head_dim));
  p.cu_q = {0};
  p.cu_k = {0};
  for (const auto& b : blocks) {
    p.cu_q.push_back(p.cu_q.back() + b.q_len);
    p.cu_k.push_back(p.cu_k.back() + b.k_len);
    p.q_offset.push_back(b.q_pos);
    p.k_offset.push_back(b.k_pos);
    p.masks.push_back(b.mask);
  }
  zeppelin::random_generator rng(seed);
  const auto nq = static_cast<std::size_t>(p.total_q()) * heads * head_dim;
  const auto nk = static_cast<std::size_t>(p.total_k()) * kv_heads * head_dim;
  // Amplitude 2 makes softmax rows peaked enough that masking mistakes show.
  fill_random(c.q_bits, c.q, nq, t, rng, 2.0);
  fill_random(c.k_bits, c.k, nk, t, rng, 2.0);
  fill_random(c.v_bits, c.v, nk, t, rng, 1.0);
  fill_random(c.do_bits, c.dout, nq, t, rng, 1.0);
  return c;
}

//! Device copies of a case's inputs and CSR arrays.
struct device_case {
  device_buffer<std::uint16_t> q, k, v, dout;
  device_buffer<std::int32_t> cu_q, cu_k;
  device_buffer<std::int64_t> q_offset, k_offset;
  device_buffer<block_mask> masks;
  std::int32_t max_q = 0;
  std::int32_t max_k = 0;

  explicit device_case(const attention_case& c)
      : q(c.q_bits), k(c.k_bits), v(c.v_bits), dout(c.do_bits), cu_q(c.problem.cu_q), cu_k(c.problem.cu_k),
        q_offset(c.problem.q_offset), k_offset(c.problem.k_offset), masks(c.problem.masks) {
    for (int b = 0; b < c.problem.blocks(); ++b) {
      max_q = std::max(max_q, c.problem.cu_q[b + 1] - c.problem.cu_q[b]);
      max_k = std::max(max_k, c.problem.cu_k[b + 1] - c.problem.cu_k[b]);
    }
  }

  //! The inputs and block list both passes use.
  zeppelin::device::attention_blocks blocks(const attention_case& c) const {
    zeppelin::device::attention_blocks p;
    p.q = q.get();
    p.k = k.get();
    p.v = v.get();
    p.cu_seqlens_q = cu_q.get();
    p.cu_seqlens_k = cu_k.get();
    p.q_offset = q_offset.get();
    p.k_offset = k_offset.get();
    p.masks = masks.get();
    p.num_blocks = c.problem.blocks();
    p.heads = c.problem.heads;
    p.kv_heads = c.problem.kv_heads;
    p.head_dim = c.problem.head_dim;
    p.total_q = c.problem.total_q();
    p.softmax_scale = static_cast<float>(c.problem.scale);
    p.type = c.type;
    return p;
  }

  zeppelin::device::attention_forward_params forward_params(const attention_case& c) const {
    zeppelin::device::attention_forward_params p;
    static_cast<zeppelin::device::attention_blocks&>(p) = blocks(c);
    p.max_seqlen_q = max_q;
    return p;
  }

  zeppelin::device::attention_backward_params backward_params(const attention_case& c) const {
    zeppelin::device::attention_backward_params p;
    static_cast<zeppelin::device::attention_blocks&>(p) = blocks(c);
    p.dout = dout.get();
    p.max_seqlen_k = max_k;
    return p;
  }
};

//! Tolerances on ||x - ref|| / ||ref|| (16-bit P and dS in the MMAs dominate).
inline double forward_tolerance(dtype t) { return t == dtype::bf16 ? 2e-2 : 5e-3; }
inline double backward_tolerance(dtype t) { return t == dtype::bf16 ? 5e-2 : 1.5e-2; }

}  // namespace zeppelin_test
