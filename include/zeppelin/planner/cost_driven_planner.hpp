// zeppelin/planner/cost_driven_planner.hpp
// Zeppelin's planner: plan a batch with every candidate (a layout policy and an execution),
// price each with the step simulator, keep the fastest.
//   in : batch, PHYSICAL topology, model, method_setup, candidates (method_specs; default
//        cost_driven_candidates: Zeppelin as published, its ablation without remapping, every
//        baseline as it runs, the baselines' layouts under Zeppelin's execution, Zeppelin
//        over the fewest micro-batches that fit the capacity, and hybrid DP's groups running
//        Ulysses)
//   out: cost_driven_choice: the chosen run (plan, simulated result), the execution options it
//        needs (sim_options: routing, engine, launches, remapping) and, per candidate, the
//        bound, the simulated step or why it was not simulated (pruned, infeasible, refused,
//        duplicate).
// Search: every candidate is laid out and bounded by plan_step_bound (planner/plan_step_bound.hpp)
// with every pair at the best rate. Candidates whose partitioners lay out alike share one layout,
// each running its own collective (the same partitioner; even_split, allgather and ulysses,
// partition/registry.hpp same_layout_but_collective; a micro-batched planner whose batch fits
// one pass and its inner partitioner, one_pass_partitioner); the first bound reads the layout's
// sums (cost/layout_totals.hpp), O(ranks + groups) per candidate: laid out without the shards
// where the partitioner can (partition_totals: the zigzag baselines, 375K shards at 4M tokens
// over 1024 GPUs), whose plan is then made only when a later stage needs its shards; else summed
// from the plan, O(shards) once per layout. A candidate whose plan and execution equal an
// earlier candidate's (compared once both plans exist) is recorded as its duplicate and neither
// bounded further nor simulated; candidates are taken in increasing order of bound (ties:
// candidate order): one bounded only at the best rate is bounded again with the launch sets of
// its busiest rank (its shard pairs: the calls a ring's rounds make can be small and slow), then
// of every rank (O(shard pairs)), going back in line after each; one bounded all three ways is
// simulated, until the next bound is no smaller than the best step found. Pruning never
// changes the choice: the chosen step is the minimum over all feasible candidates, ties going to the
// earlier candidate, exactly as simulating all of them would choose. A candidate whose
// partitioner finds the batch infeasible, or whose program exceeds the library's limits, is
// recorded with the reason and skipped; when no candidate can run, the first one's error is
// thrown. Deterministic: no clocks, no unordered containers.
// choose_by_cost stops earlier still: when the candidate next in line has an upper bound
// (planner/plan_step_upper_bound.hpp: Ulysses and USP plans; the looser, cheaper one first, then the
// tight one) below every other candidate's bound, it is chosen unsimulated (outcome certified),
// the same choice; plan_by_cost is choose_by_cost and
// then the chosen plan's simulation where it was not simulated.
// Because the baselines' own (layout, execution) pairs are candidates, the planner's step is
// never above theirs under the same cost model. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/planner/method_spec.hpp>
#include <zeppelin/planner/plan_step_bound.hpp>
#include <zeppelin/planner/plan_step_upper_bound.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/simulate.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <exception>
#include <functional>
#include <numeric>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The candidates of the `zeppelin` method, in tie-breaking order.
inline constexpr std::array<method_spec, 10> cost_driven_candidates{{
    method_spec_of(method_kind::zeppelin_paper),
    method_spec_of(method_kind::te_cp_routing_engine),
    method_spec_of(method_kind::ulysses),
    method_spec_of(method_kind::llama_cp),
    method_spec_of(method_kind::te_cp_routing),
    method_spec_of(method_kind::te_cp),
    method_spec_of(method_kind::hybrid_dp),
    {method_kind::candidate, "hybrid_dp+engine", "ByteScale-like micro-batches with routing and Zeppelin's engine",
     hybrid_dp::name, true, engine_policy::prioritized, false, launch_policy::fused_round},
    {method_kind::candidate, "zeppelin_paper+micro_batches",
     "Zeppelin as published over the fewest micro-batches that fit the capacity (a duplicate of zeppelin_paper when one pass fits)",
     micro_batched<hierarchical<>>::name, true, engine_policy::prioritized, true, launch_policy::fused_round},
    {method_kind::candidate, "hybrid_dp+ulysses",
     "FlexSP-like: ByteScale-like aligned groups per sequence, each running Ulysses (USP where the heads do not split over it)",
     hybrid_dp::name, false, engine_policy::in_order, false, launch_policy::per_group, collective_kind::all_to_all},
}};

