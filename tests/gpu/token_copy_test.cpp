// tests/gpu/token_copy_test.cpp
// Token runs: gather_runs / scatter_runs on the host (fusion of adjacent runs, errors), and
// the device copies (CUB batched memcpy and the vectorised kernel) against a host copy, for
// 16-byte, 4-byte and odd row sizes, with dst poisoned outside the runs ([gpu]).
#include "gpu_support.hpp"

#include <zeppelin/core/random.hpp>
#include <zeppelin/cuda/token_copy.hpp>
#include <zeppelin/cuda/token_runs.hpp>

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using namespace zeppelin_test;
namespace dev = zeppelin::device;

TEST_CASE("gather_runs packs segments in list order and fuses adjacent runs", "[gpu][token_copy]") {
  const std::vector<std::int64_t> starts{0, 10, 25};  // three sequences: 10, 15, ... tokens
  const std::vector<dev::sequence_segment> segments{{1, {0, 5}}, {1, {5, 9}}, {0, {2, 4}}, {2, {0, 3}}, {1, {9, 9}}};
  const auto gather = dev::gather_runs(starts, segments);
  REQUIRE(gather == std::vector<dev::token_run>{{10, 0, 9}, {2, 9, 2}, {25, 11, 3}});
  const auto scatter = dev::scatter_runs(starts, segments);
  REQUIRE(scatter == std::vector<dev::token_run>{{0, 10, 9}, {9, 2, 2}, {11, 25, 3}});
  CHECK(dev::total_tokens(gather) == 14);
  CHECK(dev::longest_run(gather) == 9);
  const std::vector<dev::sequence_segment> unknown{{3, {0, 1}}};
  CHECK_THROWS_AS(dev::gather_runs(starts, unknown), zeppelin::invalid_argument);
  const std::vector<dev::sequence_segment> reversed{{0, {4, 2}}};
  CHECK_THROWS_AS(dev::gather_runs(starts, reversed), zeppelin::invalid_argument);
}

TEST_CASE("copy_token_runs moves exactly the planned rows", "[gpu][token_copy]") {
  ZEPPELIN_REQUIRE_GPU();
  const auto algorithm = GENERATE(dev::copy_algorithm::cub_batched, dev::copy_algorithm::vectorized);
  const std::size_t row_bytes = GENERATE(std::size_t{256}, std::size_t{12}, std::size_t{7}, std::size_t{8192});
  CAPTURE(static_cast<int>(algorithm), row_bytes);
  zeppelin::random_generator rng(3);
  // Random segments of 8 sequences, gathered into a packed buffer.
  std::vector<std::int64_t> lengths, starts{0};
  for (int s = 0; s < 8; ++s) {
    lengths.push_back(rng.between(1, 700));
    starts.push_back(starts.back() + lengths.back());
  }
  std::vector<dev::sequence_segment> segments;
  for (int i = 0; i < 20; ++i) {
    const auto s = static_cast<zeppelin::sequence_index>(rng.below(8));
    const auto b = rng.between(0, lengths[static_cast<std::size_t>(s)] - 1);
    const auto e = rng.between(b, lengths[static_cast<std::size_t>(s)]);
    segments.push_back({s, {b, e}});
  }
  starts.pop_back();
  const auto runs = dev::gather_runs(starts, segments);
  const std::int64_t total_src = starts.back() + lengths.back();
  const std::int64_t total_dst = dev::total_tokens(runs);

  std::vector<unsigned char> src(static_cast<std::size_t>(total_src) * row_bytes);
  for (auto& x : src) x = static_cast<unsigned char>(rng.below(256));
  std::vector<unsigned char> expect(static_cast<std::size_t>(total_dst + 3) * row_bytes, 0xab);
  for (const auto& r : runs)
    std::memcpy(expect.data() + r.dst * row_bytes, src.data() + r.src * row_bytes, static_cast<std::size_t>(r.length) * row_bytes);

  device_buffer<unsigned char> d_src(src);
  device_buffer<unsigned char> d_dst(expect.size());
  d_dst.fill_bytes(0xab);
  device_buffer<dev::token_run> d_runs(runs);
  dev::token_copy_params p;
  p.runs = d_runs.get();
  p.num_runs = static_cast<std::int64_t>(runs.size());
  p.dst = d_dst.get();
  p.src = d_src.get();
  p.row_bytes = row_bytes;
  p.longest_run = dev::longest_run(runs);
  p.algorithm = algorithm;
  std::size_t temp_bytes = 0;
  ZEPPELIN_CUDA_CHECK(dev::copy_token_runs_temp_bytes(p, temp_bytes));
  device_buffer<unsigned char> temp(temp_bytes);
  p.temp = temp.get();
  p.temp_bytes = temp_bytes;
  ZEPPELIN_CUDA_CHECK(dev::copy_token_runs(p, nullptr));
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
  REQUIRE(d_dst.download() == expect);
}
