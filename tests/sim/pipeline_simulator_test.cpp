// tests/sim/pipeline_simulator_test.cpp
// The 4D step simulator (sim/pipeline_simulator.hpp) against closed forms: 1F1B and GPipe
// bubbles for equal micro-batches, interleaving cutting the bubble by V, recomputation
// costing exactly its layers' forwards and saving memory, memory peaks where the 1F1B
// window is fullest, DP and CP waits, WLB-LLM's imbalance degrees, and a clear error when a
// stage does not fit.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/schedule/pipeline.hpp>
#include <zeppelin/sim/pipeline_simulator.hpp>
#include <zeppelin/sim/pipeline_trace.hpp>
#include <zeppelin/sim/dedicated_link_engine.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <limits>
#include <sstream>
#include <vector>

#include "../support/sim_fixtures.hpp"

using namespace zeppelin;
using zeppelin::clusters::cluster_c;

namespace {
// Links so fast that transfers cost nothing: the pipeline's own shape is all that is left.
topology free_links(int gpus) { return zeppelin_test::links_of(1, gpus, 1, 1e30, 1e30); }

using zeppelin_test::toy_model;

// forward of every chunk 1 s and backward 2 s whatever the micro-batch (profile intercepts)
const fitted_stage_time unit_times{{0, 0, 1}, {0, 0, 2}, 1};

std::vector<std::vector<micro_batch>> equal_micro_batches(int dp, int m, token_count tokens) {
  return std::vector<std::vector<micro_batch>>(static_cast<std::size_t>(dp),
                                               std::vector<micro_batch>(static_cast<std::size_t>(m), micro_batch{{tokens}, {}}));
}

pipeline_memory_model memory_for(const model_config& m, parallel_layout l) { return {m, l, {}}; }

using zeppelin_test::unlimited;
}  // namespace

TEST_CASE("1F1B and GPipe with equal micro-batches: (M + P - 1)(F + B), bubble (P - 1) / (M + P - 1)", "[sim][pipeline]") {
  random_generator g(314);
  for (int trial = 0; trial < 40; ++trial) {
    const int P = static_cast<int>(g.between(1, 8)), M = static_cast<int>(g.between(1, 32));
    CAPTURE(P, M);
    const auto mbs = equal_micro_batches(1, M, 1024);
    const auto memory = memory_for(toy_model(2 * P), {1, 1, P, 1});
    const pipeline_sim_options o{.memory_capacity_bytes = unlimited};
    const auto f = simulate_pipeline(mbs, one_f_one_b{}, no_recompute{}, unit_times, memory, free_links(P), o);
    const auto gp = simulate_pipeline(mbs, gpipe{}, no_recompute{}, unit_times, memory, free_links(P), o);
    CHECK(f.iteration_s == Approx(3.0 * (M + P - 1)).epsilon(1e-12));
    CHECK(gp.iteration_s == Approx(3.0 * (M + P - 1)).epsilon(1e-12));
    CHECK(f.bubble_ratio == Approx(double(P - 1) / (M + P - 1)).margin(1e-12));
    for (const auto& s : f.stages[0]) {
      CHECK(s.busy_s == Approx(3.0 * M));
      CHECK(s.recompute_s == 0);
    }
  }
}

TEST_CASE("interleaving V chunks cuts the 1F1B bubble by V when M is a multiple of P", "[sim][pipeline]") {
  // per-document terms scale with the chunk's layers: a whole-model forward of 1 s, backward 2 s
  const fitted_stage_time per_layer{{0, 1.0 / 1024, 0}, {0, 2.0 / 1024, 0}, 16};
  for (const int V : {1, 2, 4})
    for (const int P : {2, 4}) {
      const int M = 2 * P;
      const auto mbs = equal_micro_batches(1, M, 1024);
      const auto memory = memory_for(toy_model(16), {1, 1, P, 1});
      const auto r = simulate_pipeline(mbs, interleaved_one_f_one_b{.virtual_stages = V}, no_recompute{}, per_layer, memory,
                                       free_links(P), {.memory_capacity_bytes = unlimited});
      const double ideal = 3.0 * M / P;  // one stage's work
      CAPTURE(P, V);
      CHECK(r.iteration_s == Approx(ideal + 3.0 * (P - 1) / (P * V)).epsilon(1e-9));
    }
}

