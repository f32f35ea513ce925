// The cost-driven planner (planner/cost_driven_planner.hpp) and the bound that prunes its search
// (planner/plan_step_bound.hpp): the bound never exceeds a simulated step (and sees the bytes a
// ring or an all-to-all must deliver, and the small launches of a ring's rounds), the choice equals
// the brute-force minimum over every candidate, the plan validates, the planner is
// deterministic and never slower than a method it considers.
#include "../support/sim_fixtures.hpp"

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>
#include <zeppelin/planner/cost_driven_planner.hpp>
#include <zeppelin/planner/methods.hpp>
#include <zeppelin/planner/plan_step_bound.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {

// A seeded batch of `total` tokens: one of the Table 2 datasets, or (case 3) one long
// sequence among many short ones, the shape where no single layout wins everywhere.
batch sampled_batch(std::uint64_t seed, token_count total) {
  random_generator rng(seed, 23);
  switch (seed % 4) {
    case 0: return sample_batch(datasets::github(), total, rng);
    case 1: return sample_batch(datasets::arxiv(), total, rng);
    case 2: return sample_batch(datasets::prolong64k(), total, rng);
    default: {
      std::vector<token_count> lengths{total / 2};
      for (token_count left = total - total / 2; left > 0;) {
        const token_count n = std::min<token_count>(left, 1 + static_cast<token_count>(rng.below(700)));
        lengths.push_back(n);
        left -= n;
      }
      return batch(lengths);
    }
  }
}

topology small_cluster(std::uint64_t seed) {
  switch (seed % 3) {
    case 0: return clusters::cluster_c(2);
    case 1: return clusters::cluster_a(2);
    default: return cluster_by_name("c", 2, 4);
  }
}

using zeppelin_test::setup_for;

}  // namespace

TEST_CASE("the plan step bound never exceeds the simulated step", "[sim][planner]") {
  const model_config models_tried[] = {models::llama_3b(), models::llama3_8b()};
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const topology t = small_cluster(seed);
    const batch b = sampled_batch(seed, 8 * 4096 + static_cast<token_count>(seed) * 517);
    const model_config& m = models_tried[seed % 2];
    const method_setup setup = setup_for(b, t);
    for (const method_spec& spec : cost_driven_candidates) {
      CAPTURE(seed, spec.name);
      const method_run run = run_spec(spec, b, t, m, setup);
      const linear_layout_kind linear = spec.remap ? linear_layout_kind::token_balanced : linear_layout_kind::attention_layout;
      const inter_node_path path = inter_node_path_of(options_for(spec, setup).router);
      const double bound = plan_step_bound(run.layout, b, m, run.view, sim_cost_model::for_topology(run.view), linear, path);
      CHECK(bound >= run.result.lower_bound_s * (1 - 1e-12));
      CHECK(bound <= run.result.step_time_s * (1 + 1e-12));
      // the bound of any router holds for this one too, and is never above the path's own
      CHECK(plan_step_bound(run.layout, b, m, run.view, sim_cost_model::for_topology(run.view), linear) <= bound);
      // every pair at the best rate (the planner's first, O(shards) bound) is never above it
      bound_prices quick = bound_prices_for(b, m, run.view, sim_cost_model::for_topology(run.view));
      bound_prices one_rank = quick;
      quick.max_shard_pairs = 0;
      one_rank.priced_ranks = 1;
      // the busiest rank's launch sets (the planner's second bound) lie between the two
      const double first = plan_step_bound(run.layout, quick, linear, path), second = plan_step_bound(run.layout, one_rank, linear, path);
      CHECK(first <= second * (1 + 1e-12));
      CHECK(second <= bound * (1 + 1e-12));
    }
  }
}

