// python/capi/zeppelin_capi_cost.cpp
// zeppelin_plan_by_cost: the cost-driven planner (planner/cost_driven_planner.hpp) behind the C
// ABI, in its own translation unit because it pulls in the step simulator. Capacity as
// `zeppelin plan --explain`: the given tokens per GPU, or the batch's balanced capacity, with
// no further slack.
#include "capi_handles.hpp"
#include "capi_support.hpp"
#include "zeppelin_capi.h"

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/partition/capacity.hpp>
#include <zeppelin/planner/cost_driven_planner.hpp>

#include <string>
#include <vector>

extern "C" int zeppelin_plan_by_cost(const int64_t* lengths, int64_t sequences, const char* cluster, int32_t nodes,
                                     int32_t gpus_per_node, const char* model, int64_t capacity, zeppelin_plan** out) {
  using zeppelin::capi::expect;
  return zeppelin::capi::guarded([&] {
    expect(out != nullptr && cluster != nullptr && model != nullptr, "zeppelin_plan_by_cost: out, cluster and model must not be NULL");
    expect(capacity >= 0, "zeppelin_plan_by_cost: capacity must be >= 0 (0: balanced), got " + std::to_string(capacity));
    const zeppelin::batch b(zeppelin::capi::lengths_of(lengths, sequences));
    const zeppelin::topology t = zeppelin::cluster_by_name(cluster, nodes, gpus_per_node);
    zeppelin::method_setup setup;
    setup.tokens_per_gpu = capacity > 0 ? capacity : zeppelin::balanced_capacity(b, t);
    setup.capacity_slack = 0;
    const zeppelin::cost_driven_choice choice = zeppelin::plan_by_cost(b, t, zeppelin::model_by_name(model), setup);
    *out = new zeppelin_plan{choice.chosen.layout, std::vector<zeppelin::token_count>(b.lengths().begin(), b.lengths().end()), choice.chosen.candidate, choice.chosen.result.step_time_s};
  });
}