TEST_CASE("full recomputation costs one forward per backward and keeps only layer inputs", "[sim][pipeline]") {
  const int P = 4, M = 8;
  const fitted_stage_time times{{0, 1.0 / 4096, 0.001}, {0, 2.0 / 4096, 0.001}, 32};
  const auto mbs = equal_micro_batches(1, M, 4096);
  const auto memory = memory_for(models::llama_7b(), {1, 1, P, 1});
  const topology t = cluster_c(1);
  const pipeline_sim_options o{.memory_capacity_bytes = unlimited};
  const auto none = simulate_pipeline(mbs, one_f_one_b{}, no_recompute{}, times, memory, t, o);
  const auto full = simulate_pipeline(mbs, one_f_one_b{}, full_recompute{}, times, memory, t, o);
  const auto some = simulate_pipeline(mbs, one_f_one_b{}, selective_recompute{{4, 2, 0, 0}}, times, memory, t, o);
  for (int p = 0; p < P; ++p) {
    const auto& n = none.stages[0][static_cast<std::size_t>(p)];
    const auto& f = full.stages[0][static_cast<std::size_t>(p)];
    const auto& s = some.stages[0][static_cast<std::size_t>(p)];
    CHECK(f.recompute_s == Approx(n.forward_s - M * 0.001).epsilon(1e-9));  // every layer's forward once more
    CHECK(f.busy_s == Approx(n.busy_s + f.recompute_s));
    CHECK(f.memory.peak_bytes < n.memory.peak_bytes);
    CHECK(s.memory.peak_bytes <= n.memory.peak_bytes);
    CHECK(s.memory.peak_bytes >= f.memory.peak_bytes);
  }
  CHECK(some.stages[0][2].recompute_s == 0);
  CHECK(some.stages[0][0].recompute_s == Approx(2 * some.stages[0][1].recompute_s));
  CHECK(full.iteration_s > none.iteration_s);
}

// InfiniPipe, Eqs. 6-8: M_tot(p, t) = M_ms(p) + sum over the window W_p(t) of M_act, with
// |W_p| = d_p - p + N_prefill (1-based p; one chunk per sequence here, N_prefill = 1), i.e.
// min(M, P - p) micro-batches on 0-based stage p, the peak at the end of the warm-up.
TEST_CASE("1F1B memory peaks where its window is fullest", "[sim][pipeline]") {
  random_generator g(99);
  for (int trial = 0; trial < 20; ++trial) {
    const int P = static_cast<int>(g.between(2, 8)), M = static_cast<int>(g.between(1, 24));
    const auto mbs = equal_micro_batches(1, M, 2048);
    const auto memory = memory_for(toy_model(2 * P), {1, 1, P, 1});
    const auto r = simulate_pipeline(mbs, one_f_one_b{}, no_recompute{}, unit_times, memory, free_links(P),
                                     {.memory_capacity_bytes = unlimited});
    for (int p = 0; p < P; ++p) {
      const auto& m = r.stages[0][static_cast<std::size_t>(p)].memory;
      CAPTURE(P, M, p);
      CHECK(m.in_flight == std::min(M, P - p));
      const double activations = m.peak_bytes - m.model_state_bytes;
      const stage_slice slice = split_model(memory.model, P)[static_cast<std::size_t>(p)];
      CHECK(activations == Approx(std::min(M, P - p) * memory.activation_bytes(2048, slice, 0)));
    }
    // GPipe holds every micro-batch
    const auto gp = simulate_pipeline(mbs, gpipe{}, no_recompute{}, unit_times, memory, free_links(P), {.memory_capacity_bytes = unlimited});
    CHECK(gp.stages[0][0].memory.in_flight == M);
  }
}

