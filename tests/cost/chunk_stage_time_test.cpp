// tests/cost/chunk_stage_time_test.cpp
// chunk_stage_time (cost/chunk_stage_time.hpp) prices a chunk's micro_batch as Eq. 4 prices
// the chunk (without the ZeRO-3 floor, which the simulator runs as flows), context included,
// on seeded random chunks; micro_batch_of_chunk shares tokens
// and pairs evenly over the Ulysses ranks; a whole sequence without shares costs the same.
#include <catch2/catch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/chunk_stage_time.hpp>

#include "../support/expect_error.hpp"

using namespace zeppelin;

TEST_CASE("chunk_stage_time prices a chunk as Eq. 4 does", "[cost][infinipipe]") {
  random_generator g(5);
  int floored = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int ds = 1 << g.below(4), dp = 4;  // 1, 2, 4 or 8 GPUs of a node
    chunk_cost_model cost = chunk_cost_model::for_model(models::gpt_13b(), clusters::infinipipe_a800_ib(4), ds, dp);
    cost.forward.b1 = g.below(2) == 0 ? 0.0 : 0.01;
    chunk c;
    const token_count context = g.below(2) == 0 ? 0 : g.between(1, 50000);
    c.context = context;
    c.slices.push_back({0, context, context + g.between(1, 20000)});
    for (int i = 1, n = static_cast<int>(g.between(0, 3)); i <= n; ++i) c.slices.push_back({i, 0, g.between(1, 4000)});
    CAPTURE(trial, ds, context);
    const micro_batch mb = micro_batch_of_chunk(c, ds);
    REQUIRE(mb.tokens() == c.tokens());
    REQUIRE(mb.cp_shares.size() == static_cast<std::size_t>(ds));
    for (const cp_share& s : mb.cp_shares) REQUIRE(std::abs(s.tokens - c.tokens() / ds) <= 1);
    const stage_slice stage{cost.layers / dp, false, false};
    const stage_times t = chunk_stage_time{cost}.times(mb, stage);
    // Eq. 4 without the ZeRO-3 floor: the simulator runs those collectives as flows
    REQUIRE(t.forward == Approx(cost.compute_seconds(cost.forward, c) + cost.all_to_all_seconds(c)).epsilon(1e-9));
    REQUIRE(t.backward == Approx(cost.compute_seconds(cost.backward, c) + cost.all_to_all_seconds(c)).epsilon(1e-9));
    if (cost.seconds(cost.forward, c) > t.forward) ++floored;
    REQUIRE(t.layer_forward * stage.layers == Approx(cost.compute_seconds(cost.forward, c) - cost.forward.b1 / dp).epsilon(1e-9));
    REQUIRE(t.cp_wait == 0);
  }
  REQUIRE(floored > 0);  // some chunks are small enough for the floor to matter
  // a whole sequence without shares: the same as its chunk
  const chunk_cost_model cost = chunk_cost_model::for_model(models::gpt_7b(), clusters::infinipipe_a800_ib(2), 8, 2);
  const chunk whole{0, {{0, 0, 9000}}};
  const stage_slice stage{cost.layers / 2, false, false};
  REQUIRE(chunk_stage_time{cost}.times(micro_batch{{9000}, {}}, stage) == chunk_stage_time{cost}.times(micro_batch_of_chunk(whole, 8), stage));
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)micro_batch_of_chunk(whole, 0); }).value("sp_degree") == 0);
}

TEST_CASE("ulysses_all_to_all_link: NVLink inside a node, the NIC share across nodes", "[cost][infinipipe]") {
  const topology topo = clusters::hydraulis_a800_ib(4);  // 8 GPUs per node, 2 per 400 Gb/s NIC
  const link_spec nv = topo.intra_node_link(), nic = topo.nic_link();
  REQUIRE(ulysses_all_to_all_link(topo, 1).bandwidth == std::numeric_limits<double>::infinity());
  // inside a node: (d - 1)/d of the data over NVLink
  REQUIRE(ulysses_all_to_all_link(topo, 8).bandwidth == Approx(nv.bandwidth * 8 / 7));
  REQUIRE(ulysses_all_to_all_link(topo, 4).bandwidth == Approx(nv.bandwidth * 4 / 3));
  REQUIRE(ulysses_all_to_all_link(topo, 8).latency == nv.latency);
  // across nodes: (d - 8)/d through half a NIC, slower than 7/d over NVLink
  const double inter16 = 8.0 / 16 / (nic.bandwidth / 2), intra16 = 7.0 / 16 / nv.bandwidth;
  REQUIRE(ulysses_all_to_all_link(topo, 16).bandwidth == Approx(1 / std::max(inter16, intra16)));
  REQUIRE(ulysses_all_to_all_link(topo, 32).bandwidth == Approx(1 / (24.0 / 32 / (nic.bandwidth / 2))));
  REQUIRE(ulysses_all_to_all_link(topo, 32).latency == nic.latency);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)ulysses_all_to_all_link(topo, 12); }).value("sp_degree") == 12);
}
