// Host attention kernel and LSE merge: against an explicit softmax, finite differences,
// block decomposition + merge, GQA head mapping, -inf guards.
#include <catch2/catch.hpp>

#include <zeppelin/core/random.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/lse_merge.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace zeppelin;

namespace {
std::vector<double> random_vec(random_generator& rng, std::size_t n) {
  std::vector<double> x(n);
  for (auto& e : x) e = 2 * rng.uniform() - 1;
  return x;
}
// loss = sum(O * W): its gradient w.r.t. O is W (the dO of the backward)
double loss(const attention_dims& d, token_count L, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, const std::vector<double>& w) {
  std::vector<double> o(q.size()), lse(static_cast<std::size_t>(L * d.heads));
  reference_forward(d, L, q.data(), k.data(), v.data(), o.data(), lse.data());
  double s = 0;
  for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
  return s;
}
}  // namespace

TEST_CASE("forward equals an explicit causal softmax with GQA", "[exec][kernel]") {
  random_generator rng(1);
  const attention_dims d{.heads = 4, .kv_heads = 2, .head_dim = 3};
  const token_count L = 7;
  const auto q = random_vec(rng, static_cast<std::size_t>(L * d.q_row()));
  const auto k = random_vec(rng, static_cast<std::size_t>(L * d.kv_row()));
  const auto v = random_vec(rng, static_cast<std::size_t>(L * d.kv_row()));
  std::vector<double> o(q.size()), lse(static_cast<std::size_t>(L * d.heads));
  reference_forward(d, L, q.data(), k.data(), v.data(), o.data(), lse.data());
  const double scale = 1 / std::sqrt(3.0);
  for (token_count i = 0; i < L; ++i)
    for (int h = 0; h < d.heads; ++h) {
      const int g = h / 2;  // GQA: heads 0,1 -> kv head 0; 2,3 -> 1
      std::vector<double> p;
      double z = 0;
      for (token_count j = 0; j <= i; ++j) {
        double s = 0;
        for (int x = 0; x < 3; ++x) s += q[static_cast<std::size_t>((i * 4 + h) * 3 + x)] * k[static_cast<std::size_t>((j * 2 + g) * 3 + x)];
        p.push_back(std::exp(scale * s));
        z += p.back();
      }
      CHECK(lse[static_cast<std::size_t>(h * L + i)] == Approx(std::log(z)).epsilon(1e-13));
      for (int x = 0; x < 3; ++x) {
        double want = 0;
        for (token_count j = 0; j <= i; ++j) want += p[static_cast<std::size_t>(j)] / z * v[static_cast<std::size_t>((j * 2 + g) * 3 + x)];
        CHECK(o[static_cast<std::size_t>((i * 4 + h) * 3 + x)] == Approx(want).epsilon(1e-13));
      }
    }
}

TEST_CASE("backward matches central finite differences", "[exec][kernel]") {
  random_generator rng(2);
  const attention_dims d{.heads = 2, .kv_heads = 1, .head_dim = 2};
  const token_count L = 5;
  auto q = random_vec(rng, static_cast<std::size_t>(L * d.q_row()));
  auto k = random_vec(rng, static_cast<std::size_t>(L * d.kv_row()));
  auto v = random_vec(rng, static_cast<std::size_t>(L * d.kv_row()));
  const auto w = random_vec(rng, q.size());
  std::vector<double> o(q.size()), lse(static_cast<std::size_t>(L * d.heads)), dq(q.size()), dk(k.size()), dv(v.size());
  reference_forward(d, L, q.data(), k.data(), v.data(), o.data(), lse.data());
  reference_backward(d, L, q.data(), k.data(), v.data(), o.data(), w.data(), lse.data(), dq.data(), dk.data(), dv.data());
  const double h = 1e-6;
  const auto check = [&](std::vector<double>& x, const std::vector<double>& grad) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double keep = x[i];
      x[i] = keep + h;
      const double up = loss(d, L, q, k, v, w);
      x[i] = keep - h;
      const double down = loss(d, L, q, k, v, w);
      x[i] = keep;
      CHECK(grad[i] == Approx((up - down) / (2 * h)).margin(1e-8));
    }
  };
  check(q, dq);
  check(k, dk);
  check(v, dv);
}

