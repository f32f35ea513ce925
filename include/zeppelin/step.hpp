// zeppelin/step.hpp
// Umbrella header of the step level: the step plan (what one training iteration runs), its
// validation, the step program built from it, the one driver and the step record. The
// simulator's backend is in sim/ (sim/simulate_step.hpp), the host runner in exec/
// (exec/step_runner.hpp). Host-only.
#pragma once

#include <zeppelin/step/block.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/cp_group_topology.hpp>
#include <zeppelin/step/driver.hpp>
#include <zeppelin/step/fingerprint.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/step/program.hpp>
#include <zeppelin/step/record.hpp>
#include <zeppelin/step/step_plan.hpp>
#include <zeppelin/step/step_plan_bytes.hpp>
#include <zeppelin/step/step_plan_json.hpp>
#include <zeppelin/step/validate.hpp>
