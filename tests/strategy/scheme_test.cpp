// tests/strategy/scheme_test.cpp
// Parallel schemes and their cost models (strategy/parallel_scheme.hpp,
// strategy/scheme_profile.hpp): the scheme space against a brute-force enumeration, MaxLen
// tight against the memory model and against the 1F1B peak the step simulator computes,
// MaxLen monotone in TP and PP, the latency fit close to the stage model, UtilLen at its
// threshold, and clear errors.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/sim/step_memory.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/strategy.hpp>

#include <algorithm>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;
using zeppelin_test::expect_invalid;

TEST_CASE("enumerate_schemes lists every valid <TP, PP, CP>, sorted", "[strategy]") {
  for (const model_config& m : {models::llama_7b(), models::llama_13b(), models::llama_550m()}) {
    for (const long long gpus : {1LL, 8LL, 24LL, 64LL}) {
      const std::vector<parallel_scheme> got = enumerate_schemes(m, gpus, 8, {.tp = {1, 2, 4, 8, 16}, .cp = {1, 2}});
      std::vector<parallel_scheme> expected;
      for (int tp = 1; tp <= 8; tp *= 2)
        for (int pp = 1; pp <= m.layers; ++pp)
          for (int cp = 1; cp <= 2; ++cp)
            if (m.heads % tp == 0 && m.layers % pp == 0 && static_cast<long long>(tp) * pp * cp <= gpus) expected.push_back({tp, pp, cp});
      std::sort(expected.begin(), expected.end());
      INFO(m.name << " on " << gpus << " GPUs");
      REQUIRE(got == expected);
    }
  }
  // 60 layers (LLaMA-2 32B's depth): PP in the divisors of 60, TP up to the node
  model_config deep = models::llama_7b();
  deep.layers = 60;
  const auto schemes = enumerate_schemes(deep, 64, 8);
  REQUIRE(std::count_if(schemes.begin(), schemes.end(), [](const parallel_scheme& s) { return s.tp == 8; }) == 6);  // pp 1,2,3,4,5,6
  REQUIRE(expect_invalid([] { (void)enumerate_schemes(models::llama_7b(), 0, 8); }).value("gpus") == 0);
  REQUIRE(expect_invalid([] { (void)enumerate_schemes(models::llama_7b(), 8, 8, {.tp = {0}}); }).value("tp") == 0);
}

TEST_CASE("MaxLen is the longest micro-batch whose 1F1B peak fits, on every stage", "[strategy]") {
  const model_config m = models::llama_13b();
  const long long N = 64;
  const double usable = 80e9 - 8.0 * (1ull << 30);
  for (const parallel_scheme& s : enumerate_schemes(m, N, 8)) {
    const pipeline_memory_model memory = scheme_memory_model(s, m, N, scheme_profile_options{}.memory);
    const token_count max_len = max_len_of(memory, usable);
    INFO("tp " << s.tp << " pp " << s.pp);
    if (max_len == 0) continue;
    // the step simulator's own peak (sim/step_memory.hpp) for PP micro-batches of MaxLen (and
    // MaxLen + 1) tokens under 1F1B, the replica's states sharded over the N GPUs (switching)
    const topology cluster = clusters::hydraulis_a800_ib(static_cast<int>(N / 8));
    const auto peak_of = [&](token_count l) {
      std::vector<std::vector<step_piece>> pieces(static_cast<std::size_t>(s.pp));
      for (std::size_t k = 0; k < pieces.size(); ++k) pieces[k] = {{static_cast<std::int64_t>(k), 0, l}};
      std::vector<rank_index> ranks(static_cast<std::size_t>(s.tp * s.pp));
      for (std::size_t i = 0; i < ranks.size(); ++i) ranks[i] = static_cast<rank_index>(i);
      step_plan p{cluster.nodes(), cluster.gpus_per_node(), std::vector<token_count>(pieces.size(), l), {}, gradient_sync::switching};
      p.replicas.push_back(make_replica(cluster, m, s.tp, 1, s.pp, std::move(ranks), tp_collectives::sequence_parallel,
                                        make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b), std::move(pieces),
                                        partitioner_by_name("hierarchical", {.capacity = l}), no_recompute{}));
      double top = 0;
      for (const rank_memory_peak& x : step_memory_peaks(make_step_program(p, cluster, m), scheme_profile_options{}.memory))
        top = std::max(top, x.peak_bytes);
      return top;
    };
    REQUIRE(peak_of(max_len) <= usable);
    REQUIRE(peak_of(max_len + 1) > usable);
    // the peak is linear in the micro-batch's length (App. C.1: no term in l^2)
    const double step = peak_of(2000) - peak_of(1000);
    REQUIRE(step > 0);
    REQUIRE(peak_of(3000) - peak_of(2000) == Approx(step).epsilon(1e-9));
    if (max_len > 2000) REQUIRE(peak_of(max_len) - peak_of(max_len - 1000) == Approx(step).epsilon(1e-9));
  }
  // more TP or more PP never holds less (PP dividing the 40 layers: an uneven split gives the
  // first stage more layers and more micro-batches in flight)
  for (const int pp : {1, 2, 4})
    for (const int tp : {1, 2, 4}) {
      const auto len = [&](int t, int p) { return max_len_of(scheme_memory_model({t, p, 1}, m, N, {}), usable); };
      REQUIRE(len(2 * tp, pp) >= len(tp, pp));
      REQUIRE(len(tp, 2 * pp) >= len(tp, pp));
    }
  REQUIRE(expect_invalid([&] { (void)scheme_memory_model({8, 8, 1}, m, 32, {}); }).value("cluster_gpus") == 32);
}

