// examples/train_gpt/gpt.hpp
// A small GPT for the reference training loop: parameters, AdamW, and the token-local
// layers with their backward passes. Attention is not here: it is the library's engine
// (main.cpp), the one layer that mixes tokens.
//   model : token embedding; per layer RMSNorm -> Q, K, V projections (GQA) -> rotary position
//           embedding at the token's position inside its document -> causal attention ->
//           output projection -> residual; RMSNorm -> W1 -> SiLU -> W2 -> residual; final
//           RMSNorm -> LM head -> cross-entropy against the next token of the same document
//   rows  : every activation is [rows][width], row-major; a rank's rows are its tokens in any
//           order (the ops are per token), so the same code runs on one rank or many
// Matrices multiply on the right: y = x W with W [in][out]. Backward functions ADD into the
// parameter gradients and overwrite the input gradient. Plain loops: sizes are small.
#pragma once

#include <zeppelin/core/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace train_gpt {

struct gpt_config {
  int vocab = 64;
  int dim = 32;       //!< model width; heads x head_dim
  int heads = 4;
  int kv_heads = 2;   //!< GQA: divides heads
  int layers = 2;
  int hidden = 64;    //!< MLP width
  double rope_base = 10000;
  double eps = 1e-6;  //!< RMSNorm
  int head_size = 0;  //!< 0: dim / heads; a tensor-parallel shard's view sets it (tensor_parallel.hpp)
  [[nodiscard]] int head_dim() const { return head_size > 0 ? head_size : dim / heads; }
  [[nodiscard]] int q_width() const { return heads * head_dim(); }
  [[nodiscard]] int kv_width() const { return kv_heads * head_dim(); }
};

template <class T>
struct layer_params {
  std::vector<T> norm1, wq, wk, wv, wo, norm2, w1, w2;
};

//! Parameters, gradients and optimizer moments share this shape.
template <class T>
struct gpt_params {
  std::vector<T> embed;
  std::vector<layer_params<T>> layers;
  std::vector<T> norm_final, lm_head;

  //! Visits every tensor in one fixed order (flattening for the all-reduce and AdamW).
  template <class F>
  void for_each(F&& f) {
    visit(*this, f);
  }
  template <class F>
  void for_each(F&& f) const {
    visit(*this, f);
  }

 private:
  template <class Self, class F>
  static void visit(Self& p, F& f) {
    f(p.embed);
    for (auto& l : p.layers)
      for (auto* t : {&l.norm1, &l.wq, &l.wk, &l.wv, &l.wo, &l.norm2, &l.w1, &l.w2}) f(*t);
    f(p.norm_final);
    f(p.lm_head);
  }
};

//! Every tensor's values in for_each order, one after another (the gradient all-reduce, and
//! the check that ranks hold the same parameters).
template <class T>
std::vector<T> flatten(gpt_params<T>& p) {
  std::vector<T> out;
  p.for_each([&](std::vector<T>& t) { out.insert(out.end(), t.begin(), t.end()); });
  return out;
}

//! Zero tensors of the model's shapes.
template <class T>
gpt_params<T> zero_params(const gpt_config& c) {
  const auto n = [](int a, int b = 1) { return std::vector<T>(static_cast<std::size_t>(a) * static_cast<std::size_t>(b), T(0)); };
  gpt_params<T> p;
  p.embed = n(c.vocab, c.dim);
  for (int i = 0; i < c.layers; ++i)
    p.layers.push_back({n(c.dim), n(c.dim, c.q_width()), n(c.dim, c.kv_width()), n(c.dim, c.kv_width()), n(c.q_width(), c.dim), n(c.dim),
                        n(c.dim, c.hidden), n(c.hidden, c.dim)});
  p.norm_final = n(c.dim);
  p.lm_head = n(c.dim, c.vocab);
  return p;
}

//! Adds `x` into `into`, tensor by tensor (the same shapes).
template <class T>
void add_params(gpt_params<T>& into, const gpt_params<T>& x) {
  std::vector<const std::vector<T>*> from;
  x.for_each([&](const std::vector<T>& t) { from.push_back(&t); });
  std::size_t i = 0;
  into.for_each([&](std::vector<T>& t) {
    const std::vector<T>& f = *from.at(i++);
    for (std::size_t j = 0; j < t.size(); ++j) t[j] += f[j];
  });
}

//! Seeded initialisation: norms 1, matrices uniform in +-1/sqrt(fan-in), embedding +-1.
template <class T>
gpt_params<T> init_params(const gpt_config& c, std::uint64_t seed) {
  gpt_params<T> p = zero_params<T>(c);
  zeppelin::random_generator rng(seed, 7);
  const auto fill = [&](std::vector<T>& w, int fan_in) {
    const double a = 1 / std::sqrt(static_cast<double>(fan_in));
    for (T& x : w) x = static_cast<T>(a * (2 * rng.uniform() - 1));
  };
  fill(p.embed, 1);
  for (auto& l : p.layers) {
    l.norm1.assign(l.norm1.size(), T(1));
    l.norm2.assign(l.norm2.size(), T(1));
    fill(l.wq, c.dim), fill(l.wk, c.dim), fill(l.wv, c.dim), fill(l.wo, c.dim), fill(l.w1, c.dim), fill(l.w2, c.hidden);
  }
  p.norm_final.assign(p.norm_final.size(), T(1));
  fill(p.lm_head, c.dim);
  return p;
}

