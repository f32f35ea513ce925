// tests/step/step_record_test.cpp
// The step program is one program: on seeded random step plans (every schedule, TP / CP /
// PP / DP degree, gradient sync, heterogeneous replicas, sliced documents, recomputation),
// the host runner executes exactly what the simulator prices: the same compute ops, the
// same transfers (bytes moved through a real communicator) and the same attention pieces and
// launches (run by the host attention engine), op for op and byte for byte.
#include <catch2/catch.hpp>
#include <zeppelin/comm/host_loopback.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/exec/attention_engine.hpp>
#include <zeppelin/exec/linear_layout.hpp>
#include <zeppelin/exec/step_runner.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/step/build.hpp>

#include <chrono>
#include <cstddef>
#include <limits>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <vector>

#include "../support/random_step_plan.hpp"

using namespace zeppelin;

namespace {

// A model that owns a byte range for every buffer a transfer names, computes nothing in its
// parts, and runs each attention through the host attention engine on random tensors (remap
// segments included): the runner's transfers and the engine's pieces and launches are real.
struct record_model {
  using value_type = double;
  const step_program& prog;
  rank_index me;
  std::map<std::tuple<int, int, int, int, int, int, std::int64_t, std::int64_t, std::int64_t, int>, std::vector<std::byte>> tensors;
  random_generator rng{7, 0};

  std::span<std::byte> buffer(const step_buffer& b) {
    auto& v = tensors[{static_cast<int>(b.tensor), static_cast<int>(b.pass), static_cast<int>(b.part), b.micro_batch, b.virtual_stage, b.layer,
                       b.document, b.offset, b.bytes, b.layers}];
    v.resize(static_cast<std::size_t>(b.bytes), std::byte{1});
    return v;
  }
  void compute(const step_block&, const layer_op&) {}
  template <class C>
  void attention(const step_block& blk, const block_attention& a, C& cp, execution_record* record) {
    const step_layout& lay = prog.layout(blk.replica, blk.micro_batch);
    const step_replica& rep = prog.replica(blk.replica);
    const attention_dims dims{prog.model.heads / rep.tp, prog.model.kv_heads / rep.tp, prog.model.head_dim, 0};
    const attention_engine<double> engine(lay.attention, dims);
    const plan& layout = rep.micro_batches[static_cast<std::size_t>(blk.micro_batch)].layout;
    const rank_index c = cp.rank();
    const auto rows = static_cast<std::size_t>(engine.rows(c));
    const auto linear = static_cast<std::size_t>(lay.linear_rows[static_cast<std::size_t>(c)]);
    const auto q_row = static_cast<std::size_t>(dims.q_row()), kv_row = static_cast<std::size_t>(dims.kv_row());
    const auto fill = [&](std::size_t n) {
      std::vector<double> x(n);
      for (double& e : x) e = rng.uniform() - 0.5;
      return x;
    };
    const std::size_t qkv = q_row + 2 * kv_row;
    const auto w = [](std::size_t n) { return static_cast<std::int64_t>(n); };
    std::vector<double> q = fill(rows * q_row), k = fill(rows * kv_row), v = fill(rows * kv_row), o = fill(rows * q_row);
    std::vector<double> lse(rows * static_cast<std::size_t>(dims.heads), 0.0);
    if (a.pass != step_pass::backward) {  // forward and recomputation: Q|K|V in, O out
      const std::vector<double> linear_qkv = fill(linear * qkv);
      std::vector<double> attention_qkv(rows * qkv), linear_o(linear * q_row);
      to_attention_layout(engine, cp, layout, pass_kind::forward, std::span<const double>(linear_qkv), std::span<double>(attention_qkv), w(qkv), record);
      engine.forward(cp, q, k, v, o, lse, record);
      to_linear_layout(engine, cp, layout, pass_kind::forward, std::span<const double>(o), std::span<double>(linear_o), w(q_row), record);
      return;
    }
    // backward: dO in, dQ|dK|dV out
    const std::vector<double> linear_do = fill(linear * q_row);
    std::vector<double> d_o(rows * q_row), dq(rows * q_row), dk(rows * kv_row), dv(rows * kv_row), attention_grads(rows * qkv),
        linear_grads(linear * qkv);
    to_attention_layout(engine, cp, layout, pass_kind::backward, std::span<const double>(linear_do), std::span<double>(d_o), w(q_row), record);
    engine.backward(cp, q, k, v, o, d_o, lse, dq, dk, dv, record);
    to_linear_layout(engine, cp, layout, pass_kind::backward, std::span<const double>(attention_grads), std::span<double>(linear_grads), w(qkv),
                     record);
  }
};

}  // namespace

