// The upper bounds that let the cost-driven planner choose without simulating its choice:
// flows_finish_bound (sim/detail/flow_finish_bound.hpp) is never below the event engine's
// last arrival; plan_step_upper_bound (planner/plan_step_upper_bound.hpp) is never below the
// simulated step of a plan it covers (Ulysses, USP, sequences alone on a rank), is tight and
// declines what it does not cover; choose_by_cost certifies a Ulysses win at 256K tokens on 32
// GPUs and then chooses exactly what simulating every candidate chooses, and a USP win on 64.
#include "../support/sim_fixtures.hpp"

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/planner/cost_driven_planner.hpp>
#include <zeppelin/planner/methods.hpp>
#include <zeppelin/planner/plan_step_upper_bound.hpp>
#include <zeppelin/sim/detail/flow_finish_bound.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {

using zeppelin_test::setup_for;

const method_spec& candidate_named(std::string_view name) {
  for (const method_spec& c : cost_driven_candidates)
    if (c.name == name) return c;
  FAIL("no candidate " << name);
  return cost_driven_candidates.front();
}

// GitHub 256K tokens (a seed) over `nodes` nodes of 8 GPUs, 7B: choose_by_cost's decision.
struct github_256k_decision {
  model_config m = model_by_name("7b");
  topology t;
  batch b;
  method_setup setup;
  cost_driven_decision d;
  github_256k_decision(int nodes, std::uint64_t seed)
      : t(cluster_by_name("c", nodes, 8)), b(sample_batch(dataset_by_name("github"), 262144, seed)), setup(setup_for(b, t)),
        d(choose_by_cost(b, t, m, setup)) {}
};

}  // namespace

TEST_CASE("the flow finish bound is never below the event engine's last arrival", "[sim][planner]") {
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    random_generator rng(seed, 41);
    const topology t = seed % 2 ? clusters::cluster_c(2) : cluster_by_name("c", 3, 4);
    const rank_index R = t.num_ranks();
    event_engine e(t);
    std::vector<detail::bounded_flow> flows;
    const std::vector<double> capacity = detail::port_capacities(t);
    const int n = 1 + static_cast<int>(rng.below(60));
    for (int f = 0; f < n; ++f) {
      const auto s = static_cast<rank_index>(rng.below(static_cast<std::uint64_t>(R)));
      auto d = static_cast<rank_index>(rng.below(static_cast<std::uint64_t>(R - 1)));
      if (d >= s) ++d;
      // sizes of one or two kinds per seed, so that small flows leave ports early
      const double bytes = (seed % 3 == 0 ? 1e6 * (1 + static_cast<double>(rng.below(2))) : 1e5 * (1 + static_cast<double>(rng.below(100))));
      e.flow(s, d, bytes, {task_kind::remap}, {});
      const detail::flow_ports ports = detail::ports_of({s, d, bytes}, t);
      flows.push_back({static_cast<std::int32_t>(ports.first), static_cast<std::int32_t>(ports.second), bytes,
                       link_model::latency(t.between(s, d), t)});
    }
    const double makespan = e.run().makespan;
    const double bound = detail::flows_finish_bound(flows, capacity);
    const double staying = detail::flows_finish_bound(flows, capacity, fair_share_bound::all_flows_stay);
    CAPTURE(seed, n);
    CHECK(makespan <= bound * (1 + 1e-9));
    CHECK(bound <= makespan * n);  // and not absurdly loose
    CHECK(bound <= staying);       // flows that leave only tighten it
    if (seed % 3 == 0) CHECK(staying <= 2.5 * bound);  // two sizes: at most one more share per port
  }
}

TEST_CASE("the plan step upper bound is never below the simulated step", "[sim][planner]") {
  const model_config models_tried[] = {models::llama_3b(), models::llama3_8b(), model_by_name("7b")};
  int covered = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const topology t = seed % 3 == 0 ? clusters::cluster_c(2) : seed % 3 == 1 ? cluster_by_name("c", 2, 4) : cluster_by_name("c", 4, 4);
    random_generator rng(seed, 43);
    const batch b = seed % 2 ? sample_batch(datasets::github(), 16384 + static_cast<token_count>(seed) * 1031, rng)
                             : sample_batch(datasets::arxiv(), 16384 + static_cast<token_count>(seed) * 1031, rng);
    const model_config& m = models_tried[seed % 3];
    const sim_cost_model cost = sim_cost_model::for_topology(t);
    for (const std::string_view name : {"ulysses", "hybrid_dp+ulysses", "zeppelin_paper", "llama_cp"}) {
      const method_spec& spec = candidate_named(name);
      const method_setup setup = setup_for(b, t);
      const plan p = with_collective_of(spec, partitioner_plan(spec, b, t, method_capacity(setup), setup.metric, &m));
      const sim_options o = options_for(spec, setup);
      const std::optional<double> upper = plan_step_upper_bound(p, b, m, t, cost, o);
      CAPTURE(seed, name, t.num_ranks(), m.heads);
      if (name == "zeppelin_paper" || name == "llama_cp") {
        CHECK_FALSE(upper);  // rings, all-gathers, remapping and prioritised engines are not covered
        continue;
      }
      if (!upper) continue;
      ++covered;
      const double step = simulate(p, b, t, m, o, cost).step_time_s;
      CHECK(step <= *upper * (1 + 1e-12));
      CHECK(*upper <= 1.001 * step);  // the chain is what the simulator runs: tight
    }
  }
  CHECK(covered >= 12);
}

