// sim_options::launch: per_group (one launch per ring group and round) against fused_round
// (one launch per rank, level and round over all its groups' blocks); both split into the
// CSR waves the device kernels take (program/launch_waves.hpp). A hand-computed case where
// fusing changes the time exactly as the throughput table predicts, and properties on
// hierarchical plans of sampled batches: same pairs and executed FLOPs, fewer launches, a
// launch never starts before every K/V it reads has arrived, no resource double-booked,
// determinism, the lower bound, and one global ring (TE CP) unchanged.
#include "../support/sim_fixtures.hpp"

#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/linear_flops.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/planner.hpp>
#include <zeppelin/sim.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

using namespace zeppelin;

namespace {

using zeppelin_test::small_model;

sim_options with_launch(launch_policy l) {
  sim_options o;
  o.launch = l;
  return o;
}

//! Two sequences (4c and 4d tokens), each zigzag-split over the same two GPUs of one node in
//! a ring group of its own: rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
plan two_rings(token_count c, token_count d) {
  plan p;
  p.method = "manual";
  p.nodes = 1;
  p.gpus_per_node = 2;
  p.capacity = 2 * (c + d);
  p.placements.resize(2);
  const token_count chunk[2] = {c, d};
  for (sequence_index s = 0; s < 2; ++s) {
    const token_count x = chunk[s];
    p.placements[0].shards.push_back({s, {0, x}, s, 0});
    p.placements[0].shards.push_back({s, {3 * x, 4 * x}, s, 0});
    p.placements[1].shards.push_back({s, {x, 2 * x}, s, 0});
    p.placements[1].shards.push_back({s, {2 * x, 3 * x}, s, 0});
    p.groups.push_back({s, zone_kind::intra_node, {0, 1}});
  }
  return p;
}

//! One attention block by hand: query rows and pairs; the kernels tile each block on its own,
//! so padded rows and the table index x = max(padded rows, sqrt(2 pairs - rows)) are per
//! block (sim/detail/attention_call.hpp).
struct block_work {
  double rows = 0, pairs = 0;
  double padded(double tile) const { return std::ceil(rows / tile) * tile; }
  double x(double tile) const { return std::max(padded(tile), std::sqrt(2 * pairs - rows)); }
  double executed(double per_pair, double tile) const { return per_pair * pairs * padded(tile) / rows; }
};
using wave = std::vector<block_work>;

//! The CSR waves of one zigzag sequence of 4x tokens over two GPUs (see two_rings) on a rank
//! in a round (the same on both ranks): round 0 computes the own chunks, whose two causal
//! squares share a wave while the full block between them reads the same keys as the first
//! (wave 2); round 1 computes two x-by-x full blocks that share their queries (rank 0) or
//! their keys (rank 1), one wave each.
std::vector<wave> zigzag_waves(double x, int round) {
  const block_work causal{x, x * (x + 1) / 2}, full{x, x * x};
  if (round == 0) return {{causal, causal}, {full}};
  return {{full}, {full}};
}

//! no two compute segments of a rank overlap, and no port ran above its capacity
void check_no_double_booking(const sim_result& r) {
  CHECK(r.max_port_utilization <= 1.0 + 1e-9);
  for (const sim_phase& ph : r.trace) {
    std::map<rank_index, std::vector<std::pair<double, double>>> busy;
    for (const compute_segment& s : ph.run.segments) busy[s.rank].push_back({s.start, s.end});
    for (auto& [rank, v] : busy) {
      std::sort(v.begin(), v.end());
      for (std::size_t i = 1; i < v.size(); ++i) CHECK(v[i - 1].second <= v[i].first + 1e-12);
    }
  }
}

}  // namespace