TEST_CASE("the first bound of a layout's sums equals its plan's, streamed or summed from the shards", "[sim][planner]") {
  // the planner bounds even_split, allgather and ulysses from sums laid out without shards,
  // shared among the three with each one's collective: the same bound as their plans give
  const model_config m = models::llama_3b();
  int streamed = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    const topology t = small_cluster(seed);
    const batch b = sampled_batch(seed, 8 * 4096 + static_cast<token_count>(seed) * 733);
    const method_setup setup = setup_for(b, t);
    const sim_cost_model cost = sim_cost_model::for_topology(t);
    bound_prices quick = bound_prices_for(b, m, t, cost);
    quick.max_shard_pairs = 0;
    const any_partitioner ring = partitioner_of(method_spec_of(method_kind::te_cp), t, method_capacity(setup));
    const std::optional<layout_totals> shared = partition_totals(ring, b, t);
    REQUIRE(shared.has_value());
    for (const method_spec& spec : cost_driven_candidates) {
      CAPTURE(seed, spec.name);
      const plan p = partition_for(spec, b, t, method_capacity(setup), setup.metric, &m);
      const linear_layout_kind linear = spec.remap ? linear_layout_kind::token_balanced : linear_layout_kind::attention_layout;
      const inter_node_path path = inter_node_path_of(options_for(spec, setup).router);
      const double of_plan = plan_step_bound(p, quick, linear, path);
      CHECK(plan_step_bound(layout_totals_of(p), quick, linear, path) == of_plan);
      const any_partitioner own = partitioner_of(spec, t, method_capacity(setup), setup.metric, &m);
      if (!same_layout_but_collective(own, ring)) continue;
      ++streamed;
      layout_totals sums = *shared;
      set_collective(sums.groups, *collective_of(own));
      set_collective_of(spec, sums.groups);
      CHECK(plan_step_bound(sums, quick, linear, path) == of_plan);
    }
  }
  CHECK(streamed == 8 * 4);  // ulysses, llama_cp, te_cp+routing, te_cp
}

TEST_CASE("a candidate laid out as sums still finds the later candidates that duplicate it", "[sim][planner]") {
  // one sequence: hybrid DP gives it every GPU, so hybrid DP + Ulysses runs Ulysses' plan; once
  // Ulysses' plan is made (its first bound came from sums) the duplicate leaves the queue, and
  // Ulysses' upper bound, below every other bound, certifies it
  const model_config m = model_by_name("7b");
  const topology t = cluster_by_name("c", 4, 8);
  const batch b({65536});
  const cost_driven_decision d = choose_by_cost(b, t, m, setup_for(b, t));
  REQUIRE(d.execution.name == "ulysses");
  CHECK_FALSE(d.result);
  const auto price_of = [&](std::string_view name) {
    return *std::find_if(d.candidates.begin(), d.candidates.end(), [&](const candidate_price& c) { return c.name == name; });
  };
  CHECK(price_of("ulysses").outcome == candidate_outcome::certified);
  const candidate_price twin = price_of("hybrid_dp+ulysses");
  CHECK(twin.outcome == candidate_outcome::duplicate);
  CHECK(twin.reason == "the plan and execution of ulysses");
  CHECK(twin.bound_s == price_of("ulysses").bound_s);
}

