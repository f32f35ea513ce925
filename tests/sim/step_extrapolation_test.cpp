// tests/sim/step_extrapolation_test.cpp
// Steps priced from two smaller runs and extrapolated (sim/step_extrapolation.hpp): over the
// members of groups that span every rank, within 1 % of the whole simulation for TE CP's ring
// and LLaMA-3's all-gather; over the documents of one micro-batch of many, within 2 %; each
// rank's parts adding up to the step, the full batch's tokens, pairs and lower bound; run_spec
// prices so what make_program refuses to build (one group of 2,048 ranks); plans neither axis
// covers.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/planner/methods.hpp>
#include <zeppelin/sim/step_extrapolation.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {

struct whole_and_extrapolated {
  sim_result whole;
  std::optional<sim_result> extrapolated;
};

// The whole simulation of `method` and its extrapolation under `limits` (which decide the
// axis: the members where they qualify, else the documents under limits.max_shard_pairs).
whole_and_extrapolated both(const char* method, const topology& t, const batch& b, const model_config& m, program_options limits = {}) {
  method_setup setup;
  setup.tokens_per_gpu = b.total_tokens() / t.num_ranks();
  const method_spec spec = method_by_name(method);
  const plan layout = partition_for(spec, b, t, method_capacity(setup), setup.metric, &m);
  const sim_cost_model cost = sim_cost_model::for_topology(t);
  whole_and_extrapolated out{simulate(layout, b, t, m, options_for(spec, setup), cost), std::nullopt};
  limits.wire = wire_format::for_model(m);
  out.extrapolated = extrapolate_step(layout, b, t, 1, m, limits, cost,
                                      [&](const batch& sample, const topology& cluster) { return run_spec(spec, sample, cluster, m, setup).result; });
  return out;
}

// Each rank's parts add up to the step, and the batch's own figures are the whole run's.
void check_consistent(const sim_result& x, const sim_result& whole, const batch& b) {
  CHECK(x.forward_s + x.backward_s + x.lm_head_s == Approx(x.step_time_s).epsilon(1e-9));
  CHECK(x.lower_bound_s == Approx(whole.lower_bound_s).epsilon(1e-12));
  CHECK(x.attention_pairs == whole.attention_pairs);
  CHECK(x.micro_batches == whole.micro_batches);
  CHECK(x.tokens_per_s * x.step_time_s == Approx(double(b.total_tokens())));
  REQUIRE(x.ranks.size() == whole.ranks.size());
  for (const rank_breakdown& rank : x.ranks) {
    CHECK(rank.total_s() == Approx(x.step_time_s).epsilon(1e-9));
    CHECK(rank.idle_s >= 0);
    CHECK(rank.attention_s > 0);
  }
}

}  // namespace

TEST_CASE("extrapolated over the members of a group of every rank: within 1 % of the whole simulation", "[sim][extrapolation]") {
  const topology t = clusters::cluster_c(12);  // 96 ranks: extrapolated from 32 and 64
  const model_config m = models::llama_7b();
  const batch b = sample_batch(datasets::github(), 96 * 1024, 3, {.max_length = 32768});
  for (const char* method : {"te_cp", "llama_cp"}) {
    INFO(method);
    const whole_and_extrapolated r = both(method, t, b, m);
    REQUIRE(r.extrapolated);
    const sim_result& x = *r.extrapolated;
    CHECK(x.extrapolated == step_extrapolation{extrapolation_axis::members, {32, 64}});
    CHECK(r.whole.extrapolated.axis == extrapolation_axis::none);
    CHECK(x.step_time_s == Approx(r.whole.step_time_s).epsilon(0.01));
    CHECK(x.cross_node_bytes == Approx(r.whole.cross_node_bytes).epsilon(0.02));
    check_consistent(x, r.whole, b);
  }
}