TEST_CASE("fused launches: two rings on two GPUs, hand-computed from the throughput table", "[sim][launch]") {
  const model_config m = small_model();
  // links so fast that the step is the kernels alone; no contention; linear at the peak
  // (and memory so fast that copies and accumulator additions are free)
  const topology t({"two", 1, 2, 1, {}, {1e30, 0}, {1e30, 0}, {"G", 1e12, 1e9, 1e30}});
  sim_cost_model cost;
  cost.contention.enabled = false;
  cost.linear.efficiency = 1.0;
  cost.attention.tile_rows = 128;
  cost.attention.forward = throughput_table{{128, 1e10}, {4096, 8e10}};
  cost.attention.backward = throughput_table{{128, 0.7e10}, {4096, 5e10}};
  const token_count c = 256, d = 100;  // the second sequence's chunks are not whole tiles
  const batch b({4 * c, 4 * d});
  const plan p = two_rings(c, d);
  const double per_pair = 4.0 * m.heads * m.head_dim;  // forward FLOPs per pair
  const double tile = cost.attention.tile_rows;

  // per rank (both ranks do the same work): forward and backward attention seconds of one
  // layer under each policy; fused, wave i of a round joins wave i of both groups
  double fwd[2] = {}, bwd[2] = {};  // [policy]
  double flops = 0;
  const auto launch = [&](const wave& w, double& f, double& bk) {
    double executed = 0, x = 0;
    for (const block_work& blk : w) executed += blk.executed(per_pair, tile), x += blk.x(tile);
    f += executed / cost.attention.forward.at(x);
    bk += 2.5 * executed / cost.attention.backward.at(x);
    return executed;
  };
  for (int k = 0; k < 2; ++k) {  // backward round k recomputes forward round (2 - k) mod 2 = k
    const auto wc = zigzag_waves(static_cast<double>(c), k), wd = zigzag_waves(static_cast<double>(d), k);
    for (std::size_t i = 0; i < wc.size(); ++i) {
      flops += 2 * 3.5 * (launch(wc[i], fwd[0], bwd[0]) + launch(wd[i], fwd[0], bwd[0]));  // two ranks
      wave joined = wc[i];
      joined.insert(joined.end(), wd[i].begin(), wd[i].end());
      (void)launch(joined, fwd[1], bwd[1]);
    }
  }
  const double tokens = 2.0 * (c + d);  // per rank
  const double peak = t.gpu().peak_flops;
  const double lin = tokens * linear_forward_flops_per_token(m) / peak;
  const double head = tokens * (lm_head_flops_per_token(m) + lm_head_backward_flops_per_token(m)) / peak;
  double expected[2];
  for (int policy = 0; policy < 2; ++policy) expected[policy] = m.layers * (fwd[policy] + lin + bwd[policy] + 2 * lin) + head;
  REQUIRE(expected[1] < expected[0] * 0.99);  // the case does exercise the table

  const sim_result per_group = simulate(p, b, t, m, with_launch(launch_policy::per_group), cost);
  const sim_result fused = simulate(p, b, t, m, with_launch(launch_policy::fused_round), cost);
  CHECK(per_group.step_time_s == Approx(expected[0]).epsilon(1e-9));
  CHECK(fused.step_time_s == Approx(expected[1]).epsilon(1e-9));
  // same work, half the launches: 2 ranks x 2 rounds x (2 groups x 2 waves | 2 waves) x 2 directions x layers
  CHECK(per_group.attention_pairs == causal_pairs(4 * c) + causal_pairs(4 * d));
  CHECK(fused.attention_pairs == per_group.attention_pairs);
  CHECK(per_group.attention_flops == Approx(m.layers * flops).epsilon(1e-12));
  CHECK(fused.attention_flops == Approx(per_group.attention_flops).epsilon(1e-12));
  CHECK(per_group.attention_launches == 32.0 * m.layers);
  CHECK(fused.attention_launches == 16.0 * m.layers);
  for (const sim_result* r : {&per_group, &fused}) {
    CHECK(r->step_time_s >= r->lower_bound_s);
    for (const rank_breakdown& br : r->ranks) CHECK(br.total_s() == Approx(r->step_time_s).epsilon(1e-9));
  }

  SECTION("a flat table: fusing changes nothing") {
    sim_cost_model flat = cost;
    flat.attention.forward = throughput_table{{1, 5e10}};
    flat.attention.backward = throughput_table{{1, 4e10}};
    CHECK(simulate(p, b, t, m, with_launch(launch_policy::fused_round), flat).step_time_s ==
          Approx(simulate(p, b, t, m, with_launch(launch_policy::per_group), flat).step_time_s).epsilon(1e-12));
  }
  SECTION("a fused launch waits for the slowest of its groups' K/V") {
    // slow links: round 1 of both groups waits for its K/V; fused, rank r's round-1 launch
    // starts only when both groups' K/V have arrived
    const topology slow({"two", 1, 2, 1, {}, {1e8, 1e-5}, {1e8, 1e-5}, {"G", 1e12, 1e9, 1e30}});
    sim_options o = with_launch(launch_policy::fused_round);
    o.record_trace = true;
    const sim_result r = simulate(p, b, slow, m, o, cost);
    const engine_run& run = r.trace.front().run;  // forward
    double last_kv[2] = {0, 0};
    for (const flow_record& f : run.flows)
      if (run.tags[static_cast<std::size_t>(f.task)].kind == task_kind::kv)
        last_kv[f.destination] = std::max(last_kv[f.destination], f.end);
    int launches = 0;
    for (const compute_segment& s : run.segments) {
      const task_tag& g = run.tags[static_cast<std::size_t>(s.task)];
      if (g.kind != task_kind::attention_forward || g.round != 1) continue;
      CHECK(run.start[static_cast<std::size_t>(s.task)] >= last_kv[s.rank]);
      CHECK(last_kv[s.rank] > 0);
      ++launches;
    }
    CHECK(launches == 4);  // two waves per rank
    check_no_double_booking(r);
  }
}

