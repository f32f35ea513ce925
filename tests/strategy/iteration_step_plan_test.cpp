// tests/strategy/iteration_step_plan_test.cpp
// Hydraulis' iteration plans as step plans (strategy/iteration_step_plan.hpp) priced by the
// one step simulator, and the homogeneous baseline (strategy/homogeneous_baseline.hpp):
// one replica per pipeline that holds sequences, with its scheme's degrees on consecutive
// GPUs, every sequence in exactly one piece; an idle pipeline's GPUs run nothing; the
// simulated iteration is at least every stage's compute and the planner's per-GPU bounds of
// the pull and the push, whose bytes are the switching plan's; one homogeneous pipeline is
// make_step_plan's plan of the same layout; the errors name their numbers; the baseline deals
// by tokens in arrival order and packs windows of at most L tokens.
#include <catch2/catch.hpp>
#include <zeppelin/checkpoint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/partition/allgather.hpp>
#include <zeppelin/partition/per_document.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/strategy/homogeneous_baseline.hpp>
#include <zeppelin/strategy/iteration_step_plan.hpp>
#include <zeppelin/strategy/switching.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "../support/expect_error.hpp"
#include "helpers.hpp"

using namespace zeppelin;
using namespace strategy_test;

namespace iteration_step_plan_test {

scheme_profile scheme(int tp, int pp, int cp, token_count max_len) {
  scheme_profile p = profile(tp, pp, max_len, 1e-9, 1e-4, 0.01);
  p.scheme.cp = cp;
  return p;
}

pipeline_plan pipeline(const scheme_profile& p, std::vector<std::vector<std::int64_t>> micro_batches, std::span<const token_count> lengths) {
  pipeline_plan out{p, {}, {}};
  for (const auto& mb : micro_batches) out.sequences.insert(out.sequences.end(), mb.begin(), mb.end());
  if (!micro_batches.empty()) out.packing = packing_of(p, std::move(micro_batches), lengths);
  return out;
}

const std::vector<token_count> lengths = {3000, 1200, 5000, 2500, 700, 4000, 1800};

// Three schemes that hold sequences and one idle, in pipelines_of order (MaxLen descending):
// <2,1,1> on GPUs 0-1, <1,2,2> on 2-5, the idle <1,2,1> on 6-7, <2,1,1> on 8-9.
iteration_plan mixed_plan(bool with_idle) {
  iteration_plan plan;
  plan.pipelines.push_back(pipeline(scheme(2, 1, 1, 32000), {{0, 1}, {2}}, lengths));
  plan.pipelines.push_back(pipeline(scheme(1, 2, 2, 16000), {{3, 4}, {5}}, lengths));
  if (with_idle) plan.pipelines.push_back(pipeline(scheme(1, 2, 1, 8000), {}, lengths));
  plan.pipelines.push_back(pipeline(scheme(2, 1, 1, 4000), {{6}}, lengths));
  return plan;
}

step_sim_result simulate(const step_plan& p, const topology& cluster, const model_config& m,
                         exchange_pricing exchanges = exchange_pricing::per_flow) {
  const step_program prog = make_step_program(p, cluster, m, hydraulis_program_options());
  return simulate_step(prog, cluster, sim_cost_model::for_topology(cluster),
                       {.pricing = block_pricing::every_op, .exchanges = exchanges, .keep_run = true});
}

}  // namespace iteration_step_plan_test

namespace isp = iteration_step_plan_test;

