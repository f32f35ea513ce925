// zeppelin/sim/pipeline_result.hpp
// What the 4D step simulator (sim/pipeline_simulator.hpp) returns for one iteration.
//   iteration_s: makespan of every replica's pipeline and the gradient all-reduce;
//   stages[replica][stage]: where a stage's time went and its peak memory;
//   bubble_ratio: mean over replicas and stages of bubble / iteration (for M equal
//     micro-batches through 1F1B without communication cost: (P - 1) / (M + P - 1));
//   attention_imbalance: WLB-LLM's Max_Attn / Avg_Attn over the micro-batches of the
//     global batch (attention work = causal pairs of their documents);
//   latency_imbalance: WLB-LLM's Max_Latency x PP / Total_Latency over a replica's
//     micro-batches (forward latency through the whole model), the largest over replicas;
//   schedules: the schedule each replica ran; run: the event engine's record (segments,
//     flows) that sim/pipeline_trace.hpp draws.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>
#include <zeppelin/sim/event_engine.hpp>
#include <zeppelin/sim/pipeline_peak_memory.hpp>

#include <algorithm>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One stage of one replica over the iteration (seconds).
struct pipeline_stage_report {
  double busy_s = 0;       //!< its compute stream ran: forward_s + backward_s
  double forward_s = 0;
  double backward_s = 0;   //!< including recompute_s
  double recompute_s = 0;  //!< forwards re-run by the checkpoint policy
  double bubble_s = 0;     //!< iteration_s - busy_s: waiting on other stages, warm-up, cool-down, gradient sync
  double cp_wait_s = 0;    //!< the average CP rank's wait for its slowest peer, summed over the stage's work
  double dp_wait_s = 0;    //!< how long its last backward ended before the slowest replica's
  stage_memory_peak memory;
};

struct pipeline_sim_result {
  double iteration_s = 0;
  double bubble_ratio = 0;
  double attention_imbalance = 1;
  double latency_imbalance = 1;
  parallel_layout layout;
  std::vector<std::vector<pipeline_stage_report>> stages;  //!< [replica][stage]
  std::vector<pipeline_schedule> schedules;                //!< [replica]
  engine_run run;

  //! Peak bytes of a stage over every replica.
  [[nodiscard]] double peak_memory_bytes(int stage) const {
    double peak = 0;
    for (const auto& replica : stages) peak = std::max(peak, replica[static_cast<std::size_t>(stage)].memory.peak_bytes);
    return peak;
  }
};

ZEPPELIN_NAMESPACE_END
