// tests/sim/zero3_traffic_test.cpp
// ZeRO-3 on the 4D step simulator (sim/pipeline_simulator.hpp with memory settings
// zero_stage 3; sim/detail/zero3_traffic.hpp) and the collective rings it runs on
// (sim/detail/collective_rings.hpp):
//   - rings: every member sends once and receives once per channel, one cycle through all of
//     them; across nodes, every node is entered and left once per channel and its channels
//     leave through distinct NICs, as many channels as the poorest node has NICs;
//   - volume: every collective's bytes are on the links once, whatever the number of
//     replicas, and the DP all-reduce is gone;
//   - time: with compute longer than a gather, only the first gather and the last
//     reduce-scatter are exposed (closed form); with gathers longer than compute the step
//     takes at least every gather one after the other;
//   - zero_shards other than the dp x cp group is refused.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/detail/collective_rings.hpp>
#include <zeppelin/sim/pipeline_simulator.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "../support/expect_error.hpp"
#include "../support/sim_fixtures.hpp"

using namespace zeppelin;

namespace {

using zeppelin_test::links_of;
using zeppelin_test::toy_model;

using zeppelin_test::unlimited;

// bytes the run moved in flows of `kind`
double bytes_of(const engine_run& run, task_kind kind) {
  double sum = 0;
  for (const flow_record& f : run.flows)
    if (run.tags[static_cast<std::size_t>(f.task)].kind == kind) sum += f.bytes;
  return sum;
}

}  // namespace

TEST_CASE("collective rings: one cycle per channel, every node's channels leave through distinct NICs", "[sim][zero3]") {
  random_generator g(41);
  for (int trial = 0; trial < 300; ++trial) {
    const int log_per_node = static_cast<int>(g.between(0, 3));
    const int per_node = 1 << log_per_node, nics = 1 << g.between(0, log_per_node);
    const int nodes = static_cast<int>(g.between(1, 4));
    const topology topo = links_of(nodes, per_node, nics, 1e11, 1e10);
    std::vector<rank_index> members;
    for (rank_index r = 0; r < topo.num_ranks(); ++r)
      if (g.below(3) != 0) members.push_back(r);
    if (members.empty()) members.push_back(static_cast<rank_index>(g.below(static_cast<std::uint64_t>(topo.num_ranks()))));
    std::vector<rank_index> shuffled = members;
    for (std::size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[g.below(i)]);
    CAPTURE(trial, nodes, per_node, nics, members.size());
    const detail::collective_rings rings = detail::make_collective_rings(topo, shuffled);
    REQUIRE(rings.members == static_cast<int>(members.size()));
    REQUIRE(rings.edges.size() == static_cast<std::size_t>(rings.channels) * members.size());
    // the channel count: the fewest distinct NICs of any node's members (1 inside a node)
    std::set<int> used_nodes;
    for (const rank_index r : members) used_nodes.insert(topo.node_of(r));
    int expected_channels = 1;
    if (used_nodes.size() > 1) {
      expected_channels = std::numeric_limits<int>::max();
      for (const int n : used_nodes) {
        std::set<int> nic_set;
        for (const rank_index r : members)
          if (topo.node_of(r) == n) nic_set.insert(topo.nic_of(r));
        expected_channels = std::min(expected_channels, static_cast<int>(nic_set.size()));
      }
    }
    REQUIRE(rings.channels == expected_channels);
    std::map<int, std::set<int>> leaving_nics;  // per node: the NIC each channel leaves through
    for (int c = 0; c < rings.channels; ++c) {
      std::vector<int> sent(static_cast<std::size_t>(topo.num_ranks()), 0), received = sent;
      std::map<rank_index, rank_index> next;
      int crossings = 0;
      for (std::size_t i = 0; i < members.size(); ++i) {
        const detail::ring_edge& e = rings.edges[static_cast<std::size_t>(c) * members.size() + i];
        ++sent[static_cast<std::size_t>(e.source)];
        ++received[static_cast<std::size_t>(e.destination)];
        next[e.source] = e.destination;
        if (topo.node_of(e.source) != topo.node_of(e.destination)) {
          ++crossings;
          REQUIRE(leaving_nics[topo.node_of(e.source)].insert(topo.nic_of(e.source)).second);
        }
      }
      for (const rank_index r : members) REQUIRE((sent[static_cast<std::size_t>(r)] == 1 && received[static_cast<std::size_t>(r)] == 1));
      // one cycle through every member
      rank_index at = members.front();
      for (std::size_t i = 0; i < members.size(); ++i) at = next.at(at);
      REQUIRE(at == members.front());
      std::set<rank_index> seen;
      for (std::size_t i = 0; i < members.size(); ++i, at = next.at(at)) seen.insert(at);
      REQUIRE(seen.size() == members.size());
      REQUIRE(crossings == (used_nodes.size() > 1 ? static_cast<int>(used_nodes.size()) : 0));
    }
    REQUIRE(rings.edge_bytes(1000.0) == Approx(1000.0 * (rings.members - 1) / rings.members / rings.channels));
  }
  zeppelin_test::expect_invalid([] { (void)detail::make_collective_rings(links_of(1, 4, 1, 1, 1), {}); });
  zeppelin_test::expect_invalid([] { (void)detail::make_collective_rings(links_of(1, 4, 1, 1, 1), {1, 2, 1}); });
}