TEST_CASE("the plan step bound counts the bytes the collectives deliver, and stays below the step", "[sim][planner]") {
  // short sequences every layout balances equally: work alone bounds every candidate alike;
  // the K/V that TE CP's and LLaMA CP's rings pass around, and Ulysses' all-to-all, lift theirs
  const model_config m = models::llama_3b();
  random_generator rng(77, 5);
  for (const topology& t : {clusters::cluster_c(8), clusters::cluster_a(8)}) {  // rings of 64 ranks
    std::vector<token_count> lengths(4096);
    for (token_count& x : lengths) x = 1 + static_cast<token_count>(rng.below(24));
    const batch b(lengths);
    const method_setup setup = setup_for(b, t);
    const sim_cost_model cost = sim_cost_model::for_topology(t);
    const bound_prices prices = bound_prices_for(b, m, t, cost);
    bound_prices work_only = prices;
    work_only.per_byte_in = 0;
    work_only.per_byte_into_node = 0;
    int lifted = 0;
    for (const method_spec& spec : cost_driven_candidates) {
      CAPTURE(t.nodes(), t.gpus_per_node(), spec.name);
      const method_run run = run_spec(spec, b, t, m, setup);
      const linear_layout_kind linear = spec.remap ? linear_layout_kind::token_balanced : linear_layout_kind::attention_layout;
      const double bound = plan_step_bound(run.layout, prices, linear);
      CHECK(bound <= run.result.step_time_s * (1 + 1e-12));
      CHECK(bound >= plan_step_bound(run.layout, work_only, linear));
      if (bound > 1.5 * plan_step_bound(run.layout, work_only, linear)) ++lifted;
      // under the direct router every byte from another node takes the receiver's own NIC
      const inter_node_path path = inter_node_path_of(options_for(spec, setup).router);
      const double own_path = plan_step_bound(run.layout, prices, linear, path);
      CHECK(own_path >= bound);
      CHECK(own_path <= run.result.step_time_s * (1 + 1e-12));
      if (spec.kind == method_kind::te_cp) CHECK(own_path > 2 * bound);  // a global ring's edges between nodes: one NIC each
    }
    CHECK(lifted >= 3);  // te_cp, te_cp+routing, llama_cp at least
  }
}

// One 8192-token sequence over two nodes of one GPU each, planned by `spec` into one group of
// `collective`: its bound with every price, with the bytes free (work only), with the work
// free (bytes only), and its simulated step.
struct split_over_two_nodes {
  double bound = 0, work = 0, bytes = 0, step = 0;
  split_over_two_nodes(const method_spec& spec, collective_kind collective) {
    const model_config m = models::llama_3b();
    const topology t = cluster_by_name("c", 2, 1);
    const batch b({8192});
    const method_run run = run_spec(spec, b, t, m, setup_for(b, t));
    REQUIRE(run.layout.groups.size() == 1);
    REQUIRE(run.layout.groups.front().collective == collective);
    const bound_prices prices = bound_prices_for(b, m, t, sim_cost_model::for_topology(t));
    REQUIRE((collective != collective_kind::all_to_all || detail::ulysses_degree(prices.wire, 2) == 2));
    bound_prices work_only = prices, bytes_only = prices;
    work_only.per_byte_in = work_only.per_byte_into_node = work_only.per_byte_nvlink = work_only.per_byte_nic = 0;
    bytes_only.per_pair = bytes_only.per_token = bytes_only.balanced = 0;
    const linear_layout_kind linear = linear_layout_kind::attention_layout;
    bound = plan_step_bound(run.layout, prices, linear);
    work = plan_step_bound(run.layout, work_only, linear);
    bytes = plan_step_bound(run.layout, bytes_only, linear);
    step = run.result.step_time_s;
    REQUIRE(work > 0);
    REQUIRE(bytes > 0);
  }
};

TEST_CASE("an all-gather member's bound adds its gathered and scattered bytes to its work", "[sim][planner]") {
  // LLaMA CP: each member computes its half only after the other half's K/V arrived, in each
  // pass, and takes in the backward's partials (its reduce-scatter) only after its launch, so
  // neither part hides the other
  const split_over_two_nodes s(method_spec_of(method_kind::llama_cp), collective_kind::all_gather);
  CHECK(s.bound == Approx(s.work + s.bytes).epsilon(1e-12));
  CHECK(s.bound <= s.step * (1 + 1e-12));
  const model_config m = models::llama_3b();
  const topology t = cluster_by_name("c", 2, 1);
  const bound_prices prices = bound_prices_for(batch({8192}), m, t, sim_cost_model::for_topology(t));
  const double kv = 2 * static_cast<double>(prices.wire.row_bytes(row_kind::kv)),
               dkv = 2 * static_cast<double>(prices.wire.row_bytes(row_kind::dkv));
  CHECK(s.bytes == Approx((4096 * kv + 4096 * kv + 4096 * dkv) * std::max(prices.per_byte_in, prices.per_byte_into_node)).epsilon(1e-12));
}