TEST_CASE("a stage over memory is an infeasible error naming stage, micro-batch and bytes", "[sim][pipeline]") {
  const auto mbs = equal_micro_batches(1, 8, 65536);
  const auto memory = memory_for(models::llama_7b(), {1, 1, 4, 1});
  try {
    (void)simulate_pipeline(mbs, one_f_one_b{}, no_recompute{}, unit_times, memory, cluster_c(1));
    FAIL("expected infeasible");
  } catch (const infeasible& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("stage 0") && Catch::Contains("micro-batch") && Catch::Contains("GiB"));
  }
  // full recomputation makes it fit
  CHECK_NOTHROW(simulate_pipeline(mbs, one_f_one_b{}, full_recompute{}, unit_times, memory, cluster_c(1)));
}

TEST_CASE("data parallel replicas wait for the slowest and imbalance degrees follow WLB-LLM", "[sim][pipeline]") {
  const fitted_stage_time quadratic{{1e-9, 1e-5, 0}, {2e-9, 2e-5, 0}, 32};
  std::vector<std::vector<micro_batch>> replicas{{{{8192}, {}}, {{8192}, {}}}, {{{4096, 4096}, {}}, {{4096, 4096}, {}}}};
  const auto memory = memory_for(models::llama_7b(), {1, 1, 2, 2});
  const auto r = simulate_pipeline(replicas, one_f_one_b{}, full_recompute{}, quadratic, memory, cluster_c(1),
                                   {.memory_capacity_bytes = unlimited});
  CHECK(r.stages[0][0].dp_wait_s == 0);      // replica 0 holds the longer documents
  CHECK(r.stages[1][0].dp_wait_s > 0);
  const double big = 8192.0 * 8193 / 2, small = 2 * (4096.0 * 4097 / 2);
  CHECK(r.attention_imbalance == Approx(big / ((2 * big + 2 * small) / 4)));
  CHECK(r.latency_imbalance == Approx(1.0));  // within each replica the micro-batches are equal (x PP / M = 1)
  // one micro-batch twice as slow as the three others, PP 2: max x PP / total = 2 x 2 / 5
  const std::vector<std::vector<micro_batch>> skewed{{{{2000}, {}}, {{1000}, {}}, {{1000}, {}}, {{1000}, {}}}};
  const fitted_stage_time linear{{0, 1e-3, 0}, {0, 2e-3, 0}, 32};
  const auto memory1 = memory_for(models::llama_7b(), {1, 1, 2, 1});
  const auto s = simulate_pipeline(skewed, one_f_one_b{}, full_recompute{}, linear, memory1, cluster_c(1), {.memory_capacity_bytes = unlimited});
  CHECK(s.latency_imbalance == Approx(0.8));
  CHECK(r.iteration_s > 0);
  std::ostringstream trace;
  write_pipeline_trace(trace, r);
  CHECK_THAT(trace.str(), Catch::Contains("\"replica 1\"") && Catch::Contains("\"stage 1\"") && Catch::Contains("gradient_sync") &&
                              Catch::Contains("\"name\":\"F0\""));
}

TEST_CASE("unbalanced CP shares make the stage wait for its slowest CP rank", "[sim][pipeline]") {
  const model_config m = toy_model(4);
  const auto time = analytic_stage_time::for_gpu(m, cluster_c(1).gpu(), 1, 2);
  micro_batch even{{8192}, {}}, skewed{{8192}, {{4096, 4096ll * 4097 / 2}, {4096, 8192ll * 8193 / 2 - 4096ll * 4097 / 2}}};
  const auto memory = memory_for(m, {1, 2, 2, 1});
  const std::vector<std::vector<micro_batch>> a{{even, even}}, b{{skewed, skewed}};
  const pipeline_sim_options o{.memory_capacity_bytes = unlimited};
  const auto ra = simulate_pipeline(a, one_f_one_b{}, no_recompute{}, time, memory, cluster_c(1), o);
  const auto rb = simulate_pipeline(b, one_f_one_b{}, no_recompute{}, time, memory, cluster_c(1), o);
  CHECK(rb.stages[0][0].cp_wait_s > ra.stages[0][0].cp_wait_s);
  CHECK(rb.iteration_s > ra.iteration_s);
}

