// tests/sim/simulate_step_test.cpp
// The step simulator (sim/simulate_step.hpp) against oracles: on free links the iteration is
// the longest path over the schedule's blocks for every schedule; equal micro-batches give
// 1F1B's bubble; recomputation costs one forward per recomputed layer; every traffic class
// moves exactly the bytes its collectives must (TP rings, the attention programs' pieces,
// boundary tensors, the gradient ring, ZeRO-3's gathers); memory peaks where the 1F1B
// window is fullest; the imbalance degrees read 1 for equal micro-batches; the two block
// pricings agree where blocks do not contend; and clear errors.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/sim/step_trace.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/make_plan.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>
#include <vector>

#include "../support/expect_error.hpp"
#include "../support/sim_fixtures.hpp"

using namespace zeppelin;
using zeppelin_test::links_of;
using zeppelin_test::unlimited;

namespace {

// LLaMA-7B layers with a vocabulary of one: the head and the embedding cost next to nothing,
// so every virtual stage of equal layers costs the same.
model_config uniform_model(int layers) {
  model_config m = zeppelin_test::toy_model(layers);
  m.vocab = 1;
  return m;
}

// pp stages (tp x cp GPUs each) x dp replicas on nodes of `per_node` GPUs with free links.
topology free_cluster(long long gpus, int per_node = 8) {
  const int nodes = static_cast<int>((gpus + per_node - 1) / per_node);
  return links_of(nodes, per_node, per_node, 1e30, 1e30);
}

struct built {
  topology cluster;
  model_config model;
  step_plan plan;
  step_program program;
};

// One document per micro-batch of the given lengths (dealt round-robin to the replicas).
template <class C = no_recompute>
built build(const step_shape& shape, const model_config& m, const std::vector<token_count>& lengths, const topology& t,
            const std::string& partitioner = "hierarchical", const C& checkpoint = {}) {
  std::vector<std::vector<std::vector<step_piece>>> pieces(static_cast<std::size_t>(shape.layout.dp));
  token_count largest = 1;
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    pieces[k % pieces.size()].push_back({{static_cast<std::int64_t>(k), 0, lengths[k]}});
    largest = std::max(largest, lengths[k]);
  }
  step_plan p = make_step_plan(t, m, lengths, std::move(pieces), shape, partitioner_by_name(partitioner, {.capacity = largest}), checkpoint);
  step_program prog = make_step_program(p, t, m);
  return {t, m, std::move(p), std::move(prog)};
}

step_sim_result run(const built& b, block_pricing pricing = block_pricing::per_shape, bool keep = false) {
  step_sim_options o;
  o.pricing = pricing;
  o.memory_capacity_bytes = unlimited;
  o.keep_run = keep;
  return simulate_step(b.program, b.cluster, sim_cost_model::for_topology(b.cluster), o);
}

step_shape shape_of(parallel_layout l, pipeline_schedule_kind kind = pipeline_schedule_kind::one_f_one_b, int virtual_stages = 1) {
  step_shape s;
  s.layout = l;
  s.schedule = make_pipeline_schedule(kind, virtual_stages);
  s.tp_mode = tp_collectives::all_reduce;
  s.sync = gradient_sync::all_reduce;
  return s;
}

}  // namespace

