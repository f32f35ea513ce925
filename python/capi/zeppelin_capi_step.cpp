// python/capi/zeppelin_capi_step.cpp
// The step planner of zeppelin_capi.h (planner/plan_step.hpp): the decision kept behind a
// handle with its JSON text, which the binding parses.
#include "capi_support.hpp"
#include "zeppelin_capi.h"

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/planner/plan_step.hpp>
#include <zeppelin/planner/step_decision_json.hpp>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

struct zeppelin_step_decision {
  zeppelin::step_decision decision;
  std::string json;
};

namespace {

using zeppelin::capi::expect;
using zeppelin::capi::lengths_of;

}  // namespace

extern "C" {

int zeppelin_plan_step(const int64_t* lengths, int64_t documents, const char* cluster, int32_t nodes, int32_t gpus_per_node, const char* model,
                       int64_t context, double margin_bytes, int32_t threads, zeppelin_step_decision** out) {
  return zeppelin::capi::guarded([&] {
    expect(out != nullptr && cluster != nullptr && model != nullptr, "zeppelin_plan_step: out, cluster and model must not be NULL");
    expect(nodes >= 1 && gpus_per_node >= 1,
           "zeppelin_plan_step: nodes and gpus_per_node must be >= 1, got " + std::to_string(nodes) + " and " + std::to_string(gpus_per_node));
    zeppelin::step_request r;
    r.documents = lengths_of(lengths, documents);
    r.cluster = zeppelin::cluster_by_name(cluster, nodes, gpus_per_node);
    r.model = zeppelin::model_by_name(model);
    r.context = context;
    r.margin_bytes = margin_bytes;
    auto handle = std::make_unique<zeppelin_step_decision>();
    handle->decision = zeppelin::plan_step(r, {.threads = threads});
    std::ostringstream text;
    zeppelin::write_step_decision_json(text, handle->decision);
    handle->json = text.str();
    *out = handle.release();
  });
}

void zeppelin_step_decision_destroy(zeppelin_step_decision* decision) { delete decision; }

double zeppelin_step_decision_seconds(const zeppelin_step_decision* decision) { return decision ? decision->decision.predicted_s : 0; }

int zeppelin_step_decision_json(const zeppelin_step_decision* decision, char* out, int64_t room, int64_t* length) {
  return zeppelin::capi::guarded([&] {
    expect(decision != nullptr && length != nullptr, "zeppelin_step_decision_json: the decision and length must not be NULL");
    *length = static_cast<int64_t>(decision->json.size());
    if (out != nullptr && room >= *length) std::copy(decision->json.begin(), decision->json.end(), out);
  });
}

}  // extern "C"