TEST_CASE("the simulator rejects inputs that do not fit its layout", "[sim][pipeline]") {
  const auto memory = memory_for(toy_model(4), {1, 1, 2, 2});
  const pipeline_sim_options o{.memory_capacity_bytes = unlimited};
  CHECK_THROWS_WITH(simulate_pipeline(equal_micro_batches(1, 2, 64), one_f_one_b{}, no_recompute{}, unit_times, memory, free_links(4), o),
                    Catch::Contains("one micro-batch list per data-parallel replica"));
  CHECK_THROWS_WITH(simulate_pipeline(equal_micro_batches(2, 2, 64), one_f_one_b{}, no_recompute{}, unit_times, memory, free_links(3), o),
                    Catch::Contains("fewer GPUs"));
  const auto deep = memory_for(toy_model(4), {1, 1, 8, 1});
  CHECK_THROWS_WITH(simulate_pipeline(equal_micro_batches(1, 2, 64), one_f_one_b{}, no_recompute{}, unit_times, deep, free_links(8), o),
                    Catch::Contains("more stages than layers"));
  CHECK_THROWS_WITH(simulate_pipeline(std::vector<std::vector<micro_batch>>{{}, {}}, one_f_one_b{}, no_recompute{}, unit_times, memory,
                                      free_links(4), o),
                    Catch::Contains("at least one micro-batch"));
}

TEST_CASE("dedicated links time the same tasks: never slower than shared links, equal when nothing contends", "[sim][pipeline]") {
  random_generator g(5);
  const fitted_stage_time quadratic{{1e-9, 1e-5, 1e-4}, {2e-9, 2e-5, 1e-4}, 32};
  for (int trial = 0; trial < 10; ++trial) {
    const int P = static_cast<int>(g.between(2, 8)), M = static_cast<int>(g.between(1, 16));
    std::vector<micro_batch> mbs(static_cast<std::size_t>(M));
    for (auto& mb : mbs) mb.documents = {g.between(512, 16384)};
    const std::vector<std::vector<micro_batch>> replicas{mbs};
    const auto memory = memory_for(models::llama_7b(), {1, 1, P, 1});
    const pipeline_sim_options o{.memory_capacity_bytes = unlimited};
    for (const topology& t : {cluster_c(1), free_links(P)}) {
      const auto shared = simulate_pipeline(replicas, one_f_one_b{}, no_recompute{}, quadratic, memory, t, o, shared_links{});
      const auto dedicated = simulate_pipeline(replicas, one_f_one_b{}, no_recompute{}, quadratic, memory, t, o, dedicated_links{});
      CHECK(dedicated.iteration_s <= shared.iteration_s * (1 + 1e-8));  // the event engine drains a flow within 1e-9 of its bytes
      if (t.name() != cluster_c(1).name()) CHECK(dedicated.iteration_s == Approx(shared.iteration_s).epsilon(1e-8));
      CHECK(dedicated.run.flows.size() == shared.run.flows.size());
      CHECK(dedicated.run.segments.size() == shared.run.segments.size());
    }
  }
}

