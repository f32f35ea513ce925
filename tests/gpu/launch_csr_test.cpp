// Host checks of the device engine's launch preparation (run without a device): the CSR
// arrays made for every attention launch of every partitioner's execution program
// (cuda/executor/launch_csr.hpp) hold exactly the launch's blocks, at aligned offsets, with
// `none` fillers only in the gaps; bad block lists and oversized launches are refused; the
// engine refuses dims without a kernel.
#include "distributed_support.hpp"

#include <zeppelin/cuda/executor/launch_csr.hpp>
#include <zeppelin/program/build.hpp>

#include <cstring>
#include <set>
#include <tuple>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

template <class T>
std::vector<T> read_array(const std::vector<std::byte>& d, std::size_t at, std::size_t n) {
  std::vector<T> out(n);
  std::memcpy(out.data(), d.data() + at, n * sizeof(T));
  return out;
}

using block_key = std::tuple<token_count, token_count, token_count, token_count, token_count, token_count, int>;

// checks the CSR of `blocks`; returns the number of real blocks found in it
std::size_t check_csr(const std::vector<attention_block>& blocks) {
  std::vector<std::byte> desc(3);  // an unaligned start must still give aligned arrays
  const device::launch_csr w = device::make_launch_csr(blocks, desc);
  std::multiset<block_key> want, got;
  for (const attention_block& b : blocks)
    want.insert({b.q_row, b.q.size(), b.kv_row, b.k.size(), b.q.begin, b.k.begin, static_cast<int>(b.mask)});
  REQUIRE(w.blocks >= 1);
  REQUIRE(w.blocks <= device::max_csr_blocks);
  CHECK(w.cu_q % 4 == 0);
  CHECK(w.q_offset % 8 == 0);
  CHECK(w.k_offset % 8 == 0);
  const auto n = static_cast<std::size_t>(w.blocks);
  const auto cu_q = read_array<std::int32_t>(desc, w.cu_q, n + 1);
  const auto cu_k = read_array<std::int32_t>(desc, w.cu_k, n + 1);
  const auto qo = read_array<std::int64_t>(desc, w.q_offset, n);
  const auto ko = read_array<std::int64_t>(desc, w.k_offset, n);
  const auto m = read_array<block_mask>(desc, w.masks, n);
  CHECK(cu_q.front() == w.first_row);
  CHECK(cu_q.back() == w.end_row);
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(cu_q[i] <= cu_q[i + 1]);
    CHECK(cu_k[i] <= cu_k[i + 1]);
    CHECK(cu_q[i + 1] - cu_q[i] <= w.max_q);
    CHECK(cu_k[i + 1] - cu_k[i] <= w.max_k);
    if (m[i] != block_mask::none)
      got.insert({cu_q[i], cu_q[i + 1] - cu_q[i], cu_k[i], cu_k[i + 1] - cu_k[i], qo[i], ko[i], static_cast<int>(m[i])});
    else
      CHECK((i + 1 < n && m[i + 1] != block_mask::none));  // a filler only before a real block
  }
  CHECK(got == want);
  return got.size();
}

// ascending, disjoint random blocks with random gaps (what launch_waves makes)
std::vector<attention_block> random_chain(random_generator& rng, std::size_t n) {
  std::vector<attention_block> blocks;
  token_count q = rng.between(0, 5), k = rng.between(0, 5);
  for (std::size_t i = 0; i < n; ++i) {
    const token_count ql = rng.between(1, 9), kl = rng.between(1, 9), pos = rng.between(0, 100);
    const bool causal = rng.below(2) == 0;
    blocks.push_back({0, {pos, pos + ql}, {causal ? pos : rng.between(0, 100), 0}, causal ? block_mask::causal : block_mask::full,
                      q, k});
    blocks.back().k.end = blocks.back().k.begin + (causal ? ql : kl);
    q += blocks.back().q.size() + rng.between(0, 3);
    k += blocks.back().k.size() + rng.between(0, 3);
  }
  return blocks;
}

}  // namespace

TEST_CASE("launch CSR: every launch of every partitioner's program is covered exactly", "[executor][csr]") {
  random_generator rng(5);
  std::size_t total = 0;
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {2, 4}, {4, 4}}) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      std::vector<token_count> lengths;
      for (int i = 0, n = static_cast<int>(rng.between(1, 6)); i < n; ++i) lengths.push_back(rng.between(1, 40 * t.num_ranks()));
      const batch b(lengths);
      const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      for (const launch_policy launch : {launch_policy::per_group, launch_policy::fused_round}) {
        INFO("method " << p.method << " topology " << nodes << "x" << gpus << " launch " << to_string(launch));
        program_options o;
        o.launch = launch;
        const device_attention_engine engine(p, b, t, {.heads = 2, .kv_heads = 1, .head_dim = 64}, device::dtype::bf16, o);
        for (const program_launch& l : engine.program().launches) total += check_csr(l.blocks.items());
        for (rank_index r = 0; r < p.num_ranks(); ++r)
          CHECK(engine.launches(r, pass_kind::forward) == engine.launches(r, pass_kind::backward));
      }
    }
  }
  CHECK(total > 0);
}

TEST_CASE("launch CSR: random chains, fillers, and what it refuses", "[executor][csr]") {
  random_generator rng(11);
  for (int trial = 0; trial < 200; ++trial) check_csr(random_chain(rng, static_cast<std::size_t>(rng.between(1, 12))));
  std::vector<std::byte> desc;
  CHECK_THROWS_AS(device::make_launch_csr({}, desc), invalid_argument);
  auto overlapping = random_chain(rng, 3);
  overlapping[2].q_row = overlapping[1].q_row;  // query rows must not go back
  CHECK_THROWS_AS(device::make_launch_csr(overlapping, desc), invalid_argument);
  std::vector<attention_block> many;  // more blocks than a launch's grid holds
  for (token_count i = 0; i < device::max_csr_blocks + 1; ++i) many.push_back({0, {0, 1}, {0, 1}, block_mask::causal, i, i});
  CHECK_THROWS_AS(device::make_launch_csr(many, desc), invalid_argument);
  many.pop_back();
  CHECK(check_csr(many) == many.size());
}

TEST_CASE("device engine rejects head dims without kernels", "[executor]") {
  const topology t = test_topology(1, 2);
  const batch b({10, 7});
  const plan p = make_plan(1, b, t, 9);
  CHECK_THROWS_AS(device_attention_engine(p, b, t, {.heads = 2, .kv_heads = 1, .head_dim = 96}, device::dtype::bf16),
                  invalid_argument);
}