TEST_CASE("an iteration plan is a step plan: a replica per pipeline that holds sequences, every sequence once", "[strategy][step]") {
  const model_config m = models::llama_550m();
  const topology cluster = clusters::hydraulis_a800_ib(2);
  const iteration_plan plan = isp::mixed_plan(true);
  const step_plan p = step_plan_of(plan, isp::lengths, cluster, m);
  REQUIRE(p.sync == gradient_sync::switching);
  REQUIRE(p.documents == isp::lengths);
  REQUIRE(p.nodes == 2);
  REQUIRE(p.gpus_per_node == 8);
  REQUIRE(p.replicas.size() == 3);
  const std::vector<std::size_t> pipeline_of = {0, 1, 3};  // the idle pipeline has no replica
  const std::vector<rank_index> first_rank = {0, 2, 8};    // but keeps GPUs 6-7
  std::vector<int> seen(isp::lengths.size(), 0);
  for (std::size_t r = 0; r < p.replicas.size(); ++r) {
    const step_replica& rep = p.replicas[r];
    const pipeline_plan& pl = plan.pipelines[pipeline_of[r]];
    INFO("replica " << r);
    REQUIRE(rep.tp == pl.profile.scheme.tp);
    REQUIRE(rep.pp == pl.profile.scheme.pp);
    REQUIRE(rep.cp == pl.profile.scheme.cp);
    REQUIRE(rep.tp_mode == tp_collectives::sequence_parallel);
    REQUIRE(rep.schedule.kind() == pipeline_schedule_kind::one_f_one_b);
    for (std::size_t i = 0; i < rep.ranks.size(); ++i) REQUIRE(rep.ranks[i] == first_rank[r] + static_cast<rank_index>(i));
    REQUIRE(std::accumulate(rep.layers.begin(), rep.layers.end(), 0) == m.layers);
    REQUIRE(*std::max_element(rep.layers.begin(), rep.layers.end()) - *std::min_element(rep.layers.begin(), rep.layers.end()) <= 1);
    REQUIRE(std::all_of(rep.recompute.begin(), rep.recompute.end(), [](std::int32_t n) { return n == 0; }));
    REQUIRE(rep.micro_batches.size() == pl.packing.micro_batches.size());
    for (std::size_t k = 0; k < rep.micro_batches.size(); ++k) {
      const step_micro_batch& mb = rep.micro_batches[k];
      REQUIRE(mb.pieces.size() == pl.packing.micro_batches[k].size());
      for (std::size_t i = 0; i < mb.pieces.size(); ++i) {
        const step_piece& x = mb.pieces[i];
        REQUIRE(x.document == pl.packing.micro_batches[k][i]);  // packing order
        REQUIRE(x.begin == 0);
        REQUIRE(x.end == isp::lengths[static_cast<std::size_t>(x.document)]);  // whole
        ++seen[static_cast<std::size_t>(x.document)];
      }
      REQUIRE(mb.layout.gpus_per_node * mb.layout.nodes == rep.cp);  // laid out on its CP group
    }
  }
  for (const int n : seen) REQUIRE(n == 1);
  const step_program prog = make_step_program(p, cluster, m, hydraulis_program_options());
  for (const rank_index g : {6, 7, 10, 15}) REQUIRE(prog.positions[static_cast<std::size_t>(g)].replica == -1);  // idle
}

TEST_CASE("simulated: at least every stage's compute and the switching bounds, the switching plan's bytes in the dp class",
          "[strategy][step][sim]") {
  const model_config m = models::llama_550m();
  const topology cluster = clusters::hydraulis_a800_ib(1);  // the three pipelines fill the node
  const iteration_plan plan = isp::mixed_plan(false);
  const step_plan p = step_plan_of(plan, isp::lengths, cluster, m);
  const step_sim_result r = isp::simulate(p, cluster, m);
  double dp_bytes = 0, slowest_compute = 0;
  for (const step_stage_report& s : r.stages) {
    REQUIRE(r.iteration_s >= s.busy_s);
    slowest_compute = std::max(slowest_compute, s.compute_s);
    dp_bytes += s.traffic_bytes[static_cast<std::size_t>(traffic_class::dp)];
  }
  REQUIRE(slowest_compute > 0);
  REQUIRE(r.iteration_s >= slowest_compute);
  // the planner's switching plan of the same pipelines (pipelines_of order = the plan's)
  strategy s;
  for (const pipeline_plan& pl : plan.pipelines) s.parts.push_back({pl.profile, 1});
  REQUIRE(pipelines_of(s).front() == plan.pipelines.front().profile);
  const switching_plan sw = make_switching_plan(s, cluster.num_ranks(), m);
  REQUIRE(!sw.pull.empty());
  REQUIRE(!sw.push_reduce.empty());
  std::vector<slice_transfer> push = sw.push_reduce;
  push.insert(push.end(), sw.push_link.begin(), sw.push_link.end());
  double planned_bytes = 0;
  for (const slice_transfer& t : sw.pull) planned_bytes += t.bytes;
  for (const slice_transfer& t : push) planned_bytes += t.bytes;
  REQUIRE(dp_bytes > 0);
  REQUIRE(dp_bytes == Approx(planned_bytes).epsilon(1e-6));
  REQUIRE(r.iteration_s >= switching_seconds(sw.pull, cluster) * (1 - 1e-9));
  REQUIRE(r.iteration_s >= switching_seconds(push, cluster) * (1 - 1e-9));
  // a rank pulls its parameters before its first block and pushes its gradients after its last
  REQUIRE(r.iteration_s > slowest_compute);
}