TEST_CASE("an all-to-all member's bound chains its lane's rows in, its attention and its outputs home", "[sim][planner]") {
  // Ulysses of degree 2: each member computes its lane only after the other's rows of it
  // arrived, and its linear modules only after its outputs came home, in each pass, so
  // neither the bytes nor the work hide the other
  const split_over_two_nodes s(method_spec_of(method_kind::ulysses), collective_kind::all_to_all);
  CHECK(s.bound == Approx(s.work + s.bytes).epsilon(1e-12));
  CHECK(s.bound <= s.step * (1 + 1e-12));
}

TEST_CASE("a ring's backward bound counts the dK/dV accumulators its edges carry home", "[sim][planner]") {
  // TE CP's ring of two: each member takes in the other's K/V in each pass and, in the
  // backward, the dK/dV accumulators of both halves (the other's, then its own coming home)
  const split_over_two_nodes s(method_spec_of(method_kind::te_cp), collective_kind::ring);
  const model_config m = models::llama_3b();
  const topology t = cluster_by_name("c", 2, 1);
  const bound_prices prices = bound_prices_for(batch({8192}), m, t, sim_cost_model::for_topology(t));
  const double kv = 2 * static_cast<double>(prices.wire.row_bytes(row_kind::kv)),
               dkv = 2 * static_cast<double>(prices.wire.row_bytes(row_kind::dkv));
  const double per_byte = std::max(prices.per_byte_in, prices.per_byte_into_node);
  CHECK(s.bytes == Approx((4096 * kv + 4096 * kv + 8192 * dkv) * per_byte).epsilon(1e-12));
  CHECK(s.bound <= s.step * (1 + 1e-12));
}

TEST_CASE("a rank's bound counts the compute speed it loses while its bytes come in", "[sim][planner]") {
  // GitHub 256K over 32 GPUs, seed 19: TE CP + routing's ranks take in 31/32 of every
  // sequence's K/V and dK/dV while they compute; at the speed lost to SM contention its bound
  // rises above Ulysses' step, which the planner then chooses without simulating either
  const model_config m = models::llama_7b();
  const topology t = clusters::cluster_c(4);
  const batch b = sample_batch(datasets::github(), 262144, 19);
  const method_setup setup = setup_for(b, t);
  const sim_cost_model cost = sim_cost_model::for_topology(t);
  const bound_prices prices = bound_prices_for(b, m, t, cost);
  REQUIRE(prices.comm_slowdown == cost.contention.slowdown(t.gpu()));
  REQUIRE(prices.comm_slowdown > 0);
  CHECK(bound_prices_for(b, m, t, cost, 2).comm_slowdown == 0);  // a TP collective is not slowed
  bound_prices uncontended = prices;
  uncontended.comm_slowdown = 0;
  double ulysses_step = 0;
  for (const method_spec& spec : cost_driven_candidates) {
    CAPTURE(spec.name);
    const method_run run = run_spec(spec, b, t, m, setup);
    const linear_layout_kind linear = spec.remap ? linear_layout_kind::token_balanced : linear_layout_kind::attention_layout;
    const inter_node_path path = inter_node_path_of(options_for(spec, setup).router);
    const double bound = plan_step_bound(run.layout, prices, linear, path), without = plan_step_bound(run.layout, uncontended, linear, path);
    CHECK(bound <= run.result.step_time_s * (1 + 1e-12));
    if (spec.kind == method_kind::ulysses) ulysses_step = run.result.step_time_s;
    if (spec.kind == method_kind::te_cp_routing) {
      CHECK(without < ulysses_step);
      CHECK(bound > ulysses_step);
    }
  }
  const cost_driven_decision d = choose_by_cost(b, t, m, setup);
  CHECK(d.execution.kind == method_kind::ulysses);
  CHECK_FALSE(d.result.has_value());
  for (const candidate_price& c : d.candidates) CHECK(c.outcome != candidate_outcome::simulated);
}