TEST_CASE("ZeRO-3 hidden behind compute: only the first gather and the last reduce-scatter show", "[sim][zero3]") {
  // one stage of 8 layers on a Ulysses group of 4 GPUs in one node: a forward takes 1 s and a
  // backward 2 s (1/8 and 1/4 s a layer), a layer's gather 10 ms, so every gather after the
  // first runs behind the layer before it, and the backward's gather and reduce-scatter
  // (sharing the ring) behind its 1/4 s layers
  const model_config model = toy_model(8);
  const parallel_layout layout{.tp = 1, .cp = 4, .pp = 1, .dp = 1};
  const pipeline_memory_model memory{model, layout, {.zero_stage = 3}};
  const double layer_bytes = memory.parameters(split_model(model, 1)[0]) * 2 / 8;
  const double gather_s = 0.01, edge_bytes = layer_bytes * 3 / 4;
  const topology topo = links_of(1, 4, 1, edge_bytes / gather_s, 1e9);
  const fitted_stage_time unit{{0, 0, 1}, {0, 0, 2}, 1};
  for (const int m : {1, 3, 5}) {
    const std::vector<std::vector<micro_batch>> replicas(1, std::vector<micro_batch>(static_cast<std::size_t>(m), micro_batch{{4096}, {}}));
    const pipeline_sim_result r = simulate_pipeline(std::span<const std::vector<micro_batch>>(replicas), one_f_one_b{}, no_recompute{}, unit,
                                                    memory, topo, {.memory_capacity_bytes = unlimited});
    CAPTURE(m);
    REQUIRE(r.iteration_s == Approx(3.0 * m + 2 * gather_s).epsilon(1e-9));
    REQUIRE(r.stages[0][0].busy_s == Approx(3.0 * m).epsilon(1e-12));
    // every layer: a gather in each pass and a reduce-scatter in the backward, each moving
    // 3/4 of the layer through every GPU's ring edge
    REQUIRE(bytes_of(r.run, task_kind::parameter_gather) == Approx(2.0 * m * 8 * 4 * edge_bytes).epsilon(1e-12));
    REQUIRE(bytes_of(r.run, task_kind::gradient_scatter) == Approx(1.0 * m * 8 * 4 * edge_bytes).epsilon(1e-12));
  }
  // ZeRO-1 (the default settings): no parameter traffic, the step is its compute
  const std::vector<std::vector<micro_batch>> one(1, std::vector<micro_batch>(2, micro_batch{{4096}, {}}));
  const pipeline_sim_result plain = simulate_pipeline(std::span<const std::vector<micro_batch>>(one), one_f_one_b{}, no_recompute{}, unit,
                                                      pipeline_memory_model{model, layout, {}}, topo, {.memory_capacity_bytes = unlimited});
  REQUIRE(plain.iteration_s == Approx(6.0).epsilon(1e-12));
  REQUIRE(bytes_of(plain.run, task_kind::parameter_gather) == 0);
}

