// tests/gpu/attention_test.cpp
// [gpu] varlen attention forward / backward against the fp64 host reference (reference.hpp):
// uneven lengths (tile remainders), causal / full / none blocks with ring-style positions,
// GQA, bf16 and fp16, head dims 64 and 128; every output poisoned with NaN before the launch.
// Also: a ring of two KV chunks merged by LSE equals one launch, and the backward of the two
// chunks with the global O / LSE accumulates to the full gradients.
#include "attention_fixture.hpp"

#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/cast.hpp>
#include <zeppelin/cuda/lse_merge.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace zeppelin_test;
namespace dev = zeppelin::device;

namespace {

struct forward_result {
  std::vector<float> o;       // from the dtype output
  std::vector<float> o_f32;   // from the fp32 output
  std::vector<float> lse;
  std::vector<std::uint16_t> o_bits;
};

forward_result run_forward(const attention_case& c, const device_case& d) {
  const auto& p = c.problem;
  const std::size_t nq = static_cast<std::size_t>(p.total_q()) * p.heads * p.head_dim;
  device_buffer<std::uint16_t> o(nq);
  device_buffer<float> o_f32(nq);
  device_buffer<float> lse(static_cast<std::size_t>(p.heads) * p.total_q());
  o.fill_bytes(0xff);
  o_f32.fill_bytes(0xff);
  lse.fill_bytes(0xff);
  auto params = d.forward_params(c);
  params.o = o.get();
  params.o_f32 = o_f32.get();
  params.lse = lse.get();
  dev::validate(params);
  ZEPPELIN_CUDA_CHECK(dev::attention_forward(params, nullptr));
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
  forward_result r;
  r.o_bits = o.download();
  r.o.resize(nq);
  for (std::size_t i = 0; i < nq; ++i) r.o[i] = from_bits(r.o_bits[i], c.type);
  r.o_f32 = o_f32.download();
  r.lse = lse.download();
  return r;
}

void check_forward(const attention_case& c, const forward_result& r) {
  std::vector<double> ref_o, ref_lse;
  reference_forward(c.problem, c.q, c.k, c.v, ref_o, ref_lse);
  for (float x : r.o_f32) REQUIRE(std::isfinite(x));  // every element written, no NaN
  CHECK(relative_l2(r.o_f32, ref_o) < forward_tolerance(c.type));
  CHECK(relative_l2(r.o, ref_o) < forward_tolerance(c.type));
  double worst_lse = 0.0;
  for (std::size_t i = 0; i < ref_lse.size(); ++i) {
    if (std::isinf(ref_lse[i])) {
      REQUIRE(r.lse[i] == -std::numeric_limits<float>::infinity());
      continue;
    }
    REQUIRE(std::isfinite(r.lse[i]));
    worst_lse = std::max(worst_lse, std::abs(double(r.lse[i]) - ref_lse[i]) / (1.0 + std::abs(ref_lse[i])));
  }
  CHECK(worst_lse < 2e-3);
  // Rows that see no key are exactly zero.
  const auto& p = c.problem;
  for (std::int64_t row = 0; row < p.total_q(); ++row)
    for (int h = 0; h < p.heads; ++h)
      if (std::isinf(ref_lse[static_cast<std::size_t>(h) * p.total_q() + row]))
        for (int dd = 0; dd < p.head_dim; ++dd) REQUIRE(r.o_f32[p.q_index(row, h, dd)] == 0.0f);
}

struct backward_result {
  std::vector<float> dq, dk_accum, dv_accum, dk, dv;
};

backward_result run_backward(const attention_case& c, const device_case& d, const std::vector<std::uint16_t>& o_bits,
                             const std::vector<float>& lse) {
  const auto& p = c.problem;
  const std::size_t nq = static_cast<std::size_t>(p.total_q()) * p.heads * p.head_dim;
  const std::size_t nk = static_cast<std::size_t>(p.total_k()) * p.kv_heads * p.head_dim;
  device_buffer<std::uint16_t> o(o_bits);
  device_buffer<float> lse_d(lse);
  device_buffer<float> delta(static_cast<std::size_t>(p.heads) * p.total_q());
  device_buffer<float> dq(nq), dk_accum(nk), dv_accum(nk);
  device_buffer<std::uint16_t> dk(nk), dv(nk);
  dq.fill_bytes(0);
  dk_accum.fill_bytes(0);
  dv_accum.fill_bytes(0);
  dk.fill_bytes(0xff);
  dv.fill_bytes(0xff);
  delta.fill_bytes(0xff);

  dev::attention_preprocess_params pre;
  pre.o = o.get();
  pre.dout = d.dout.get();
  pre.delta = delta.get();
  pre.rows = p.total_q();
  pre.heads = p.heads;
  pre.head_dim = p.head_dim;
  pre.type = c.type;
  dev::validate(pre);
  ZEPPELIN_CUDA_CHECK(dev::attention_backward_preprocess(pre, nullptr));

  auto params = d.backward_params(c);
  params.lse = lse_d.get();
  params.delta = delta.get();
  params.dq_accum = dq.get();
  params.dk_accum = dk_accum.get();
  params.dv_accum = dv_accum.get();
  params.dk = dk.get();
  params.dv = dv.get();
  dev::validate(params);
  ZEPPELIN_CUDA_CHECK(dev::attention_backward(params, nullptr));
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());