//! AdamW with bias correction; decoupled weight decay on matrices only (not norms or the
//! embedding).
template <class T>
struct adamw {
  double lr = 3e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
  gpt_params<T> m, v;
  int t = 0;

  void step(gpt_params<T>& params, gpt_params<T>& grads) {
    ++t;
    const double c1 = 1 - std::pow(beta1, t), c2 = 1 - std::pow(beta2, t);
    std::vector<std::vector<T>*> ps, gs, ms, vs;
    params.for_each([&](std::vector<T>& x) { ps.push_back(&x); });
    grads.for_each([&](std::vector<T>& x) { gs.push_back(&x); });
    m.for_each([&](std::vector<T>& x) { ms.push_back(&x); });
    v.for_each([&](std::vector<T>& x) { vs.push_back(&x); });
    for (std::size_t i = 0; i < ps.size(); ++i) {
      auto &w = *ps[i], &g = *gs[i], &mm = *ms[i], &vv = *vs[i];
      const bool decay = is_matrix(i, ps.size());
      for (std::size_t j = 0; j < w.size(); ++j) {
        mm[j] = static_cast<T>(beta1 * mm[j] + (1 - beta1) * g[j]);
        vv[j] = static_cast<T>(beta2 * vv[j] + (1 - beta2) * g[j] * g[j]);
        const double update = (mm[j] / c1) / (std::sqrt(vv[j] / c2) + eps) + (decay ? weight_decay * w[j] : 0.0);
        w[j] = static_cast<T>(w[j] - lr * update);
      }
    }
  }

 private:
  // tensor i of the for_each order: 0 embed, then 8 per layer (norm1, wq, wk, wv, wo, norm2,
  // w1, w2), then norm_final, lm_head
  static bool is_matrix(std::size_t i, std::size_t count) {
    if (i == 0) return false;               // embed
    if (i == count - 1) return true;        // lm_head
    if (i == count - 2) return false;       // norm_final
    const std::size_t k = (i - 1) % 8;      // inside a layer
    return k != 0 && k != 5;
  }
};

// --- token-local ops -------------------------------------------------------------------

//! y[n][b] = x[n][a] W[a][b]
template <class T>
void matmul(const std::vector<T>& x, const std::vector<T>& w, std::vector<T>& y, std::size_t n, std::size_t a, std::size_t b) {
  y.assign(n * b, T(0));
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < a; ++i) {
      const T xi = x[r * a + i];
      for (std::size_t j = 0; j < b; ++j) y[r * b + j] += xi * w[i * b + j];
    }
}

//! dx = dy W^T (overwritten), dW += x^T dy
template <class T>
void matmul_backward(const std::vector<T>& x, const std::vector<T>& w, const std::vector<T>& dy, std::vector<T>& dx,
                     std::vector<T>& dw, std::size_t n, std::size_t a, std::size_t b) {
  dx.assign(n * a, T(0));
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < a; ++i) {
      T s = 0;
      const T xi = x[r * a + i];
      for (std::size_t j = 0; j < b; ++j) {
        s += dy[r * b + j] * w[i * b + j];
        dw[i * b + j] += xi * dy[r * b + j];
      }
      dx[r * a + i] = s;
    }
}

//! y = x / rms(x) * g per row; inv[r] = 1 / rms
template <class T>
void rmsnorm(const std::vector<T>& x, const std::vector<T>& g, std::vector<T>& y, std::vector<T>& inv, std::size_t n,
             std::size_t d, double eps) {
  y.resize(n * d), inv.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    double ss = 0;
    for (std::size_t i = 0; i < d; ++i) ss += double(x[r * d + i]) * double(x[r * d + i]);
    inv[r] = static_cast<T>(1 / std::sqrt(ss / static_cast<double>(d) + eps));
    for (std::size_t i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] * inv[r] * g[i];
  }
}

template <class T>
void rmsnorm_backward(const std::vector<T>& x, const std::vector<T>& g, const std::vector<T>& inv, const std::vector<T>& dy,
                      std::vector<T>& dx, std::vector<T>& dg, std::size_t n, std::size_t d) {
  dx.resize(n * d);
  for (std::size_t r = 0; r < n; ++r) {
    T dot = 0;  // sum_i dy_i g_i x_i
    for (std::size_t i = 0; i < d; ++i) {
      dot += dy[r * d + i] * g[i] * x[r * d + i];
      dg[i] += dy[r * d + i] * x[r * d + i] * inv[r];
    }
    const T k = inv[r] * inv[r] * inv[r] * dot / static_cast<T>(d);
    for (std::size_t i = 0; i < d; ++i) dx[r * d + i] = dy[r * d + i] * g[i] * inv[r] - x[r * d + i] * k;
  }
}

