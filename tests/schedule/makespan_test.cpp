// tests/schedule/makespan_test.cpp
// pipeline_makespan (schedule/pipeline/makespan.hpp): the textbook (M + P - 1)(f + b) of
// GPipe and 1F1B with equal micro-batches; on seeded random durations, every schedule policy
// (GPipe, 1F1B, interleaved, chunk-level 1F1B with chains) equals the longest path of the
// schedule's dependency graph found by an independent topological sort; a schedule that
// cannot run and bad durations are refused.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/schedule/pipeline.hpp>

#include <algorithm>
#include <map>
#include <limits>
#include <queue>
#include <tuple>
#include <vector>

#include "../support/expect_error.hpp"

using namespace zeppelin;

namespace {

// the longest path through the graph of compute ops: edges from the previous compute op of
// the stage and from the cross-stage predecessor (Kahn's algorithm)
double longest_path(const pipeline_schedule& s, const std::map<std::tuple<int, int, int, int>, double>& seconds) {
  using key = std::tuple<int, int, int>;  // kind, micro-batch, virtual stage
  std::map<key, int> node;
  std::vector<double> cost;
  std::vector<std::vector<int>> out;
  std::vector<int> indegree;
  const auto add_node = [&](key k, double c) {
    node[k] = static_cast<int>(cost.size());
    cost.push_back(c), out.emplace_back(), indegree.push_back(0);
  };
  for (int p = 0; p < s.stages; ++p)
    for (const pipeline_op& op : s.ops[static_cast<std::size_t>(p)])
      if (is_compute(op.kind))
        add_node({static_cast<int>(op.kind), op.micro_batch, s.virtual_stage(p, op.chunk)},
                 seconds.at({static_cast<int>(op.kind), p, op.micro_batch, op.chunk}));
  const auto edge = [&](int from, int to) { out[static_cast<std::size_t>(from)].push_back(to), ++indegree[static_cast<std::size_t>(to)]; };
  const int last = s.stages * s.virtual_stages - 1;
  for (int p = 0; p < s.stages; ++p) {
    int previous = -1;
    for (const pipeline_op& op : s.ops[static_cast<std::size_t>(p)]) {
      if (!is_compute(op.kind)) continue;
      const int v = s.virtual_stage(p, op.chunk);
      const int me = node.at({static_cast<int>(op.kind), op.micro_batch, v});
      if (previous >= 0) edge(previous, me);
      previous = me;
      if (op.kind == pipeline_op_kind::forward && v > 0) edge(node.at({0, op.micro_batch, v - 1}), me);
      if (op.kind == pipeline_op_kind::backward) edge(node.at(v < last ? key{1, op.micro_batch, v + 1} : key{0, op.micro_batch, v}), me);
    }
  }
  std::vector<double> finish(cost.size(), 0);
  std::queue<int> ready;
  for (std::size_t i = 0; i < cost.size(); ++i)
    if (indegree[i] == 0) ready.push(static_cast<int>(i));
  double best = 0;
  int seen = 0;
  while (!ready.empty()) {
    const auto i = static_cast<std::size_t>(ready.front());
    ready.pop();
    ++seen;
    finish[i] += cost[i];
    best = std::max(best, finish[i]);
    for (const int j : out[i]) {
      finish[static_cast<std::size_t>(j)] = std::max(finish[static_cast<std::size_t>(j)], finish[i]);
      if (--indegree[static_cast<std::size_t>(j)] == 0) ready.push(j);
    }
  }
  REQUIRE(seen == static_cast<int>(cost.size()));  // a DAG
  return best;
}

}  // namespace