TEST_CASE("ZeRO-3 over replicas and stages: each collective once, no DP all-reduce, gathers bound the step", "[sim][zero3]") {
  random_generator g(43);
  for (int trial = 0; trial < 40; ++trial) {
    const int layers = 4 * static_cast<int>(g.between(1, 4));
    const model_config model = toy_model(layers);
    const parallel_layout layout{.tp = 1, .cp = 1 << g.between(0, 2), .pp = 1 << g.between(0, 2), .dp = 1 << g.between(0, 1)};
    if (layout.cp * layout.dp == 1) continue;
    const int m = static_cast<int>(g.between(layout.pp, 2 * layout.pp + 2));
    const pipeline_memory_model memory{model, layout, {.zero_stage = 3}};
    // slow or fast links, one node per stage group or several
    const int per_node = g.below(2) == 0 ? 8 : 4;
    const int nodes = static_cast<int>((layout.gpus() + per_node - 1) / per_node);
    const topology topo = links_of(nodes, per_node, g.below(2) == 0 ? 1 : 2, g.below(2) == 0 ? 1e9 : 3e11, g.below(2) == 0 ? 1e8 : 5e10);
    const fitted_stage_time times{{0, 1e-6, 0.05}, {0, 2e-6, 0.1}, layers};
    std::vector<std::vector<micro_batch>> replicas(static_cast<std::size_t>(layout.dp));
    for (auto& rep : replicas)
      for (int k = 0; k < m; ++k) rep.push_back(micro_batch{{g.between(512, 8192)}, {}});
    CAPTURE(trial, layers, layout.cp, layout.pp, layout.dp, m, per_node);
    const pipeline_sim_result r = simulate_pipeline(std::span<const std::vector<micro_batch>>(replicas), one_f_one_b{}, no_recompute{}, times,
                                                    memory, topo, {.memory_capacity_bytes = unlimited});
    const std::vector<stage_slice> slices = split_model(model, layout.pp);
    const int z = layout.cp * layout.dp;
    double expected = 0;
    for (int p = 0; p < layout.pp; ++p) {
      const stage_slice& s = slices[static_cast<std::size_t>(p)];
      const double layer_bytes = memory.parameters(s) * 2 / s.layers;
      // per micro-batch and layer: two gathers and a reduce-scatter, each (z - 1)/z of the
      // layer over each of the z edges of each channel's ring (the channels split the bytes)
      expected += 3.0 * m * s.layers * layer_bytes * (z - 1);
      const double gathers = 2.0 * m * s.layers;  // one after the other on the stage
      if (nodes == 1) REQUIRE(r.iteration_s >= gathers * layer_bytes * (z - 1) / z / topo.intra_node_link().bandwidth * (1 - 1e-9));
      REQUIRE(r.iteration_s >= r.stages[0][static_cast<std::size_t>(p)].busy_s * (1 - 1e-12));
    }
    REQUIRE(bytes_of(r.run, task_kind::parameter_gather) + bytes_of(r.run, task_kind::gradient_scatter) == Approx(expected).epsilon(1e-9));
    REQUIRE(bytes_of(r.run, task_kind::gradient_sync) == 0);
    // the same on the dedicated-link engine moves the same bytes
    const pipeline_sim_result d = simulate_pipeline(std::span<const std::vector<micro_batch>>(replicas), one_f_one_b{}, no_recompute{}, times,
                                                    memory, topo, {.memory_capacity_bytes = unlimited}, dedicated_links{});
    REQUIRE(d.run.intra_node_bytes + d.run.inter_node_bytes == Approx(r.run.intra_node_bytes + r.run.inter_node_bytes).epsilon(1e-9));
  }
}

TEST_CASE("ZeRO-3 traffic runs over the layout's dp x cp GPUs: other shard counts are refused", "[sim][zero3]") {
  const model_config model = toy_model(4);
  const parallel_layout layout{.tp = 1, .cp = 2, .pp = 1, .dp = 2};
  const topology topo = links_of(1, 4, 1, 1e11, 1e10);
  const std::vector<std::vector<micro_batch>> replicas(2, std::vector<micro_batch>(1, micro_batch{{1024}, {}}));
  const fitted_stage_time unit{{0, 0, 1}, {0, 0, 2}, 1};
  const auto e = zeppelin_test::expect_invalid([&] {
    (void)simulate_pipeline(std::span<const std::vector<micro_batch>>(replicas), one_f_one_b{}, no_recompute{}, unit,
                            pipeline_memory_model{model, layout, {.zero_stage = 3, .zero_shards = 8}}, topo, {.memory_capacity_bytes = unlimited});
  });
  REQUIRE(e.value("zero_shards") == 8);
  REQUIRE(e.value("dp_x_cp") == 4);
  // the group itself (4) is accepted
  REQUIRE_NOTHROW(simulate_pipeline(std::span<const std::vector<micro_batch>>(replicas), one_f_one_b{}, no_recompute{}, unit,
                                    pipeline_memory_model{model, layout, {.zero_stage = 3, .zero_shards = 4}}, topo, {.memory_capacity_bytes = unlimited}));
}