TEST_CASE("run_spec prices a group too large to build by extrapolation, and says so", "[sim][extrapolation]") {
  // One ring of 2,048 ranks runs 2,048^2 position-rounds, over program_options'
  // max_member_rounds (2^20): make_program refuses it, run_spec extrapolates
  const topology t = clusters::cluster_c(256);
  const model_config m = models::llama_7b();
  const batch b = sample_batch(datasets::github(), 2048 * 256, 5, {.max_length = 16384});
  method_setup setup;
  setup.tokens_per_gpu = 256;
  for (const char* method : {"te_cp", "llama_cp"}) {
    INFO(method);
    const method_run run = run_method(method, b, t, m, setup);
    CHECK(run.result.extrapolated == step_extrapolation{extrapolation_axis::members, {32, 64}});
    CHECK(run.result.step_time_s > 0);
    CHECK(run.result.ranks.size() == 2048);
    CHECK(run.layout.num_ranks() == 2048);
    CHECK(run.result.efficiency > 0);
    CHECK(run.result.efficiency <= 1);
  }
}

TEST_CASE("extrapolated over the documents of one micro-batch: within 2 % of the whole simulation", "[sim][extrapolation]") {
  // TE CP's zigzag of 600 short documents over 32 ranks, the limit at the plan's shard pairs:
  // one document in eight holds an eighth of them, so the runs take one in sixteen and one
  // in eight
  const topology t = clusters::cluster_c(4);  // no room for smaller runs over members
  const model_config m = models::llama_7b();
  std::vector<token_count> lengths;
  for (int d = 0; d < 600; ++d) lengths.push_back(256 + 64 * (d % 5));
  const batch b(lengths);
  for (const char* method : {"te_cp", "llama_cp"}) {
    INFO(method);
    const method_spec spec = method_by_name(method);
    method_setup setup;
    setup.tokens_per_gpu = b.total_tokens() / t.num_ranks();
    const plan layout = partition_for(spec, b, t, method_capacity(setup), setup.metric, &m);
    program_options limits;
    limits.max_shard_pairs = detail::shard_pairs_of(layout);
    const whole_and_extrapolated r = both(method, t, b, m, limits);
    REQUIRE(r.extrapolated);
    const sim_result& x = *r.extrapolated;
    CHECK(x.extrapolated == step_extrapolation{extrapolation_axis::documents, {38, 75}});
    CHECK(x.step_time_s == Approx(r.whole.step_time_s).epsilon(0.02));
    CHECK(x.cross_node_bytes == Approx(r.whole.cross_node_bytes).epsilon(0.02));
    check_consistent(x, r.whole, b);
  }
}

TEST_CASE("extrapolation covers plans whose groups span every rank, on clusters with room for two smaller runs",
          "[sim][extrapolation]") {
  const model_config m = models::llama_7b();
  const wire_format wire = wire_format::for_model(m);
  const batch b({4096, 2048, 1024, 512});
  method_setup setup;
  setup.tokens_per_gpu = 128;
  const auto layout_of = [&](const char* method, const topology& t) {
    return partition_for(method_by_name(method), b, t, method_capacity(setup), setup.metric, &m);
  };
  // 12 nodes of 8: 32 and 64 ranks
  CHECK(extrapolation_nodes(layout_of("te_cp", clusters::cluster_c(12)), clusters::cluster_c(12), 1, wire) == std::pair{4, 8});
  // 8 nodes: a run of 64 ranks would be the cluster itself
  CHECK_FALSE(extrapolation_nodes(layout_of("te_cp", clusters::cluster_c(8)), clusters::cluster_c(8), 1, wire));
  // Ulysses (32 heads): its ring of subgroups needs 2 at K1, so 64 and 128 ranks
  CHECK(extrapolation_nodes(layout_of("ulysses", clusters::cluster_c(24)), clusters::cluster_c(24), 1, wire) == std::pair{8, 16});
  // Hybrid DP's groups do not span every rank
  const plan hybrid = layout_of("hybrid_dp", clusters::cluster_c(12));
  REQUIRE(!hybrid.groups.empty());
  CHECK(hybrid.groups.front().ranks.size() < 96);
  CHECK_FALSE(extrapolation_nodes(hybrid, clusters::cluster_c(12), 1, wire));
}