TEST_CASE("blocks merged by LSE equal the whole row and -inf rows stay finite", "[exec][kernel]") {
  random_generator rng(3);
  const attention_dims d{.heads = 2, .kv_heads = 2, .head_dim = 4};
  const token_count L = 9;
  const auto q = random_vec(rng, static_cast<std::size_t>(L * d.q_row()));
  const auto k = random_vec(rng, static_cast<std::size_t>(L * d.kv_row()));
  const auto v = random_vec(rng, static_cast<std::size_t>(L * d.kv_row()));
  std::vector<double> o(q.size()), lse(static_cast<std::size_t>(L * d.heads));
  reference_forward(d, L, q.data(), k.data(), v.data(), o.data(), lse.data());
  // queries [5, 9) against keys [0, 3) (full), [3, 5) (full), [5, 9) (causal), merged in that order
  const token_range qr{5, 9};
  std::vector<double> acc(static_cast<std::size_t>(4 * d.q_row()), 0.0), acc_lse(8, -std::numeric_limits<double>::infinity());
  const host_attention kernel;
  for (const auto& [kr, mask] : {std::pair{token_range{0, 3}, block_mask::full}, std::pair{token_range{3, 5}, block_mask::full},
                                 std::pair{token_range{5, 9}, block_mask::causal}, std::pair{token_range{6, 9}, block_mask::none}}) {
    std::vector<double> bo(acc.size()), bl(8);
    kernel.forward(attention_forward_args<double>{d, mask, qr, kr, q.data() + 5 * d.q_row(), k.data() + kr.begin * d.kv_row(),
                                                  v.data() + kr.begin * d.kv_row(), bo.data(), bl.data(), 4});
    merge_block(acc.data(), acc_lse.data(), 4, bo.data(), bl.data(), 4, 4, d.heads, d.head_dim);
  }
  for (token_count i = 0; i < 4; ++i)
    for (int hh = 0; hh < 2; ++hh) {
      CHECK(acc_lse[static_cast<std::size_t>(hh * 4 + i)] == Approx(lse[static_cast<std::size_t>(hh * L + 5 + i)]).epsilon(1e-13));
      for (int x = 0; x < 4; ++x)
        CHECK(acc[static_cast<std::size_t>((i * 2 + hh) * 4 + x)] ==
              Approx(o[static_cast<std::size_t>(((5 + i) * 2 + hh) * 4 + x)]).epsilon(1e-12));
    }
  // a causal block whose keys all follow the queries: LSE -inf, O zero, merge leaves the accumulator
  std::vector<double> bo(static_cast<std::size_t>(2 * d.q_row()), 7.0), bl(4, 0.0);
  kernel.forward(attention_forward_args<double>{d, block_mask::causal, {0, 2}, {4, 6}, q.data(), k.data(), v.data(), bo.data(), bl.data(), 2});
  for (double x : bl) CHECK(std::isinf(x));
  for (double x : bo) CHECK(x == 0.0);
  std::vector<double> a2(bo.size(), 0.0), l2(4, -std::numeric_limits<double>::infinity());
  merge_block(a2.data(), l2.data(), 2, bo.data(), bl.data(), 2, 2, d.heads, d.head_dim);
  for (double x : a2) CHECK(x == 0.0);
  for (double x : l2) CHECK(std::isinf(x));
  CHECK(merged_lse(-std::numeric_limits<float>::infinity(), 1.5f) == 1.5f);
  CHECK(merged_lse(0.0, 0.0) == Approx(std::log(2.0)));
  CHECK(merged_lse(1000.0, 1000.0) == Approx(1000 + std::log(2.0)));
}

TEST_CASE("bad dims are rejected", "[exec][kernel]") {
  CHECK_THROWS_AS(validate(attention_dims{.heads = 3, .kv_heads = 2, .head_dim = 4}), invalid_argument);
  CHECK_THROWS_AS(validate(attention_dims{.heads = 2, .kv_heads = 1, .head_dim = 0}), invalid_argument);
  std::vector<double> x(4);
  CHECK_THROWS_AS(reference_forward(attention_dims{}, 0, x.data(), x.data(), x.data(), x.data(), x.data()), invalid_argument);
}
