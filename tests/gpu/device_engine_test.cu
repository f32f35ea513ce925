// [gpu] The CUDA executors end to end on a device loopback world (N ranks on one GPU): for
// every partitioner on emulated 2..16 ranks, dispatch -> device attention engine forward and
// backward -> inverse dispatch equals the single-GPU reference (the same kernels on the whole
// packed batch), fp16; with the direct and the proxy-routed transport.
#include "distributed_support.hpp"

#include <zeppelin/route/proxy.hpp>

#include <utility>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {

batch gpu_lengths(random_generator& rng, rank_index ranks) {
  // lengths 1, shorter than a group, not divisible by 2G, and a few longer ones (> 1 tile)
  std::vector<token_count> lengths;
  const auto n = static_cast<int>(rng.between(1, 5));
  for (int i = 0; i < n; ++i) {
    const auto kind = rng.below(4);
    lengths.push_back(kind == 0 ? 1 : kind == 1 ? rng.between(2, ranks + 1) : rng.between(2, 96 * ranks));
  }
  return batch(lengths);
}

void check_against_reference(const gpu_results& got, const gpu_problem& ref) {
  CHECK_FALSE(any_nan(got.o));
  CHECK_FALSE(any_nan(got.dq));
  CHECK_FALSE(any_nan(got.dk));
  CHECK_FALSE(any_nan(got.dv));
  // fp16 outputs of fp32 arithmetic in another summation order: a few fp16 ulps
  CHECK(relative_l2(got.o, ref.o) < 2e-3);
  CHECK(max_abs_diff(got.lse, ref.lse) < 1e-3);
  CHECK(relative_l2(got.dq, ref.dq) < 5e-3);
  CHECK(relative_l2(got.dk, ref.dk) < 5e-3);
  CHECK(relative_l2(got.dv, ref.dv) < 5e-3);
}

}  // namespace

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
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " sequences " << b.size() << " tokens "
                     << b.total_tokens() << " head_dim " << dims.head_dim << " kv_heads " << dims.kv_heads);
      check_against_reference(run_device_distributed(p, b, ref), ref);
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
    check_against_reference(run_device_distributed(p, b, ref), ref);
  }
}

TEST_CASE("device engine: proxy-routed transport gives the same result", "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  const topology t = test_topology(2, 4, 2);
  random_generator rng(31);
  for (int method = 0; method < 2; ++method) {
    const batch b = gpu_lengths(rng, t.num_ranks());
    const attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = 64};
    const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
    const gpu_problem ref = make_gpu_problem(b, dims, rng());
    INFO("method " << p.method);
    device_routed_transport<proxy_router> routed;
    routed.topo = t;
    check_against_reference(run_device_distributed(p, b, ref, routed), ref);
  }
}