TEST_CASE("the dedicated-link engine runs in-order streams and prices each flow alone", "[sim][pipeline]") {
  const topology t = cluster_c(2);
  dedicated_link_engine e(t);
  const task_tag fwd{task_kind::linear_forward, flow_leg::direct, -1, -1, 0, 0};
  const task_tag act{task_kind::activation, flow_leg::direct, -1, -1, 0, 0};
  const task_id a = e.compute(0, 1.0, fwd, 0, {});
  const task_id f1 = e.flow(0, 1, 380e9, act, {a});   // NVLink: 1 s + 3 us
  const task_id f2 = e.flow(0, 8, 48e9, act, {a});    // NIC: 1 s + 10 us, alone on its port
  const task_id b = e.compute(1, 0.5, fwd, 0, {f1});
  const task_id c = e.compute(1, 0.25, fwd, 0, {});  // in order: after b even though ready at 0
  const task_id d = e.compute(8, 0.5, fwd, 0, {f2});
  const engine_run r = e.run();
  CHECK(r.end[static_cast<std::size_t>(f1)] == Approx(2.0 + 3e-6));
  CHECK(r.end[static_cast<std::size_t>(f2)] == Approx(2.0 + 10e-6));
  CHECK(r.start[static_cast<std::size_t>(b)] == Approx(2.0 + 3e-6));
  CHECK(r.start[static_cast<std::size_t>(c)] == Approx(r.end[static_cast<std::size_t>(b)]));
  CHECK(r.end[static_cast<std::size_t>(d)] == Approx(2.5 + 10e-6));
  CHECK(r.makespan == Approx(r.end[static_cast<std::size_t>(c)]));
  CHECK(r.ranks[1].busy_total() + r.ranks[1].stalled + r.ranks[1].idle == Approx(r.makespan));
  CHECK(r.inter_node_bytes == 48e9);
  dedicated_link_engine bad(t);
  CHECK_THROWS_WITH(bad.compute(99, 1, fwd, 0, {}), Catch::Contains("outside the topology"));
  CHECK_THROWS_WITH(bad.compute(0, -1, fwd, 0, {}), Catch::Contains("non-negative"));
  CHECK_THROWS_WITH(bad.compute(0, 1, fwd, 0, {5}), Catch::Contains("earlier tasks"));
}

TEST_CASE("variable micro-batches: the simulated iteration equals a direct longest-path recurrence", "[sim][pipeline]") {
  // Oracle: F(v, k) starts when its stage is free and F(v - 1, k) has ended; B(v, k) when its
  // stage is free and B(v + 1, k) has ended; each stage runs its compute ops in schedule order.
  random_generator g(77);
  const fitted_stage_time linear{{1e-10, 1e-5, 1e-3}, {2e-10, 2e-5, 1e-3}, 1};
  for (int trial = 0; trial < 30; ++trial) {
    const int P = static_cast<int>(g.between(1, 6)), M = static_cast<int>(g.between(1, 20));
    const int V = P >= 2 ? static_cast<int>(g.between(1, 3)) : 1;
    std::vector<micro_batch> mbs(static_cast<std::size_t>(M));
    for (auto& mb : mbs) mb.documents = {g.between(100, 20000)};
    const std::vector<std::vector<micro_batch>> replicas{mbs};
    const auto memory = memory_for(toy_model(P * V), {1, 1, P, 1});
    const auto r = simulate_pipeline(replicas, interleaved_one_f_one_b{.virtual_stages = V}, no_recompute{}, linear, memory, free_links(P),
                                     {.memory_capacity_bytes = unlimited});
    const auto& s = r.schedules[0];
    const auto slices = split_model(memory.model, P * V);
    std::map<std::tuple<int, int, int>, double> end;  // (kind, virtual stage, mb) -> end
    std::vector<std::size_t> next(static_cast<std::size_t>(P), 0);
    std::vector<double> free_at(static_cast<std::size_t>(P), 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int p = 0; p < P; ++p)
        for (auto& i = next[static_cast<std::size_t>(p)]; i < s.ops[static_cast<std::size_t>(p)].size(); ++i) {
          const pipeline_op& op = s.ops[static_cast<std::size_t>(p)][i];
          if (!is_compute(op.kind)) continue;
          const int v = s.virtual_stage(p, op.chunk);
          const bool fwd = op.kind == pipeline_op_kind::forward;
          double ready = free_at[static_cast<std::size_t>(p)];
          if (fwd ? v > 0 : v < P * V - 1) {
            const auto it = end.find({fwd ? 0 : 1, fwd ? v - 1 : v + 1, op.micro_batch});
            if (it == end.end()) break;
            ready = std::max(ready, it->second);
          }
          const stage_times t = linear.times(mbs[static_cast<std::size_t>(op.micro_batch)], slices[static_cast<std::size_t>(v)]);
          free_at[static_cast<std::size_t>(p)] = end[{fwd ? 0 : 1, v, op.micro_batch}] = ready + (fwd ? t.forward : t.backward);
          progress = true;
        }
    }
    CAPTURE(P, M, V);
    CHECK(r.iteration_s == Approx(*std::max_element(free_at.begin(), free_at.end())).epsilon(1e-9));
  }
}
