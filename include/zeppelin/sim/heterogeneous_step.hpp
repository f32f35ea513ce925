// zeppelin/sim/heterogeneous_step.hpp
// One training iteration of a Hydraulis plan on the 4D step simulator: pipelines of
// different schemes <TP, PP, CP>, each with its own micro-batches, running side by side.
//   in : an iteration_plan (strategy/iteration_plan.hpp: per pipeline its scheme profile
//        and micro-batches as sequence indices), the sequences' lengths, the model, the
//        cluster's GPU count N (the optimizer states are sharded over all of them), a
//        topology, a pipeline schedule policy, a checkpoint policy, options
//   out: heterogeneous_step_result: per pipeline the simulated seconds and the iteration's
//        (the slowest pipeline's), and the gap 1 - fastest / slowest over the pipelines
//        that hold sequences (Hydraulis reports max / min rank latency gaps)
// Each pipeline is simulated on its own (simulate_pipeline with layout {tp, cp, pp, 1} on
// the topology's first tp x cp x pp GPUs: pipelines occupy disjoint GPUs and exchange
// nothing during propagation), with the stage time its profile gives: T(l, P) split one
// third forward, two thirds backward (fitted_stage_time over the stage's layers), so the
// simulator prices the plan with the planner's own latency model and adds what the
// planner's estimate leaves out: the schedule's real bubbles with unequal micro-batches,
// pipeline sends, and the memory check against the scheme's model (memory of
// strategy/scheme_profile.hpp). The optimizer step's pull and push over mutual slices
// (Hydraulis section 5) is not part of the step: simulate_switching prices a plan of them
// (strategy/switching.hpp) on the event engine, and Hydraulis overlaps them with
// propagation when micro-batches are long enough.
// Errors: invalid_argument for a plan without pipelines, a topology with fewer GPUs than a
// pipeline needs; infeasible when a stage runs out of memory; what the simulator throws.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>
#include <zeppelin/sim/pipeline_simulator.hpp>
#include <zeppelin/strategy/iteration_plan.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/strategy/scheme_profile.hpp>
#include <zeppelin/strategy/switching.hpp>

#include <algorithm>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct heterogeneous_step_result {
  std::vector<double> pipeline_seconds;  //!< per pipeline of the plan; 0 for one without sequences
  double iteration_s = 0;                //!< the slowest pipeline
  double gap = 0;                        //!< 1 - fastest / slowest over pipelines with sequences
};

//! The stage time model of a scheme profile: T(l, P) split 1/3 forward, 2/3 backward over
//! one stage's layers (model layers / PP).
[[nodiscard]] inline fitted_stage_time stage_time_of(const scheme_profile& p, const model_config& model) {
  const quadratic_profile& t = p.latency;
  return {{t.a / 3, t.b / 3, t.c / 3}, {2 * t.a / 3, 2 * t.b / 3, 2 * t.c / 3}, std::max(1, model.layers / p.scheme.pp)};
}

//! Simulates `plan` (see the file comment).
template <pipeline_schedule_policy S, checkpoint_policy C>
[[nodiscard]] heterogeneous_step_result simulate_heterogeneous_step(const iteration_plan& plan, std::span<const token_count> lengths,
                                                                    const model_config& model, long long cluster_gpus, const topology& topo,
                                                                    const S& schedule, const C& checkpoint,
                                                                    const scheme_profile_options& profile_options = {},
                                                                    const pipeline_sim_options& options = {}) {
  ZEPPELIN_EXPECTS(!plan.pipelines.empty(), "a step needs at least one pipeline", {});
  heterogeneous_step_result out;
  double fastest = 0;
  for (const pipeline_plan& p : plan.pipelines) {
    if (p.packing.micro_batches.empty()) {
      out.pipeline_seconds.push_back(0);
      continue;
    }
    std::vector<std::vector<micro_batch>> replica(1);
    for (const auto& mb : p.packing.micro_batches) {
      micro_batch m;
      for (const std::int64_t i : mb) {
        ZEPPELIN_EXPECTS(i >= 0 && static_cast<std::size_t>(i) < lengths.size(), "a planned sequence index is outside the iteration",
                         {{"index", double(i)}, {"sequences", double(lengths.size())}});
        m.documents.push_back(lengths[static_cast<std::size_t>(i)]);
      }
      replica[0].push_back(std::move(m));
    }
    const pipeline_memory_model memory = scheme_memory_model(p.profile.scheme, model, cluster_gpus, profile_options.memory);
    const pipeline_sim_result r = simulate_pipeline(std::span<const std::vector<micro_batch>>(replica), schedule, checkpoint,
                                                    stage_time_of(p.profile, model), memory, topo, options);
    out.pipeline_seconds.push_back(r.iteration_s);
    out.iteration_s = std::max(out.iteration_s, r.iteration_s);
    fastest = fastest == 0 ? r.iteration_s : std::min(fastest, r.iteration_s);
  }
  out.gap = out.iteration_s > 0 ? 1 - fastest / out.iteration_s : 0;
  return out;
}

//! Hydraulis' pull or push (strategy/switching.hpp) on the event engine: every transfer a
//! flow, all released at once, sharing NVLink ports and NICs max-min fairly under the link
//! model (latency per flow, NCCL's rendezvous). Returns the makespan; 0 for no transfers.
//! switching_seconds (the per-GPU bandwidth bound) is a lower bound of it.
[[nodiscard]] inline double simulate_switching(std::span<const slice_transfer> transfers, const topology& topo, const link_model& link = {}) {
  if (transfers.empty()) return 0;
  event_engine engine(topo, stream_policy::in_order, link);
  for (std::size_t i = 0; i < transfers.size(); ++i) {
    const slice_transfer& t = transfers[i];
    ZEPPELIN_EXPECTS(t.src >= 0 && t.dst >= 0 && t.src < topo.num_ranks() && t.dst < topo.num_ranks(),
                     "a switching transfer names a GPU outside the topology", {{"src", double(t.src)}, {"dst", double(t.dst)}});
    (void)engine.flow(t.src, t.dst, t.bytes, task_tag{task_kind::parameter_sync, flow_leg::direct, -1, static_cast<std::int32_t>(i % 1000000), t.first_layer, 0},
                      std::span<const task_id>{});
  }
  return engine.run().makespan;
}

ZEPPELIN_NAMESPACE_END