TEST_CASE("switching priced per port: each exchange whole after a barrier, at its busiest port, the same bytes",
          "[strategy][step][sim]") {
  // Over two nodes (the pull and push cross the NICs): the pull ends every rank's wait at
  // its busiest port's time, the push's reduction and link follow the last backward one after
  // the other, each at its own; the record and the bytes are per_flow's.
  const model_config m = models::llama_550m();
  const topology cluster = clusters::hydraulis_a800_ib(2);
  std::vector<token_count> lengths = isp::lengths;
  lengths.push_back(900);
  iteration_plan plan = isp::mixed_plan(true);
  plan.pipelines.push_back(isp::pipeline(isp::scheme(4, 1, 1, 3000), {{7}}, lengths));  // GPUs 10-13, on node 1 with 8-9
  const step_plan p = step_plan_of(plan, lengths, cluster, m);
  const step_program prog = make_step_program(p, cluster, m, hydraulis_program_options());
  REQUIRE(prog.exchanges == 3);
  const sim_cost_model cost = sim_cost_model::for_topology(cluster);
  const auto run = [&](exchange_pricing x) {
    return simulate_step(prog, cluster, cost, {.pricing = block_pricing::every_op, .exchanges = x, .record = true, .keep_run = true});
  };
  const step_sim_result by_port = run(exchange_pricing::per_port), by_flow = run(exchange_pricing::per_flow);
  // each exchange's flows, as the program lists them (every transfer from its source's group)
  std::vector<std::vector<link_flow>> flows(3);
  for (const step_group& g : prog.groups)
    for (const std::int32_t x : g.transfers) {
      const step_transfer& t = prog.transfers[static_cast<std::size_t>(x)];
      if (g.exchange >= 0 && t.src == g.rank) flows[static_cast<std::size_t>(g.exchange)].push_back({t.src, t.dst, double(t.bytes)});
    }
  const double pull_s = busiest_port_seconds(flows[0], cluster), reduce_s = busiest_port_seconds(flows[1], cluster),
               link_s = busiest_port_seconds(flows[2], cluster);
  REQUIRE(pull_s > 0);
  REQUIRE(reduce_s > 0);
  REQUIRE(link_s > 0);
  // no block starts before the pull's time, and the first ones start right at it
  double first_block = std::numeric_limits<double>::infinity(), slowest_busy = 0;
  for (std::size_t id = 0; id < by_port.block_of_task.size(); ++id)
    if (by_port.block_of_task[id] >= 0) first_block = std::min(first_block, by_port.run.start[id]);
  CHECK(first_block == Approx(pull_s).epsilon(1e-9));
  for (const step_stage_report& s : by_port.stages) slowest_busy = std::max(slowest_busy, s.busy_s);
  CHECK(by_port.iteration_s >= (pull_s + slowest_busy + reduce_s + link_s) * (1 - 1e-9));
  // the engine holds one task per exchange instead of a flow per transfer
  std::size_t flows_listed = 0;
  for (const auto& f : flows) flows_listed += f.size();
  CHECK(by_flow.tasks - by_port.tasks >= flows_listed - 2 * 3);
  // the same transfers and bytes
  CHECK(by_port.record.transfers == by_flow.record.transfers);
  const auto dp = static_cast<std::size_t>(traffic_class::dp);
  CHECK(by_port.traffic_bytes[dp] > 0);
  CHECK(by_port.traffic_bytes[dp] == Approx(by_flow.traffic_bytes[dp]).epsilon(1e-12));
  for (std::size_t i = 0; i < by_port.stages.size(); ++i) {
    CHECK(by_port.stages[i].traffic_bytes[dp] == Approx(by_flow.stages[i].traffic_bytes[dp]).epsilon(1e-12));
    CHECK(by_port.stages[i].traffic_s[dp] >= (pull_s + reduce_s + link_s) * (1 - 1e-9));  // every rank takes part in all three
  }
  // the perfect schedule of the bytes is the faster, the barrier the slower: both within 10 %
  // of max-min fair flows here
  CHECK(by_port.iteration_s == Approx(by_flow.iteration_s).epsilon(0.1));

  // the program that holds each rank's traffic alone prices the same (its bytes count
  // fractional elements, the listed ones whole ones) and lists no switching transfer
  step_program_options traffic_only = hydraulis_program_options();
  traffic_only.exchanges = exchange_detail::traffic_only;
  const step_program counted = make_step_program(p, cluster, m, traffic_only);
  REQUIRE(counted.exchanges == 3);
  REQUIRE(counted.exchange_traffic.size() == 3);
  CHECK(counted.transfers.size() + flows_listed <= prog.transfers.size());
  for (const step_group& g : counted.groups) CHECK((g.exchange < 0 || g.transfers.empty()));
  const step_sim_result by_count =
      simulate_step(counted, cluster, cost, {.pricing = block_pricing::every_op, .exchanges = exchange_pricing::per_port, .keep_run = true});
  CHECK(by_count.iteration_s == Approx(by_port.iteration_s).epsilon(1e-4));
  CHECK(by_count.traffic_bytes[dp] == Approx(by_port.traffic_bytes[dp]).epsilon(1e-4));
  for (std::size_t i = 0; i < by_count.stages.size(); ++i)
    CHECK(by_count.stages[i].traffic_s[dp] == Approx(by_port.stages[i].traffic_s[dp]).epsilon(1e-4));
  // nothing to run per flow or to record
  CHECK_THROWS_AS(simulate_step(counted, cluster, cost, {.pricing = block_pricing::every_op}), invalid_argument);
  CHECK_THROWS_AS(simulate_step(counted, cluster, cost, {.pricing = block_pricing::every_op, .exchanges = exchange_pricing::per_port, .record = true}),
                  invalid_argument);
}