TEST_CASE("the plan step upper bound covers USP groups and sequences alone on a rank", "[sim][planner]") {
  // few heads over 16 and 32 GPUs: Ulysses of degree 4 (or 8 lanes sharing 2 K/V heads) and a
  // ring of the subgroups; hybrid DP's groups leave short sequences alone on a rank, some of
  // them on a rank of a group too (its local level runs after the group's rounds)
  model_config four_heads = models::llama_3b(), shared_kv = models::llama_3b();
  four_heads.heads = four_heads.kv_heads = 4;
  four_heads.hidden = 4 * four_heads.head_dim;
  shared_kv.heads = 8;
  shared_kv.kv_heads = 2;
  shared_kv.hidden = 8 * shared_kv.head_dim;
  int usp = 0, alone_in_group = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const topology t = seed % 2 ? cluster_by_name("c", 2, 8) : clusters::cluster_c(4);
    random_generator rng(seed, 47);
    const token_count tokens = 32768 + static_cast<token_count>(seed) * 4099;
    const batch b = seed % 3 == 0 ? sample_batch(datasets::prolong64k(), tokens, rng)
                                  : seed % 3 == 1 ? sample_batch(datasets::github(), tokens, rng) : sample_batch(datasets::arxiv(), tokens, rng);
    const model_config& m = seed % 4 < 2 ? four_heads : shared_kv;
    const wire_format wire = wire_format::for_model(m);
    const sim_cost_model cost = sim_cost_model::for_topology(t);
    for (const std::string_view name : {"ulysses", "hybrid_dp+ulysses"}) {
      const method_spec& spec = candidate_named(name);
      const method_setup setup = setup_for(b, t);
      const plan p = with_collective_of(spec, partitioner_plan(spec, b, t, method_capacity(setup), setup.metric, &m));
      const sim_options o = options_for(spec, setup);
      const std::optional<double> upper = plan_step_upper_bound(p, b, m, t, cost, o);
      CAPTURE(seed, name, t.num_ranks(), m.heads, m.kv_heads);
      REQUIRE(upper);
      const double step = simulate(p, b, t, m, o, cost).step_time_s;
      CHECK(step <= *upper * (1 + 1e-12));
      // each stretch between exchanges at its slowest member, summed: up to 0.9 % above the
      // step where members meet different subgroups' keys in a round (rings of 4 and 8)
      CHECK(*upper <= 1.01 * step);
      bool ring = false, mixed = false;
      for (const ring_group& g : p.groups) {
        const auto G = static_cast<std::int32_t>(g.ranks.size());
        ring = ring || (G > 1 && detail::ulysses_degree(wire, G) < G);
      }
      for (const placement& pl : p.placements) {
        const bool grouped = std::any_of(pl.shards.begin(), pl.shards.end(), [](const shard& s) { return s.group != no_group; });
        mixed = mixed || (grouped && std::any_of(pl.shards.begin(), pl.shards.end(), [](const shard& s) { return s.group == no_group; }));
      }
      usp += ring;
      alone_in_group += mixed;
    }
  }
  CHECK(usp >= 8);
  CHECK(alone_in_group >= 1);
}

TEST_CASE("the plan step upper bound declines shared NICs and other executions", "[sim][planner]") {
  const model_config m = models::llama_3b();
  const batch b({6000, 3000, 2000});
  const method_spec& spec = candidate_named("ulysses");
  for (const topology& t : {clusters::cluster_a(2), clusters::cluster_c(2)}) {
    const method_setup setup = setup_for(b, t);
    const plan p = with_collective_of(spec, partitioner_plan(spec, b, t, method_capacity(setup), setup.metric, &m));
    const sim_cost_model cost = sim_cost_model::for_topology(t);
    sim_options o = options_for(spec, setup);
    const bool own_nics = t.num_nics() == t.num_ranks();
    CHECK(plan_step_upper_bound(p, b, m, t, cost, o).has_value() == own_nics);
    o.engine = engine_policy::prioritized;
    CHECK_FALSE(plan_step_upper_bound(p, b, m, t, cost, o));
    o = options_for(spec, setup);
    o.router.policy = proxy_router{};
    CHECK_FALSE(plan_step_upper_bound(p, b, m, t, cost, o));
  }
}