TEST_CASE("on free links the iteration is the longest path over the schedule's blocks, for every schedule", "[sim][step]") {
  random_generator g(77);
  for (int trial = 0; trial < 24; ++trial) {
    const int P = static_cast<int>(g.between(1, 5)), M = static_cast<int>(g.between(1, 9));
    const auto kind = static_cast<pipeline_schedule_kind>(g.between(0, 3));
    const int V = kind == pipeline_schedule_kind::interleaved ? 2 : 1;
    std::vector<token_count> lengths(static_cast<std::size_t>(M));
    for (token_count& x : lengths) x = g.between(64, 4096);
    const built b = build(shape_of({1, 1, P, 1}, kind, V), zeppelin_test::toy_model(P * V * 2), lengths, free_cluster(P));
    const step_sim_result r = run(b, block_pricing::per_shape, true);
    // every block's duration, as the simulator priced it
    std::vector<double> duration(b.program.blocks.size(), 0);
    for (const compute_segment& s : r.run.segments)
      duration[static_cast<std::size_t>(r.block_of_task[static_cast<std::size_t>(s.task)])] += s.end - s.start;
    // Oracle, the program's semantics with free links: a rank runs its blocks in order on its
    // compute stream (each after the groups its `after` names) and its groups in order on its
    // communication stream (each posted after the previous group and the blocks in its
    // `after`); a group completes once every transfer's other end has posted its group.
    const step_program& prog = b.program;
    const auto R = prog.ranks.size();
    std::vector<std::vector<int>> group_of_end(prog.transfers.size(), std::vector<int>(2, -1));  // transfer x end -> group
    for (std::size_t g = 0; g < prog.groups.size(); ++g)
      for (const std::int32_t x : prog.groups[g].transfers) {
        const step_transfer& t = prog.transfers[static_cast<std::size_t>(x)];
        auto& ends = group_of_end[static_cast<std::size_t>(x)];
        // a transfer to the rank itself has both ends in the one group
        if (t.src == prog.groups[g].rank) ends[0] = static_cast<int>(g);
        if (t.dst == prog.groups[g].rank) ends[1] = static_cast<int>(g);
      }
    std::vector<double> posted(prog.groups.size(), -1);
    std::vector<std::vector<double>> op_end(R);
    std::vector<std::size_t> next(R, 0);
    std::vector<double> compute_free(R, 0), comm_free(R, 0);
    for (std::size_t r = 0; r < R; ++r) op_end[r].assign(prog.ranks[r].size(), -1);
    for (bool progress = true; progress;) {
      progress = false;
      for (std::size_t r = 0; r < R; ++r)
        for (auto& i = next[r]; i < prog.ranks[r].size(); ++i) {
          const step_op& op = prog.ranks[r][i];
          const bool block = op.kind == step_op_kind::block;
          double ready = block ? compute_free[r] : comm_free[r];
          for (const std::int32_t a : op.after) ready = std::max(ready, op_end[r][static_cast<std::size_t>(a)]);
          if (block) {
            op_end[r][i] = compute_free[r] = ready + duration[static_cast<std::size_t>(op.index)];
            progress = true;
            continue;
          }
          posted[static_cast<std::size_t>(op.index)] = ready;
          double done = ready;
          bool partners = true;
          for (const std::int32_t x : prog.groups[static_cast<std::size_t>(op.index)].transfers)
            for (const int g : group_of_end[static_cast<std::size_t>(x)]) {
              REQUIRE(g >= 0);  // every transfer has both ends in some group
              if (posted[static_cast<std::size_t>(g)] < 0) partners = false;
              done = std::max(done, posted[static_cast<std::size_t>(g)]);
            }
          if (!partners) break;  // a partner has not posted yet
          op_end[r][i] = comm_free[r] = done;
          progress = true;
        }
    }
    std::vector<double> free_at;
    for (std::size_t r = 0; r < R; ++r) {
      REQUIRE(next[r] == prog.ranks[r].size());
      free_at.push_back(std::max(compute_free[r], comm_free[r]));
    }
    CAPTURE(P, M, V, to_string(kind));
    CHECK(r.iteration_s == Approx(*std::max_element(free_at.begin(), free_at.end())).epsilon(1e-9));
    // pricing every op in one engine gives the same step: nothing contends on free links
    CHECK(run(b, block_pricing::every_op).iteration_s == Approx(r.iteration_s).epsilon(1e-9));
  }
}

TEST_CASE("equal micro-batches: 1F1B and GPipe take (M + P - 1)(F + B), bubble (P - 1) / (M + P - 1)", "[sim][step]") {
  for (const int P : {1, 2, 4})
    for (const int M : {1, 3, 8}) {
      const std::vector<token_count> lengths(static_cast<std::size_t>(M), 2048);
      const model_config m = uniform_model(2 * P);
      const built one = build(shape_of({1, 1, 1, 1}), uniform_model(2), {2048}, free_cluster(1));
      const double f_plus_b = run(one).iteration_s;  // one stage's share of one micro-batch
      for (const auto kind : {pipeline_schedule_kind::one_f_one_b, pipeline_schedule_kind::gpipe}) {
        const step_sim_result r = run(build(shape_of({1, 1, P, 1}, kind), m, lengths, free_cluster(P)));
        CAPTURE(P, M, to_string(kind));
        CHECK(r.iteration_s == Approx((M + P - 1) * f_plus_b).epsilon(1e-3));
        CHECK(r.bubble_ratio == Approx(double(P - 1) / (M + P - 1)).margin(1e-3));
        CHECK(r.latency_imbalance == Approx(1.0).margin(1e-9));
        CHECK(r.attention_imbalance == 1.0);
      }
    }
}

