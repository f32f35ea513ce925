// tests/pack/infinipipe_methods_test.cpp
// InfiniPipe's methods as step plans (pack/infinipipe_methods.hpp): each method's plans are
// the planner and conversion its table names (equal plans), its seconds are the sum of
// simulate_step over them (to the bit), the context defaults to the longest sequence, the
// packing baselines' plans hold no slices, a method that cannot fit gives no plans and
// +infinity, bad settings name the value. documents_of (pack/sequence_step_plan.hpp)
// renumbers pieces in order of first appearance.
#include <catch2/catch.hpp>
#include "../support/sim_fixtures.hpp"
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/pack/infinipipe_methods.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;
using namespace zeppelin_test;

namespace {


// The sum of simulate_step over `parts`, each program built and simulated on its own.
double summed(const std::vector<sequence_step_plan>& parts, const topology& topo, const model_config& model) {
  double total = 0;
  for (const sequence_step_plan& p : parts)
    total += simulate_step(make_step_program(p.plan, topo, model, step_options_of(model)), topo, sim_cost_model::for_topology(topo),
                           back_to_back_sim_options())
                 .iteration_s;
  return total;
}

}  // namespace

TEST_CASE("InfiniPipe methods: each is its plan's step plans, its seconds their simulated sum", "[pack][infinipipe][step]") {
  random_generator g(61);
  const model_config model = gpt_7b_layers(4);
  const topology topo = clusters::infinipipe_a800_ib(2);  // 16 GPUs: SP 8 x PP 2
  for (int trial = 0; trial < 3; ++trial) {
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(3, 10)));
    for (auto& l : lengths) l = g.below(5) == 0 ? g.between(12000, 30000) : g.between(64, 6000);
    const infinipipe_setting s{.sp_degree = 8, .pp_degree = 2, .usable_bytes = 30.0 * (1ull << 30), .fixed_chunk_tokens = 4096,
                               .context = trial % 2 == 0 ? 0 : 40000, .max_slices = 3};
    const token_count context = s.context > 0 ? s.context : *std::max_element(lengths.begin(), lengths.end());
    CAPTURE(trial, lengths.size(), context);
    elastic_pipeline_options o = elastic_pipeline_options::for_model(model, topo, 8, 2, s.usable_bytes);
    const elastic_pipeline_options everywhere = elastic_pipeline_options::for_model(model, topo, 16, 1, s.usable_bytes);
    const auto plans = [&](infinipipe_method m) {
      const std::optional<std::vector<sequence_step_plan>> p = infinipipe_method_plans(m, lengths, model, topo, s);
      REQUIRE(p.has_value());
      return *p;
    };
    const std::vector<sequence_step_plan> seq1f1b = plans(infinipipe_method::seq1f1b_like);
    REQUIRE(seq1f1b == elastic_step_plans(fixed_chunk_plan(lengths, o, 4096), lengths, model, o, topo));
    const std::vector<sequence_step_plan> megatron = plans(infinipipe_method::megatron_like);
    REQUIRE(megatron == elastic_step_plans(fixed_chunk_plan(lengths, o, context), lengths, model, o, topo));
    const std::vector<sequence_step_plan> deepspeed = plans(infinipipe_method::deepspeed_like);
    REQUIRE(deepspeed == elastic_step_plans(fixed_chunk_plan(lengths, everywhere, context), lengths, model, everywhere, topo));
    REQUIRE((deepspeed.front().plan.replicas.front().cp == 16 && deepspeed.front().plan.replicas.front().pp == 1));
    const std::vector<sequence_step_plan> flexsp = plans(infinipipe_method::flexsp_like);
    REQUIRE(flexsp == flexsp_step_plans(assign_flexsp_groups(lengths, model, topo, s.usable_bytes), lengths, model, topo));
    o.processor.max_slices = 3;
    const std::vector<sequence_step_plan> ours = plans(infinipipe_method::infinipipe);
    REQUIRE(ours == elastic_step_plans(plan_elastic_pipeline(lengths, o), lengths, model, o, topo));
    // packing: every piece a whole sequence
    for (const auto* parts : {&megatron, &deepspeed})
      for (const sequence_step_plan& p : *parts)
        for (const step_micro_batch& mb : p.plan.replicas.front().micro_batches)
          for (const step_piece& x : mb.pieces) REQUIRE((x.begin == 0 && x.end == p.plan.documents[static_cast<std::size_t>(x.document)]));
    // the seconds: the sum of simulate_step over the plans
    const std::pair<infinipipe_method, const std::vector<sequence_step_plan>*> all[] = {
        {infinipipe_method::infinipipe, &ours},         {infinipipe_method::seq1f1b_like, &seq1f1b}, {infinipipe_method::megatron_like, &megatron},
        {infinipipe_method::deepspeed_like, &deepspeed}, {infinipipe_method::flexsp_like, &flexsp}};
    for (const auto& [m, parts] : all) {
      CAPTURE(to_string(m));
      const double seconds = simulate_infinipipe_method(m, lengths, model, topo, s);
      REQUIRE(seconds > 0);
      REQUIRE(seconds == summed(*parts, topo, model));
    }
  }
  // names, in the order a comparison prints them
  REQUIRE(to_string(infinipipe_methods.front()) == "infinipipe");
  REQUIRE(to_string(infinipipe_method::flexsp_like) == "flexsp_like");
}