TEST_CASE("the bound of a group that serves several micro-batches counts each one's pairs and bytes in it", "[sim][planner]") {
  // hybrid DP's micro-batches reuse its aligned groups: group 0 runs one long document in
  // micro-batch 0 and another in micro-batch 1; lumping both into one micro-batch put the
  // bound above the step (8.13 s against 6.55 s)
  const model_config m = models::llama_7b();
  const topology t = clusters::cluster_c(2);
  const batch b = sample_batch(datasets::prolong64k(), 262144, 1);
  const method_spec& spec = cost_driven_candidates.back();
  REQUIRE(spec.name == "hybrid_dp+ulysses");
  const method_run run = run_spec(spec, b, t, m, setup_for(b, t));
  REQUIRE(run.layout.micro_batches() == 2);
  bool shared = false;
  for (std::size_t g = 0; g < run.layout.groups.size(); ++g) {
    bool in[2] = {false, false};
    for (const placement& pl : run.layout.placements)
      for (const shard& s : pl.shards)
        if (s.group == static_cast<group_index>(g)) in[s.micro_batch] = true;
    shared = shared || (in[0] && in[1]);
  }
  REQUIRE(shared);
  const double bound = plan_step_bound(run.layout, b, m, run.view, sim_cost_model::for_topology(run.view), linear_layout_kind::attention_layout);
  CHECK(bound <= run.result.step_time_s * (1 + 1e-12));
  CHECK(bound >= run.result.lower_bound_s * (1 - 1e-12));
}

TEST_CASE("a USP group's bound counts the K/V and dK/dV partials its lanes' rings pass", "[sim][planner]") {
  // 4 heads over 64 ranks: Ulysses of degree 4 and a ring of 16 subgroups, one per 4 GPUs;
  // each member takes in its lane's K/V of the 15 other subgroups in each pass and the dK/dV
  // partials of 15 in the backward, ten times what its subgroup's all-to-all brings
  model_config m = models::llama_3b();
  m.heads = m.kv_heads = 4;
  m.hidden = 4 * m.head_dim;
  const topology t = clusters::cluster_c(8);
  const token_count n = 65536;
  const batch b({n});
  const method_run run = run_spec(method_spec_of(method_kind::ulysses), b, t, m, setup_for(b, t));
  REQUIRE(run.layout.groups.size() == 1);
  REQUIRE(run.layout.groups.front().collective == collective_kind::all_to_all);
  const bound_prices prices = bound_prices_for(b, m, run.view, sim_cost_model::for_topology(run.view));
  REQUIRE(detail::ulysses_degree(prices.wire, 64) == 4);
  bound_prices bytes_only = prices;
  bytes_only.per_pair = bytes_only.per_token = bytes_only.balanced = 0;
  const double others = static_cast<double>(n - n / 16);
  const double kv = static_cast<double>(prices.wire.row_bytes(row_kind::kv, 1)),
               dkv = static_cast<double>(prices.wire.row_bytes(row_kind::dkv, 1));
  const double ring = (others * 2 * kv + others * 2 * (kv + dkv)) * prices.per_byte_in;
  const linear_layout_kind linear = linear_layout_kind::attention_layout;
  CHECK(plan_step_bound(run.layout, bytes_only, linear) >= 0.99 * ring);
  CHECK(plan_step_bound(run.layout, prices, linear) <= run.result.step_time_s * (1 + 1e-12));
}