TEST_CASE("full recomputation costs one forward per backward", "[sim][step]") {
  const std::vector<token_count> lengths(4, 2048);
  const model_config m = uniform_model(4);
  const built none = build(shape_of({1, 1, 2, 1}), m, lengths, free_cluster(2));
  const built full = build(shape_of({1, 1, 2, 1}), m, lengths, free_cluster(2), "hierarchical", full_recompute{});
  const step_sim_result a = run(none, block_pricing::every_op), b = run(full, block_pricing::every_op);
  // every layer's forward again in backward: the forward blocks' compute (the embedding and
  // the head, which are not recomputed, cost next to nothing with a vocabulary of one)
  double forwards = 0, recomputed = 0;
  for (const double f : a.forward_latency[0]) forwards += f;
  for (int s = 0; s < 2; ++s) {
    recomputed += b.stage(0, s).recompute_s;
    CHECK(b.stage(0, s).compute_s == Approx(a.stage(0, s).compute_s).epsilon(1e-9));
    CHECK(b.stage(0, s).memory.peak_bytes < a.stage(0, s).memory.peak_bytes);
  }
  CHECK(recomputed == Approx(forwards).epsilon(1e-3));
  CHECK(b.iteration_s > a.iteration_s);
}

TEST_CASE("TP collectives move Megatron-LM's bytes: two all-reduces a layer each way, or their reduce-scatters and all-gathers, with the vocabulary-parallel embedding and head", "[sim][step]") {
  const token_count rows = 1000;
  const model_config m = zeppelin_test::toy_model(3);
  for (const auto mode : {tp_collectives::all_reduce, tp_collectives::sequence_parallel})
    for (const int recomputed : {0, 2}) {
      step_shape shape = shape_of({2, 1, 1, 1});
      shape.tp_mode = mode;
      const topology t = links_of(1, 2, 2, 300e9, 50e9);
      const built b = recomputed ? build(shape, m, {rows}, t, "hierarchical", selective_recompute{{recomputed}}) : build(shape, m, {rows}, t);
      const step_sim_result r = run(b, block_pricing::every_op);
      // per layer and pass: 2 all-reduces of rows x hidden, each rank sending 2 (tp - 1) / tp of it
      // (sequence parallel: 4 collectives each (tp - 1) / tp); a recomputed layer's forward
      // again; the embedding's output and the head's input gradient alike (sequence parallel:
      // their reduce-scatters, and the all-gathers of the head's input and the embedding's
      // gradient); the cross-entropy's statistics, 2 fp32 per row and TP rank, all-gathered
      const double tensor = double(rows) * m.hidden * 2;  // bf16
      const double statistics = double(rows) * 2 * 4;
      const double per_rank = (2 * m.layers + recomputed + 1) * 2 * tensor * 2 * (2 - 1) / 2.0 + statistics * (2 - 1);
      CAPTURE(to_string(mode), recomputed);
      CHECK(r.stage(0, 0).traffic_bytes[static_cast<std::size_t>(traffic_class::tp)] == Approx(2 * per_rank).epsilon(1e-12));
      CHECK(r.stage(0, 0).traffic_s[static_cast<std::size_t>(traffic_class::tp)] > 0);
    }
}

