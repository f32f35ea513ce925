// zeppelin/planner.hpp
// Umbrella header of the planners that choose by cost: the step planner (plan_step: one
// iteration's composition of packing, strategy, CP layouts, schedule and checkpointing,
// chosen on the step simulator; planning ahead) and the CP layout policies chosen per
// micro-batch. Host-only.
#pragma once

#include <zeppelin/planner/any_cp_layout.hpp>
#include <zeppelin/planner/cheapest_layout.hpp>
#include <zeppelin/planner/elastic_composition.hpp>
#include <zeppelin/planner/plan_step.hpp>
#include <zeppelin/planner/planning_ahead.hpp>
#include <zeppelin/planner/step_candidate.hpp>
#include <zeppelin/planner/step_composition.hpp>
#include <zeppelin/planner/step_decision_json.hpp>
#include <zeppelin/planner/step_packer.hpp>
#include <zeppelin/planner/step_request.hpp>
#include <zeppelin/planner/step_strategy.hpp>
