// zeppelin/sim/elastic_step.hpp
// InfiniPipe's iteration on the 4D step simulator: the pipelines of an elastic plan
// (pack/elastic_pipeline.hpp) run back to back, each a chunk-level 1F1B
// (schedule/pipeline/chunk_one_f_one_b.hpp) with its stage-aware checkpointing
// (checkpoint/stage_aware.hpp), priced by the chunk cost model (cost/chunk_stage_time.hpp).
//   in : the plan, the sequences' lengths, the model, the plan's options (cost model:
//        d_s, d_p), a topology with at least d_s x d_p GPUs (a stage's d_s GPUs one node's),
//        simulator options
//   out: elastic_step_result: the iteration's seconds (the pipelines' sum: each flushes
//        before the next starts, gradients accumulate) and each pipeline's simulator result
// What the simulator adds to the planner's estimate: the real 1F1B bubbles of unequal
// chunks, the activation sends between stages on the topology's links, the recompute
// placed where the checkpoint plan puts it, and ZeRO-3 over each stage's d_s GPUs: every
// layer's parameters gathered before it runs (the next layer's gather behind the current
// layer's compute) and its gradients reduce-scattered after its backward, ring flows on the
// topology's links (sim/pipeline_simulator.hpp). The layout is TP 1, CP d_s (the Ulysses
// group: each rank computes 1/d_s of every chunk, micro_batch_of_chunk), PP d_p, DP 1.
// Memory: the planner's window model (Eq. 20) decides what fits, so the simulator's own
// per-token memory check is off unless options.memory_capacity_bytes asks for it.
// Errors: invalid_argument for a plan without pipelines or a topology with too few GPUs;
// what simulate_pipeline throws.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/chunk_stage_time.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/schedule/pipeline/chunk_one_f_one_b.hpp>
#include <zeppelin/sim/pipeline_simulator.hpp>

#include <limits>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct elastic_step_result {
  double iteration_s = 0;                   //!< the pipelines' sum
  std::vector<pipeline_sim_result> pipelines;  //!< one per plan pipeline, in plan order
};

//! Simulates `plan` (see the file comment).
[[nodiscard]] inline elastic_step_result simulate_elastic_step(const elastic_plan& plan, const model_config& model,
                                                               const elastic_pipeline_options& options, const topology& topo,
                                                               pipeline_sim_options sim = {.memory_capacity_bytes = std::numeric_limits<double>::infinity()}) {
  ZEPPELIN_EXPECTS(!plan.pipelines.empty(), "an elastic step needs at least one pipeline", {});
  const chunk_cost_model& cost = options.processor.cost;
  const pipeline_memory_model memory{model, {.tp = 1, .cp = cost.d_s, .pp = cost.d_p, .dp = 1}, {.zero_stage = 3}};
  elastic_step_result out;
  for (const elastic_pipeline& p : plan.pipelines) {
    std::vector<std::vector<micro_batch>> replica(1);
    for (const std::int64_t k : p.forward) replica[0].push_back(micro_batch_of_chunk(plan.chunks.chunks[static_cast<std::size_t>(k)], cost.d_s));
    out.pipelines.push_back(simulate_pipeline(std::span<const std::vector<micro_batch>>(replica), chunk_one_f_one_b{.chains = p.chains},
                                              stage_aware_recompute{p.checkpoint}, chunk_stage_time{cost}, memory, topo, sim));
    out.iteration_s += out.pipelines.back().iteration_s;
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