TEST_CASE("CP, PP and DP traffic: the attention programs' pieces, each boundary tensor once, the gradient ring", "[sim][step]") {
  const model_config m = zeppelin_test::toy_model(4);
  const std::vector<token_count> lengths = {3000, 1000, 2000, 4000};
  const built b = build(shape_of({1, 2, 2, 2}), m, lengths, free_cluster(8), "even_split");
  const step_sim_result r = run(b, block_pricing::every_op);
  // CP: per micro-batch, its program's pieces once per layer and pass (no recomputation)
  for (int replica = 0; replica < 2; ++replica)
    for (int s = 0; s < 2; ++s) {
      double cp = 0;
      for (std::int32_t k = 0; k < 2; ++k)
        for (const recorded_transfer& x : program_record(b.program.layout(replica, k).attention).transfers) cp += double(x.bytes) * 2;  // 2 layers a stage
      CHECK(r.stage(replica, s).traffic_bytes[static_cast<std::size_t>(traffic_class::cp)] == Approx(cp).epsilon(1e-12));
    }
  // PP: stage 0 sends each micro-batch's activations, stage 1 its gradients: rows x hidden x 2 bytes
  for (int replica = 0; replica < 2; ++replica) {
    double rows = 0;
    for (std::int32_t k = 0; k < 2; ++k) rows += double(b.plan.replicas[static_cast<std::size_t>(replica)].micro_batches[static_cast<std::size_t>(k)].tokens());
    CHECK(r.stage(replica, 0).traffic_bytes[static_cast<std::size_t>(traffic_class::pp)] == Approx(rows * m.hidden * 2).epsilon(1e-12));
    CHECK(r.stage(replica, 1).traffic_bytes[static_cast<std::size_t>(traffic_class::pp)] == Approx(rows * m.hidden * 2).epsilon(1e-12));
  }
  // DP: a ring all-reduce over the 4 ranks of a stage (2 CP ranks x 2 replicas): 2 (n - 1) / n of
  // the stage's fp32 gradients from each rank
  for (int s = 0; s < 2; ++s) {
    const double params = b.program.stage_parameters[0][static_cast<std::size_t>(s)];
    const double sent = r.stage(0, s).traffic_bytes[static_cast<std::size_t>(traffic_class::dp)] +
                        r.stage(1, s).traffic_bytes[static_cast<std::size_t>(traffic_class::dp)];
    CHECK(sent == Approx(4 * 2 * 3.0 / 4 * params * 4).epsilon(1e-6));
  }
}

TEST_CASE("with TP the sync first sums the norms' gradients over each stage's TP ranks, then the shard's over CP ranks and replicas", "[sim][step]") {
  const model_config m = zeppelin_test::toy_model(4);
  const built b = build(shape_of({2, 2, 2, 2}), m, {3000, 1000, 2000, 4000}, free_cluster(16), "even_split");
  const step_program& prog = b.program;
  const step_sim_result r = run(b, block_pricing::every_op);
  for (int s = 0; s < 2; ++s) {
    const double params = prog.stage_parameters[0][static_cast<std::size_t>(s)];
    const double replicated = prog.stage_replicated_parameters[0][static_cast<std::size_t>(s)];
    CHECK(replicated == 2.0 * m.hidden * 2 + (s == 1 ? m.hidden : 0));  // 2 layers' norms, the final norm on the last stage
    // each rank: 2 (2 - 1) / 2 of the norms' fp32 gradients over TP, 2 (4 - 1) / 4 of its shard's over 2 CP x 2 replicas
    double sent = 0;
    for (int replica = 0; replica < 2; ++replica) sent += r.stage(replica, s).traffic_bytes[static_cast<std::size_t>(traffic_class::dp)];
    CHECK(sent == Approx(8 * (replicated * 4 + 2 * 3.0 / 4 * params * 4)).epsilon(1e-6));
  }
  // the TP all-reduce names the last `replicated` gradients of the stage, between TP ranks of one (replica, CP rank, stage)
  for (const step_transfer& x : prog.transfers) {
    if (x.from.tensor != step_tensor::gradients || x.traffic != traffic_class::dp) continue;
    const step_position a = prog.positions[static_cast<std::size_t>(x.src)], c = prog.positions[static_cast<std::size_t>(x.dst)];
    REQUIRE(a.stage == c.stage);
    const auto s = static_cast<std::size_t>(a.stage);
    const double tail = (prog.stage_parameters[0][s] - prog.stage_replicated_parameters[0][s]) * 4;
    if (a.tp != c.tp) {
      CHECK((a.replica == c.replica && a.cp == c.cp));
      CHECK(double(x.from.offset) >= tail);
      CHECK(double(x.from.offset + x.bytes) <= prog.stage_parameters[0][s] * 4);
    }
  }
}

TEST_CASE("with sequence parallelism each TP rank sends its row share of a boundary tensor, at the chunk its reduce-scatter summed", "[sim][step]") {
  const model_config m = zeppelin_test::toy_model(4);
  step_shape shape = shape_of({2, 2, 2, 1});
  shape.tp_mode = tp_collectives::sequence_parallel;
  const built b = build(shape, m, {3001, 1000, 2003}, free_cluster(8), "even_split");
  const step_program& prog = b.program;
  const std::int64_t row_bytes = std::int64_t{m.hidden} * prog.options.activation_bytes;
  int boundaries = 0;
  for (const step_transfer& x : prog.transfers) {
    if (x.traffic != traffic_class::pp) continue;
    const step_position at = prog.positions[static_cast<std::size_t>(x.src)];
    const token_count rows = prog.layout(at.replica, x.from.micro_batch).linear_rows[static_cast<std::size_t>(at.cp)];
    const std::int64_t first = detail::ring_chunk_begin(rows, 2, at.tp), end = detail::ring_chunk_begin(rows, 2, at.tp + 1);
    CHECK(x.from.offset == first * row_bytes);
    CHECK(x.bytes == (end - first) * row_bytes);
    CHECK(x.to == x.from);
    ++boundaries;
  }
  CHECK(boundaries == 2 * 2 * 2 * static_cast<int>(prog.layouts[0].size()));  // (activation, gradient) x tp x cp x micro-batches
}

