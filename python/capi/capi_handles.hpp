// python/capi/capi_handles.hpp
// The objects behind the opaque handles of zeppelin_capi.h that more than one translation
// unit creates or reads.
#pragma once

#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>

#include <limits>
#include <string>
#include <vector>

struct zeppelin_plan {
  zeppelin::plan plan;
  std::vector<zeppelin::token_count> lengths;  //!< the batch it places
  std::string choice;  //!< the cost-driven planner's chosen candidate ("" for a partitioner's plan)
  double predicted_step_s = std::numeric_limits<double>::quiet_NaN();  //!< its simulated step
};