TEST_CASE("one homogeneous pipeline is make_step_plan's plan of the same layout", "[strategy][step][sim]") {
  const model_config m = models::llama_550m();
  const topology cluster = clusters::hydraulis_a800_ib(1);
  random_generator rng(11);
  std::vector<token_count> own(24);
  for (auto& l : own) l = rng.between(100, 6000);
  const scheme_profile p = isp::scheme(2, 2, 2, 20000);
  const iteration_plan plan = homogeneous_plan(p, 1, own, 16384);
  REQUIRE(plan.pipelines.front().packing.count() >= 2);
  const step_plan ours = step_plan_of(plan, own, cluster, m);
  const step_shape shape{.layout = {.tp = 2, .cp = 2, .pp = 2, .dp = 1},
                         .tp_mode = tp_collectives::sequence_parallel,
                         .schedule = {one_f_one_b{}},
                         .sync = gradient_sync::switching};
  const step_plan theirs = make_step_plan(cluster, m, own, {whole_documents(own, plan.pipelines.front().packing.micro_batches)}, shape,
                                          allgather{.capacity = max_sequence_length, .cp_size = 0}, no_recompute{});
  REQUIRE(ours == theirs);
  REQUIRE(isp::simulate(ours, cluster, m).iteration_s == isp::simulate(theirs, cluster, m).iteration_s);
  // another layout policy and schedule reach the replicas
  const step_plan gpipe_ring = step_plan_of(plan, own, cluster, m, {gpipe{}}, no_recompute{}, per_document{.capacity = 16384});
  REQUIRE(gpipe_ring.replicas.front().schedule.kind() == pipeline_schedule_kind::gpipe);
  REQUIRE(gpipe_ring.replicas.front().micro_batches.front().layout.method == "per_document");
}

