// tests/remap/layout_test.cpp
// remap/layout.hpp on random plans: an alltoallv run with the generated counts and
// displacements moves every (sequence, position) token to where the target layout and the
// segment lists say; the inverse restores the source exactly; inverse(inverse(x)) == x.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/remap/exact.hpp>
#include <zeppelin/remap/greedy.hpp>
#include <zeppelin/remap/layout.hpp>

#include <algorithm>
#include <utility>
#include <vector>

using namespace zeppelin;

namespace {

using token_id = std::pair<sequence_index, token_count>;
using buffers = std::vector<std::vector<token_id>>;

plan random_plan(random_generator& rng) {
  plan p;
  p.method = "random";
  p.gpus_per_node = static_cast<int>(rng.between(1, 4));
  p.nodes = static_cast<int>(rng.between(1, 4));
  const auto d = static_cast<std::size_t>(p.gpus_per_node * p.nodes);
  p.placements.resize(d);
  const auto sequences = static_cast<sequence_index>(rng.between(1, 12));
  for (sequence_index s = 0; s < sequences; ++s) {
    const token_count length = rng.between(1, 300);
    token_count at = 0;
    while (at < length) {
      const token_count piece = std::min(length - at, rng.between(1, length));
      const auto r = static_cast<std::size_t>(rng.below(d));
      const auto mb = static_cast<std::int32_t>(rng.below(5) == 0);  // a few shards in micro-batch 1
      p.placements[r].shards.push_back(shard{s, {at, at + piece}, static_cast<group_index>(rng.below(3)) - 1, mb});
      at += piece;
    }
  }
  for (auto& pl : p.placements) rng.shuffle(pl.shards.begin(), pl.shards.end());
  return p;
}

std::vector<token_id> expand(const placement& pl) {
  std::vector<token_id> out;
  for (const auto& s : pl.shards)
    for (token_count t = s.range.begin; t < s.range.end; ++t) out.emplace_back(s.seq, t);
  return out;
}

// What an alltoallv with these arguments does, rank by rank.
buffers run_alltoallv(const relayout_plan& x, const buffers& in) {
  const auto d = static_cast<rank_index>(x.ranks.size());
  std::vector<alltoallv_args> args;
  for (rank_index r = 0; r < d; ++r) args.push_back(alltoallv(x, r));
  buffers out(static_cast<std::size_t>(d));
  for (rank_index r = 0; r < d; ++r) out[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(x.ranks[static_cast<std::size_t>(r)].target_tokens));
  for (rank_index i = 0; i < d; ++i) {
    const auto& a = args[static_cast<std::size_t>(i)];
    REQUIRE(std::accumulate(a.send_counts.begin(), a.send_counts.end(), token_count{0}) == x.ranks[static_cast<std::size_t>(i)].source_tokens);
    REQUIRE(std::accumulate(a.recv_counts.begin(), a.recv_counts.end(), token_count{0}) == x.ranks[static_cast<std::size_t>(i)].target_tokens);
    for (rank_index j = 0; j < d; ++j) {
      const auto& b = args[static_cast<std::size_t>(j)];
      const auto n = a.send_counts[static_cast<std::size_t>(j)];
      REQUIRE(n == b.recv_counts[static_cast<std::size_t>(i)]);
      for (token_count k = 0; k < n; ++k)
        out[static_cast<std::size_t>(j)][static_cast<std::size_t>(b.recv_displs[static_cast<std::size_t>(i)] + k)] =
            in[static_cast<std::size_t>(i)][static_cast<std::size_t>(a.send_displs[static_cast<std::size_t>(j)] + k)];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("remap lists move every token where the target layout says and the inverse restores it", "[remap]") {
  random_generator rng(21);
  for (int trial = 0; trial < 200; ++trial) {
    const auto p = random_plan(rng);
    const std::int32_t mb = trial % 4 == 0 ? 1 : 0;
    const relayout_plan x = trial % 3 == 0 ? plan_remap(p, 1.0, 8.0, greedy_remap{}, mb)
                                        : plan_remap(p, 1.0, 8.0, exact_remap{}, mb);
    const auto d = p.placements.size();
    buffers src(d);
    token_count total = 0;
    for (std::size_t r = 0; r < d; ++r) {
      src[r] = expand(x.source[r]);
      std::vector<shard> mine;
      for (const auto& s : p.placements[r].shards)
        if (s.micro_batch == mb) mine.push_back(s);
      REQUIRE(x.source[r].shards == mine);
      total += static_cast<token_count>(src[r].size());
    }
    const auto dst = run_alltoallv(x, src);
    const token_count mean = total / static_cast<token_count>(d);
    for (std::size_t r = 0; r < d; ++r) {
      REQUIRE(dst[r] == expand(x.target[r]));
      REQUIRE((x.ranks[r].target_tokens == mean || x.ranks[r].target_tokens == mean + 1));
      for (const auto& s : x.target[r].shards) REQUIRE(s.micro_batch == mb);
      // Every received segment names the tokens that landed at its offset.
      for (const auto& seg : x.ranks[r].receives)
        for (token_count k = 0; k < seg.range.size(); ++k)
          REQUIRE(dst[r][static_cast<std::size_t>(seg.to_offset + k)] == token_id{seg.seq, seg.range.begin + k});
      // Sends cover the source buffer in order, receives the destination buffer.
      token_count at = 0;
      for (const auto& seg : x.ranks[r].sends) {
        REQUIRE(seg.from_offset == at);
        at += seg.range.size();
      }
      REQUIRE(at == x.ranks[r].source_tokens);
      at = 0;
      for (const auto& seg : x.ranks[r].receives) {
        REQUIRE(seg.to_offset == at);
        at += seg.range.size();
      }
      REQUIRE(at == x.ranks[r].target_tokens);
    }
    // Tokens are conserved.
    std::vector<token_id> before, after;
    for (std::size_t r = 0; r < d; ++r) before.insert(before.end(), src[r].begin(), src[r].end()), after.insert(after.end(), dst[r].begin(), dst[r].end());
    std::sort(before.begin(), before.end());
    std::sort(after.begin(), after.end());
    REQUIRE(before == after);
    // The inverse is exact.
    const auto y = inverse(x);
    REQUIRE(inverse(y) == x);
    REQUIRE(run_alltoallv(y, dst) == src);
    REQUIRE(y.target == x.source);
  }
}

TEST_CASE("make_remap_plan rejects a matrix that does not fit the plan", "[remap]") {
  plan p;
  p.gpus_per_node = 2;
  p.nodes = 1;
  p.placements = {placement{{shard{0, {0, 4}}}}, placement{}};
  CHECK_NOTHROW(make_remap_plan(p, remap_matrix{2, {{0, 1, 2}}}));
  CHECK_THROWS_AS(make_remap_plan(p, remap_matrix{2, {{0, 1, 5}}}), invalid_argument);
  CHECK_THROWS_AS(make_remap_plan(p, remap_matrix{3, {}}), invalid_argument);
  CHECK_THROWS_AS(make_remap_plan(p, remap_matrix{2, {{0, 0, 1}}}), invalid_argument);
  CHECK_THROWS_AS(make_remap_plan(p, remap_matrix{2, {{1, 0, 0}}}), invalid_argument);
}

TEST_CASE("a remap plan pins its segments on a small plan", "[remap]") {
  // Rank 0 holds seq 0 [0,6) then seq 1 [0,2); rank 1 holds nothing. B = {4, 4}.
  plan p;
  p.gpus_per_node = 2;
  p.nodes = 1;
  p.placements = {placement{{shard{0, {0, 6}, 0}, shard{1, {0, 2}}}}, placement{}};
  const auto x = plan_remap(p, 1, 4, exact_remap{});
  REQUIRE(x.ranks[0].sends.size() == 3);
  CHECK(x.ranks[0].sends[0] == relayout_segment{0, {0, 4}, 0, 0, 0, 0, 0, 0});
  CHECK(x.ranks[0].sends[1] == relayout_segment{0, {4, 6}, 0, 1, 4, 0, 0, 0});
  CHECK(x.ranks[0].sends[2] == relayout_segment{1, {0, 2}, 0, 1, 6, 2, no_group, 0});
  CHECK(x.target[1].shards == std::vector<shard>{shard{0, {4, 6}, 0}, shard{1, {0, 2}}});
  const auto a0 = alltoallv(x, 0);
  CHECK(a0.send_counts == std::vector<token_count>{4, 4});
  CHECK(a0.send_displs == std::vector<token_count>{0, 4});
  const auto a1 = alltoallv(x, 1);
  CHECK(a1.recv_counts == std::vector<token_count>{4, 0});
  CHECK(a1.recv_displs == std::vector<token_count>{0, 0});
}

TEST_CASE("remap costs from a topology by the link model", "[remap]") {
  const auto a = clusters::cluster_a(2);  // 200 GB/s NVLink, 24 GB/s NICs shared by two GPUs
  const auto [intra, inter] = remap_token_costs(a, 8192);
  CHECK(intra == Approx(8192 / 200e9));
  CHECK(inter == Approx(2 * 8192 / 24e9));
  const auto c = clusters::cluster_c(1);
  CHECK(remap_token_costs(c, 8192).second == Approx(8192 / 48e9));
  plan p;
  p.gpus_per_node = 8;
  p.nodes = 2;
  p.placements.resize(16);
  p.placements[0].shards = {shard{0, {0, 160}}};
  const auto q = make_remap_problem(p, a, 8192);
  CHECK(q.target == std::vector<token_count>(16, 10));
  CHECK(q.inter_cost == Approx(inter));
  CHECK_THROWS_AS(make_remap_problem(p, clusters::cluster_a(1), 8192), invalid_argument);
  CHECK_THROWS_AS(remap_token_costs(a, 0), invalid_argument);
}