//! Rotary embedding of rows of `heads` heads of `hd` (even) elements: pairs (2i, 2i + 1)
//! turn by pos * base^(-2i / hd); `direction` -1 turns back (the backward pass).
template <class T>
void rope(std::vector<T>& x, const std::vector<std::int64_t>& pos, std::size_t heads, std::size_t hd, double base, int direction) {
  const std::size_t w = heads * hd;
  for (std::size_t r = 0; r < pos.size(); ++r)
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i + 1 < hd; i += 2) {
        const double theta = direction * static_cast<double>(pos[r]) * std::pow(base, -static_cast<double>(i) / static_cast<double>(hd));
        const double c = std::cos(theta), s = std::sin(theta);
        T& a = x[r * w + h * hd + i];
        T& b = x[r * w + h * hd + i + 1];
        const double x0 = a, x1 = b;
        a = static_cast<T>(x0 * c - x1 * s);
        b = static_cast<T>(x0 * s + x1 * c);
      }
}

template <class T>
T sigmoid(T z) {
  return T(1) / (T(1) + std::exp(-z));
}

//! The cross-entropy's per-row statistics of a shard of the vocabulary: `logits` [n][v] are
//! the logits of tokens [first, first + v); stats[r] = (log-sum-exp of row r, its target's logit
//! when the target is in the shard, else 0) for rows with a target (-1: none; stats 0).
template <class T>
void cross_entropy_statistics(const std::vector<T>& logits, const std::vector<std::int64_t>& target, std::size_t v, std::int64_t first,
                              std::span<T> stats) {
  for (std::size_t r = 0; r < target.size(); ++r) {
    stats[2 * r] = stats[2 * r + 1] = T(0);
    if (target[r] < 0) continue;
    double mx = logits[r * v];
    for (std::size_t j = 1; j < v; ++j) mx = std::max(mx, double(logits[r * v + j]));
    double sum = 0;
    for (std::size_t j = 0; j < v; ++j) sum += std::exp(double(logits[r * v + j]) - mx);
    stats[2 * r] = static_cast<T>(mx + std::log(sum));
    const std::int64_t t = target[r] - first;
    if (t >= 0 && t < static_cast<std::int64_t>(v)) stats[2 * r + 1] = logits[r * v + static_cast<std::size_t>(t)];
  }
}

//! The cross-entropy of rows whose vocabulary is cut into `shards` shards, from every shard's
//! statistics (`stats` [shards][n][2], cross_entropy_statistics) and this shard's logits
//! (tokens [first, first + v)): returns the rows' summed loss; dlogits = (softmax - onehot) *
//! scale over this shard for rows with a target, 0 otherwise. Every shard computes the same
//! loss bits (the statistics are combined in shard order).
template <class T>
double cross_entropy_from_statistics(const std::vector<T>& logits, const std::vector<std::int64_t>& target, std::size_t v,
                                     std::int64_t first, std::span<const T> stats, int shards, std::vector<T>& dlogits, double scale) {
  const std::size_t n = target.size();
  dlogits.assign(n * v, T(0));
  double loss = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if (target[r] < 0) continue;
    double mx = stats[2 * r], picked = 0;
    for (int s = 0; s < shards; ++s) mx = std::max(mx, double(stats[(static_cast<std::size_t>(s) * n + r) * 2]));
    double sum = 0;
    for (int s = 0; s < shards; ++s) {
      sum += std::exp(double(stats[(static_cast<std::size_t>(s) * n + r) * 2]) - mx);
      picked += double(stats[(static_cast<std::size_t>(s) * n + r) * 2 + 1]);
    }
    const double lse = mx + std::log(sum);
    loss += lse - picked;
    const std::int64_t t = target[r] - first;
    for (std::size_t j = 0; j < v; ++j)
      dlogits[r * v + j] = static_cast<T>((std::exp(double(logits[r * v + j]) - lse) - (static_cast<std::int64_t>(j) == t ? 1.0 : 0.0)) * scale);
  }
  return loss;
}

//! Cross-entropy of rows of logits [n][V] against targets (-1: no target), summed; dlogits =
//! (softmax - onehot) * scale for rows with a target, 0 otherwise: the one-shard case of the
//! two above.
template <class T>
double cross_entropy(const std::vector<T>& logits, const std::vector<std::int64_t>& target, std::vector<T>& dlogits,
                     std::size_t v, double scale) {
  std::vector<T> stats(2 * target.size());
  cross_entropy_statistics(logits, target, v, 0, std::span<T>(stats));
  return cross_entropy_from_statistics(logits, target, v, 0, std::span<const T>(stats), 1, dlogits, scale);
}

}  // namespace train_gpt