TEST_CASE("pipeline makespan: (M + P - 1)(f + b) for equal micro-batches", "[schedule][pipeline]") {
  for (const int P : {1, 2, 4, 7})
    for (const int M : {1, 3, 8, 20}) {
      const std::vector<token_count> tokens(static_cast<std::size_t>(M), 100);
      const auto f = [](int, int, int) { return 2.0; };
      const auto b = [](int, int, int) { return 3.0; };
      CAPTURE(P, M);
      CHECK(pipeline_makespan(gpipe{}.build(P, tokens), f, b) == Approx((M + P - 1) * 5.0));
      CHECK(pipeline_makespan(one_f_one_b{}.build(P, tokens), f, b) == Approx((M + P - 1) * 5.0));
    }
}

TEST_CASE("pipeline makespan: every schedule equals the longest path of its graph (random durations)", "[schedule][pipeline]") {
  random_generator g(4711);
  int cases = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int P = static_cast<int>(g.between(1, 6)), M = static_cast<int>(g.between(1, 12));
    const std::vector<token_count> tokens(static_cast<std::size_t>(M), 64);
    pipeline_schedule s;
    switch (trial % 4) {
      case 0: s = gpipe{}.build(P, tokens); break;
      case 1: s = one_f_one_b{}.build(P, tokens); break;
      case 2: {
        if (M % P != 0) continue;  // interleaved needs whole rounds of P micro-batches
        s = interleaved_one_f_one_b{.virtual_stages = 2}.build(P, tokens);
        break;
      }
      default: {
        std::vector<int> chains;
        for (int left = M; left > 0;) {
          const int c = static_cast<int>(g.between(1, std::min(left, 4)));
          chains.push_back(c), left -= c;
        }
        std::sort(chains.rbegin(), chains.rend());
        s = chunk_one_f_one_b{.chains = chains}.build(P, tokens);
      }
    }
    std::map<std::tuple<int, int, int, int>, double> seconds;  // kind, stage, micro-batch, chunk
    for (int p = 0; p < P; ++p)
      for (const pipeline_op& op : s.ops[static_cast<std::size_t>(p)])
        if (is_compute(op.kind)) seconds[{static_cast<int>(op.kind), p, op.micro_batch, op.chunk}] = 0.1 + g.uniform();
    const auto of = [&](pipeline_op_kind k) {
      return [&seconds, k](int p, int mb, int c) { return seconds.at({static_cast<int>(k), p, mb, c}); };
    };
    CAPTURE(trial, P, M);
    CHECK(pipeline_makespan(s, of(pipeline_op_kind::forward), of(pipeline_op_kind::backward)) == Approx(longest_path(s, seconds)).epsilon(1e-12));
    ++cases;
  }
  CHECK(cases > 150);
}

TEST_CASE("pipeline makespan: a schedule that cannot run and bad durations are refused", "[schedule][pipeline]") {
  const std::vector<token_count> tokens{10, 10};
  pipeline_schedule s = one_f_one_b{}.build(2, tokens);
  const auto one = [](int, int, int) { return 1.0; };
  // stage 0 runs the backward of micro-batch 0 before its forward: it waits for stage 1's
  // backward, which waits for stage 0's forward
  auto& ops = s.ops[0];
  const auto f = std::find_if(ops.begin(), ops.end(), [](const pipeline_op& op) { return op.kind == pipeline_op_kind::forward; });
  const auto b = std::find_if(ops.begin(), ops.end(), [](const pipeline_op& op) { return op.kind == pipeline_op_kind::backward; });
  std::iter_swap(f, b);
  CHECK(zeppelin_test::expect_invalid([&] { (void)pipeline_makespan(s, one, one); }).value("stage") >= 0);
  const pipeline_schedule ok = one_f_one_b{}.build(2, tokens);
  CHECK_THROWS_WITH(pipeline_makespan(ok, [](int, int, int) { return -1.0; }, one), Catch::Contains("finite and non-negative"));
  CHECK_THROWS_WITH(pipeline_makespan(ok, one, [](int, int, int) { return std::numeric_limits<double>::infinity(); }),
                    Catch::Contains("finite and non-negative"));
}
