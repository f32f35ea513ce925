// tests/gpu/reference.hpp
// fp64 host reference of the device attention (tiny shapes only: plain loops).
// In:  a CSR problem (cu_seqlens, positions, masks, GQA heads) and Q, K, V, dO as floats
//      (already rounded to the device dtype); layouts as attention_params.hpp.
// Out: forward O [total_q][heads][D] and LSE [heads][total_q] (natural log, -inf for rows
//      that see no key); backward dQ, dK, dV given the GLOBAL O and LSE (what the device
//      backward is given), so partial blocks of a ring can be checked one by one.
#pragma once

#include <zeppelin/schedule/block_mask.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace zeppelin_test {

struct attention_problem {
  std::vector<std::int32_t> cu_q;  // [blocks + 1]
  std::vector<std::int32_t> cu_k;  // [blocks + 1]
  std::vector<std::int64_t> q_offset;  // [blocks]
  std::vector<std::int64_t> k_offset;  // [blocks]
  std::vector<zeppelin::block_mask> masks;  // [blocks]
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  double scale = 0.0;
  std::int64_t total_q() const { return cu_q.back(); }
  std::int64_t total_k() const { return cu_k.back(); }
  int blocks() const { return static_cast<int>(masks.size()); }

  bool visible(int b, std::int64_t i, std::int64_t j) const {
    switch (masks[static_cast<std::size_t>(b)]) {
      case zeppelin::block_mask::none: return false;
      case zeppelin::block_mask::full: return true;
      case zeppelin::block_mask::causal:
        return k_offset[static_cast<std::size_t>(b)] + j <= q_offset[static_cast<std::size_t>(b)] + i;
    }
    return false;
  }
  std::size_t q_index(std::int64_t row, int h, int d) const {
    return (static_cast<std::size_t>(row) * static_cast<std::size_t>(heads) + static_cast<std::size_t>(h)) *
               static_cast<std::size_t>(head_dim) + static_cast<std::size_t>(d);
  }
  std::size_t k_index(std::int64_t row, int h, int d) const {
    return (static_cast<std::size_t>(row) * static_cast<std::size_t>(kv_heads) + static_cast<std::size_t>(h)) *
               static_cast<std::size_t>(head_dim) + static_cast<std::size_t>(d);
  }
  double score(const std::vector<float>& q, const std::vector<float>& k, std::int64_t qi, std::int64_t kj, int h) const {
    const int kvh = h / (heads / kv_heads);
    double s = 0.0;
    for (int d = 0; d < head_dim; ++d) s += double(q[q_index(qi, h, d)]) * double(k[k_index(kj, kvh, d)]);
    return s * scale;
  }
};

inline void reference_forward(const attention_problem& p, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, std::vector<double>& o, std::vector<double>& lse) {
  const std::int64_t tq = p.total_q();
  o.assign(static_cast<std::size_t>(tq) * p.heads * p.head_dim, 0.0);
  lse.assign(static_cast<std::size_t>(p.heads) * tq, -std::numeric_limits<double>::infinity());
  for (int b = 0; b < p.blocks(); ++b) {
    const std::int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1], k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
    for (int h = 0; h < p.heads; ++h) {
      const int kvh = h / (p.heads / p.kv_heads);
      for (std::int64_t i = q0; i < q1; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        std::vector<double> s(static_cast<std::size_t>(k1 - k0));
        for (std::int64_t j = k0; j < k1; ++j) {
          const bool vis = p.visible(b, i - q0, j - k0);
          s[static_cast<std::size_t>(j - k0)] = vis ? p.score(q, k, i, j, h) : -std::numeric_limits<double>::infinity();
          mx = std::max(mx, s[static_cast<std::size_t>(j - k0)]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;
        double sum = 0.0;
        for (auto& x : s) sum += (x = std::exp(x - mx));
        for (int d = 0; d < p.head_dim; ++d) {
          double acc = 0.0;
          for (std::int64_t j = k0; j < k1; ++j) acc += s[static_cast<std::size_t>(j - k0)] * v[p.k_index(j, kvh, d)];
          o[p.q_index(i, h, d)] = acc / sum;
        }
        lse[static_cast<std::size_t>(h) * tq + i] = mx + std::log(sum);
      }
    }
  }
}

//! Gradients given the global O and LSE ([heads][lse_stride], row offset lse_row0 for Q row 0).
inline void reference_backward(const attention_problem& p, const std::vector<float>& q, const std::vector<float>& k,
                               const std::vector<float>& v, const std::vector<float>& o, const std::vector<float>& dout,
                               const std::vector<float>& lse, std::vector<double>& dq, std::vector<double>& dk,
                               std::vector<double>& dv) {
  const std::int64_t tq = p.total_q();
  const std::int64_t tk = p.total_k();
  dq.assign(static_cast<std::size_t>(tq) * p.heads * p.head_dim, 0.0);
  dk.assign(static_cast<std::size_t>(tk) * p.kv_heads * p.head_dim, 0.0);
  dv.assign(dk.size(), 0.0);
  for (int b = 0; b < p.blocks(); ++b) {
    const std::int64_t q0 = p.cu_q[b], q1 = p.cu_q[b + 1], k0 = p.cu_k[b], k1 = p.cu_k[b + 1];
    for (int h = 0; h < p.heads; ++h) {
      const int kvh = h / (p.heads / p.kv_heads);
      for (std::int64_t i = q0; i < q1; ++i) {
        const double l = lse[static_cast<std::size_t>(h) * tq + i];
        if (l == -std::numeric_limits<double>::infinity()) continue;
        double delta = 0.0;
        for (int d = 0; d < p.head_dim; ++d) delta += double(dout[p.q_index(i, h, d)]) * double(o[p.q_index(i, h, d)]);
        for (std::int64_t j = k0; j < k1; ++j) {
          if (!p.visible(b, i - q0, j - k0)) continue;
          const double pij = std::exp(p.score(q, k, i, j, h) - l);
          double dp = 0.0;
          for (int d = 0; d < p.head_dim; ++d) dp += double(dout[p.q_index(i, h, d)]) * double(v[p.k_index(j, kvh, d)]);
          const double ds = pij * (dp - delta);
          for (int d = 0; d < p.head_dim; ++d) {
            dv[p.k_index(j, kvh, d)] += pij * dout[p.q_index(i, h, d)];
            dq[p.q_index(i, h, d)] += p.scale * ds * k[p.k_index(j, kvh, d)];
            dk[p.k_index(j, kvh, d)] += p.scale * ds * q[p.q_index(i, h, d)];
          }
        }
      }
    }
  }
}

}  // namespace zeppelin_test