  backward_result r;
  r.dq = dq.download();
  r.dk_accum = dk_accum.download();
  r.dv_accum = dv_accum.download();
  const auto dk_bits = dk.download();
  const auto dv_bits = dv.download();
  r.dk.resize(nk);
  r.dv.resize(nk);
  for (std::size_t i = 0; i < nk; ++i) {
    r.dk[i] = from_bits(dk_bits[i], c.type);
    r.dv[i] = from_bits(dv_bits[i], c.type);
  }
  return r;
}

std::vector<block_spec> varlen_causal(const std::vector<std::int32_t>& lengths) {
  std::vector<block_spec> blocks;
  for (auto len : lengths) blocks.push_back({len, len, 0, 0, block_mask::causal});
  return blocks;
}

// Ring-round blocks: a query chunk against KV chunks before it (full), a diagonal chunk
// (causal, equal positions), zigzag-like uneven chunks with partial overlap (causal with
// offsets), a skipped block, and a block whose queries all precede its keys.
std::vector<block_spec> ring_blocks() {
  return {
      {70, 90, 200, 0, block_mask::full},        // "lower": every key before every query
      {129, 129, 64, 64, block_mask::causal},    // diagonal
      {100, 150, 300, 250, block_mask::causal},  // keys overlap the queries' start
      {33, 200, 0, 17, block_mask::causal},      // queries 0..32 vs keys 17..216: partial rows
      {40, 40, 0, 0, block_mask::none},          // skipped: O = 0, LSE = -inf
      {20, 64, 0, 100, block_mask::causal},      // queries before every key: empty rows
      {1, 1, 5, 5, block_mask::causal},
  };
}

}  // namespace

TEST_CASE("attention forward matches the fp64 reference on varlen causal batches", "[gpu][attention]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto type = GENERATE(dtype::bf16, dtype::fp16);
  const int head_dim = GENERATE(64, 128);
  CAPTURE(to_string(type), head_dim);
  const auto c = make_case(varlen_causal({1, 63, 64, 65, 130, 257}), 4, 2, head_dim, type, 11);
  const device_case d(c);
  check_forward(c, run_forward(c, d));
}

TEST_CASE("attention forward handles ring-round blocks, masks and positions", "[gpu][attention]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto type = GENERATE(dtype::bf16, dtype::fp16);
  const int head_dim = GENERATE(64, 128);
  const int kv_heads = GENERATE(1, 3);
  CAPTURE(to_string(type), head_dim, kv_heads);
  const auto c = make_case(ring_blocks(), 3, kv_heads, head_dim, type, 23);
  const device_case d(c);
  check_forward(c, run_forward(c, d));
}

