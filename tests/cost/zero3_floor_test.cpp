// tests/cost/zero3_floor_test.cpp
// ZeRO-3 in InfiniPipe's chunk cost model (cost/chunk_cost.hpp): the ring time of a
// layer's parameters over a stage's d_s GPUs (NVLink inside a node, the node's NICs across
// nodes), the backward's floor twice the forward's, and T_tot never below L / d_p floors
// while equal to Eq. 4 above them.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/chunk_cost.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../support/expect_error.hpp"

using namespace zeppelin;

namespace {
double layer_parameter_bytes(const model_config& m) {
  return pipeline_memory_model{m, parallel_layout{}, memory_settings{}}.parameters(stage_slice{1, false, false}) * 2;
}
}  // namespace

TEST_CASE("ZeRO-3 layer floor: a layer's parameters around the stage's ring", "[cost][chunk_cost][zero3]") {
  const model_config gpt = models::gpt_13b();
  const topology four = clusters::infinipipe_a800_ib(4);  // 8 GPUs a node, one 400 Gb/s NIC
  // inside a node: NVLink, 7/8 of the layer through every GPU's edge
  const chunk_cost_model stage = chunk_cost_model::for_model(gpt, four, 8, 4);
  REQUIRE(stage.forward.layer_floor == Approx(layer_parameter_bytes(gpt) * 7 / 8 / links::nvlink_a800().bandwidth).epsilon(1e-12));
  REQUIRE(stage.backward.layer_floor == Approx(2 * stage.forward.layer_floor).epsilon(1e-12));
  // across the four nodes: the one NIC of a node is the slower path
  const chunk_cost_model cluster = chunk_cost_model::for_model(gpt, four, 32, 1);
  REQUIRE(cluster.forward.layer_floor == Approx(layer_parameter_bytes(gpt) * 31 / 32 / links::nic_400g().bandwidth).epsilon(1e-12));
  // a node with eight NICs: eight channels, NVLink the slower path again
  const topology rails = clusters::cluster_c(4);
  REQUIRE(zero3_ring_seconds_per_byte(rails, 32) ==
          Approx(31.0 / 32 * std::max(1 / rails.intra_node_link().bandwidth, 1 / (rails.nics_per_node() * rails.nic_link().bandwidth))));
  // no group, no traffic
  REQUIRE(chunk_cost_model::for_model(gpt, four, 1, 4).forward.layer_floor == 0);
  REQUIRE(zero3_ring_seconds_per_byte(four, 1) == 0);
}

TEST_CASE("ZeRO-3 layer floor: T_tot is Eq. 4 above the floor and the floor below it", "[cost][chunk_cost][zero3]") {
  const model_config gpt = models::gpt_7b();
  const chunk_cost_model m = chunk_cost_model::for_model(gpt, clusters::infinipipe_a800_ib(4), 8, 4);
  random_generator g(47);
  int floored = 0, above = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const token_count begin = g.below(2) == 0 ? 0 : g.between(1, 60000);
    const token_count end = begin + g.between(1, 40000);
    const chunk c{begin, {{0, begin, end}}};
    for (const chunk_compute_coefficients* pass : {&m.forward, &m.backward}) {
      const double eq4 = m.compute_seconds(*pass, c) + m.all_to_all_seconds(c);
      const double floor = pass->layer_floor * gpt.layers / m.d_p;
      REQUIRE(m.busy_seconds(*pass, c) == eq4);
      REQUIRE(m.seconds(*pass, c) == std::max(eq4, floor));
      (eq4 < floor ? floored : above) += 1;
    }
  }
  // both regimes occur: a few hundred tokens cannot hide a 7B layer's gather, a long chunk can
  REQUIRE(floored > 0);
  REQUIRE(above > 0);
  REQUIRE(m.seconds(m.forward, chunk{0, {{0, 0, 64}}}) == Approx(m.forward.layer_floor * gpt.layers / 4).epsilon(1e-12));
}

TEST_CASE("ZeRO-3 layer floor: errors name the value", "[cost][chunk_cost][zero3]") {
  const topology four = clusters::infinipipe_a800_ib(4);
  const auto e = zeppelin_test::expect_invalid([&] { (void)zero3_ring_seconds_per_byte(four, 12); });
  REQUIRE(e.value("group") == 12);
  REQUIRE(e.value("gpus_per_node") == 8);
  chunk_cost_model m;
  m.backward.layer_floor = std::numeric_limits<double>::quiet_NaN();
  REQUIRE(std::isnan(*zeppelin_test::expect_invalid([&] { validate(m); }).value("layer_floor")));
  m.backward.layer_floor = -1;
  REQUIRE(zeppelin_test::expect_invalid([&] { validate(m); }).value("layer_floor") == -1);
}