TEST_CASE("ZeRO-3 gathers every layer's parameters before its forward and backward and scatters its gradients", "[sim][step]") {
  const model_config m = zeppelin_test::toy_model(2);
  step_shape shape = shape_of({1, 2, 1, 1});
  shape.sync = gradient_sync::fully_sharded;
  const built b = build(shape, m, {4096, 2048}, free_cluster(2));
  const step_sim_result r = run(b, block_pricing::every_op);
  // per micro-batch and layer: a gather forward, a gather backward, a reduce-scatter; each rank
  // of a ring of 2 sends half of one TP rank's parameters of the layer (bf16 gathers, fp32 scatters)
  double sent = 0;
  for (int l = 0; l < m.layers; ++l) {
    const double p = double(detail::tp_rank_parameters(m, 1, 1, l == 0, l == m.layers - 1));
    sent += 2 * (2 * p / 2 * 2 + p / 2 * 4);  // 2 micro-batches
  }
  CHECK(r.stage(0, 0).traffic_bytes[static_cast<std::size_t>(traffic_class::tp)] == Approx(2 * sent).epsilon(1e-6));
  CHECK(r.stage(0, 0).traffic_bytes[static_cast<std::size_t>(traffic_class::dp)] == 0);  // one replica: no ring after the step
}

TEST_CASE("ZeRO-3: the first virtual stage gathers its first layer before the embedding and scatters it after the embedding's backward", "[sim][step]") {
  const model_config m = zeppelin_test::toy_model(2);
  step_shape shape = shape_of({1, 2, 1, 1});
  shape.sync = gradient_sync::fully_sharded;
  const built b = build(shape, m, {4096, 2048}, free_cluster(2));
  int checked = 0;
  for (std::int32_t i = 0; i < static_cast<std::int32_t>(b.program.blocks.size()); ++i) {
    const block_program bp = make_block_program(b.program, i);
    const std::vector<layer_op>& ops = bp.ops[0];
    std::size_t embedding = ops.size();
    for (std::size_t j = 0; j < ops.size(); ++j)
      if (ops[j].kind == layer_op_kind::compute && ops[j].part == model_part::embedding) embedding = j;
    REQUIRE(embedding < ops.size());
    const auto is_layer0_ring = [&](const layer_op& op, step_tensor tensor) {
      if (op.kind != layer_op_kind::group || op.layer != 0) return false;
      const step_transfer& x = bp.transfers[static_cast<std::size_t>(bp.groups[static_cast<std::size_t>(op.index)].transfers.front())];
      return x.from.tensor == tensor;
    };
    if (b.program.blocks[static_cast<std::size_t>(i)].pass == step_pass::forward) {
      // every op before the embedding gathers layer 0's parameters, and the embedding waits for them
      CHECK(embedding > 0);
      for (std::size_t j = 0; j < embedding; ++j) CHECK(is_layer0_ring(ops[j], step_tensor::parameters));
      CHECK(ops[embedding].after.size() == 1);
    } else {
      // the embedding's backward is followed only by layer 0's gradient reduce-scatter
      CHECK(embedding + 1 < ops.size());
      for (std::size_t j = embedding + 1; j < ops.size(); ++j) CHECK(is_layer0_ring(ops[j], step_tensor::gradients));
      for (std::size_t j = 0; j < embedding; ++j) CHECK_FALSE(is_layer0_ring(ops[j], step_tensor::gradients));
    }
    ++checked;
  }
  CHECK(checked == 4);  // two micro-batches, forward and backward
}

