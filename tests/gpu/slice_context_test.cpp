// tests/gpu/slice_context_test.cpp
// [gpu] device::slice_context and the device context attention (cuda/slice_context.hpp)
// against the host primitive (exec/slice_context.hpp, fp64) on the same 16-bit inputs: one
// document of 181 tokens cut into 3 uneven slices, GQA (4 query heads, 2 KV heads), bf16 and
// fp16, head dims 64 and 128, on a stream of its own. Every slice runs its own causal block
// with the device kernels, then its context (the rows the earlier slices kept) forward, and,
// last slice first, backward. O and LSE of the whole document, dQ, dK, dV and the kept
// gradient after every add_gradient match the host run within the 16-bit tolerances of
// attention_fixture.hpp; one slice's backward reuses the delta of its own block, the other
// computes it. Also: keep appends the rows bit for bit and keeps the gradient through growth
// (zero for new rows), add_gradient adds a prefix, release forgets one entry only; and, on the
// host alone (no device needed), bad arguments are refused by name before any device work.
#include "attention_fixture.hpp"

#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/cast.hpp>
#include <zeppelin/cuda/executor/row_ops.hpp>
#include <zeppelin/cuda/slice_context.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/exec/slice_context.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

using namespace zeppelin_test;
namespace dev = zeppelin::device;

