// tests/strategy/switching_test.cpp
// Hydraulis' switching (strategy/switching.hpp): the pull brings every GPU exactly the
// segments of its TP shard, each from its owner; with TP 1 it is an all-gather; the push
// reduces every segment on one copy from all D copies and links it to its owner; the
// per-GPU time bound and the overlap threshold.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/strategy/switching.hpp>

#include <map>
#include <set>
#include <vector>

#include "../support/expect_error.hpp"
#include "helpers.hpp"

using namespace zeppelin;
using namespace strategy_test;

namespace {
double model_elements(const model_config& m) {
  double e = 0;
  for (const stage_slice& s : split_model(m, 1)) e += pipeline_memory_model{m, {}, {}}.parameters(s);
  return e;
}
}  // namespace

TEST_CASE("the pull brings each GPU its TP shard's segments from their owners", "[strategy]") {
  const model_config m = models::llama_7b();
  const strategy s{{{profile(1, 2, 8000, 0, 1, 0), 2}, {profile(4, 1, 32000, 0, 1, 0), 1}, {profile(2, 4, 16000, 0, 1, 0), 1}}, 0};
  const long long N = 16;
  REQUIRE(s.gpus() == 16);
  const switching_plan plan = make_switching_plan(s, N, m);
  REQUIRE(plan.pull_segments == 16);  // LCM(16, 4)
  REQUIRE(plan.copies == 4);
  REQUIRE(plan.push_segments == 16);  // LCM(16, 4 x 4)
  // every GPU: received segments + the ones it owns = exactly its TP shard
  std::map<int, std::set<std::int64_t>> got;
  for (const slice_transfer& t : plan.pull) {
    REQUIRE(t.src != t.dst);
    for (std::int64_t k = t.first_segment; k < t.first_segment + t.segments; ++k) {
      REQUIRE(k / (plan.pull_segments / N) == t.src);  // from the owner
      REQUIRE(got[t.dst].insert(k).second);             // once
    }
  }
  // pipelines_of order: <4,1> (MaxLen 32000) on GPUs 0-3, <2,4> on 4-11, two <1,2> on 12-15
  const auto shard_of = [&](int gpu) -> std::pair<std::int64_t, std::int64_t> {
    if (gpu < 4) return {gpu * 4, gpu * 4 + 4};
    if (gpu < 12) return {((gpu - 4) % 2) * 8, ((gpu - 4) % 2) * 8 + 8};
    return {0, 16};
  };
  for (int g = 0; g < 16; ++g) {
    const auto [lo, hi] = shard_of(g);
    std::set<std::int64_t> expected;
    for (std::int64_t k = lo; k < hi; ++k)
      if (k != g) expected.insert(k);  // segment g is its own
    INFO("gpu " << g);
    REQUIRE(got[g] == expected);
  }
}

TEST_CASE("with TP 1 the pull is an all-gather and the push moves D - 1 model copies to reducers", "[strategy]") {
  const model_config m = models::llama_550m();
  const long long N = 8;
  const strategy s{{{profile(1, 1, 8000, 0, 1, 0), 8}}, 0};
  const switching_plan plan = make_switching_plan(s, N, m);
  const double bytes = 2 * model_elements(m);
  double pull = 0, reduce = 0, link = 0;
  for (const auto& t : plan.pull) pull += t.bytes;
  for (const auto& t : plan.push_reduce) reduce += t.bytes;
  for (const auto& t : plan.push_link) link += t.bytes;
  REQUIRE(pull == Approx(N * bytes * (N - 1) / N));
  REQUIRE(reduce == Approx((plan.copies - 1) * bytes));
  REQUIRE(link <= bytes * (1 + 1e-9));
  // every (segment, reducer) gets exactly D - 1 contributions
  std::map<std::pair<std::int64_t, int>, int> contributions;
  for (const auto& t : plan.push_reduce) {
    REQUIRE(t.segments == 1);
    REQUIRE(t.first_segment % plan.copies == t.dst);  // copy k mod D; one GPU per copy here
    ++contributions[{t.first_segment, t.dst}];
  }
  for (const auto& [key, n] : contributions) REQUIRE(n == plan.copies - 1);

  const topology topo = clusters::hydraulis_a800_ib(1);
  const double t = switching_seconds(plan.pull, topo);
  REQUIRE(t == Approx(bytes * (N - 1) / N / topo.intra_node_link().bandwidth + topo.intra_node_link().latency));  // each GPU receives 7/8 of the model over NVLink
  REQUIRE(overlap_tokens({8, 1, 1}, topo.gpu(), 25e9) == Approx(8 * topo.gpu().peak_flops / 25e9));
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)make_switching_plan(s, 4, m); }).value("gpus") == 4);
}

TEST_CASE("switching_transfers_at_least never exceeds the transfers the plan lists", "[strategy]") {
  // Random strategies of <TP, PP, CP> pipelines on clusters with spare GPUs: the O(users)
  // count that lets make_step_program refuse a plan before building it is a lower bound,
  // and within a small factor of the truth (so that it refuses only what is large).
  const model_config m = models::llama_550m();
  random_generator rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    strategy s;
    const int kinds = static_cast<int>(rng.between(1, 3));
    for (int k = 0; k < kinds; ++k) {
      scheme_profile p = profile(1 << rng.between(0, 2), static_cast<int>(rng.between(1, 3)), 1000 * (k + 1), 0, 1, 0);
      p.scheme.cp = static_cast<int>(rng.between(1, 2));
      s.parts.push_back({p, static_cast<int>(rng.between(1, 3))});
    }
    const long long N = s.gpus() + rng.between(0, 5);
    INFO("trial " << trial << " gpus " << N);
    const std::vector<detail::switching_user> users = detail::switching_users(s, m);
    const switching_plan plan = make_switching_plan(users, N);
    const auto listed = static_cast<std::int64_t>(plan.pull.size() + plan.push_reduce.size() + plan.push_link.size());
    const std::int64_t bound = switching_transfers_at_least(users, N);
    REQUIRE(bound <= listed);
    REQUIRE(4 * bound >= listed);
  }
}