//! Why a candidate has no simulated step.
enum class candidate_outcome : std::uint8_t {
  simulated,   //!< step_s holds its simulated step
  pruned,      //!< its bound was no smaller than a simulated step: it cannot win
  infeasible,  //!< the partitioner or the program builder refused it (reason)
  duplicate,   //!< its plan and execution are an earlier candidate's (reason names it): the same step
  certified,   //!< chosen unsimulated: its upper bound (upper_s) is below every other candidate's bound
};

[[nodiscard]] constexpr const char* to_string(candidate_outcome o) noexcept {
  switch (o) {
    case candidate_outcome::simulated: return "simulated";
    case candidate_outcome::pruned: return "pruned";
    case candidate_outcome::infeasible: return "infeasible";
    case candidate_outcome::duplicate: return "duplicate";
    case candidate_outcome::certified: return "certified";
  }
  return "?";
}

//! One candidate's price.
struct candidate_price {
  std::string name;
  candidate_outcome outcome = candidate_outcome::infeasible;
  double bound_s = 0;  //!< plan_step_bound (0 when infeasible): with launch sets where it was bounded again
  double step_s = 0;   //!< simulated step (outcome simulated)
  double upper_s = 0;  //!< plan_step_upper_bound where it was asked for (0: not asked, or none exists)
  std::string reason;  //!< the error (outcome infeasible), the earlier candidate (duplicate)
};

//! What choose_by_cost decides: the candidate, its plan and execution, and its simulated step
//! unless its bounds alone chose it.
struct cost_driven_decision {
  std::size_t chosen_index = 0;  //!< into the candidate list
  method_spec execution;         //!< the chosen candidate (its partitioner and execution)
  sim_options options;           //!< what an engine runs the chosen plan with (options_for)
  topology view;                 //!< the CP view the plan is on
  plan layout;                   //!< the chosen plan
  std::optional<sim_result> result;  //!< the chosen plan's simulation, when it was simulated
  std::vector<candidate_price> candidates;  //!< in candidate order
};

struct cost_driven_choice {
  method_run chosen;        //!< the chosen candidate's plan and simulated result
  std::size_t chosen_index = 0;  //!< into the candidate list
  method_spec execution;    //!< the chosen candidate (its partitioner and execution)
  sim_options options;      //!< what an engine runs the chosen plan with (options_for)
  std::vector<candidate_price> candidates;  //!< in candidate order
};

//! Whether two candidates run a plan the same way (routing, engine, remapping, launches; their
//! collectives are in their plans' groups).
[[nodiscard]] constexpr bool same_execution(const method_spec& x, const method_spec& y) noexcept {
  return x.routing == y.routing && x.engine == y.engine && x.remap == y.remap && x.launch == y.launch;
}

//! Whether two plans lay out the same tokens the same way (everything but method and notes).
[[nodiscard]] inline bool same_layout(const plan& x, const plan& y) noexcept {
  return x.nodes == y.nodes && x.gpus_per_node == y.gpus_per_node && x.capacity == y.capacity && x.placements == y.placements &&
         x.groups == y.groups;
}