TEST_CASE("attention forward with a single mask for all blocks and no positions", "[gpu][attention]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto c = make_case(varlen_causal({100, 7, 300}), 2, 2, 128, dtype::bf16, 5);
  device_case d(c);
  auto params = d.forward_params(c);
  params.masks = nullptr;
  params.q_offset = nullptr;
  params.k_offset = nullptr;
  params.mask = block_mask::full;
  const std::size_t nq = static_cast<std::size_t>(c.problem.total_q()) * 2 * 128;
  device_buffer<float> o(nq);
  o.fill_bytes(0xff);
  params.o_f32 = o.get();
  ZEPPELIN_CUDA_CHECK(dev::attention_forward(params, nullptr));
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
  auto full = c;
  for (auto& m : full.problem.masks) m = block_mask::full;
  std::vector<double> ref_o, ref_lse;
  reference_forward(full.problem, c.q, c.k, c.v, ref_o, ref_lse);
  CHECK(relative_l2(o.download(), ref_o) < forward_tolerance(dtype::bf16));
}

namespace {

// validate(params) throws naming `message` and the pointer's `address` offset.
template <class Params>
void rejects_misalignment(const Params& params, const std::string& message, double address) {
  try {
    dev::validate(params);
    FAIL("validate accepted a pointer " << address << " bytes off its boundary (" << message << ")");
  } catch (const zeppelin::invalid_argument& e) {
    CHECK(std::string(e.what()).find(message) != std::string::npos);
    CHECK(e.value("address") == address);
  }
}

}  // namespace

TEST_CASE("attention facades reject bad parameters without launching", "[gpu][attention]") {
  // No device needed: validation happens on the host.
  dev::attention_forward_params p;
  p.head_dim = 96;
  p.heads = 2;
  p.kv_heads = 2;
  p.softmax_scale = 0.1f;
  CHECK(dev::attention_forward(p, nullptr) == cudaErrorInvalidValue);
  try {
    dev::validate(p);
    FAIL("validate accepted head_dim 96");
  } catch (const zeppelin::invalid_argument& e) {
    CHECK(e.value("head_dim") == 96.0);
  }
  p.head_dim = 64;
  p.kv_heads = 3;
  CHECK_THROWS_AS(dev::validate(p), zeppelin::invalid_argument);
  p.kv_heads = 1;
  CHECK_NOTHROW(dev::validate(p));  // zero blocks: a valid no-op
  CHECK(dev::attention_forward(p, nullptr) == cudaSuccess);
  // the forward's epilogue stores O in 16-byte chunks and fp32 O in float pairs
  alignas(16) std::uint16_t o_bits[16] = {};
  alignas(16) float o_f32[4] = {};
  p.o = o_bits + 4;
  rejects_misalignment(p, "o must be 16-byte aligned", 8.0);
  p.o = o_bits + 8;
  p.o_f32 = o_f32 + 1;
  rejects_misalignment(p, "o_f32 must be 8-byte aligned", 4.0);
  p.o_f32 = o_f32 + 2;
  CHECK_NOTHROW(dev::validate(p));
  p.o = nullptr, p.o_f32 = nullptr;
  // the backward adds into its fp32 accumulators two floats at a time
  dev::attention_backward_params b;
  static_cast<dev::attention_blocks&>(b) = p;
  alignas(16) float accumulators[8] = {};
  b.dq_accum = accumulators, b.dk_accum = accumulators + 2, b.dv_accum = accumulators + 1;
  rejects_misalignment(b, "dq_accum, dk_accum and dv_accum must be 8-byte aligned", 4.0);
  b.dv_accum = accumulators + 4;
  CHECK_NOTHROW(dev::validate(b));
}

