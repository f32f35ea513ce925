// zeppelin/planner/step_decision_json.hpp
// The step planner's decision (planner/plan_step.hpp) as one line of JSON, what
// `zeppelin step --json` prints and the Python binding's plan_step reads:
//   {"format":"zeppelin.step","version":1,"chosen":"<name>","predicted_s":x,
//    "lower_bound_s":y,"efficiency":y/x,
//    "candidates":[{"name":"..","seconds":s or null,"refusal":null or "..",
//                   "stopped_after_s":null or x (its simulation stopped past the best price x)}, ...],
//    "parts":[{"sequences":[request document of each plan document],
//              "plan":<the part's step plan: step/step_plan_json.hpp, zeppelin.step_plan v1>}]}
// Each part's plan holds its replicas (degrees, ranks, layers, schedule, recomputation), each
// micro-batch's pieces (document, begin, end: slices where begin > 0 or end < the length)
// and CP layout; its documents are renumbered, sequences[d] naming document d's index in the
// request. docs/formats.md documents the format. Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/detail/json_writer.hpp>
#include <zeppelin/planner/plan_step.hpp>
#include <zeppelin/step/step_plan_json.hpp>

#include <cstddef>
#include <ostream>
#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

inline constexpr std::string_view step_decision_json_format = "zeppelin.step";
inline constexpr int step_decision_json_version = 1;

//! Writes `d` as one line of JSON (see the file comment); returns `os`.
inline std::ostream& write_step_decision_json(std::ostream& os, const step_decision& d) {
  os << "{\"format\":\"" << step_decision_json_format << "\",\"version\":" << step_decision_json_version << ",\"chosen\":\""
     << detail::json_escape(d.chosen_name()) << "\",\"predicted_s\":" << detail::json_double(d.predicted_s)
     << ",\"lower_bound_s\":" << detail::json_double(d.lower_bound_s) << ",\"efficiency\":" << detail::json_double(d.efficiency())
     << ",\"candidates\":[";
  for (std::size_t i = 0; i < d.candidates.size(); ++i) {
    const priced_step_candidate& c = d.candidates[i];
    os << (i ? "," : "") << "{\"name\":\"" << detail::json_escape(c.name) << "\",\"seconds\":" << detail::json_double(c.seconds)
       << ",\"refusal\":";
    if (c.planned())
      os << "null";
    else
      os << '"' << detail::json_escape(c.refusal) << '"';
    os << ",\"stopped_after_s\":" << (c.stopped() ? detail::json_double(c.stopped_after_s) : std::string("null")) << '}';
  }
  os << "],\"parts\":[";
  for (std::size_t p = 0; p < d.parts.size(); ++p) {
    os << (p ? "," : "") << "{\"sequences\":[";
    for (std::size_t k = 0; k < d.parts[p].sequences.size(); ++k) os << (k ? "," : "") << d.parts[p].sequences[k];
    os << "],\"plan\":";
    detail::write_step_plan_json_object(os, d.parts[p].plan);
    os << '}';
  }
  return os << "]}\n";
}

ZEPPELIN_NAMESPACE_END