TEST_CASE("the plan step bound is the perfect-balance bound for one rank and grows with imbalance", "[sim][planner]") {
  const model_config m = models::llama_3b();
  const topology one = cluster_by_name("c", 1, 1);
  const batch b({3000, 1000});
  const plan single{"manual", 1, 1, 4000, {placement{{shard{0, {0, 3000}, no_group, 0}, shard{1, {0, 1000}, no_group, 0}}}}, {}, {}};
  const sim_cost_model cost = sim_cost_model::for_topology(one);
  // one launch of two causal sequences: 3072 + 1024 tile rows, below the tables' best size,
  // so above the perfect-balance bound by exactly that launch's slowdown
  const bound_prices prices = bound_prices_for(b, m, one, cost);
  const double pairs = static_cast<double>(causal_pairs(3000) + causal_pairs(1000));
  const double slowdown = prices.slowdown.at(3072 + 1024);
  CHECK(slowdown > 1.5);
  CHECK(plan_step_bound(single, b, m, one, cost, linear_layout_kind::attention_layout) ==
        Approx(pairs * prices.per_pair * slowdown + 4000 * prices.per_token).epsilon(1e-12));
  bound_prices flat = prices;  // rate tables without a slope: the perfect-balance bound
  flat.slowdown.attention.forward = throughput_table({{1, 1e15}});
  flat.slowdown.attention.backward = throughput_table({{1, 1e15}});
  CHECK(plan_step_bound(single, flat, linear_layout_kind::attention_layout) == Approx(step_lower_bound(b, m, one, cost)).epsilon(1e-12));

  // two ranks: the long sequence alone on rank 0 is the busier rank whatever the layout of
  // the linear modules
  const topology two = cluster_by_name("c", 1, 2);
  const plan split{"manual", 1, 2, 4000,
                   {placement{{shard{0, {0, 3000}, no_group, 0}}}, placement{{shard{1, {0, 1000}, no_group, 0}}}}, {}, {}};
  const sim_cost_model cost2 = sim_cost_model::for_topology(two);
  const double balanced = step_lower_bound(b, m, two, cost2);
  const double as_laid_out = plan_step_bound(split, b, m, two, cost2, linear_layout_kind::attention_layout);
  const double remapped = plan_step_bound(split, b, m, two, cost2, linear_layout_kind::token_balanced);
  CHECK(as_laid_out > remapped);
  CHECK(remapped > balanced);
}

TEST_CASE("a ring member's small launches lift the bound, which stays below the step", "[sim][planner]") {
  // one 64K sequence over rings of 16 to 64 ranks (1K to 4K tokens each: launches far below
  // the tables' best size) and the same on a few ranks; both launch policies
  const model_config m = models::llama_3b();
  const batch b({65536});
  for (const int nodes : {2, 4, 8})
    for (const method_spec& spec : {method_spec_of(method_kind::te_cp), method_spec_of(method_kind::te_cp_routing_engine)}) {
      const topology t = cluster_by_name("c", nodes, 8);
      CAPTURE(nodes, spec.name);
      const method_run run = run_spec(spec, b, t, m, setup_for(b, t));
      const bound_prices prices = bound_prices_for(b, m, run.view, sim_cost_model::for_topology(run.view));
      bound_prices flat = prices;
      flat.slowdown.attention.forward = throughput_table({{1, 1e15}});
      flat.slowdown.attention.backward = throughput_table({{1, 1e15}});
      const linear_layout_kind linear = spec.remap ? linear_layout_kind::token_balanced : linear_layout_kind::attention_layout;
      const double bound = plan_step_bound(run.layout, prices, linear), without = plan_step_bound(run.layout, flat, linear);
      CHECK(bound <= run.result.step_time_s * (1 + 1e-12));
      CHECK(bound > 1.5 * without);  // each round's launch has 1K - 4K query rows
    }
}