TEST_CASE("iteration step plans name their errors", "[strategy][step]") {
  const model_config m = models::llama_550m();
  const topology cluster = clusters::hydraulis_a800_ib(1);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)step_plan_of(iteration_plan{}, isp::lengths, cluster, m); }).value("pipelines") == 0);
  iteration_plan idle;
  idle.pipelines.push_back(isp::pipeline(isp::scheme(1, 1, 1, 8000), {}, isp::lengths));
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)step_plan_of(idle, isp::lengths, cluster, m); }).value("pipelines") == 1);
  // more GPUs than the cluster's 8
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)step_plan_of(isp::mixed_plan(true), isp::lengths, cluster, m); }).value("gpus") == 10);
  // a sequence index outside the lengths
  iteration_plan outside;
  outside.pipelines.push_back(isp::pipeline(isp::scheme(1, 1, 1, 8000), {{0}}, isp::lengths));
  outside.pipelines.front().packing.micro_batches.front().push_back(99);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)step_plan_of(outside, isp::lengths, cluster, m); }).value("document") == 99);
  // a sequence in no micro-batch, and one in two
  iteration_plan missing;
  missing.pipelines.push_back(isp::pipeline(isp::scheme(1, 1, 1, 8000), {{0, 1, 2, 3, 4, 5}}, isp::lengths));
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)step_plan_of(missing, isp::lengths, cluster, m); }).value("document") == 6);
  iteration_plan twice = missing;
  twice.pipelines.push_back(isp::pipeline(isp::scheme(1, 1, 1, 8000), {{6, 0}}, isp::lengths));
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)step_plan_of(twice, isp::lengths, cluster, m); }).value("document") == 0);
  // <1,2,4> after one GPU: stage 0's CP ranks are GPUs 1-4 of node 0, stage 1's 5-7 and 8
  iteration_plan unlike;
  unlike.pipelines.push_back(isp::pipeline(isp::scheme(1, 1, 1, 32000), {{0}}, isp::lengths));
  unlike.pipelines.push_back(isp::pipeline(isp::scheme(1, 2, 4, 16000), {{1, 2, 3, 4, 5, 6}}, isp::lengths));
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)step_plan_of(unlike, isp::lengths, clusters::hydraulis_a800_ib(2), m); }).value("stage") == 1);
  // a switching over the step program's limit is refused before it is built, naming both
  const step_plan mixed = step_plan_of(isp::mixed_plan(false), isp::lengths, cluster, m);
  step_program_options small = hydraulis_program_options();
  small.max_switching_transfers = 10;
  const auto e = zeppelin_test::expect_error<resource_limit>([&] { (void)make_step_program(mixed, cluster, m, small); });
  REQUIRE(e.value("max_switching_transfers") == 10);
  REQUIRE(e.value("switching_transfers") > 10);
  REQUIRE(e.value("gpus") == 8);
}

TEST_CASE("the homogeneous baseline deals by tokens in arrival order and packs windows of L", "[strategy]") {
  random_generator rng(6);
  const scheme_profile p = profile(4, 2, 20000, 1e-9, 1e-4, 0.01);
  std::vector<token_count> own(300);
  for (auto& l : own) l = rng.between(1, 8000);
  const iteration_plan plan = homogeneous_plan(p, 4, own, 16384);
  REQUIRE(plan.pipelines.size() == 4);
  std::vector<token_count> tokens;
  std::vector<int> seen(own.size(), 0);
  double slowest = 0;
  for (const pipeline_plan& pl : plan.pipelines) {
    REQUIRE(std::is_sorted(pl.sequences.begin(), pl.sequences.end()));  // arrival order
    token_count t = 0;
    std::vector<std::int64_t> packed;
    for (const auto& mb : pl.packing.micro_batches) {
      token_count in = 0;
      for (const std::int64_t i : mb) in += own[static_cast<std::size_t>(i)], ++seen[static_cast<std::size_t>(i)];
      REQUIRE(in <= 16384);
      packed.insert(packed.end(), mb.begin(), mb.end());
    }
    REQUIRE(packed == pl.sequences);
    for (const std::int64_t i : pl.sequences) t += own[static_cast<std::size_t>(i)];
    tokens.push_back(t);
    REQUIRE(pl.packing.seconds == Approx((p.scheme.pp - 1 + pl.packing.count()) * pl.packing.slowest_seconds));
    slowest = std::max(slowest, pl.packing.seconds);
  }
  for (const int s : seen) REQUIRE(s == 1);
  REQUIRE(*std::max_element(tokens.begin(), tokens.end()) - *std::min_element(tokens.begin(), tokens.end()) <= 8000);
  REQUIRE(plan.seconds == slowest);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)homogeneous_plan(p, 4, std::vector<token_count>{20001}, 32768); }).value("limit") == 20000);
  REQUIRE(zeppelin_test::expect_invalid([&] { (void)homogeneous_plan(p, 0, own, 16384); }).value("pipelines") == 0);
}
