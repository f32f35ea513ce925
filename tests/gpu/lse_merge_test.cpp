// tests/gpu/lse_merge_test.cpp
// [gpu] LSE merge against the fp64 formula, for fp32 / bf16 / fp16 partials, with -inf rows
// on either side (no NaN), strided LSE (a slice of a larger [heads][total] array), head dims
// that do not fill a warp (4, 64) and that need two passes (288).
#include "gpu_support.hpp"

#include <zeppelin/core/random.hpp>
#include <zeppelin/cuda/lse_merge.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

using namespace zeppelin_test;
namespace dev = zeppelin::device;

TEST_CASE("lse_merge matches the log-sum-exp formula and guards -inf", "[gpu][merge]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto part = GENERATE(dev::partial_type::fp32, dev::partial_type::bf16, dev::partial_type::fp16);
  const int head_dim = GENERATE(4, 64, 288);
  CAPTURE(static_cast<int>(part), head_dim);
  const std::int64_t rows = 37, stride = 50;
  const int heads = 3;
  const std::size_t n = static_cast<std::size_t>(rows) * heads * head_dim;
  const float inf = std::numeric_limits<float>::infinity();
  zeppelin::random_generator rng(7);

  std::vector<float> acc(n), part_f(n);
  std::vector<std::uint16_t> part_bits(n);
  for (std::size_t i = 0; i < n; ++i) {
    acc[i] = static_cast<float>(2.0 * rng.uniform() - 1.0);
    part_f[i] = static_cast<float>(2.0 * rng.uniform() - 1.0);
    if (part != dev::partial_type::fp32) {
      const auto t = part == dev::partial_type::bf16 ? dev::dtype::bf16 : dev::dtype::fp16;
      part_bits[i] = to_bits(part_f[i], t);
      part_f[i] = from_bits(part_bits[i], t);
    }
  }
  std::vector<float> lse_acc(static_cast<std::size_t>(heads) * stride, 123.0f), lse_part(lse_acc.size(), 456.0f);
  for (int h = 0; h < heads; ++h)
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto at = static_cast<std::size_t>(h * stride + r);
      lse_acc[at] = static_cast<float>(10.0 * rng.uniform() - 5.0);
      lse_part[at] = static_cast<float>(10.0 * rng.uniform() - 5.0);
      if (r % 7 == 1) lse_acc[at] = -inf;
      if (r % 5 == 2) lse_part[at] = -inf;
    }
  // An empty accumulator row may hold garbage: poison it.
  for (int h = 0; h < heads; ++h)
    for (std::int64_t r = 0; r < rows; ++r)
      if (lse_acc[static_cast<std::size_t>(h * stride + r)] == -inf)
        for (int d = 0; d < head_dim; ++d) acc[(static_cast<std::size_t>(r) * heads + h) * head_dim + d] = std::nanf("");

  device_buffer<float> d_acc(acc), d_lse_acc(lse_acc), d_lse_part(lse_part), d_part_f(part_f);
  device_buffer<std::uint16_t> d_part_bits(part_bits);
  dev::lse_merge_params p;
  p.o_acc = d_acc.get();
  p.lse_acc = d_lse_acc.get();
  p.o_part = part == dev::partial_type::fp32 ? static_cast<const void*>(d_part_f.get()) : d_part_bits.get();
  p.lse_part = d_lse_part.get();
  p.rows = rows;
  p.heads = heads;
  p.head_dim = head_dim;
  p.lse_acc_stride = stride;
  p.lse_part_stride = stride;
  p.part_type = part;
  dev::validate(p);
  ZEPPELIN_CUDA_CHECK(dev::lse_merge(p, nullptr));
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = d_acc.download();
  const auto out_lse = d_lse_acc.download();

  for (int h = 0; h < heads; ++h) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto at = static_cast<std::size_t>(h * stride + r);
      const double a = lse_acc[at], b = lse_part[at];
      double merged = a, wa = 1.0, wb = 0.0;
      if (b == -inf) {
      } else if (a == -inf) {
        merged = b, wa = 0.0, wb = 1.0;
      } else {
        const double hi = std::max(a, b);
        merged = hi + std::log1p(std::exp(std::min(a, b) - hi));
        wa = std::exp(a - merged);
        wb = std::exp(b - merged);
      }
      if (merged == -inf) {
        REQUIRE(out_lse[at] == -inf);
      } else {
        REQUIRE(std::abs(out_lse[at] - merged) < 1e-5 * (1.0 + std::abs(merged)));
      }
      for (int d = 0; d < head_dim; ++d) {
        const std::size_t i = (static_cast<std::size_t>(r) * heads + h) * head_dim + d;
        if (a == -inf && b == -inf) continue;  // untouched (NaN stays NaN)
        const double expect = (wa == 0.0 ? 0.0 : wa * acc[i]) + wb * part_f[i];
        REQUIRE(std::isfinite(out[i]));
        REQUIRE(std::abs(out[i] - expect) < 1e-5);
      }
    }
    // Entries past `rows` in the strided LSE are untouched.
    for (std::int64_t r = rows; r < stride; ++r) REQUIRE(out_lse[static_cast<std::size_t>(h * stride + r)] == 123.0f);
  }
}