TEST_CASE("fused and per-group launches on hierarchical plans: same work, fewer launches, inputs first", "[sim][launch]") {
  const model_config m = models::llama_3b();
  const char* names[] = {"arxiv", "github", "prolong64k"};
  double fewer = 0;
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const topology t = seed == 2 ? clusters::cluster_c(2) : clusters::cluster_a(2);
    random_generator rng(seed, 11);
    const batch b = sample_batch(dataset_by_name(names[seed - 1]), 16 * 4096, rng);
    const plan p = partition_for(method_by_name("zeppelin_paper"), b, t, 4608);
    std::int64_t pairs = 0;
    for (sequence_index s = 0; s < b.size(); ++s) pairs += causal_pairs(b.length(s));
    sim_result res[2];
    for (const launch_policy l : {launch_policy::per_group, launch_policy::fused_round}) {
      CAPTURE(seed, static_cast<int>(l));
      sim_options o = options_for(method_by_name("zeppelin_paper"), {});
      o.launch = l;
      o.record_trace = true;
      sim_result r = simulate(p, b, t, m, o);
      CHECK(r.attention_pairs == pairs);
      CHECK(r.step_time_s >= r.lower_bound_s);
      check_no_double_booking(r);
      for (const rank_breakdown& br : r.ranks) CHECK(br.total_s() == Approx(r.step_time_s).epsilon(1e-9));
      // determinism: bit for bit
      const sim_result again = simulate(p, b, t, m, o);
      CHECK(again.step_time_s == r.step_time_s);
      CHECK(again.attention_launches == r.attention_launches);
      res[static_cast<int>(l)] = std::move(r);
    }
    CHECK(res[1].attention_flops == Approx(res[0].attention_flops).epsilon(1e-12));
    CHECK(res[1].cross_node_bytes == res[0].cross_node_bytes);  // the transfers do not change
    CHECK(res[1].attention_launches <= res[0].attention_launches);
    fewer += res[0].attention_launches - res[1].attention_launches;

    // a launch of round k starts only after every K/V its level sent in round k - 1 reached
    // its rank (no routing here, so every K/V flow ends at its consumer)
    sim_options o = options_for(method_by_name("zeppelin_paper"), {});
    o.launch = launch_policy::fused_round;
    o.router = {};
    o.remap.reset();
    o.record_trace = true;
    const sim_result r = simulate(p, b, t, m, o);
    const engine_run& run = r.trace.front().run;  // forward, micro-batch 0
    using key = std::tuple<std::int32_t, std::int32_t, std::int32_t, rank_index>;  // layer, level, round, rank
    std::map<key, double> arrived;
    for (const flow_record& f : run.flows) {
      const task_tag& g = run.tags[static_cast<std::size_t>(f.task)];
      if (g.kind != task_kind::kv) continue;
      double& a = arrived[{g.layer, g.group, g.round + 1, f.destination}];
      a = std::max(a, f.end);
    }
    int checked = 0;
    for (const compute_segment& seg : run.segments) {
      const auto i = static_cast<std::size_t>(seg.task);
      const task_tag& g = run.tags[i];
      if (g.kind != task_kind::attention_forward || g.round < 1) continue;
      const auto it = arrived.find({g.layer, g.group, g.round, seg.rank});
      if (it == arrived.end()) continue;
      CHECK(run.start[i] >= it->second - 1e-15);
      ++checked;
    }
    CHECK(checked > 0);
  }
  CHECK(fewer > 0);  // some rank was in several rings of one queue
}

TEST_CASE("one global ring (TE CP): both launch policies give the same step", "[sim][launch]") {
  const model_config m = models::llama_3b();
  const topology t = clusters::cluster_a(2);
  random_generator rng(4, 11);
  const batch b = sample_batch(datasets::github(), 16 * 4096, rng);
  for (const char* name : {"te_cp", "te_cp+routing", "llama_cp"}) {
    CAPTURE(name);
    const method_spec& spec = method_by_name(name);
    CHECK(spec.launch == launch_policy::per_group);
    method_setup setup;
    setup.launch = launch_policy::fused_round;
    const sim_result fused = run_method(spec, b, t, m, setup).result;
    const sim_result per_group = run_method(spec, b, t, m).result;
    CHECK(fused.step_time_s == per_group.step_time_s);
    CHECK(fused.attention_launches == per_group.attention_launches);
  }
  CHECK(method_by_name("zeppelin_paper").launch == launch_policy::fused_round);
  CHECK(method_by_name("te_cp+routing+engine").launch == launch_policy::fused_round);
  CHECK(options_for(method_by_name("zeppelin_paper"), {}).launch == launch_policy::fused_round);
}