TEST_CASE("the cost-driven planner chooses the brute-force minimum over its candidates", "[sim][planner]") {
  const model_config m = models::llama_3b();
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const topology t = small_cluster(seed);
    const batch b = sampled_batch(seed, 8 * 4096 + static_cast<token_count>(seed) * 911);
    const method_setup setup = setup_for(b, t);
    CAPTURE(seed);
    const cost_driven_choice choice = plan_by_cost(b, t, m, setup);
    REQUIRE(choice.candidates.size() == cost_driven_candidates.size());

    double best = std::numeric_limits<double>::infinity();
    std::size_t best_index = 0;
    for (std::size_t i = 0; i < cost_driven_candidates.size(); ++i) {
      CAPTURE(cost_driven_candidates[i].name);
      const double step = run_spec(cost_driven_candidates[i], b, t, m, setup).result.step_time_s;
      const candidate_price& price = choice.candidates[i];
      CHECK(price.name == cost_driven_candidates[i].name);
      if (price.outcome == candidate_outcome::simulated) CHECK(price.step_s == step);
      if (price.outcome == candidate_outcome::pruned) CHECK(price.bound_s >= choice.chosen.result.step_time_s);
      CHECK(price.bound_s <= step * (1 + 1e-12));
      if (step < best) best = step, best_index = i;
    }
    CHECK(choice.chosen.result.step_time_s == best);
    CHECK(choice.chosen_index == best_index);
    CHECK(choice.candidates[best_index].outcome == candidate_outcome::simulated);
    CHECK(choice.execution.name == cost_driven_candidates[best_index].name);
    CHECK(choice.chosen.candidate == std::string(choice.execution.name));
    validate(choice.chosen.layout, b, choice.chosen.view);

    // what an engine runs: the chosen candidate's options
    const sim_options expected = options_for(cost_driven_candidates[best_index], setup);
    CHECK(choice.options.engine == expected.engine);
    CHECK(choice.options.launch == expected.launch);
    CHECK(choice.options.remap == expected.remap);
  }
}

TEST_CASE("the zeppelin method is deterministic and never slower than a method it considers", "[sim][planner]") {
  const model_config m = models::llama3_8b();
  for (std::uint64_t seed = 11; seed <= 14; ++seed) {
    const topology t = small_cluster(seed);
    const batch b = sampled_batch(seed, 12 * 4096);
    const method_setup setup = setup_for(b, t);
    CAPTURE(seed);
    const method_run ours = run_method("zeppelin", b, t, m, setup);
    CHECK(ours.name == "zeppelin");
    CHECK(ours.result.method == "zeppelin");
    for (const method_spec& spec : method_specs) {
      if (spec.kind == method_kind::zeppelin) continue;
      CAPTURE(spec.name);
      CHECK(ours.result.step_time_s <= run_method(spec, b, t, m, setup).result.step_time_s);
    }
    const cost_driven_choice again = plan_by_cost(b, t, m, setup);
    CHECK(again.chosen.result.step_time_s == ours.result.step_time_s);
    CHECK(again.chosen.layout == ours.layout);
    CHECK(again.chosen.candidate == ours.candidate);
  }
}

TEST_CASE("the cost-driven planner records a trace for the chosen candidate only when asked", "[sim][planner]") {
  const model_config m = models::llama_3b();
  const topology t = clusters::cluster_c(2);
  const batch b = sampled_batch(3, 8 * 4096);
  method_setup setup = setup_for(b, t);
  const cost_driven_choice plain = plan_by_cost(b, t, m, setup);
  CHECK(plain.chosen.result.trace.empty());
  setup.record_trace = true;
  const cost_driven_choice traced = plan_by_cost(b, t, m, setup);
  CHECK_FALSE(traced.chosen.result.trace.empty());
  CHECK(traced.chosen.result.step_time_s == plain.chosen.result.step_time_s);
}