TEST_CASE("the plan step upper bound declines plans it does not cover", "[sim][planner]") {
  const model_config m = models::llama_3b();
  const batch b({6000, 3000, 2000, 700});
  const method_spec& spec = candidate_named("ulysses");
  const topology t = clusters::cluster_c(2);
  const method_setup setup = setup_for(b, t);
  const plan p = with_collective_of(spec, partitioner_plan(spec, b, t, method_capacity(setup), setup.metric, &m));
  const sim_cost_model cost = sim_cost_model::for_topology(t);
  const sim_options o = options_for(spec, setup);
  REQUIRE(plan_step_upper_bound(p, b, m, t, cost, o));
  REQUIRE(p.groups.size() == 1);
  const auto declined = [&](const plan& q) { return !plan_step_upper_bound(q, b, m, t, cost, o).has_value(); };
  plan outside = p;  // the last member's shards on a rank outside the group
  outside.groups[0].ranks.pop_back();
  CHECK(declined(outside));
  plan ring = p;
  ring.groups[0].collective = collective_kind::ring;
  CHECK(declined(ring));
  plan split_alone = p;  // a piece of a sequence alone on a rank, not the whole of it
  split_alone.placements[0].shards.front().group = no_group;
  CHECK(declined(split_alone));
  plan two_groups = p;  // rank 0 holds tokens of two groups in one micro-batch
  two_groups.groups.push_back({1, p.groups[0].zone, {0, 1}, collective_kind::all_to_all});
  two_groups.placements[0].shards.back().group = 1;
  CHECK(declined(two_groups));
}

TEST_CASE("choose_by_cost certifies a clear Ulysses win and chooses as simulating every candidate does", "[sim][planner]") {
  const auto& [m, t, b, setup, d] = github_256k_decision(4, 1);
  REQUIRE(d.execution.name == "ulysses");
  CHECK_FALSE(d.result);  // chosen by its bounds alone
  const candidate_price& chosen = d.candidates[d.chosen_index];
  CHECK(chosen.outcome == candidate_outcome::certified);
  // brute force: every candidate simulated; the certified one is the fastest, and its upper
  // bound lies between its step and every other candidate's step
  const sim_cost_model cost = sim_cost_model::for_topology(t);
  double fastest_other = 1e300, step = 0;
  for (std::size_t i = 0; i < cost_driven_candidates.size(); ++i) {
    const method_spec& spec = cost_driven_candidates[i];
    const plan p = with_collective_of(spec, partitioner_plan(spec, b, t, method_capacity(setup), setup.metric, &m));
    const double s = simulate(p, b, t, m, options_for(spec, setup), cost).step_time_s;
    if (i == d.chosen_index) step = s;
    else fastest_other = std::min(fastest_other, s);
  }
  CHECK(step <= chosen.upper_s);
  CHECK(chosen.upper_s < fastest_other);
  // plan_by_cost simulates the certified choice
  const cost_driven_choice c = plan_by_cost(b, t, m, setup);
  CHECK(c.chosen_index == d.chosen_index);
  CHECK(c.chosen.result.step_time_s == step);
  CHECK(c.candidates[c.chosen_index].outcome == candidate_outcome::simulated);
}

TEST_CASE("choose_by_cost certifies a USP win over 64 GPUs", "[sim][planner]") {
  // 7B's 32 heads over 64 GPUs: Ulysses of degree 32 and a ring of two subgroups
  const auto& [m, t, b, setup, d] = github_256k_decision(8, 2);
  REQUIRE(d.execution.name == "ulysses");
  REQUIRE(d.layout.groups.size() == 1);
  REQUIRE(detail::ulysses_degree(wire_format::for_model(m), 64) == 32);
  CHECK_FALSE(d.result);
  const candidate_price& chosen = d.candidates[d.chosen_index];
  CHECK(chosen.outcome == candidate_outcome::certified);
  for (std::size_t i = 0; i < d.candidates.size(); ++i) {
    const candidate_price& c = d.candidates[i];
    if (i == d.chosen_index || c.outcome == candidate_outcome::infeasible) continue;
    CAPTURE(c.name);
    CHECK(c.outcome != candidate_outcome::simulated);
    CHECK(chosen.upper_s < c.bound_s);  // below every rival's lower bound
  }
  const cost_driven_choice c = plan_by_cost(b, t, m, setup);
  CHECK(c.chosen_index == d.chosen_index);
  CHECK(c.chosen.result.step_time_s <= chosen.upper_s);
  // certified by the looser upper bound (every flow on its ports to the end), within a few per
  // cent; the tight one within 0.1 %
  CHECK(chosen.upper_s <= 1.05 * c.chosen.result.step_time_s);
  const std::optional<double> tight = plan_step_upper_bound(c.chosen.layout, b, m, c.chosen.view, sim_cost_model::for_topology(c.chosen.view),
                                                            c.options, fair_share_bound::done_flows_leave);
  REQUIRE(tight.has_value());
  CHECK(*tight <= chosen.upper_s);
  CHECK(c.chosen.result.step_time_s <= *tight);
  CHECK(*tight <= 1.001 * c.chosen.result.step_time_s);
}
