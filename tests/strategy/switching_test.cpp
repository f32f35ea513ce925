// tests/strategy/switching_test.cpp
// Hydraulis' switching (strategy/switching.hpp): the pull brings every GPU exactly the
// segments of its TP shard, each from its owner; with TP 1 it is an all-gather; the push
// reduces every segment on one copy from all D copies and links it to its owner; the
// per-GPU time bound and the overlap threshold; each GPU's traffic counted without the list
// (strategy/switching_traffic.hpp).
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/strategy/switching.hpp>
#include <zeppelin/strategy/switching_traffic.hpp>

#include <cstdint>
#include <map>
#include <set>
#include <span>
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

namespace {
// One to three kinds of <TP 1-4, PP 1-3, CP 1-2> pipelines, one to three of each.
strategy random_strategy(random_generator& rng) {
  strategy s;
  const int kinds = static_cast<int>(rng.between(1, 3));
  for (int k = 0; k < kinds; ++k) {
    scheme_profile p = profile(1 << rng.between(0, 2), static_cast<int>(rng.between(1, 3)), 1000 * (k + 1), 0, 1, 0);
    p.scheme.cp = static_cast<int>(rng.between(1, 2));
    s.parts.push_back({p, static_cast<int>(rng.between(1, 3))});
  }
  return s;
}
}  // namespace

TEST_CASE("switching_transfers_at_least never exceeds the transfers the plan lists", "[strategy]") {
  // Random strategies of <TP, PP, CP> pipelines on clusters with spare GPUs: the O(users)
  // count that lets make_step_program refuse a plan before building it is a lower bound,
  // and within a small factor of the truth (so that it refuses only what is large).
  const model_config m = models::llama_550m();
  random_generator rng(17);
  for (int trial = 0; trial < 60; ++trial) {
    const strategy s = random_strategy(rng);
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

TEST_CASE("switching traffic: each GPU's bytes per link class, as the listed transfers sum them, without the list",
          "[strategy]") {
  // Random heterogeneous strategies (TP 1-4, PP 1-3, CP 1-2, spare GPUs) on nodes of four
  // GPUs: switching_traffic_of's counts equal make_switching_plan's transfers summed per end
  // and link class, in each of the three exchanges.
  const model_config m = models::llama_550m();
  random_generator rng(29);
  for (int trial = 0; trial < 60; ++trial) {
    const strategy s = random_strategy(rng);
    const int nodes = static_cast<int>((s.gpus() + rng.between(0, 5) + 3) / 4);
    const topology t({"four-per-node", nodes, 4, 2, {0, 0, 1, 1}, links::nvlink_a800(), links::nic_400g(), gpus::a800_80g()});
    INFO("trial " << trial << " gpus " << t.num_ranks());
    const std::vector<detail::switching_user> users = detail::switching_users(s, m);
    const switching_traffic traffic = switching_traffic_of(users, t, 2.0, 4.0);
    const switching_plan pulled = make_switching_plan(users, t.num_ranks(), 2.0), pushed = make_switching_plan(users, t.num_ranks(), 4.0);
    const auto summed = [&](const std::vector<slice_transfer>& transfers) {
      std::vector<rank_traffic> out(static_cast<std::size_t>(t.num_ranks()));
      for (const slice_transfer& x : transfers) {
        const bool intra = t.node_of(x.src) == t.node_of(x.dst);
        (intra ? out[static_cast<std::size_t>(x.src)].sent_intra : out[static_cast<std::size_t>(x.src)].sent_inter) += x.bytes;
        (intra ? out[static_cast<std::size_t>(x.dst)].received_intra : out[static_cast<std::size_t>(x.dst)].received_inter) += x.bytes;
      }
      return out;
    };
    const std::vector<rank_traffic> expected[3] = {summed(pulled.pull), summed(pushed.push_reduce), summed(pushed.push_link)};
    const std::vector<rank_traffic>* got[3] = {&traffic.pull, &traffic.push_reduce, &traffic.push_link};
    for (int x = 0; x < 3; ++x)
      for (std::size_t g = 0; g < expected[x].size(); ++g) {
        const rank_traffic &e = expected[x][g], &c = (*got[x])[g];
        INFO("exchange " << x << " gpu " << g);
        CHECK(c.sent_intra == Approx(e.sent_intra).epsilon(1e-9).margin(1e-6));
        CHECK(c.received_intra == Approx(e.received_intra).epsilon(1e-9).margin(1e-6));
        CHECK(c.sent_inter == Approx(e.sent_inter).epsilon(1e-9).margin(1e-6));
        CHECK(c.received_inter == Approx(e.received_inter).epsilon(1e-9).margin(1e-6));
      }
    // and so the same busiest port as the transfers
    std::vector<link_flow> flows;
    for (const slice_transfer& x : pulled.pull) flows.push_back({x.src, x.dst, x.bytes});
    CHECK(busiest_port_seconds(std::span<const rank_traffic>(traffic.pull), t) == Approx(busiest_port_seconds(flows, t)).epsilon(1e-9));
  }
  CHECK_THROWS_AS(switching_traffic_of({}, clusters::hydraulis_a800_ib(1), 2, 4), invalid_argument);
  strategy single;
  single.parts.push_back({profile(1, 1, 1000, 0, 1, 0), 1});
  const std::vector<detail::switching_user> one = detail::switching_users(single, m);
  CHECK_THROWS_AS(switching_traffic_of(one, clusters::hydraulis_a800_ib(1), 0, 4), invalid_argument);
}

TEST_CASE("count_congruent counts the k = c mod d in a half-open range", "[strategy]") {
  for (std::int64_t d = 1; d <= 5; ++d)
    for (std::int64_t c = 0; c < d; ++c)
      for (std::int64_t a = 0; a <= 12; ++a)
        for (std::int64_t b = 0; b <= 12; ++b) {
          std::int64_t brute = 0;
          for (std::int64_t k = a; k < b; ++k) brute += k % d == c ? 1 : 0;
          REQUIRE(detail::count_congruent(a, b, c, d) == brute);
        }
}