namespace {

// Runs every rank of `prog` on host threads and returns their records merged.
step_record run_on_host(const step_program& prog, const topology& cluster) {
  step_record all;
  std::mutex lock;
  const host_loopback_world world{.ranks = prog.num_ranks(), .gpus_per_node = cluster.gpus_per_node(), .timeout = std::chrono::seconds(60)};
  world.run([&](host_loopback_comm& c) {
    record_model model{prog, static_cast<rank_index>(c.rank()), {}, random_generator(7, static_cast<std::uint64_t>(c.rank()))};
    step_record mine;
    run_step_rank(prog, model, c, &mine);
    const std::lock_guard<std::mutex> hold(lock);
    all.merge(mine);
  });
  all.sort();
  return all;
}

step_record simulated_record(const step_program& prog, const topology& cluster) {
  step_sim_options o;
  o.record = true;
  o.memory_capacity_bytes = std::numeric_limits<double>::infinity();
  return simulate_step(prog, cluster, sim_cost_model::for_topology(cluster), o).record;
}

}  // namespace

TEST_CASE("step record: the host runner executes what the simulator prices, on 200 random step plans", "[step][record]") {
  int sliced = 0, heterogeneous = 0, tensor_parallel = 0, zero3 = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const zeppelin_test::random_step_case c = zeppelin_test::random_step_plan(seed);
    INFO(c.description);
    const step_program prog = make_step_program(c.plan, c.cluster, c.model, c.options);
    const step_record sim = simulated_record(prog, c.cluster);
    const step_record host = run_on_host(prog, c.cluster);
    REQUIRE(!sim.ops.empty());
    REQUIRE(!sim.attention_launches.empty());
    REQUIRE(host.ops == sim.ops);
    REQUIRE(host.transfers == sim.transfers);
    REQUIRE(host.attention_transfers == sim.attention_transfers);
    REQUIRE(host.attention_launches == sim.attention_launches);
    // what both ran is the whole program: every transfer once, every block's ops
    REQUIRE(sim.transfers.size() >= prog.transfers.size());
    for (const step_replica& r : c.plan.replicas) {
      tensor_parallel += r.tp > 1;
      for (const step_micro_batch& mb : r.micro_batches)
        for (const step_piece& x : mb.pieces) sliced += x.context() > 0;
    }
    heterogeneous += c.description.find("heterogeneous") != std::string::npos;
    zero3 += c.plan.sync == gradient_sync::fully_sharded;
  }
  // the seeds cover what the test is for
  CHECK(sliced > 20);
  CHECK(heterogeneous > 10);
  CHECK(tensor_parallel > 20);
  CHECK(zero3 > 10);
}

TEST_CASE("context transfers move kept K/V into a gathered context and dK/dV back: no rank sends from what it receives into", "[step][record]") {
  int sliced_plans = 0, transfers = 0;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const zeppelin_test::random_step_case c = zeppelin_test::random_step_plan(seed);
    INFO(c.description);
    const step_program prog = make_step_program(c.plan, c.cluster, c.model, c.options);
    bool any = false;
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(prog.blocks.size()); ++i) {
      const block_program bp = make_block_program(prog, i);
      // per rank: the (tensor, document, layer) byte ranges it sends from and receives into
      using key = std::tuple<rank_index, int, std::int64_t, std::int32_t>;
      std::map<key, std::vector<std::pair<std::int64_t, std::int64_t>>> sent, received;
      for (const step_transfer& x : bp.transfers) {
        const bool forward = x.from.tensor == step_tensor::context, backward = x.from.tensor == step_tensor::gathered_context_gradient;
        if (!forward && !backward) {
          CHECK(x.to.tensor != step_tensor::gathered_context);
          CHECK(x.to.tensor != step_tensor::context_gradient);
          continue;
        }
        any = true;
        ++transfers;
        CHECK(x.to.tensor == (forward ? step_tensor::gathered_context : step_tensor::context_gradient));
        CHECK(x.combine == (forward ? combine_kind::copy : combine_kind::add));
        CHECK((x.to.document == x.from.document && x.to.layer == x.from.layer));
        sent[{x.src, static_cast<int>(x.from.tensor), x.from.document, x.from.layer}].push_back({x.from.offset, x.from.offset + x.bytes});
        received[{x.dst, static_cast<int>(x.to.tensor), x.to.document, x.to.layer}].push_back({x.to.offset, x.to.offset + x.bytes});
      }
      for (const auto& [k, ranges] : received) {
        const auto it = sent.find(k);
        if (it == sent.end()) continue;
        for (const auto& [b, e] : ranges)
          for (const auto& [sb, se] : it->second) CHECK((e <= sb || se <= b));
      }
    }
    sliced_plans += any;
  }
  CHECK(sliced_plans > 10);
  CHECK(transfers > 100);
}