TEST_CASE("scheme profiles: the latency fit follows the stage model and UtilLen sits at its threshold", "[strategy]") {
  const model_config m = models::llama_7b();
  const auto schemes = enumerate_schemes(m, 16, 8, {.tp = {1, 2, 4}, .cp = {1, 2}});  // tp x cp within a node
  const std::vector<scheme_profile> profiles = profile_schemes(schemes, m, gpus::a800_80g(), 16);
  REQUIRE(!profiles.empty());
  for (const scheme_profile& p : profiles) {
    INFO("tp " << p.scheme.tp << " pp " << p.scheme.pp);
    REQUIRE(p.max_len >= 1);
    REQUIRE(p.latency.a >= 0);
    REQUIRE(p.latency.c >= 0);
    const analytic_stage_time t = analytic_stage_time::for_gpu(m, gpus::a800_80g(), p.scheme.tp, p.scheme.cp);
    for (const token_count l : {token_count{4096}, p.max_len}) {
      double slowest = 0;
      for (const stage_slice& s : split_model(m, p.scheme.pp)) {
        const stage_times st = t.times(micro_batch{{l}, {}}, s);
        slowest = std::max(slowest, st.forward + st.backward + tp_collective_seconds(p.scheme, m, s.layers, l, {200e9, 3e-6}) +
                                        cp_collective_seconds(p.scheme, m, s.layers, l, {200e9, 3e-6}));
      }
      REQUIRE(p.latency.at(double(l)) == Approx(slowest).epsilon(0.1));
    }
  }
  // UtilLen: the constant is at most 15% of a micro-batch's time there, more just below
  const quadratic_profile t{1e-9, 1e-5, 0.05};
  const token_count u = util_len_of(t, 1 << 20, 0.85);
  REQUIRE(t.c / t.at(double(u)) <= 0.15);
  REQUIRE(t.c / t.at(double(u - 1)) > 0.15);
  REQUIRE(util_len_of({1e-9, 1e-5, 0}, 1 << 20, 0.85) == 1);
  REQUIRE(util_len_of(t, 100, 0.85) == 100);
  REQUIRE(expect_invalid([&] { (void)util_len_of(t, 100, 1.0); }).value("util_efficiency") == 1.0);
  // TP collectives: 8 per layer of (tp - 1) / tp x l x H x 2 bytes, plus the ring latency
  REQUIRE(tp_collective_seconds({1, 1, 1}, m, 32, 4096, {100e9, 1e-6}) == 0);
  // CP collectives: 2 per layer of (cp - 1) / cp x l x 2 kv_width / tp x 2 bytes, plus the ring latency
  REQUIRE(cp_collective_seconds({2, 1, 1}, m, 32, 4096, {100e9, 1e-6}) == 0);
  REQUIRE(cp_collective_seconds({2, 1, 4}, m, 32, 4096, {100e9, 0}) ==
          Approx(32 * 2 * 0.75 * 4096 * 2 * 4096 / 2 * 2 / 100e9));
  REQUIRE(tp_collective_seconds({4, 1, 1}, m, 32, 4096, {100e9, 0}) == Approx(32 * 8 * 0.75 * 4096 * 4096 * 2 / 100e9));
  REQUIRE(expect_invalid([&] { (void)profile_schemes(schemes, m, gpus::a800_80g(), 16, {.tp_link = {0, 0}}); }).value("bandwidth") == 0);
  REQUIRE(expect_invalid([&] { (void)profile_schemes(schemes, m, gpus::a800_80g(), 16, {.margin_bytes = -1}); }).value("margin_bytes") == -1);
}
