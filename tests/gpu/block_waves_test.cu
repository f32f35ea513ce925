// Host checks of the CUDA executors' planning (run without a device): the CSR waves built
// from ring rounds (cuda/executor/block_waves.hpp) cover every block of every round exactly
// once, with ascending disjoint query rows and key rows and `none` fillers only in the gaps;
// and the device engine builds programs for every partitioner's plan.
#include "distributed_support.hpp"

#include <zeppelin/cuda/executor/block_waves.hpp>

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

// checks the waves of `blocks`; returns the number of real blocks found in them
std::size_t check_waves(const std::vector<device::block_desc>& blocks) {
  std::vector<std::byte> desc(3);  // an unaligned start must still give aligned arrays
  const auto waves = device::make_block_waves(blocks, desc);
  std::multiset<std::tuple<token_count, token_count, token_count, token_count, token_count, token_count, int>> want, got;
  for (const auto& b : blocks)
    if (b.q_len > 0 && b.k_len > 0 && b.mask != block_mask::none)
      want.insert({b.q_row, b.q_len, b.k_row, b.k_len, b.q_pos, b.k_pos, static_cast<int>(b.mask)});
  for (const auto& w : waves) {
    REQUIRE(w.blocks >= 1);
    REQUIRE(w.blocks <= device::max_wave_blocks);
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
      else if (i + 1 < n)
        CHECK(m[i + 1] != block_mask::none);  // a filler only before a real block
    }
  }
  CHECK(got == want);
  return got.size();
}

}  // namespace

TEST_CASE("block waves: every ring round of every partitioner's plan is covered exactly by chained CSR launches",
          "[executor][waves]") {
  random_generator rng(5);
  std::size_t total = 0;
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {2, 4}, {4, 4}}) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      std::vector<token_count> lengths;
      for (int i = 0, n = static_cast<int>(rng.between(1, 6)); i < n; ++i) lengths.push_back(rng.between(1, 40 * t.num_ranks()));
      const batch b(lengths);
      const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      INFO("method " << p.method << " topology " << nodes << "x" << gpus);
      const device_attention_engine<> engine(p, b, {.heads = 2, .kv_heads = 1, .head_dim = 64}, device::dtype::bf16);
      for (const ring_schedule& s : engine.schedules())
        for (std::int32_t k = 0; k < s.rounds(); ++k)
          for (std::int32_t pos = 0; pos < s.size(); ++pos) {
            std::vector<device::block_desc> blocks;
            for (const attention_block& blk : s.forward[static_cast<std::size_t>(k)][static_cast<std::size_t>(pos)].blocks)
              blocks.push_back({blk.q_row, blk.q.size(), blk.kv_row, blk.k.size(), blk.q.begin, blk.k.begin, blk.mask});
            total += check_waves(blocks);
          }
      for (rank_index r = 0; r < p.num_ranks(); ++r) CHECK(engine.launches(r, false) == engine.launches(r, true));
    }
  }
  CHECK(total > 0);
}

TEST_CASE("block waves: random overlapping blocks, fillers and the launch limit", "[executor][waves]") {
  random_generator rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<device::block_desc> blocks;
    for (int i = 0, n = static_cast<int>(rng.between(0, 12)); i < n; ++i)
      blocks.push_back({rng.between(0, 50), rng.between(0, 9), rng.between(0, 50), rng.between(0, 9), rng.between(0, 100),
                        rng.between(0, 100), static_cast<block_mask>(rng.below(3))});
    check_waves(blocks);
  }
  std::vector<device::block_desc> many;  // one chain longer than a launch may hold
  for (token_count i = 0; i < 70000; ++i) many.push_back({2 * i, 1, 2 * i, 1, 0, 0, block_mask::full});
  std::vector<std::byte> desc;
  const auto waves = device::make_block_waves(many, desc);
  CHECK(waves.size() == 3);  // 69999 fillers + 70000 blocks over launches of <= 65535
  CHECK(check_waves(many) == many.size());
}

TEST_CASE("device engine rejects head dims without kernels", "[executor]") {
  const topology t = test_topology(1, 2);
  const batch b({10, 7});
  const plan p = make_plan(1, b, t, 9);
  CHECK_THROWS_AS(device_attention_engine<>(p, b, {.heads = 2, .kv_heads = 1, .head_dim = 96}, device::dtype::bf16),
                  invalid_argument);
}
