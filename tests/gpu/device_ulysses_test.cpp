// [gpu] The all-to-all collective of the execution program (DeepSpeed-Ulysses, and Ulysses x
// ring where the heads do not split over a whole group) on the device engine, as
// tests/exec/ulysses_test.cpp runs it on the host engine, on a device loopback world (N ranks on
// one GPU), fp16:
//   - Ulysses plans (partition/ulysses.hpp) of groups of 2 to 8 ranks, MHA, GQA and MQA (K/V
//     heads replicated when a lane has fewer query heads than a K/V head serves), groups larger
//     than the heads or not dividing them (Ulysses x ring), every launch and engine policy:
//     O, LSE, dQ, dK, dV equal the single-GPU reference (the kernels on the whole packed
//     batch), and the engine executed exactly what the program lists;
//   - ring, all-gather and all-to-all groups in one program give the same reference.
// Host side (no device needed): the engine takes such programs and builds the CSR arrays of
// every launch over a lane.
#include "distributed_support.hpp"

#include <zeppelin/program/detail/all_to_all_collective.hpp>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

// (heads, K/V heads): lanes for every group of 1, 2, 4 and 8 ranks (8 heads), replicated K/V
// heads (8/2, 8/1, 4/1), and Ulysses x ring for groups of 8 over 4 or 2 heads, of 3, 6 or 8
// over 6 heads
constexpr std::pair<std::int32_t, std::int32_t> head_shapes[] = {{8, 8}, {8, 2}, {8, 1}, {8, 4}, {4, 1}, {2, 2}, {6, 3}, {6, 2}};

// a Ulysses plan of groups of cp ranks (0: the partitioner's choice), raising the capacity
// from a fair share until one exists
plan ulysses_plan(const batch& b, const topology& t, std::int32_t cp) {
  for (token_count capacity = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();; capacity += capacity / 4 + 1) {
    try {
      return ulysses{.capacity = capacity, .cp_size = cp}.partition(b, t);
    } catch (const infeasible&) {
    }
  }
}

}  // namespace

TEST_CASE("device engine: the all-to-all collective equals the single-GPU reference (MHA, GQA, MQA, Ulysses x ring)",
          "[gpu][executor][ulysses]") {
  ZEPPELIN_REQUIRE_GPU();
  const std::vector<std::pair<int, int>> topologies{{1, 2}, {1, 4}, {2, 2}, {2, 4}, {1, 8}, {1, 3}, {2, 3}};
  random_generator rng(5151);
  int cases = 0, replicated = 0, hybrid = 0;
  for (const auto& [nodes, gpus] : topologies) {
    const topology t = test_topology(nodes, gpus);
    for (int trial = 0; trial < 4; ++trial) {
      const batch b = gpu_lengths(rng, t.num_ranks());
      const auto [heads, kv_heads] = head_shapes[rng.below(std::size(head_shapes))];
      const attention_dims dims{.heads = heads, .kv_heads = kv_heads, .head_dim = rng.below(2) ? 64 : 128};
      // groups of 2, 3, 4 or all ranks
      std::vector<std::int32_t> sizes{0};
      for (const std::int32_t g : {2, 3, 4})
        if (t.num_ranks() % g == 0 && g < t.num_ranks()) sizes.push_back(g);
      const plan p = ulysses_plan(b, t, sizes[rng.below(sizes.size())]);
      program_options o;
      o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
      o.engine = rng.below(2) ? engine_policy::prioritized : engine_policy::in_order;
      const gpu_problem ref = make_gpu_problem(b, dims, rng());
      std::int32_t G = 0;  // the largest group
      for (const ring_group& g : p.groups) G = std::max(G, static_cast<std::int32_t>(g.ranks.size()));
      INFO("topology " << nodes << "x" << gpus << " heads " << dims.heads << "/" << dims.kv_heads << " head_dim " << dims.head_dim
                       << " sequences " << b.size() << " tokens " << b.total_tokens() << " largest group " << G << " launch "
                       << to_string(o.launch) << " engine " << to_string(o.engine));
      const gpu_results got = run_device_distributed(p, b, t, ref, o);
      check_against_reference(got, ref, b);
      check_record(got, p, b, t, o);
      const std::int32_t u = detail::ulysses_degree(got.program.wire, G);
      CHECK(uses_head_lanes(got.program) == (G > 1));
      if (u > kv_heads) ++replicated;
      if (u < G) ++hybrid;
      ++cases;
    }
  }
  CHECK(cases == 28);
  CHECK(replicated > 3);  // lanes sharing a K/V head were met
  CHECK(hybrid > 5);      // and Ulysses x ring
}

TEST_CASE("device engine: ring, all-gather and all-to-all groups in one program", "[gpu][executor][ulysses]") {
  ZEPPELIN_REQUIRE_GPU();
  random_generator rng(5252);
  int with_all_to_all = 0;
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 4}, {2, 2}, {2, 4}}) {
    const topology t = test_topology(nodes, gpus);
    for (int trial = 0; trial < 3; ++trial) {
      const batch b = gpu_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 8, .kv_heads = 2, .head_dim = 64};
      plan p = make_plan(0, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());  // hierarchical: groups of any size
      // every group whose size divides the heads runs all-to-all, the others alternate ring and all-gather
      int others = 0;
      for (ring_group& g : p.groups) {
        const bool lanes = g.ranks.size() > 1 && dims.heads % static_cast<std::int32_t>(g.ranks.size()) == 0;
        g.collective = lanes ? collective_kind::all_to_all : others++ % 2 ? collective_kind::all_gather : collective_kind::ring;
        with_all_to_all += lanes;
      }
      const gpu_problem ref = make_gpu_problem(b, dims, rng());
      INFO("topology " << nodes << "x" << gpus << " groups " << p.groups.size() << " tokens " << b.total_tokens());
      const gpu_results got = run_device_distributed(p, b, t, ref);
      check_against_reference(got, ref, b);
      check_record(got, p, b, t, {});
    }
  }
  CHECK(with_all_to_all > 5);
}

TEST_CASE("device engine: a program with all-to-all groups is taken, every lane launch with its CSR arrays", "[executor][ulysses]") {
  // construction makes no CUDA call: this runs without a device
  const topology t = test_topology(1, 4);
  const batch b({300, 41});
  const plan p = ulysses{.capacity = 400}.partition(b, t);
  const attention_dims dims{.heads = 8, .kv_heads = 2, .head_dim = 64};
  const device_attention_engine engine(p, b, t, dims, device::dtype::fp16);
  CHECK(uses_head_lanes(engine.program()));
  std::size_t lanes = 0;
  for (const program_launch& l : engine.program().launches) lanes += !l.lane.whole();
  CHECK(lanes > 0);
  for (rank_index r = 0; r < t.num_ranks(); ++r) CHECK(engine.launches(r, pass_kind::forward) > 0);
}
