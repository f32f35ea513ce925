// zeppelin/planner/plan_step.hpp
// The step planner: one training iteration's documents, a cluster and a model in, the step
// plan of the fastest candidate composition out, every candidate priced on the one step
// simulator (sim/simulate_step.hpp: TP, CP, PP and DP traffic, switching, recomputation and
// the compute on one event engine).
//   in : the step request (planner/step_request.hpp), the candidates (planner/
//        step_candidate.hpp; default_step_candidates: each paper's composition, Megatron-LM-,
//        TransformerEngine- and Ulysses-like baselines, and compositions across papers), options
//   out: step_decision:
//          candidates   per candidate its name and predicted seconds, or why it refused
//                       (the error's message), or the price past which its simulation
//                       stopped because it could no longer win (stopped_after_s)
//          chosen       the index of the fastest (ties: the earlier candidate)
//          parts        its step plans, run back to back (one but for InfiniPipe's
//                       pipelines), pieces naming the request's documents through
//                       sequence_step_plan::sequences
//          predicted_s  its simulated seconds (the parts' sum: simulate_back_to_back)
//          lower_bound_s  the iteration's lower bound (sim/lower_bound.hpp: its exact FLOPs
//                       at the best rates over every GPU): efficiency = lower_bound_s /
//                       predicted_s
// Candidates are priced in order. With candidate_pricing::until_beaten (the default) a
// candidate's simulation stops as soon as its clock passes the best price so far (the event
// engine's deadline): it cannot win, and the choice and its price are those of pricing every
// candidate to the end (candidate_pricing::complete), only faster. Never slower than a
// candidate it priced; deterministic: `threads` price a simulation's block shapes at once
// and change no result.
// Pricing (step_planner_sim_options): per_shape blocks, no memory check by the simulator
// (back_to_back_sim_options: each composition's planner decided what fits, the schemes'
// MaxLen, InfiniPipe's budgets), Hydraulis' switching per port (exchange_pricing::per_port
// over each rank's traffic: its exchanges price in O(GPUs x users) at any scale, where flow
// by flow they are refused past step_program_options::max_switching_transfers). A stopped
// simulation costs little: per_shape pricing stops as soon as one rank's blocks priced so
// far pass the best price (sim/simulate_step.hpp), before the step runs.
// Errors: invalid_argument for a bad request, no candidates, threads < 1; infeasible when
// every candidate refuses, listing the first refusal. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>
#include <zeppelin/planner/step_candidate.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/sim/lower_bound.hpp>
#include <zeppelin/sim/simulate_step.hpp>

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! How far each candidate is simulated (see the file comment).
enum class candidate_pricing : std::uint8_t {
  until_beaten = 0,  //!< stop a simulation once it passes the best price so far
  complete = 1,      //!< simulate every candidate to its end (every price exact)
};

//! How the step planner prices a candidate by default: back_to_back_sim_options, with Hydraulis'
//! switching priced per port (see the file comment).
[[nodiscard]] inline step_sim_options step_planner_sim_options() {
  step_sim_options o = back_to_back_sim_options();
  o.exchanges = exchange_pricing::per_port;
  return o;
}

struct step_planner_options {
  int threads = 1;  //!< block shapes priced at once inside each simulation
  candidate_pricing pricing = candidate_pricing::until_beaten;
  step_sim_options simulation = step_planner_sim_options();  //!< how each candidate is priced
};

//! One candidate's price (see the file comment).
struct priced_step_candidate {
  std::string name;
  double seconds = std::numeric_limits<double>::infinity();  //!< +inf unless priced to the end
  std::string refusal;                                       //!< why it did not plan; empty when it did
  double stopped_after_s = 0;  //!< > 0: its simulation stopped past this price (it takes longer)

  [[nodiscard]] bool planned() const noexcept { return refusal.empty(); }
  [[nodiscard]] bool stopped() const noexcept { return stopped_after_s > 0; }
  //! Priced to the end: a price the choice may keep.
  [[nodiscard]] bool priced() const noexcept { return planned() && !stopped(); }
};

struct step_decision {
  std::size_t chosen = 0;
  std::vector<sequence_step_plan> parts;  //!< the chosen candidate's
  double predicted_s = 0;
  double lower_bound_s = 0;
  std::vector<priced_step_candidate> candidates;

  [[nodiscard]] const std::string& chosen_name() const { return candidates.at(chosen).name; }
  [[nodiscard]] double efficiency() const noexcept { return predicted_s > 0 ? lower_bound_s / predicted_s : 0.0; }
};

//! Plans and prices candidate `c` for `r` into `price`, its simulation stopped past
//! `simulation.deadline_s` (see the file comment); returns its step plans (empty unless
//! priced to the end).
[[nodiscard]] inline std::vector<sequence_step_plan> price_step_candidate(const step_candidate& c, const step_request& r,
                                                                          std::span<const scheme_profile> profiles,
                                                                          const step_sim_options& simulation, priced_step_candidate& price) {
  price = priced_step_candidate{};
  price.name = c.name;
  try {
    std::vector<sequence_step_plan> parts = c.plan(r, profiles);
    const back_to_back_result priced = simulate_back_to_back(parts, r.cluster, r.model, simulation);
    price.seconds = priced.iteration_s;
    if (!priced.stopped) return parts;
    price.stopped_after_s = simulation.deadline_s;
  } catch (const error& e) {
    price.refusal = e.what();
  }
  return {};
}

//! The fastest of `candidates` for `r` (see the file comment).
[[nodiscard]] inline step_decision plan_step(const step_request& r, std::span<const step_candidate> candidates,
                                             const step_planner_options& options = {}) {
  validate(r);
  ZEPPELIN_EXPECTS(!candidates.empty(), "the step planner needs at least one candidate", {});
  ZEPPELIN_EXPECTS(options.threads >= 1, "the step planner needs at least 1 thread", {{"threads", double(options.threads)}});
  const std::vector<scheme_profile> profiles = scheme_profiles_of(r);
  step_decision out;
  out.candidates.resize(candidates.size());
  step_sim_options simulation = options.simulation;
  simulation.threads = options.threads;
  bool any = false;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (options.pricing == candidate_pricing::until_beaten && any) simulation.deadline_s = out.predicted_s;
    std::vector<sequence_step_plan> parts = price_step_candidate(candidates[i], r, profiles, simulation, out.candidates[i]);
    const priced_step_candidate& c = out.candidates[i];
    if (c.priced() && (!any || c.seconds < out.predicted_s)) out.chosen = i, out.predicted_s = c.seconds, out.parts = std::move(parts), any = true;
  }
  if (!any)
    ZEPPELIN_THROW(infeasible, "no candidate composition plans this step (first refusal: " + out.candidates.front().refusal + ")",
                   {{"candidates", double(candidates.size())}, {"longest_document", double(longest_document(r))}});
  out.lower_bound_s = step_lower_bound(batch(r.documents), r.model, r.cluster);
  return out;
}

//! plan_step over default_step_candidates(r).
[[nodiscard]] inline step_decision plan_step(const step_request& r, const step_planner_options& options = {}) {
  const std::vector<step_candidate> candidates = default_step_candidates(r);
  return plan_step(r, candidates, options);
}

ZEPPELIN_NAMESPACE_END