TEST_CASE("1F1B memory peaks where the first stage holds min(M, P) micro-batches", "[sim][step]") {
  const model_config m = zeppelin_test::toy_model(8);
  for (const int M : {2, 4, 8}) {
    const built b = build(shape_of({1, 1, 4, 1}), m, std::vector<token_count>(static_cast<std::size_t>(M), 4096), free_cluster(4));
    const step_sim_result r = run(b);
    const pipeline_memory_model mm = step_memory_model(b.program, 0, {});
    const stage_slice first{2, true, false};
    const double expected = mm.model_state_bytes(first) + std::min(M, 4) * mm.activation_bytes(4096, first, 0);
    CAPTURE(M);
    CHECK(r.stage(0, 0).memory.peak_bytes == Approx(expected).epsilon(1e-12));
  }
}

TEST_CASE("data-parallel replicas: the step waits for the slowest, imbalance degrees follow WLB-LLM", "[sim][step]") {
  const model_config m = uniform_model(4);
  // replica 0 runs two equal micro-batches, replica 1 a long and a short one
  const built b = build(shape_of({1, 1, 2, 2}), m, {2048, 4096, 2048, 512}, free_cluster(4));
  const step_sim_result r = run(b);
  CHECK(r.latency_imbalance > 1.0);
  const auto imbalance_of = [](const std::vector<double>& lat) { return std::max(lat[0], lat[1]) * 2 / (lat[0] + lat[1]); };
  CHECK(r.latency_imbalance == Approx(std::max(imbalance_of(r.forward_latency[0]), imbalance_of(r.forward_latency[1]))).epsilon(1e-12));
  const double pairs = (2048.0 * 2049 / 2 * 2 + 4096.0 * 4097 / 2 + 512.0 * 513 / 2) / 4;
  CHECK(r.attention_imbalance == Approx(4096.0 * 4097 / 2 / pairs).epsilon(1e-12));
  // eight equal micro-batches on four stages: balanced, 1
  const step_sim_result even = run(build(shape_of({1, 1, 4, 1}), m, std::vector<token_count>(8, 1024), free_cluster(4)));
  CHECK(even.latency_imbalance == Approx(1.0).margin(1e-9));
}

TEST_CASE("per_shape pricing is every_op's step where blocks do not share links", "[sim][step]") {
  // TP and CP inside one node per stage, stages on their own nodes, one replica: a block's
  // traffic stays on its node's NVLink, the pipeline's on NICs of its own
  const topology t = links_of(2, 4, 4, 300e9, 50e9);
  const built b = build(shape_of({2, 2, 2, 1}), zeppelin_test::toy_model(4), {8192, 4096, 2048}, t, "per_document");
  // without SM contention (a transfer of another block slowing a block's kernels is what
  // per_shape leaves out)
  sim_cost_model cost = sim_cost_model::for_topology(t);
  cost.contention.enabled = false;
  const auto priced = [&](block_pricing p) {
    return simulate_step(b.program, t, cost, {.pricing = p, .memory_capacity_bytes = unlimited}).iteration_s;
  };
  CHECK(priced(block_pricing::per_shape) == Approx(priced(block_pricing::every_op)).epsilon(1e-9));
}

TEST_CASE("per_shape pricing gives the same step on any threads, as when shapes are priced as blocks run", "[sim][step]") {
  // shared NICs and slow links, so that shapes differ in placement and contend inside
  const topology t = links_of(4, 2, 2, 100e9, 5e9);
  const built b = build(shape_of({2, 2, 2, 1}), zeppelin_test::toy_model(4), {8192, 4096, 2048, 6000, 512, 3000}, t, "per_document");
  const sim_cost_model cost = sim_cost_model::for_topology(t);
  const auto with = [&](int threads) {
    return simulate_step(b.program, t, cost, {.pricing = block_pricing::per_shape, .memory_capacity_bytes = unlimited, .threads = threads});
  };
  const step_sim_result one = with(1);
  for (const int threads : {2, 3, 8}) {
    const step_sim_result many = with(threads);
    CHECK(many.iteration_s == one.iteration_s);
    CHECK(many.forward_latency == one.forward_latency);
    REQUIRE(many.stages.size() == one.stages.size());
    for (std::size_t i = 0; i < one.stages.size(); ++i) {
      CHECK(many.stages[i].compute_s == one.stages[i].compute_s);
      CHECK(many.stages[i].traffic_s == one.stages[i].traffic_s);
      CHECK(many.stages[i].traffic_bytes == one.stages[i].traffic_bytes);
    }
  }
  // the backend alone prices each shape when its first block runs: the same step
  event_engine e(t, stream_policy::in_order, cost.link, cost.contention.slowdown(t.gpu()));
  std::vector<rank_index> ranks(static_cast<std::size_t>(b.program.num_ranks()));
  std::iota(ranks.begin(), ranks.end(), 0);
  step_sim_backend backend(e, b.program, t, cost, block_pricing::per_shape, ranks);
  run_step(b.program, backend);
  CHECK(e.run().makespan == one.iteration_s);
  CHECK(zeppelin_test::expect_invalid([&] { (void)with(0); }).value("threads") == 0);
}