TEST_CASE("InfiniPipe methods: what cannot fit is +infinity, bad settings are named", "[pack][infinipipe]") {
  const model_config model = models::gpt_30b();
  const topology topo = clusters::infinipipe_a800_ib(4);
  const std::vector<token_count> lengths{200000, 3000, 500};
  const infinipipe_setting tight{.usable_bytes = 12.0 * (1ull << 30)};
  REQUIRE(!infinipipe_method_plans(infinipipe_method::infinipipe, lengths, model, topo, tight).has_value());
  REQUIRE(std::isinf(simulate_infinipipe_method(infinipipe_method::infinipipe, lengths, model, topo, tight)));
  REQUIRE(!infinipipe_method_plans(infinipipe_method::megatron_like, lengths, model, topo, tight).has_value());
  REQUIRE(std::isinf(simulate_infinipipe_method(infinipipe_method::megatron_like, lengths, model, topo, tight)));
  REQUIRE(std::isinf(simulate_infinipipe_method(infinipipe_method::seq1f1b_like, lengths, model, topo, tight)));
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_infinipipe_method(infinipipe_method::seq1f1b_like, lengths, model, topo, {.fixed_chunk_tokens = 0});
          }).value("fixed_chunk_tokens") == 0);
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_infinipipe_method(infinipipe_method::megatron_like, lengths, model, topo, {.context = -1});
          }).value("context") == -1);
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_infinipipe_method(infinipipe_method::infinipipe, lengths, model, clusters::infinipipe_a800_ib(1), {});
          }).value("gpus") == 8);
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_infinipipe_method(infinipipe_method::flexsp_like, lengths, model, topo, {.usable_bytes = 0});
          }).value("usable_bytes") == 0);
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)infinipipe_method_plans(infinipipe_method::infinipipe, lengths, model, topo, {.sp_degree = 0});
          }).value("sp_degree") == 0);
  zeppelin_test::expect_invalid([&] { (void)simulate_infinipipe_method(infinipipe_method::infinipipe, {}, model, topo, {}); });
}

TEST_CASE("documents_of renumbers pieces by first appearance", "[pack][infinipipe]") {
  const std::vector<token_count> lengths{100, 200, 300, 400};
  std::vector<std::vector<step_piece>> mbs{{{2, 0, 150}, {0, 0, 100}}, {{2, 150, 300}, {3, 0, 400}}};
  std::vector<std::int64_t> sequences;
  const std::vector<token_count> documents = documents_of(mbs, lengths, sequences);
  REQUIRE(sequences == std::vector<std::int64_t>{2, 0, 3});
  REQUIRE(documents == std::vector<token_count>{300, 100, 400});
  REQUIRE(mbs[0] == std::vector<step_piece>{{0, 0, 150}, {1, 0, 100}});
  REQUIRE(mbs[1] == std::vector<step_piece>{{0, 150, 300}, {2, 0, 400}});
  std::vector<std::vector<step_piece>> bad{{{4, 0, 10}}};
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)documents_of(bad, lengths, sequences); }).value("sequence") == 4);
}