TEST_CASE("the cost-driven planner: infeasible candidates are recorded, and bad candidate lists refused", "[sim][planner]") {
  const model_config m = models::llama_3b();
  const topology t = cluster_by_name("c", 1, 4);
  const batch b({4000, 3000, 1000});
  const method_setup setup = setup_for(b, t);
  const std::array<method_spec, 2> with_unknown{{
      {method_kind::candidate, "unknown", "a partitioner that does not exist", "no_such_partitioner", false,
       engine_policy::in_order, false},
      method_spec_of(method_kind::te_cp),
  }};
  const cost_driven_choice choice = plan_by_cost(b, t, m, setup, with_unknown);
  CHECK(choice.chosen_index == 1);
  CHECK(choice.candidates[0].outcome == candidate_outcome::infeasible);
  CHECK(choice.candidates[0].reason.find("no_such_partitioner") != std::string::npos);
  CHECK(choice.candidates[1].outcome == candidate_outcome::simulated);

  // no feasible candidate: the first candidate's error
  CHECK_THROWS_WITH(plan_by_cost(b, t, m, setup, std::span<const method_spec>(with_unknown).first(1)),
                    Catch::Contains("no_such_partitioner"));
  CHECK_THROWS_AS(plan_by_cost(b, t, m, setup, std::span<const method_spec>{}), invalid_argument);
  const std::array<method_spec, 1> itself{{method_by_name("zeppelin")}};
  CHECK_THROWS_WITH(plan_by_cost(b, t, m, setup, itself), Catch::Contains("its own candidate"));
  CHECK_THROWS_WITH(partition_for(method_by_name("zeppelin"), b, t, 4096), Catch::Contains("plan_by_cost"));
}

TEST_CASE("the cost-driven planner plans a batch over the capacity in micro-batches", "[sim][planner]") {
  const model_config m = models::llama_3b();
  const topology t = cluster_by_name("c", 1, 4);
  const batch b({3000, 2500, 2000, 4000, 1500, 3500, 2600, 1900, 1800, 1776});  // 24,576 tokens
  method_setup setup = setup_for(b, t);
  const auto micro = static_cast<std::size_t>(
      std::find_if(cost_driven_candidates.begin(), cost_driven_candidates.end(), [](const method_spec& c) { return c.name == "zeppelin_paper+micro_batches"; }) -
      cost_driven_candidates.begin());
  REQUIRE(micro < cost_driven_candidates.size());
  // one pass fits: the micro-batched candidate is zeppelin_paper's plan, not simulated again
  const cost_driven_choice fits = plan_by_cost(b, t, m, setup);
  const candidate_price& same = fits.candidates[micro];
  CHECK(same.outcome == candidate_outcome::duplicate);
  CHECK(same.reason.find("zeppelin_paper") != std::string::npos);
  CHECK(same.bound_s == fits.candidates.front().bound_s);
  // half the room the batch needs: every one-pass candidate refuses it, the micro-batched one plans it
  setup.tokens_per_gpu = setup.tokens_per_gpu / 2;
  setup.capacity_slack = 0;
  const cost_driven_choice over = plan_by_cost(b, t, m, setup);
  CHECK(over.chosen_index == micro);
  CHECK(over.execution.name == "zeppelin_paper+micro_batches");
  CHECK(over.chosen.layout.micro_batches() >= 2);
  validate(over.chosen.layout, b, over.chosen.view);
  for (std::size_t i = 0; i < over.candidates.size(); ++i) {
    CAPTURE(over.candidates[i].name);
    CHECK(over.candidates[i].outcome == (i == micro ? candidate_outcome::simulated : candidate_outcome::infeasible));
  }
  CHECK(over.chosen.result.step_time_s == run_spec(cost_driven_candidates[micro], b, t, m, setup).result.step_time_s);
}

TEST_CASE("a method's collective replaces its partitioner's on every group that spans ranks", "[sim][planner]") {
  const topology t = cluster_by_name("c", 2, 4);
  const batch b({9000, 700, 40, 3000, 12});
  const method_spec& flexsp = cost_driven_candidates.back();
  REQUIRE(flexsp.name == "hybrid_dp+ulysses");
  const plan ours = partition_for(flexsp, b, t, 2000);
  plan theirs = partition_for(method_spec_of(method_kind::hybrid_dp), b, t, 2000);
  int spanning = 0;
  for (ring_group& g : theirs.groups) {
    CHECK(g.collective == collective_kind::ring);
    if (g.zone == zone_kind::local) continue;
    g.collective = collective_kind::all_to_all;
    ++spanning;
  }
  CHECK(spanning >= 1);
  CHECK(ours == theirs);  // the same layout, only the collective differs
  validate(ours, b, t);
}