//! Chooses, for `b` on `physical` and model `m`, the candidate whose simulated step is least
//! (see the file comment), simulating as few as its bounds allow: the chosen one too, unless
//! its upper bound (plan_step_upper_bound) is below every other candidate's lower bound. Throws
//! invalid_argument for an empty candidate list or a candidate that is itself the cost-driven
//! zeppelin, and the first candidate's error when none is feasible.
[[nodiscard]] inline cost_driven_decision choose_by_cost(const batch& b, const topology& physical, const model_config& m,
                                                         const method_setup& setup = {},
                                                         std::span<const method_spec> candidates = cost_driven_candidates) {
  ZEPPELIN_EXPECTS(!candidates.empty(), "the cost-driven planner needs at least one candidate", {});
  const topology view = tensor_parallel_view(physical, setup.tensor_parallel);
  const sim_cost_model cost = setup.cost ? *setup.cost : sim_cost_model::for_topology(view);
  const token_count capacity = method_capacity(setup);

  std::vector<candidate_price> prices(candidates.size());
  std::vector<std::optional<plan>> layouts(candidates.size());
  // once per batch, not per candidate. The bounds a candidate goes through, each at least the
  // one before and costing less than the next (and all of them less than the simulation they
  // may spare): every pair at the best rate, O(shards), or O(ranks + groups) from the sums of a
  // layout laid out without its shards; the busiest rank's launch sets, its own shard pairs;
  // every rank's, all shard pairs
  const bound_prices tight = bound_prices_for(b, m, view, cost, setup.tensor_parallel);
  bound_prices quick = tight, one_rank = tight;
  quick.max_shard_pairs = 0;
  one_rank.priced_ranks = 1;
  const std::array<const bound_prices*, 3> stages{&quick, &one_rank, &tight};
  const auto linear_of = [&](std::size_t i) {
    return candidates[i].remap ? linear_layout_kind::token_balanced : linear_layout_kind::attention_layout;
  };
  const auto path_of = [&](std::size_t i) { return inter_node_path_of(options_for(candidates[i], setup).router); };
  std::optional<std::exception_ptr> first_error;
  // candidates whose partitioners lay out alike (the same partitioner, or even_split, allgather
  // and ulysses: same_layout_but_collective) share that layout, each with its own collective:
  // each layout is made once per call. At a layout's first candidate: its plan, or, where the
  // partitioner lays out the plan's sums without the shards (partition_totals), those sums; the
  // plan then comes when a candidate of it needs a later stage (most are pruned before)
  std::vector<std::optional<any_partitioner>> partitioners(candidates.size());
  std::vector<std::size_t> first_of(candidates.size());
  // [candidate]: it shares its layout through its one-pass partitioner (one_pass_partitioner: a
  // micro-batched planner whose batch fits one pass), which may refuse where it would not
  std::vector<std::uint8_t> via_one_pass(candidates.size(), 0);
  std::vector<std::optional<plan>> partitioned(candidates.size());
  std::vector<std::optional<layout_totals>> summed(candidates.size());
  // the groups of candidate i on its layout's groups: its partitioner's collective where the
  // layout's first candidate has another partitioner, then its spec's
  const auto set_collectives = [&](std::size_t i, std::vector<ring_group>& groups) {
    const std::size_t f = first_of[i];
    if (!(*partitioners[i] == *partitioners[f]))
      if (const std::optional<collective_kind> own = collective_of(*partitioners[i])) set_collective(groups, *own);
    set_collective_of(candidates[i], groups);
  };
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    ZEPPELIN_EXPECTS(candidates[i].kind != method_kind::zeppelin, "the cost-driven planner cannot be its own candidate",
                     {{"candidate", double(i)}});
    prices[i].name = std::string(candidates[i].name);
    try {
      partitioners[i] = partitioner_of(candidates[i], view, capacity, setup.metric, &m);
    } catch (const error& e) {
      prices[i].reason = e.what();
      if (!first_error) first_error = std::current_exception();
    }
    first_of[i] = i;
    if (!partitioners[i]) continue;
    const std::optional<any_partitioner> one_pass = one_pass_partitioner(*partitioners[i], b, view);
    for (std::size_t j = 0; j < i; ++j) {
      if (!partitioners[j]) continue;
      const bool alike = same_layout_but_collective(*partitioners[j], *partitioners[i]);
      if (alike || (one_pass && same_layout_but_collective(*partitioners[j], *one_pass))) {
        first_of[i] = first_of[j];
        via_one_pass[i] = via_one_pass[j] || !alike;
        break;
      }
    }
  }
  // a candidate whose plan and execution an earlier one already has costs the same step: it is
  // not bounded or simulated again (e.g. a micro-batched planner whose batch fits one pass;
  // hybrid DP + Ulysses giving one sequence every GPU, as Ulysses does). Compared once both
  // plans exist: when the later one is laid out, or when a layout laid out as sums gets its plan
  // (against the candidates before it, and the later ones it makes duplicates, which leave the
  // queue)
  std::vector<std::size_t> duplicate_of(candidates.size(), candidates.size());
  const auto mark_duplicate = [&](std::size_t later, std::size_t earlier) {
    prices[later].outcome = candidate_outcome::duplicate;
    prices[later].reason = "the plan and execution of " + prices[earlier].name;
    duplicate_of[later] = earlier;
    layouts[later].reset();
  };
  const auto same_run = [&](std::size_t i, std::size_t j) {
    return layouts[j] && same_execution(candidates[i], candidates[j]) && same_layout(*layouts[i], *layouts[j]);
  };
  const auto is_duplicate = [&](std::size_t i) {
    for (std::size_t j = 0; j < i; ++j)
      if (same_run(i, j)) {
        mark_duplicate(i, j);
        return true;
      }
    return false;
  };
  std::vector<std::uint8_t> pending(candidates.size(), 0);  // [candidate]: bounded, its plan not yet made

  // every candidate's first bound, from its layout's sums (laid out without the shards where
  // the partitioner can, else summed from its plan once per layout)
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (!partitioners[i]) continue;
    candidate_price& price = prices[i];
    if (const std::size_t f = first_of[i]; f < i && !summed[f]) {  // the partitioner refused the batch
      if (!via_one_pass[i]) {
        price.reason = prices[f].reason;
        continue;
      }
      first_of[i] = i;  // in one pass: it goes on to more micro-batches, its own layout
    }
    const std::size_t first = first_of[i];
    bool last = true;  // no later candidate shares the layout: it takes the plan and sums rather than copies
    for (std::size_t j = i + 1; j < candidates.size() && last; ++j) last = !partitioners[j] || first_of[j] != first;
    try {
      if (first == i) {
        summed[i] = partition_totals(*partitioners[i], b, view);
        if (!summed[i]) {
          partitioned[i] = partition(*partitioners[i], b, view);
          summed[i] = layout_totals_of(*partitioned[i]);
        }
      }
      if (partitioned[first]) {
        layouts[i] = last ? std::move(*partitioned[first]) : *partitioned[first];
        if (last) partitioned[first].reset();
        set_collectives(i, layouts[i]->groups);
        if (is_duplicate(i)) continue;
      }
      layout_totals sums = last ? std::move(*summed[first]) : *summed[first];
      set_collectives(i, sums.groups);
      price.bound_s = plan_step_bound(sums, quick, linear_of(i), path_of(i));
      pending[i] = !layouts[i];
    } catch (const error& e) {
      price.reason = e.what();
      layouts[i].reset();
      if (!first_error) first_error = std::current_exception();
    }
  }
  summed.clear();

  // the plan of a pending candidate (its partitioner run once for all its candidates); false when
  // it is an earlier candidate's duplicate
  const auto make_plan = [&](std::size_t i) {
    if (!pending[i]) return true;
    pending[i] = 0;
    const std::size_t f = first_of[i];
    if (!partitioned[f]) partitioned[f] = partition(*partitioners[f], b, view);
    layouts[i] = *partitioned[f];
    set_collectives(i, layouts[i]->groups);
    if (is_duplicate(i)) return false;
    for (std::size_t j = i + 1; j < candidates.size(); ++j)  // (bounded alike, so never simulated before i)
      if (prices[j].outcome != candidate_outcome::simulated && same_run(i, j)) mark_duplicate(j, i);
    return true;
  };
  const auto is_gone = [&](std::size_t i) { return prices[i].outcome == candidate_outcome::duplicate; };
  const auto bound_of = [&](std::size_t i, const bound_prices& unit) { return plan_step_bound(*layouts[i], unit, linear_of(i), path_of(i)); };

  // candidates are priced without traces or records; the chosen one is simulated again with
  // them when the setup asks (the same step: the simulator is deterministic)
  method_setup pricing = setup;
  pricing.record_trace = false;
  pricing.record_execution = false;

  // the candidate of least bound next (ties: candidate order); one not yet bounded by the
  // last stage is bounded by the next and goes back in, so candidates are simulated in order
  // of their tight bounds
  using queued = std::pair<double, std::size_t>;
  std::priority_queue<queued, std::vector<queued>, std::greater<>> queue;
  std::vector<std::size_t> stage(candidates.size(), 0);  // [candidate]: the last stage that bounded it
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (layouts[i] || pending[i]) queue.emplace(prices[i].bound_s, i);

  std::optional<std::size_t> best;
  std::optional<sim_result> best_result;
  while (!queue.empty()) {
    const std::size_t i = queue.top().second;
    queue.pop();
    if (is_gone(i)) continue;
    candidate_price& price = prices[i];
    const bool cannot_win =
        best && (price.bound_s > best_result->step_time_s || (price.bound_s == best_result->step_time_s && i > *best));
    if (cannot_win) {
      price.outcome = candidate_outcome::pruned;
      continue;
    }
    if (stage[i] + 1 < stages.size()) {
      if (!make_plan(i)) continue;
      price.bound_s = std::max(price.bound_s, bound_of(i, *stages[++stage[i]]));
      queue.emplace(price.bound_s, i);
      continue;
    }
    // chosen unsimulated when its upper bound is below every other candidate's bound (ties: the
    // earlier candidate) and no simulated step beats it: the others are bounded further first,
    // cheapest stage first, while that can still certify it
    // The looser upper bound first, a fraction of the cost of the tight one: while it can
    // certify, the others with plans are bounded further up to the busiest rank's launch sets
    // (cheap); the tight one then, the others through every stage, plans made where needed (a
    // rival between the two upper bounds is not worth its every rank's launch sets)
    struct upper_pass {
      fair_share_bound shares;
      std::size_t last_stage;  // the stage the others are bounded up to
      bool make_plans;         // whether a rival laid out as sums gets its plan for that
    };
    bool certified = false;
    for (const upper_pass pass : {upper_pass{fair_share_bound::all_flows_stay, 1, false},
                                  upper_pass{fair_share_bound::done_flows_leave, stages.size() - 1, true}}) {
      if (best || certified) break;
      const fair_share_bound shares = pass.shares;
      const std::optional<double> upper =
          plan_step_upper_bound(*layouts[i], b, m, view, cost, options_for(candidates[i], pricing), shares);
      if (!upper) break;  // none exists for this plan or execution
      price.upper_s = *upper;
      const auto beaten = [&](const queued& q) { return q.first > *upper || (q.first == *upper && q.second > i); };
      const auto drop_gone = [&] {
        while (!queue.empty() && is_gone(queue.top().second)) queue.pop();
      };
      const auto can_go_on = [&](std::size_t j) { return stage[j] < pass.last_stage && (pass.make_plans || !pending[j]); };
      for (drop_gone(); !queue.empty() && !beaten(queue.top()) && can_go_on(queue.top().second); drop_gone()) {
        const std::size_t j = queue.top().second;
        queue.pop();
        if (!make_plan(j)) continue;
        prices[j].bound_s = std::max(prices[j].bound_s, bound_of(j, *stages[++stage[j]]));
        queue.emplace(prices[j].bound_s, j);
      }
      certified = queue.empty() || beaten(queue.top());
    }
    if (certified) {
      price.outcome = candidate_outcome::certified;
      best = i;
      for (; !queue.empty(); queue.pop())
        if (!is_gone(queue.top().second)) prices[queue.top().second].outcome = candidate_outcome::pruned;
      break;
    }
    try {
      sim_result r = simulate(*layouts[i], b, view, m, options_for(candidates[i], pricing), cost);
      price.outcome = candidate_outcome::simulated;
      price.step_s = r.step_time_s;
      const bool better = !best || r.step_time_s < best_result->step_time_s ||
                          (r.step_time_s == best_result->step_time_s && i < *best);
      if (better) {
        best = i;
        best_result = std::move(r);
      }
    } catch (const error& e) {
      price.reason = e.what();
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (!best) std::rethrow_exception(*first_error);
  for (std::size_t i = 0; i < candidates.size(); ++i)  // a duplicate has its original's bound, bounded again or not
    if (duplicate_of[i] < candidates.size()) prices[i].bound_s = prices[duplicate_of[i]].bound_s;

  const method_spec& spec = candidates[*best];
  if (best_result) best_result->method = std::string(spec.name);
  plan& chosen = *layouts[*best];
  chosen.method = std::string(name_of(*partitioners[*best]));  // its layout may be another partitioner's
  return {.chosen_index = *best,
          .execution = spec,
          .options = options_for(spec, setup),
          .view = view,
          .layout = std::move(chosen),
          .result = std::move(best_result),
          .candidates = std::move(prices)};
}

//! Plans `b` on `physical` for model `m` with every candidate and keeps the fastest under the
//! simulator: choose_by_cost, then the chosen plan's simulation where its bounds alone chose
//! it (its outcome then turns from certified to simulated) or where the setup asks for a trace
//! or an execution record. Throws what choose_by_cost throws.
[[nodiscard]] inline cost_driven_choice plan_by_cost(const batch& b, const topology& physical, const model_config& m,
                                                     const method_setup& setup = {},
                                                     std::span<const method_spec> candidates = cost_driven_candidates) {
  cost_driven_decision d = choose_by_cost(b, physical, m, setup, candidates);
  const method_spec& spec = d.execution;
  if (!d.result || setup.record_trace || setup.record_execution) {
    const sim_cost_model cost = setup.cost ? *setup.cost : sim_cost_model::for_topology(d.view);
    d.result = simulate(d.layout, b, d.view, m, d.options, cost);
    candidate_price& price = d.candidates[d.chosen_index];
    price.outcome = candidate_outcome::simulated;
    price.step_s = d.result->step_time_s;
  }
  d.result->method = std::string(spec.name);
  return {.chosen = {std::string(spec.name), std::string(spec.name), std::move(d.view), std::move(d.layout), std::move(*d.result)},
          .chosen_index = d.chosen_index,
          .execution = spec,
          .options = std::move(d.options),
          .candidates = std::move(d.candidates)};
}

ZEPPELIN_NAMESPACE_END