namespace {

// rows [b, e) of a [rows][width] host tensor
std::vector<double> slice_ctx_rows(const std::vector<double>& t, std::int64_t width, std::int64_t b, std::int64_t e) {
  return {t.begin() + b * width, t.begin() + e * width};
}

std::vector<double> slice_ctx_widen(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// n elements of T from device memory (after a device synchronisation)
template <class T>
std::vector<T> slice_ctx_download(const void* device, std::int64_t n) {
  std::vector<T> host(static_cast<std::size_t>(n));
  if (n > 0) ZEPPELIN_CUDA_CHECK(cudaMemcpy(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

void slice_ctx_sync() { ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize()); }

// The host run of a document cut at `cuts`: each slice's own causal block and its context
// (exec/slice_context.hpp), forward, then backward last slice first.
struct slice_ctx_reference {
  std::vector<double> o, lse;                      // [L][heads][D], [heads][L]
  std::vector<double> dq, dk, dv;                  // the whole document's gradients
  std::vector<std::vector<double>> kept_dk, kept_dv;  // [slice]: the kept gradient after its add_gradient
};

slice_ctx_reference slice_ctx_host_run(const zeppelin::attention_dims& dims, const std::vector<std::int64_t>& cuts,
                                       const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                                       const std::vector<double>& d_o) {
  const std::int64_t L = cuts.back(), Q = dims.q_row(), KV = dims.kv_row(), H = dims.heads;
  const std::int64_t document = 7;
  const std::int32_t layer = 3;
  const zeppelin::host_attention kernel;
  zeppelin::slice_context<double> kept(dims);
  const std::size_t slices = cuts.size() - 1;
  slice_ctx_reference r;
  r.o.assign(q.size(), 0.0);
  r.lse.assign(static_cast<std::size_t>(H * L), 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  r.kept_dk.resize(slices);
  r.kept_dv.resize(slices);
  std::vector<std::vector<double>> slice_o(slices), slice_lse(slices);
  for (std::size_t j = 0; j < slices; ++j) {
    const std::int64_t b = cuts[j], e = cuts[j + 1], n = e - b;
    const auto sq = slice_ctx_rows(q, Q, b, e), sk = slice_ctx_rows(k, KV, b, e), sv = slice_ctx_rows(v, KV, b, e);
    auto& o = slice_o[j];
    auto& lse = slice_lse[j];
    o.assign(sq.size(), 0.0);
    lse.assign(static_cast<std::size_t>(H * n), 0.0);
    kernel.forward(zeppelin::attention_forward_args<double>{dims, block_mask::causal, {b, e}, {b, e}, sq.data(), sk.data(), sv.data(),
                                                            o.data(), lse.data(), n});
    if (b > 0)
      zeppelin::context_attention_forward<double>(dims, sq, kept.keys(document, layer), kept.values(document, layer), o, lse, n);
    if (e < L) kept.keep(document, layer, sk, sv);
    std::copy(o.begin(), o.end(), r.o.begin() + b * Q);
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < n; ++i) r.lse[static_cast<std::size_t>(h * L + b + i)] = lse[static_cast<std::size_t>(h * n + i)];
  }
  for (std::size_t j = slices; j-- > 0;) {
    const std::int64_t b = cuts[j], e = cuts[j + 1], n = e - b;
    const auto sq = slice_ctx_rows(q, Q, b, e), sk = slice_ctx_rows(k, KV, b, e), sv = slice_ctx_rows(v, KV, b, e),
               sdo = slice_ctx_rows(d_o, Q, b, e);
    std::vector<double> sdq(sq.size(), 0.0), sdk(sk.size(), 0.0), sdv(sv.size(), 0.0);
    kernel.backward(zeppelin::attention_backward_args<double>{dims, block_mask::causal, {b, e}, {b, e}, sq.data(), sk.data(), sv.data(),
                                                              slice_o[j].data(), sdo.data(), slice_lse[j].data(), n, sdq.data(),
                                                              sdk.data(), sdv.data()});
    if (b > 0) {
      const std::span<const double> ck = kept.keys(document, layer).first(static_cast<std::size_t>(b * KV)),
                                    cv = kept.values(document, layer).first(static_cast<std::size_t>(b * KV));
      std::vector<double> cdk(ck.size(), 0.0), cdv(cv.size(), 0.0);
      zeppelin::context_attention_backward<double>(dims, sq, ck, cv, slice_o[j], sdo, slice_lse[j], n, sdq, cdk, cdv);
      kept.add_gradient(document, layer, cdk, cdv);
      const auto [gk, gv] = kept.gradient(document, layer);
      r.kept_dk[j].assign(gk.begin(), gk.end());
      r.kept_dv[j].assign(gv.begin(), gv.end());
    }
    if (e < L) {
      const auto [gk, gv] = kept.gradient(document, layer);
      for (std::int64_t x = 0; x < n * KV; ++x) {
        sdk[static_cast<std::size_t>(x)] += gk[static_cast<std::size_t>(b * KV + x)];
        sdv[static_cast<std::size_t>(x)] += gv[static_cast<std::size_t>(b * KV + x)];
      }
    }
    std::copy(sdq.begin(), sdq.end(), r.dq.begin() + b * Q);
    std::copy(sdk.begin(), sdk.end(), r.dk.begin() + b * KV);
    std::copy(sdv.begin(), sdv.end(), r.dv.begin() + b * KV);
  }
  return r;
}

}  // namespace

TEST_CASE("device slice context: a document attended slice by slice matches the host slice context, forward and backward",
          "[gpu][infinipipe][slice_context]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto type = GENERATE(dtype::bf16, dtype::fp16);
  const int head_dim = GENERATE(64, 128);
  CAPTURE(to_string(type), head_dim);
  const zeppelin::attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = head_dim};
  const std::vector<std::int64_t> cuts{0, 45, 118, 181};  // uneven slices, none a multiple of a tile
  const std::int64_t L = cuts.back(), Q = dims.q_row(), KV = dims.kv_row(), H = dims.heads;
  const std::int64_t kept_rows = cuts[cuts.size() - 2];  // every slice but the last keeps its rows
  zeppelin::random_generator rng(29);
  std::vector<std::uint16_t> q_bits, k_bits, v_bits, do_bits;
  std::vector<float> q, k, v, d_o;
  fill_random(q_bits, q, static_cast<std::size_t>(L * Q), type, rng, 2.0);
  fill_random(k_bits, k, static_cast<std::size_t>(L * KV), type, rng, 2.0);
  fill_random(v_bits, v, static_cast<std::size_t>(L * KV), type, rng, 1.0);
  fill_random(do_bits, d_o, static_cast<std::size_t>(L * Q), type, rng, 1.0);
  const slice_ctx_reference ref = slice_ctx_host_run(dims, cuts, slice_ctx_widen(q), slice_ctx_widen(k), slice_ctx_widen(v),
                                                     slice_ctx_widen(d_o));

  // Device inputs and outputs; everything after the uploads runs on `stream`.
  const dev::cuda_stream stream(dev::stream_priorities().least);
  device_buffer<std::uint16_t> q_d(q_bits), k_d(k_bits), v_d(v_bits), do_d(do_bits), o_global(static_cast<std::size_t>(L * Q));
  device_buffer<float> o_acc(static_cast<std::size_t>(L * Q)), lse_acc(static_cast<std::size_t>(H * L)),
      delta(static_cast<std::size_t>(H * L)), dq(static_cast<std::size_t>(L * Q)), dk(static_cast<std::size_t>(L * KV)),
      dv(static_cast<std::size_t>(L * KV)), ctx_dk(static_cast<std::size_t>(kept_rows * KV)),
      ctx_dv(static_cast<std::size_t>(kept_rows * KV));
  std::vector<device_buffer<std::int32_t>> cu;  // [slice]: {0, rows} of its own block
  for (std::size_t j = 0; j + 1 < cuts.size(); ++j)
    cu.emplace_back(std::vector<std::int32_t>{0, static_cast<std::int32_t>(cuts[j + 1] - cuts[j])});
  o_acc.fill_bytes(0xff);  // the own blocks write every row: poison shows a row that was not
  lse_acc.fill_bytes(0xff);
  for (auto* g : {&dq, &dk, &dv}) g->fill_bytes(0);
  slice_ctx_sync();

  // A slice's own causal block (positions from 0 on both sides: the slice's first token).
  const auto own_block = [&](std::size_t j) {
    const std::int64_t b = cuts[j], n = cuts[j + 1] - b;
    dev::attention_blocks p;
    p.q = q_d.get() + b * Q;
    p.k = k_d.get() + b * KV;
    p.v = v_d.get() + b * KV;
    p.cu_seqlens_q = cu[j].get();
    p.cu_seqlens_k = cu[j].get();
    p.mask = block_mask::causal;
    p.num_blocks = 1;
    p.heads = dims.heads;
    p.kv_heads = dims.kv_heads;
    p.head_dim = dims.head_dim;
    p.total_q = n;
    p.lse_stride = L;  // the slice's columns of the document's [heads][L] LSE
    p.softmax_scale = static_cast<float>(dims.softmax_scale());
    p.type = type;
    return p;
  };

  dev::slice_context kept(dims, type);
  const std::int64_t document = 7;
  const std::int32_t layer = 3;
  for (std::size_t j = 0; j + 1 < cuts.size(); ++j) {
    const std::int64_t b = cuts[j], e = cuts[j + 1], n = e - b;
    REQUIRE(kept.rows(document, layer) == b);
    dev::attention_forward_params f;
    static_cast<dev::attention_blocks&>(f) = own_block(j);
    f.o_f32 = o_acc.get() + b * Q;
    f.lse = lse_acc.get() + b;
    f.max_seqlen_q = static_cast<std::int32_t>(n);
    ZEPPELIN_CUDA_CHECK(dev::attention_forward(f, stream));
    if (b > 0)
      dev::context_attention_forward(dims, type,
                                     {.q = q_d.get() + b * Q, .k = kept.keys(document, layer), .v = kept.values(document, layer),
                                      .o = o_acc.get() + b * Q, .lse = lse_acc.get() + b, .rows = n, .context_rows = b, .lse_stride = L},
                                     stream);
    if (e < L) kept.keep(document, layer, k_d.get() + b * KV, v_d.get() + b * KV, n, stream);
  }
  slice_ctx_sync();
  CHECK(relative_l2(o_acc.download(), ref.o) < forward_tolerance(type));
  CHECK(relative_l2(lse_acc.download(), ref.lse) < 1e-3);
  // the kept rows are the earlier slices' K and V, bit for bit, and their gradient is zero
  REQUIRE(kept.rows(document, layer) == kept_rows);
  const auto kept_elements = static_cast<std::size_t>(kept_rows * KV);
  CHECK(slice_ctx_download<std::uint16_t>(kept.keys(document, layer), kept_rows * KV) ==
        std::vector<std::uint16_t>(k_bits.begin(), k_bits.begin() + static_cast<std::ptrdiff_t>(kept_elements)));
  CHECK(slice_ctx_download<std::uint16_t>(kept.values(document, layer), kept_rows * KV) ==
        std::vector<std::uint16_t>(v_bits.begin(), v_bits.begin() + static_cast<std::ptrdiff_t>(kept_elements)));
  CHECK(slice_ctx_download<float>(kept.gradient(document, layer).first, kept_rows * KV) == std::vector<float>(kept_elements, 0.0f));

  // Backward, last slice first, with the global O (cast to the dtype) and LSE.
  ZEPPELIN_CUDA_CHECK(dev::cast_from_f32(o_global.get(), o_acc.get(), L * Q, type, stream));
  for (std::size_t j = cuts.size() - 1; j-- > 0;) {
    const std::int64_t b = cuts[j], e = cuts[j + 1], n = e - b;
    CAPTURE(j);
    dev::attention_preprocess_params pre;
    pre.o = o_global.get() + b * Q;
    pre.dout = do_d.get() + b * Q;
    pre.delta = delta.get() + b;
    pre.rows = n;
    pre.heads = dims.heads;
    pre.head_dim = dims.head_dim;
    pre.delta_stride = L;
    pre.type = type;
    ZEPPELIN_CUDA_CHECK(dev::attention_backward_preprocess(pre, stream));
    dev::attention_backward_params g;
    static_cast<dev::attention_blocks&>(g) = own_block(j);
    g.dout = do_d.get() + b * Q;
    g.lse = lse_acc.get() + b;
    g.delta = delta.get() + b;
    g.dq_accum = dq.get() + b * Q;
    g.dk_accum = dk.get() + b * KV;
    g.dv_accum = dv.get() + b * KV;
    g.max_seqlen_k = static_cast<std::int32_t>(n);
    ZEPPELIN_CUDA_CHECK(dev::attention_backward(g, stream));
    if (b > 0) {  // the context's share: dQ in place, the context rows' dK/dV back to the kept entry
      ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(ctx_dk.get(), 0, static_cast<std::size_t>(b * KV) * sizeof(float), stream));
      ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(ctx_dv.get(), 0, static_cast<std::size_t>(b * KV) * sizeof(float), stream));
      const float* own_delta = j == 1 ? delta.get() + b : nullptr;  // reused once, computed once
      dev::context_attention_backward(dims, type,
                                      {.q = q_d.get() + b * Q, .k = kept.keys(document, layer), .v = kept.values(document, layer),
                                       .o = o_global.get() + b * Q, .d_o = do_d.get() + b * Q, .lse = lse_acc.get() + b,
                                       .delta = own_delta, .dq = dq.get() + b * Q, .dk = ctx_dk.get(), .dv = ctx_dv.get(), .rows = n,
                                       .context_rows = b, .lse_stride = L},
                                      stream);
      kept.add_gradient(document, layer, ctx_dk.get(), ctx_dv.get(), b, stream);
      slice_ctx_sync();
      const auto [gk, gv] = kept.gradient(document, layer);
      CHECK(relative_l2(slice_ctx_download<float>(gk, kept_rows * KV), ref.kept_dk[j]) < backward_tolerance(type));
      CHECK(relative_l2(slice_ctx_download<float>(gv, kept_rows * KV), ref.kept_dv[j]) < backward_tolerance(type));
    }
    if (e < L) {  // what the later slices returned for this slice's kept rows
      const auto [gk, gv] = kept.gradient(document, layer);
      ZEPPELIN_CUDA_CHECK(dev::add_f32(dk.get() + b * KV, gk + b * KV, n * KV, stream));
      ZEPPELIN_CUDA_CHECK(dev::add_f32(dv.get() + b * KV, gv + b * KV, n * KV, stream));
    }
  }
  slice_ctx_sync();
  CHECK(relative_l2(dq.download(), ref.dq) < backward_tolerance(type));
  CHECK(relative_l2(dk.download(), ref.dk) < backward_tolerance(type));
  CHECK(relative_l2(dv.download(), ref.dv) < backward_tolerance(type));

