// tests/sim/infinipipe_methods_test.cpp
// InfiniPipe's methods on the 4D simulator (sim/infinipipe_methods.hpp): each method is the
// plan and simulator call its table names (same seconds to the bit), the context defaults to
// the longest sequence, a method that cannot fit gives +infinity, bad settings name the value.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/sim/infinipipe_methods.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

TEST_CASE("InfiniPipe methods: each is its plan on the simulator", "[sim][infinipipe]") {
  random_generator g(61);
  const model_config model = models::gpt_7b();
  const topology topo = clusters::infinipipe_a800_ib(2);  // 16 GPUs: SP 8 x PP 2
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<token_count> lengths(static_cast<std::size_t>(g.between(4, 30)));
    for (auto& l : lengths) l = g.below(6) == 0 ? g.between(20000, 90000) : g.between(64, 8192);
    const infinipipe_setting s{.sp_degree = 8, .pp_degree = 2, .usable_bytes = 60.0 * (1ull << 30), .fixed_chunk_tokens = 8192,
                               .context = trial % 2 == 0 ? 0 : 65536, .max_slices = 3};
    const token_count context = s.context > 0 ? s.context : *std::max_element(lengths.begin(), lengths.end());
    CAPTURE(trial, lengths.size(), context);
    elastic_pipeline_options o = elastic_pipeline_options::for_model(model, topo, 8, 2, s.usable_bytes);
    const elastic_pipeline_options everywhere = elastic_pipeline_options::for_model(model, topo, 16, 1, s.usable_bytes);
    const auto method = [&](infinipipe_method m) { return simulate_infinipipe_method(m, lengths, model, topo, s); };
    REQUIRE(method(infinipipe_method::seq1f1b_like) == simulate_elastic_step(fixed_chunk_plan(lengths, o, 8192), model, o, topo).iteration_s);
    REQUIRE(method(infinipipe_method::megatron_like) == simulate_elastic_step(fixed_chunk_plan(lengths, o, context), model, o, topo).iteration_s);
    REQUIRE(method(infinipipe_method::deepspeed_like) ==
            simulate_elastic_step(fixed_chunk_plan(lengths, everywhere, context), model, everywhere, topo).iteration_s);
    REQUIRE(method(infinipipe_method::flexsp_like) == simulate_flexsp_step(lengths, model, topo, s.usable_bytes).iteration_s);
    o.processor.max_slices = 3;
    REQUIRE(method(infinipipe_method::infinipipe) == simulate_elastic_step(plan_elastic_pipeline(lengths, o), model, o, topo).iteration_s);
  }
  // names, in the order a comparison prints them
  REQUIRE(to_string(infinipipe_methods.front()) == "infinipipe");
  REQUIRE(to_string(infinipipe_method::flexsp_like) == "flexsp_like");
}

TEST_CASE("InfiniPipe methods: what cannot fit is +infinity, bad settings are named", "[sim][infinipipe]") {
  const model_config model = models::gpt_30b();
  const topology topo = clusters::infinipipe_a800_ib(4);
  const std::vector<token_count> lengths{200000, 3000, 500};
  const infinipipe_setting tight{.usable_bytes = 12.0 * (1ull << 30)};
  REQUIRE(std::isinf(simulate_infinipipe_method(infinipipe_method::infinipipe, lengths, model, topo, tight)));
  REQUIRE(std::isinf(simulate_infinipipe_method(infinipipe_method::megatron_like, lengths, model, topo, tight)));
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_infinipipe_method(infinipipe_method::seq1f1b_like, lengths, model, topo, {.fixed_chunk_tokens = 0});
          }).value("fixed_chunk_tokens") == 0);
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_infinipipe_method(infinipipe_method::infinipipe, lengths, model, clusters::infinipipe_a800_ib(1), {});
          }).value("gpus") == 8);
  REQUIRE(zeppelin_test::expect_invalid([&] {
            (void)simulate_infinipipe_method(infinipipe_method::flexsp_like, lengths, model, topo, {.usable_bytes = 0});
          }).value("usable_bytes") == 0);
  zeppelin_test::expect_invalid([&] { (void)simulate_infinipipe_method(infinipipe_method::infinipipe, {}, model, topo, {}); });
}
