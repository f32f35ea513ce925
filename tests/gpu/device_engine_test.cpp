// [gpu] The CUDA executors end to end on a device loopback world (N ranks on one GPU): for
// every partitioner on emulated 2..16 ranks, dispatch -> device attention engine forward and
// backward -> inverse dispatch equals the single-GPU reference (the same kernels on the whole
// packed batch), fp16, per sequence; under the direct and the proxy router, per-group and fused
// launches; and every run's execution record (what the engine moved and launched on every
// rank) equals the record of the program the host engine and the simulator run for the same
// plan and options. The all-to-all (Ulysses) collective: device_ulysses_test.cpp.
#include "distributed_support.hpp"

#include <zeppelin/program/record.hpp>
#include <zeppelin/route/proxy.hpp>

#include <utility>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

TEST_CASE("device engine: distributed attention equals the single-GPU reference for every partitioner, 2..16 ranks",
          "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  const std::vector<std::pair<int, int>> topologies{{1, 2}, {2, 2}, {1, 8}, {2, 4}, {4, 4}};
  random_generator rng(808);
  int cases = 0;
  for (const auto& [nodes, gpus] : topologies) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      const batch b = gpu_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 4, .kv_heads = rng.below(2) ? 2 : 4, .head_dim = rng.below(2) ? 64 : 128};
      const token_count fair = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
      const plan p = make_plan(method, b, t, rng.below(2) ? fair : b.max_length());
      const gpu_problem ref = make_gpu_problem(b, dims, rng());
      program_options o;
      o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
      o.engine = rng.below(2) ? engine_policy::prioritized : engine_policy::in_order;
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " sequences " << b.size() << " tokens "
                     << b.total_tokens() << " head_dim " << dims.head_dim << " kv_heads " << dims.kv_heads << " launch "
                     << to_string(o.launch) << " engine " << to_string(o.engine));
      const gpu_results got = run_device_distributed(p, b, t, ref, o);
      check_against_reference(got, ref, b);
      check_record(got, p, b, t, o);
      ++cases;
    }
  }
  CHECK(cases == 25);
}

TEST_CASE("device engine: one long sequence over a 16-rank global ring (zigzag, uneven chunks)", "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  const topology t = test_topology(4, 4);
  for (const token_count len : {token_count{31}, token_count{33}, token_count{1000}}) {
    const batch b({len});
    const attention_dims dims{.heads = 2, .kv_heads = 1, .head_dim = 64};
    const plan p = make_plan(1, b, t, b.total_tokens());  // even_split: the sequence over all 16 ranks
    const gpu_problem ref = make_gpu_problem(b, dims, 99 + static_cast<std::uint64_t>(len));
    INFO("length " << len);
    const gpu_results got = run_device_distributed(p, b, t, ref);
    check_against_reference(got, ref, b);
    check_record(got, p, b, t, {});
  }
}

TEST_CASE("device engine: proxy routing (no fallback to direct) gives the same result", "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  // links without latency, so that the router splits even these small payloads over both
  // NICs (with latencies it keeps them direct, and the proxied check below fails)
  topology_config c = test_topology(2, 4, 2).config();
  c.intra_node.latency = 0;
  c.nic.latency = 0;
  const topology t(c);
  random_generator rng(31);
  for (int method = 0; method < 2; ++method) {
    const batch b = gpu_lengths(rng, t.num_ranks());
    const attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = 64};
    const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
    const gpu_problem ref = make_gpu_problem(b, dims, rng());
    INFO("method " << p.method);
    program_options o;
    o.router.policy = proxy_router{.fallback_to_direct = false};
    const gpu_results got = run_device_distributed(p, b, t, ref, o);
    // some inter-node bytes went through a proxy: a piece whose ends are not the edge's
    bool proxied = false;
    for (const program_phase& ph : got.program.phases)
      for (const transfer& piece : ph.pieces) {
        const transfer& whole = ph.payloads.items().at(static_cast<std::size_t>(piece.payload));
        proxied = proxied || piece.src != whole.src || piece.dst != whole.dst;
      }
    CHECK(proxied);
    check_against_reference(got, ref, b);
    check_record(got, p, b, t, o);
  }
}