TEST_CASE("a deadline stops a simulation exactly when the step takes longer, per_shape before the step runs", "[sim][step]") {
  const topology t = links_of(4, 2, 2, 100e9, 5e9);
  const sim_cost_model cost = sim_cost_model::for_topology(t);
  random_generator random(7);
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<token_count> lengths;
    for (int d = 0, n = 2 + static_cast<int>(random() % 6); d < n; ++d) lengths.push_back(1 + static_cast<token_count>(random() % 8192));
    const built b = build(shape_of({2, 2, 2, 1}), zeppelin_test::toy_model(4), lengths, t, trial % 2 ? "per_document" : "per_sequence");
    for (const block_pricing pricing : {block_pricing::per_shape, block_pricing::every_op}) {
      const auto with = [&](double deadline, int threads) {
        return simulate_step(b.program, t, cost, {.pricing = pricing, .memory_capacity_bytes = unlimited, .threads = threads, .deadline_s = deadline});
      };
      const double full = with(std::numeric_limits<double>::infinity(), 1).iteration_s;
      REQUIRE(full > 0);
      for (const double f : {0.01, 0.3, 0.7, 0.999, 1.0, 1.001, 3.0})
        for (const int threads : {1, 3}) {
          CAPTURE(trial, to_string(pricing), f, threads);
          const step_sim_result r = with(f * full, threads);
          CHECK(r.stopped == (full > f * full));
          if (r.stopped) CHECK(r.iteration_s == std::numeric_limits<double>::infinity());
          else CHECK(r.iteration_s == full);
        }
      // a rank's blocks priced one by one pass 1% of the step long before the last shape
      if (pricing == block_pricing::per_shape) {
        event_engine e(t, stream_policy::in_order, cost.link, cost.contention.slowdown(t.gpu()));
        std::vector<rank_index> ranks(static_cast<std::size_t>(b.program.num_ranks()));
        std::iota(ranks.begin(), ranks.end(), 0);
        step_sim_backend backend(e, b.program, t, cost, block_pricing::per_shape, ranks);
        CHECK(backend.price_shapes(1, 0.01 * full) > 0.01 * full);
        step_sim_backend all(e, b.program, t, cost, block_pricing::per_shape, ranks);
        CHECK(all.price_shapes(1) == 0);
        CHECK(backend.shapes_priced() < all.shapes_priced());
      }
    }
  }
}