TEST_CASE("attention backward matches the fp64 reference", "[gpu][attention]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto type = GENERATE(dtype::bf16, dtype::fp16);
  const int head_dim = GENERATE(64, 128);
  const bool ring = GENERATE(false, true);
  CAPTURE(to_string(type), head_dim, ring);
  const auto c = ring ? make_case(ring_blocks(), 4, 2, head_dim, type, 31)
                      : make_case(varlen_causal({1, 64, 65, 200}), 4, 1, head_dim, type, 37);
  const device_case d(c);
  const auto fwd = run_forward(c, d);
  const auto bwd = run_backward(c, d, fwd.o_bits, fwd.lse);
  std::vector<double> dq, dk, dv;
  reference_backward(c.problem, c.q, c.k, c.v, fwd.o, c.dout, fwd.lse, dq, dk, dv);
  for (float x : bwd.dk) REQUIRE(std::isfinite(x));
  for (float x : bwd.dv) REQUIRE(std::isfinite(x));
  CHECK(relative_l2(bwd.dq, dq) < backward_tolerance(type));
  CHECK(relative_l2(bwd.dk_accum, dk) < backward_tolerance(type));
  CHECK(relative_l2(bwd.dv_accum, dv) < backward_tolerance(type));
  CHECK(relative_l2(bwd.dk, dk) < backward_tolerance(type));
  CHECK(relative_l2(bwd.dv, dv) < backward_tolerance(type));
}