  kept.release(document, layer, stream);
  CHECK(kept.rows(document, layer) == 0);
  CHECK_THROWS_WITH(kept.keys(document, layer), Catch::Contains("nothing kept"));
  slice_ctx_sync();
}

TEST_CASE("device slice context: keep appends, add_gradient adds a prefix, release forgets one entry", "[gpu][infinipipe][slice_context]") {
  ZEPPELIN_REQUIRE_GPU();
  const zeppelin::attention_dims dims{.heads = 2, .kv_heads = 1, .head_dim = 64};
  const std::int64_t KV = dims.kv_row(), total = 14;
  const auto n = static_cast<std::size_t>(total * KV);
  std::vector<std::uint16_t> k_bits(n), v_bits(n);
  for (std::size_t i = 0; i < n; ++i) {  // distinct bit patterns: the copies are bytewise
    k_bits[i] = static_cast<std::uint16_t>(i * 7 + 1);
    v_bits[i] = static_cast<std::uint16_t>(60000 - i * 3);
  }
  const dev::cuda_stream stream(dev::stream_priorities().least);
  device_buffer<std::uint16_t> k_d(k_bits), v_d(v_bits);
  device_buffer<float> ones(std::vector<float>(n, 1.0f)), twos(std::vector<float>(n, 2.0f));
  slice_ctx_sync();

  dev::slice_context kept(dims, dtype::bf16);
  kept.keep(7, 3, k_d.get(), v_d.get(), 5, stream);
  kept.add_gradient(7, 3, ones.get(), twos.get(), 5, stream);  // before the entry grows
  kept.keep(7, 3, k_d.get() + 5 * KV, v_d.get() + 5 * KV, 0, stream);  // an empty slice
  kept.keep(7, 3, k_d.get() + 5 * KV, v_d.get() + 5 * KV, total - 5, stream);
  kept.keep(7, 4, k_d.get(), v_d.get(), 2, stream);  // the next layer of the same document
  CHECK(kept.rows(7, 3) == total);
  CHECK(kept.rows(7, 4) == 2);
  CHECK(kept.rows(8, 3) == 0);
  kept.add_gradient(7, 3, twos.get(), ones.get(), 9, stream);  // a prefix of the kept rows
  CHECK_THROWS_WITH(kept.add_gradient(7, 4, ones.get(), ones.get(), 3, stream), Catch::Contains("at most the kept rows"));
  slice_ctx_sync();

  CHECK(slice_ctx_download<std::uint16_t>(kept.keys(7, 3), total * KV) == k_bits);
  CHECK(slice_ctx_download<std::uint16_t>(kept.values(7, 3), total * KV) == v_bits);
  std::vector<float> want_dk(n, 0.0f), want_dv(n, 0.0f);
  for (std::size_t i = 0; i < static_cast<std::size_t>(9 * KV); ++i) {
    want_dk[i] = i < static_cast<std::size_t>(5 * KV) ? 3.0f : 2.0f;
    want_dv[i] = i < static_cast<std::size_t>(5 * KV) ? 3.0f : 1.0f;
  }
  CHECK(slice_ctx_download<float>(kept.gradient(7, 3).first, total * KV) == want_dk);
  CHECK(slice_ctx_download<float>(kept.gradient(7, 3).second, total * KV) == want_dv);
  CHECK(slice_ctx_download<float>(kept.gradient(7, 4).first, 2 * KV) == std::vector<float>(static_cast<std::size_t>(2 * KV), 0.0f));

  kept.release(7, 3, stream);
  kept.release(7, 3, stream);  // nothing left: a no-op
  CHECK(kept.rows(7, 3) == 0);
  CHECK_THROWS_WITH(kept.gradient(7, 3), Catch::Contains("nothing kept"));
  REQUIRE(kept.rows(7, 4) == 2);
  slice_ctx_sync();
  CHECK(slice_ctx_download<std::uint16_t>(kept.keys(7, 4), 2 * KV) ==
        std::vector<std::uint16_t>(k_bits.begin(), k_bits.begin() + static_cast<std::ptrdiff_t>(2 * KV)));
}

