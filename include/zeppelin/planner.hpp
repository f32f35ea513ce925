// zeppelin/planner.hpp
// Umbrella header of the planners that choose by cost: CP layout policies chosen per
// micro-batch. Host-only.
#pragma once

#include <zeppelin/planner/any_cp_layout.hpp>
#include <zeppelin/planner/cheapest_layout.hpp>