TEST_CASE("two KV chunks merged by LSE equal one launch and their backward sums to the full gradients",
          "[gpu][attention][merge]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto type = GENERATE(dtype::bf16, dtype::fp16);
  const int head_dim = GENERATE(64, 128);
  CAPTURE(to_string(type), head_dim);
  // One sequence of 300 tokens, causal; the ring splits its keys at 137 (uneven chunks).
  const int L = 300, cut = 137, heads = 4, kv_heads = 2;
  const auto whole = make_case({{L, L, 0, 0, block_mask::causal}}, heads, kv_heads, head_dim, type, 41);
  const auto& p = whole.problem;
  const std::size_t nq = static_cast<std::size_t>(L) * heads * head_dim;
  const std::size_t kv_row = static_cast<std::size_t>(kv_heads) * head_dim;

  device_buffer<std::uint16_t> q(whole.q_bits), k(whole.k_bits), v(whole.v_bits), dout(whole.do_bits);
  device_buffer<std::int32_t> cu_q(std::vector<std::int32_t>{0, L});
  device_buffer<std::int32_t> cu_k0(std::vector<std::int32_t>{0, cut}), cu_k1(std::vector<std::int32_t>{0, L - cut});
  device_buffer<std::int64_t> q_pos(std::vector<std::int64_t>{0}), k_pos0(std::vector<std::int64_t>{0}),
      k_pos1(std::vector<std::int64_t>{cut});
  device_buffer<float> o_acc(nq), lse_acc(static_cast<std::size_t>(heads) * L), o_part(nq),
      lse_part(static_cast<std::size_t>(heads) * L);
  o_acc.fill_bytes(0xff);  // an empty accumulator (LSE = -inf) may hold anything
  std::vector<float> minus_inf(static_cast<std::size_t>(heads) * L, -std::numeric_limits<float>::infinity());
  lse_acc.upload(minus_inf);

  // One block: all L queries against the keys from key0 on (a ring round's KV chunk).
  const auto chunk_blocks = [&](const device_buffer<std::int32_t>& cu_k, const device_buffer<std::int64_t>& k_pos,
                                std::size_t key0) {
    dev::attention_blocks blocks;
    blocks.q = q.get();
    blocks.k = k.get() + key0 * kv_row;
    blocks.v = v.get() + key0 * kv_row;
    blocks.cu_seqlens_q = cu_q.get();
    blocks.cu_seqlens_k = cu_k.get();
    blocks.q_offset = q_pos.get();
    blocks.k_offset = k_pos.get();
    blocks.mask = block_mask::causal;
    blocks.num_blocks = 1;
    blocks.heads = heads;
    blocks.kv_heads = kv_heads;
    blocks.head_dim = head_dim;
    blocks.total_q = L;
    blocks.softmax_scale = static_cast<float>(p.scale);
    blocks.type = type;
    return blocks;
  };
  const auto chunk_forward = [&](const device_buffer<std::int32_t>& cu_k, const device_buffer<std::int64_t>& k_pos,
                                 std::size_t key0) {
    dev::attention_forward_params f;
    static_cast<dev::attention_blocks&>(f) = chunk_blocks(cu_k, k_pos, key0);
    f.o_f32 = o_part.get();
    f.lse = lse_part.get();
    f.max_seqlen_q = L;
    ZEPPELIN_CUDA_CHECK(dev::attention_forward(f, nullptr));
    dev::lse_merge_params m;
    m.o_acc = o_acc.get();
    m.lse_acc = lse_acc.get();
    m.o_part = o_part.get();
    m.lse_part = lse_part.get();
    m.rows = L;
    m.heads = heads;
    m.head_dim = head_dim;
    m.part_type = dev::partial_type::fp32;
    ZEPPELIN_CUDA_CHECK(dev::lse_merge(m, nullptr));
  };
  chunk_forward(cu_k1, k_pos1, cut);  // the later chunk first: its first rows see nothing
  chunk_forward(cu_k0, k_pos0, 0);
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());

  std::vector<double> ref_o, ref_lse;
  reference_forward(p, whole.q, whole.k, whole.v, ref_o, ref_lse);
  const auto merged_o = o_acc.download();
  const auto merged_lse = lse_acc.download();
  CHECK(relative_l2(merged_o, ref_o) < forward_tolerance(type));
  CHECK(relative_l2(merged_lse, ref_lse) < 1e-3);

  // Backward: global O (merged, cast to the dtype) and global LSE for both chunks.
  device_buffer<std::uint16_t> o_global(nq);
  ZEPPELIN_CUDA_CHECK(dev::cast_from_f32(o_global.get(), o_acc.get(), static_cast<std::int64_t>(nq), type, nullptr));
  device_buffer<float> delta(static_cast<std::size_t>(heads) * L);
  dev::attention_preprocess_params pre;
  pre.o = o_global.get();
  pre.dout = dout.get();
  pre.delta = delta.get();
  pre.rows = L;
  pre.heads = heads;
  pre.head_dim = head_dim;
  pre.type = type;
  ZEPPELIN_CUDA_CHECK(dev::attention_backward_preprocess(pre, nullptr));
  const std::size_t nk = static_cast<std::size_t>(L) * kv_row;
  device_buffer<float> dq(nq), dk(nk), dv(nk);
  dq.fill_bytes(0);
  dk.fill_bytes(0);
  dv.fill_bytes(0);
  const auto chunk_backward = [&](const device_buffer<std::int32_t>& cu_k, const device_buffer<std::int64_t>& k_pos,
                                  std::size_t key0, int keys) {
    dev::attention_backward_params b;
    static_cast<dev::attention_blocks&>(b) = chunk_blocks(cu_k, k_pos, key0);
    b.dout = dout.get();
    b.lse = lse_acc.get();
    b.delta = delta.get();
    b.dq_accum = dq.get();
    b.dk_accum = dk.get() + key0 * kv_row;
    b.dv_accum = dv.get() + key0 * kv_row;
    b.max_seqlen_k = keys;
    ZEPPELIN_CUDA_CHECK(dev::attention_backward(b, nullptr));
  };
  chunk_backward(cu_k0, k_pos0, 0, cut);
  chunk_backward(cu_k1, k_pos1, cut, L - cut);
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());

  const auto o_bits = o_global.download();
  std::vector<float> o_vals(nq);
  for (std::size_t i = 0; i < nq; ++i) o_vals[i] = from_bits(o_bits[i], type);
  std::vector<double> ref_dq, ref_dk, ref_dv;
  reference_backward(p, whole.q, whole.k, whole.v, o_vals, whole.dout, merged_lse, ref_dq, ref_dk, ref_dv);
  CHECK(relative_l2(dq.download(), ref_dq) < backward_tolerance(type));
  CHECK(relative_l2(dk.download(), ref_dk) < backward_tolerance(type));
  CHECK(relative_l2(dv.download(), ref_dv) < backward_tolerance(type));
}
