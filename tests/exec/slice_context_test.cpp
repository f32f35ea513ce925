// exec/slice_context.hpp: a document attended slice by slice, each slice's own causal block
// plus its context (the rows of the earlier slices, kept by slice_context), equals the dense
// causal attention of the whole document: outputs, LSE and every gradient (fp64).
#include <catch2/catch.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/slice_context.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "exec_test_support.hpp"

using namespace zeppelin;

namespace {
// rows [b, e) of a [rows][width] tensor
std::vector<double> slice_test_rows(const std::vector<double>& t, std::int64_t width, std::int64_t b, std::int64_t e) {
  return {t.begin() + b * width, t.begin() + e * width};
}
double slice_test_gap(std::span<const double> a, std::span<const double> b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}
}  // namespace

TEST_CASE("slice_context: a document attended slice by slice equals its dense attention, forward and backward", "[exec][infinipipe]") {
  int cases = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    random_generator g(seed, 5);
    const int kv_heads = static_cast<int>(g.between(1, 2));
    const attention_dims dims{.heads = kv_heads * static_cast<int>(g.between(1, 2)), .kv_heads = kv_heads, .head_dim = 4};
    const std::int64_t L = g.between(2, 40), Q = dims.q_row(), KV = dims.kv_row(), H = dims.heads;
    // cut points: 1 to 4 slices
    std::vector<std::int64_t> cuts{0};
    for (int j = 0; j < 3; ++j)
      if (g.below(2) == 0) cuts.push_back(g.between(1, L - 1));
    cuts.push_back(L);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    // one document: its inputs and its dense causal attention (LSE [heads][L])
    const zeppelin_test::problem_data<double> dense = zeppelin_test::make_problem<double>(batch({L}), dims, seed);
    const std::vector<double>&q = dense.q, &k = dense.k, &v = dense.v, &d_o = dense.d_o, &o = dense.o, &lse = dense.lse, &dq = dense.dq,
                              &dk = dense.dk, &dv = dense.dv;
    CAPTURE(seed, L, cuts.size() - 1, dims.heads, dims.kv_heads);

    slice_context<double> kept(dims);
    const std::int64_t document = 7;
    const std::int32_t layer = 3;
    const host_attention kernel;
    struct slice_state {
      std::vector<double> o, lse;
    };
    std::vector<slice_state> slices;
    // forward, slice by slice: own causal block, then the context kept so far
    for (std::size_t j = 0; j + 1 < cuts.size(); ++j) {
      const std::int64_t b = cuts[j], e = cuts[j + 1], n = e - b;
      const auto sq = slice_test_rows(q, Q, b, e), sk = slice_test_rows(k, KV, b, e), sv = slice_test_rows(v, KV, b, e);
      slice_state s{std::vector<double>(static_cast<std::size_t>(n * Q)), std::vector<double>(static_cast<std::size_t>(H * n))};
      kernel.forward(attention_forward_args<double>{dims, block_mask::causal, {b, e}, {b, e}, sq.data(), sk.data(), sv.data(), s.o.data(),
                                                    s.lse.data(), n});
      REQUIRE(kept.rows(document, layer) == b);
      if (b > 0)
        context_attention_forward<double>(dims, sq, kept.keys(document, layer), kept.values(document, layer), s.o, s.lse, n);
      CHECK(slice_test_gap(s.o, slice_test_rows(o, Q, b, e)) < 1e-12);
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t i = 0; i < n; ++i) CHECK(std::abs(s.lse[static_cast<std::size_t>(h * n + i)] - lse[static_cast<std::size_t>(h * L + b + i)]) < 1e-12);
      if (e < L) kept.keep(document, layer, sk, sv);  // the document continues: keep the slice's rows
      slices.push_back(std::move(s));
    }
    // backward, last slice first: own block, the context's share sent back into the kept rows
    std::vector<double> got_dq(q.size(), 0.0), got_dk(k.size(), 0.0), got_dv(v.size(), 0.0);
    for (std::size_t j = cuts.size() - 1; j-- > 0;) {
      const std::int64_t b = cuts[j], e = cuts[j + 1], n = e - b;
      const auto sq = slice_test_rows(q, Q, b, e), sk = slice_test_rows(k, KV, b, e), sv = slice_test_rows(v, KV, b, e), sdo = slice_test_rows(d_o, Q, b, e);
      std::vector<double> sdq(sq.size(), 0.0), sdk(sk.size(), 0.0), sdv(sv.size(), 0.0);
      kernel.backward(attention_backward_args<double>{dims, block_mask::causal, {b, e}, {b, e}, sq.data(), sk.data(), sv.data(),
                                                      slices[j].o.data(), sdo.data(), slices[j].lse.data(), n, sdq.data(), sdk.data(),
                                                      sdv.data()});
      if (b > 0) {
        const std::span<const double> ck = kept.keys(document, layer).first(static_cast<std::size_t>(b * KV)),
                                      cv = kept.values(document, layer).first(static_cast<std::size_t>(b * KV));
        std::vector<double> cdk(ck.size(), 0.0), cdv(cv.size(), 0.0);
        context_attention_backward<double>(dims, sq, ck, cv, slices[j].o, sdo, slices[j].lse, n, sdq, cdk, cdv);
        kept.add_gradient(document, layer, cdk, cdv);
      }
      if (e < L) {  // what the later slices returned for this slice's kept rows
        const auto [gk, gv] = kept.gradient(document, layer);
        for (std::int64_t x = b * KV; x < e * KV; ++x) sdk[static_cast<std::size_t>(x - b * KV)] += gk[static_cast<std::size_t>(x)],
                                                        sdv[static_cast<std::size_t>(x - b * KV)] += gv[static_cast<std::size_t>(x)];
      }
      std::copy(sdq.begin(), sdq.end(), got_dq.begin() + b * Q);
      std::copy(sdk.begin(), sdk.end(), got_dk.begin() + b * KV);
      std::copy(sdv.begin(), sdv.end(), got_dv.begin() + b * KV);
    }
    CHECK(slice_test_gap(got_dq, dq) < 1e-12);
    CHECK(slice_test_gap(got_dk, dk) < 1e-12);
    CHECK(slice_test_gap(got_dv, dv) < 1e-12);
    if (cuts.size() > 2) kept.release(document, layer);
    CHECK(kept.rows(document, layer) == 0);
    cases += cuts.size() > 2;
  }
  CHECK(cases > 20);
}

TEST_CASE("slice_context: bad sizes and missing entries are refused by name", "[exec][infinipipe]") {
  const attention_dims dims{.heads = 2, .kv_heads = 1, .head_dim = 4};
  slice_context<double> kept(dims);
  const std::vector<double> three(3), four(4), eight(8);
  CHECK_THROWS_WITH(kept.keep(0, 0, three, three), Catch::Contains("whole rows"));
  CHECK_THROWS_WITH(kept.keys(0, 0), Catch::Contains("nothing kept"));
  kept.keep(0, 0, four, four);
  CHECK_THROWS_WITH(kept.add_gradient(0, 0, eight, eight), Catch::Contains("at most the kept rows"));
  std::vector<double> o(8), lse(2);
  CHECK_THROWS_WITH(context_attention_forward<double>(dims, three, four, four, o, lse, 1), Catch::Contains("whole query rows"));
}
