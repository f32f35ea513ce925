// zeppelin/planner.hpp
// Umbrella header of the planners that choose by cost, on the simulators of zeppelin/sim.hpp:
//   the step planner   plan_step: one iteration's composition of packing, strategy, CP
//                      layouts, schedule and checkpointing; planning ahead; its policies
//   the CP planner     choose_by_cost (plan_by_cost: the same choice, then the chosen plan
//                      simulated): one batch's CP layout and execution, among method_specs,
//                      pruned by plan_step_bound and certified by plan_step_upper_bound; the
//                      CP layout policies chosen per micro-batch (cheapest_layout)
//   the named methods  method_spec, plan_method, run_method: every baseline of the
//                      evaluation and the cost-driven `zeppelin`, by name
// Host-only.
#pragma once

#include <zeppelin/planner/any_cp_layout.hpp>
#include <zeppelin/planner/cheapest_layout.hpp>
#include <zeppelin/planner/cost_driven_planner.hpp>
#include <zeppelin/planner/elastic_composition.hpp>
#include <zeppelin/planner/method_spec.hpp>
#include <zeppelin/planner/methods.hpp>
#include <zeppelin/planner/plan_step.hpp>
#include <zeppelin/planner/plan_step_bound.hpp>
#include <zeppelin/planner/plan_step_upper_bound.hpp>
#include <zeppelin/planner/planning_ahead.hpp>
#include <zeppelin/planner/step_candidate.hpp>
#include <zeppelin/planner/step_composition.hpp>
#include <zeppelin/planner/step_decision_json.hpp>
#include <zeppelin/planner/step_packer.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/planner/step_strategy.hpp>