TEST_CASE("per_shape prices a block of many identical layers from its first ones, as every_op runs it", "[sim][step]") {
  const model_config m = zeppelin_test::toy_model(32);  // 16 layers a stage
  const std::vector<token_count> lengths = {8192, 4096, 2048, 3000};
  for (const int cp : {1, 2}) {
    // each stage's TP x CP ranks on a node of their own, one replica: blocks share no links
    const topology t = links_of(2, 2 * cp, 2 * cp, 300e9, 50e9);
    sim_cost_model cost = sim_cost_model::for_topology(t);
    cost.contention.enabled = false;  // what per_shape leaves out: another block's transfers slowing a kernel
    for (const auto mode : {tp_collectives::all_reduce, tp_collectives::sequence_parallel})
      for (const int recompute : {0, 1, 2}) {  // none, every layer, some (a backward of two runs: run whole)
        step_shape shape = shape_of({2, cp, 2, 1});
        shape.tp_mode = mode;
        const built b = recompute == 0   ? build(shape, m, lengths, t, "per_document")
                        : recompute == 1 ? build(shape, m, lengths, t, "per_document", full_recompute{})
                                         : build(shape, m, lengths, t, "per_document", selective_recompute{{5}});
        CAPTURE(cp, to_string(mode), recompute);
        const auto priced = [&](block_pricing p) { return simulate_step(b.program, t, cost, {.pricing = p, .memory_capacity_bytes = unlimited}); };
        const step_sim_result shaped = priced(block_pricing::per_shape), every = priced(block_pricing::every_op);
        CHECK(shaped.iteration_s == Approx(every.iteration_s).epsilon(1e-9));
        REQUIRE(shaped.stages.size() == every.stages.size());
        for (std::size_t i = 0; i < every.stages.size(); ++i) {
          CHECK(shaped.stages[i].compute_s == Approx(every.stages[i].compute_s).epsilon(1e-9));
          CHECK(shaped.stages[i].recompute_s == Approx(every.stages[i].recompute_s).epsilon(1e-9));
          for (const traffic_class k : {traffic_class::tp, traffic_class::cp}) {
            CHECK(shaped.stages[i].traffic_s[static_cast<std::size_t>(k)] == Approx(every.stages[i].traffic_s[static_cast<std::size_t>(k)]).epsilon(1e-9));
            CHECK(shaped.stages[i].traffic_bytes[static_cast<std::size_t>(k)] ==
                  Approx(every.stages[i].traffic_bytes[static_cast<std::size_t>(k)]).epsilon(1e-9));
          }
        }
        // which blocks were priced from their first layers: with TP alone (its collectives
        // keep a stage's ranks in step) every block but the backwards that recompute some
        // layers; across unequal CP ranks a layer may still drift after six, and the block
        // is run whole
        event_engine e(t, stream_policy::in_order, cost.link, cost.contention.slowdown(t.gpu()));
        std::vector<rank_index> ranks(static_cast<std::size_t>(b.program.num_ranks()));
        std::iota(ranks.begin(), ranks.end(), 0);
        step_sim_backend backend(e, b.program, t, cost, block_pricing::per_shape, ranks);
        backend.price_shapes(2);
        if (cp == 1 && recompute < 2) CHECK(backend.shapes_priced_by_period() == backend.shapes_priced());
        if (cp == 1 && recompute == 2) CHECK((backend.shapes_priced_by_period() > 0 && backend.shapes_priced_by_period() < backend.shapes_priced()));
      }
  }
}

TEST_CASE("the step trace shows each stage's blocks, kernels and transfers", "[sim][step]") {
  const built b = build(shape_of({2, 1, 2, 1}), zeppelin_test::toy_model(2), {1024, 512}, links_of(2, 2, 2, 300e9, 50e9));
  const step_sim_result r = run(b, block_pricing::every_op, true);
  std::ostringstream os;
  write_step_trace(os, b.program, r);
  const std::string s = os.str();
  CHECK(s.find("\"format\":\"zeppelin.step_trace\"") != std::string::npos);
  CHECK(s.find("\"name\":\"F0\"") != std::string::npos);
  CHECK(s.find("\"name\":\"B1\"") != std::string::npos);
  CHECK(s.find("stage 1 kernels") != std::string::npos);
  CHECK(s.find("\"name\":\"tp_transfer\",\"cat\":\"tp\"") != std::string::npos);
  CHECK(s.find("\"name\":\"activation\",\"cat\":\"pp\"") != std::string::npos);
  CHECK_THROWS_WITH(write_step_trace(os, b.program, run(b)), Catch::Contains("keep_run"));
}

TEST_CASE("the step simulator refuses what it cannot price", "[sim][step]") {
  const built b = build(shape_of({1, 1, 2, 1}), zeppelin_test::toy_model(2), {1 << 20}, free_cluster(2));
  const sim_cost_model cost = sim_cost_model::for_topology(b.cluster);
  // a micro-batch over the GPU's memory names the stage, the micro-batch and the bytes
  const infeasible e = zeppelin_test::expect_error<infeasible>([&] { (void)simulate_step(b.program, b.cluster, cost, {}); });
  CHECK(std::string(e.what()).find("stage 0 runs out of GPU memory at micro-batch 0") != std::string::npos);
  CHECK(e.value("bytes") > b.cluster.gpu().memory_bytes);
  CHECK(zeppelin_test::expect_invalid([&] { (void)simulate_step(b.program, b.cluster, cost, {.memory_capacity_bytes = -1}); })
            .value("memory_capacity_bytes") == -1);
  CHECK_THROWS_WITH(simulate_step(b.program, b.cluster, cost, {.pricing = block_pricing::per_shape, .memory_capacity_bytes = unlimited, .record = true}),
                    Catch::Contains("every op priced"));
  CHECK(zeppelin_test::expect_invalid([&] { (void)simulate_step(b.program, links_of(1, 4, 4, 1e30, 1e30), cost, {.memory_capacity_bytes = unlimited}); })
            .value("ranks") == 4);
}
