// zeppelin/sim/result.hpp
// What simulate() returns for one training step.
//   step_time_s, tokens_per_s, lower_bound_s (sim/lower_bound.hpp), efficiency = bound / time,
//   imbalance = max / mean over ranks of compute time (attention + linear),
//   per rank: attention, linear, exposed communication and idle seconds (they add up to
//   step_time_s), the bytes that crossed nodes and NVLink, the attention kernels' launches,
//   executed FLOPs and pairs (sim_options::launch changes the launches only), and optionally
//   the phases' task timings for a Chrome trace (sim/trace.hpp) and the execution record of
//   one layer (program/record.hpp). Ranks are CP ranks (a TP group when
//   tensor_parallel > 1). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/sim/event_engine.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Where one rank's step time went (seconds; the four add up to the step time).
struct rank_breakdown {
  double attention_s = 0;      //!< attention kernels, forward + backward, every layer
  double linear_s = 0;         //!< GEMMs / norms / MoE, every layer, and the LM head
  double exposed_comm_s = 0;   //!< stream free while work waits for data (K/V, dK/dV, remap,
                               //!< all-gather, TP collectives, slower peers of a ring)
  double idle_s = 0;           //!< nothing left to do until the phase ends
  token_count attention_tokens = 0;  //!< tokens held in the attention layout (all micro-batches)
  token_count linear_tokens = 0;     //!< tokens the linear modules processed (after remapping)
  [[nodiscard]] double compute_s() const noexcept { return attention_s + linear_s; }
  [[nodiscard]] double total_s() const noexcept { return attention_s + linear_s + exposed_comm_s + idle_s; }
};

//! One simulated phase, kept for traces: the engine's timings shifted by `offset_s`.
struct sim_phase {
  std::string name;     //!< "forward mb0", "backward mb0", ...
  double offset_s = 0;  //!< where the phase starts on the trace's time axis
  double scale = 1;     //!< layers represented per simulated layer
  engine_run run;
};

//! What a step priced from two smaller runs was extrapolated over (sim/step_extrapolation.hpp).
enum class extrapolation_axis : std::uint8_t {
  none = 0,       //!< simulated whole
  members = 1,    //!< the members of groups that span every rank
  documents = 2,  //!< the documents of one micro-batch
};

[[nodiscard]] constexpr std::string_view to_string(extrapolation_axis a) noexcept {
  switch (a) {
    case extrapolation_axis::none: return "none";
    case extrapolation_axis::members: return "members";
    case extrapolation_axis::documents: return "documents";
  }
  return "?";
}

//! The axis and the sizes of the two runs (ranks, or documents) a step was extrapolated from.
struct step_extrapolation {
  extrapolation_axis axis = extrapolation_axis::none;
  std::array<std::int64_t, 2> from{0, 0};
  friend constexpr bool operator==(const step_extrapolation&, const step_extrapolation&) = default;
};

struct sim_result {
  std::string method;          //!< plan.method
  double step_time_s = 0;
  double tokens_per_s = 0;
  double lower_bound_s = 0;
  double efficiency = 0;       //!< lower_bound_s / step_time_s, in (0, 1]
  double imbalance = 1;        //!< max / mean of rank_breakdown::compute_s()
  double forward_s = 0;        //!< all layers, all micro-batches
  double backward_s = 0;
  double lm_head_s = 0;
  double cross_node_bytes = 0;  //!< bytes through NICs in the whole step
  double intra_node_bytes = 0;  //!< bytes over NVLink in the whole step
  double max_port_utilization = 0;  //!< largest port load seen (<= 1: no link double-booked)
  double attention_launches = 0;    //!< attention kernel launches with work: every rank, layer, direction
  double attention_flops = 0;       //!< FLOPs the attention kernels execute in the step (forward +
                                    //!< backward, every layer and rank, tile padding included)
  std::int64_t attention_pairs = 0; //!< (query, key) pairs per head of ONE layer's forward, all
                                    //!< micro-batches: the batch's causal pairs for a valid plan
  std::int32_t micro_batches = 1;
  //! How the step was priced where its program was too large to build (sim/step_extrapolation.hpp);
  //! axis none: simulated whole
  step_extrapolation extrapolated{};
  std::vector<rank_breakdown> ranks;
  std::vector<sim_phase> trace;  //!< filled when sim_options::record_trace
  execution_record record;       //!< one layer's transfers and launches, when sim_options::record_execution
};

ZEPPELIN_NAMESPACE_END