TEST_CASE("device slice context: bad arguments are refused by name before any device work", "[infinipipe][slice_context]") {
  const zeppelin::attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = 64};
  using Catch::Contains;
  CHECK_THROWS_WITH(dev::slice_context(zeppelin::attention_dims{.heads = 4, .kv_heads = 2, .head_dim = 32}, dtype::bf16),
                    Contains("no attention kernel") && Contains("head_dim=32"));
  CHECK_THROWS_WITH(dev::slice_context(zeppelin::attention_dims{.heads = 4, .kv_heads = 3, .head_dim = 64}, dtype::bf16),
                    Contains("kv_heads must divide heads"));
  CHECK_THROWS_WITH(dev::slice_context(dims, static_cast<dtype>(7)), Contains("unknown dtype") && Contains("dtype=7"));

  // the bookkeeping: nothing below reaches the device
  dev::slice_context kept(dims, dtype::bf16);
  CHECK(kept.rows(0, 0) == 0);
  CHECK_THROWS_WITH(kept.keys(0, 0), Contains("nothing kept") && Contains("document=0"));
  CHECK_THROWS_WITH(kept.gradient(0, 0), Contains("nothing kept"));
  CHECK_THROWS_WITH(kept.add_gradient(0, 0, nullptr, nullptr, 0, nullptr), Contains("nothing kept"));
  CHECK_THROWS_WITH(kept.keep(0, 0, nullptr, nullptr, -1, nullptr), Contains("non-negative row count") && Contains("rows=-1"));
  CHECK_THROWS_WITH(kept.keep(0, 0, nullptr, nullptr, 3, nullptr), Contains("non-negative row count") && Contains("k_is_null=1"));
  const auto at = [](std::uintptr_t address) { return reinterpret_cast<float*>(address); };  // fake device addresses
  CHECK_THROWS_WITH(kept.keep(0, 0, at(256), at(512), std::int64_t{1} << 30, nullptr),
                    Contains("under 2^30") && Contains("rows=1073741824"));
  CHECK_THROWS(kept.keys(0, 0));  // a refused keep leaves no entry
  kept.keep(0, 0, nullptr, nullptr, 0, nullptr);  // an empty slice: an entry without rows
  CHECK(kept.keys(0, 0) == nullptr);
  CHECK_THROWS_WITH(kept.add_gradient(0, 0, nullptr, nullptr, 1, nullptr), Contains("at most the kept rows") && Contains("kept=0"));
  kept.release(0, 0, nullptr);
  CHECK_THROWS(kept.keys(0, 0));

  // context attention: the fake addresses are never dereferenced (each call is refused first)
  const dev::context_forward_args f{.q = at(256), .k = at(512), .v = at(768), .o = at(1024), .lse = at(2048), .rows = 3, .context_rows = 5};
  const auto forward = [&](const dev::context_forward_args& a, int head_dim = 64) {
    dev::context_attention_forward({.heads = 4, .kv_heads = 2, .head_dim = head_dim}, dtype::bf16, a, nullptr);
  };
  auto a = f;
  a.rows = -1;
  CHECK_THROWS_WITH(forward(a), Contains("row counts must be in [0, 2^30)") && Contains("rows=-1"));
  a = f;
  a.context_rows = std::int64_t{1} << 30;
  CHECK_THROWS_WITH(forward(a), Contains("row counts must be in [0, 2^30)"));
  a = f;
  a.lse_stride = 2;
  CHECK_THROWS_WITH(forward(a), Contains("LSE stride") && Contains("lse_stride=2"));
  a = f;
  a.q = at(258);
  CHECK_THROWS_WITH(forward(a), Contains("not aligned") && Contains("q=2"));
  a = f;
  a.o = nullptr;
  CHECK_THROWS_WITH(forward(a), Contains("pointer is null") && Contains("o=0"));
  CHECK_THROWS_WITH(forward(f, 32), Contains("no attention kernel"));
  CHECK_NOTHROW(forward({.rows = 0, .context_rows = 5}));  // no query rows: nothing to do, null pointers allowed
  CHECK_NOTHROW(forward({.rows = 3, .context_rows = 0}));  // no context

  const dev::context_backward_args g{.q = at(256), .k = at(512), .v = at(768), .o = at(1024), .d_o = at(1280), .lse = at(2048),
                                     .dq = at(4096), .dk = at(8192), .dv = at(12288), .rows = 3, .context_rows = 5};
  const auto backward = [&](const dev::context_backward_args& b) { dev::context_attention_backward(dims, dtype::bf16, b, nullptr); };
  auto b = g;
  b.dk = nullptr;
  CHECK_THROWS_WITH(backward(b), Contains("pointer is null") && Contains("dk=0"));
  b = g;
  b.o = nullptr;  // no delta either: O is needed to compute it
  CHECK_THROWS_WITH(backward(b), Contains("pointer is null") && Contains("o=0"));
  b = g;
  b.dq = at(4100);
  CHECK_THROWS_WITH(backward(b), Contains("not aligned") && Contains("dq=4"));
  b = g;
  b.lse_stride = 1;
  CHECK_THROWS_WITH(backward(b), Contains("LSE stride"));
  CHECK_NOTHROW(backward({.rows = 3, .context_rows = 0}));
}
