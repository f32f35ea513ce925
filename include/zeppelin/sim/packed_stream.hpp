// zeppelin/sim/packed_stream.hpp
// Trains a stream of documents with a packing method (sim/packing_methods.hpp) on the 4D
// step simulator: every iteration the method's packer forms the global batch's
// micro-batches, its CP sharding shares each one, and simulate_pipeline prices the step.
//   in : the method, document lengths in stream order, the context window, a pipeline
//        schedule policy, a checkpoint policy, the analytic stage time model (its sharding
//        is replaced by the method's), the memory model (its layout gives TP, CP, PP, DP),
//        the topology, simulator options
//   out: packed_stream_result: the packing run (pack/stream.hpp), per iteration the
//        simulated seconds and WLB-LLM's latency imbalance, totals and throughput
// One iteration: a global batch is PP x DP sequences of the context (WLB-LLM section 6.1),
// so N = PP x DP micro-batches per iteration and PP x DP x context tokens arrive per
// iteration. The packer's non-empty micro-batches, in its order, are cut into DP
// consecutive runs, one per replica (a replica gets PP of them when none is empty). An
// iteration with fewer non-empty micro-batches than DP (the end of a stream) runs on as
// many replicas as it has micro-batches (its gradient ring is that small); an iteration
// without any is not run (0 s). The whole stream is trained, the packer's flush included,
// so every method trains every token once and total seconds compare methods directly.
// Errors: invalid_argument for context < 1, a document longer than the method's L_max, an
// invalid method; infeasible when a micro-batch does not fit in GPU memory (from the
// simulator); what the packer and simulator throw.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/cost/stage_time.hpp>
#include <zeppelin/pack/stream.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>
#include <zeppelin/sim/link_sharing.hpp>
#include <zeppelin/sim/packing_methods.hpp>
#include <zeppelin/sim/pipeline_simulator.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct packed_stream_result {
  packing_run packing;                    //!< the packer's iterations, delays (pack/stream.hpp)
  std::vector<double> iteration_seconds;  //!< per packed iteration; 0 for one without documents
  std::vector<double> latency_imbalance;  //!< per packed iteration: Max_Latency x PP / Total_Latency (1 if empty)
  double seconds = 0;                     //!< sum of iteration_seconds
  token_count tokens = 0;                 //!< tokens trained (all of the stream)

  [[nodiscard]] double tokens_per_second() const noexcept { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
  //! Mean latency imbalance over the iterations that ran.
  [[nodiscard]] double mean_latency_imbalance() const noexcept {
    double sum = 0;
    std::size_t ran = 0;
    for (std::size_t i = 0; i < iteration_seconds.size(); ++i)
      if (iteration_seconds[i] > 0) sum += latency_imbalance[i], ++ran;
    return ran > 0 ? sum / static_cast<double>(ran) : 1.0;
  }
};

//! The micro-batches of one packed iteration as DP replicas (see the file comment); empty
//! when it holds no document.
[[nodiscard]] inline std::vector<std::vector<micro_batch>> replicas_of(const packed_iteration& it, std::span<const token_count> lengths,
                                                                       int dp) {
  ZEPPELIN_EXPECTS(dp >= 1, "the data-parallel degree must be >= 1", {{"dp", double(dp)}});
  std::vector<micro_batch> filled;
  for (const packed_micro_batch& mb : it.micro_batches) {
    if (mb.documents.empty()) continue;
    micro_batch m;
    for (const std::int64_t i : mb.documents) {
      ZEPPELIN_EXPECTS(i >= 0 && static_cast<std::size_t>(i) < lengths.size(), "a packed document index is outside the stream",
                       {{"index", double(i)}, {"documents", double(lengths.size())}});
      m.documents.push_back(lengths[static_cast<std::size_t>(i)]);
    }
    filled.push_back(std::move(m));
  }
  const std::size_t count = filled.size();
  const std::size_t replicas = std::min(count, static_cast<std::size_t>(dp));
  std::vector<std::vector<micro_batch>> out(replicas);
  for (std::size_t r = 0; r < replicas; ++r)
    for (std::size_t k = r * count / replicas; k < (r + 1) * count / replicas; ++k) out[r].push_back(std::move(filled[k]));
  return out;
}

//! Trains `lengths` with `method` (see the file comment).
template <pipeline_schedule_policy S, checkpoint_policy C, link_sharing L = shared_links>
[[nodiscard]] packed_stream_result simulate_packed_stream(const packing_method& method, std::span<const token_count> lengths,
                                                          token_count context, const S& schedule, const C& checkpoint,
                                                          const analytic_stage_time& stage, const pipeline_memory_model& memory,
                                                          const topology& topo, const pipeline_sim_options& options = {},
                                                          const L& links = {}) {
  const parallel_layout& layout = memory.layout;
  validate(layout);
  const packing_limits limits{.micro_batches = layout.pp * layout.dp, .max_tokens = max_tokens_of(method, context)};
  packed_stream_result out;
  out.packing = pack_stream(method.packer, lengths, limits, {.tokens_per_iteration = limits.micro_batches * context});
  analytic_stage_time priced = stage;
  priced.sharding = method.sharding;
  for (const packed_iteration& it : out.packing.iterations) {
    const std::vector<std::vector<micro_batch>> replicas = replicas_of(it, lengths, layout.dp);
    if (replicas.empty()) {
      out.iteration_seconds.push_back(0);
      out.latency_imbalance.push_back(1);
      continue;
    }
    pipeline_memory_model used = memory;
    used.layout.dp = static_cast<int>(replicas.size());
    const pipeline_sim_result r = simulate_pipeline(std::span<const std::vector<micro_batch>>(replicas), schedule, checkpoint, priced,
                                                    used, topo, options, links);
    out.iteration_seconds.push_back(r.iteration_s);
    out.latency_imbalance.push_back(r.latency_imbalance);
    out.seconds += r.iteration_s;
    for (const auto& replica : replicas)
      for (const micro_batch& mb : replica) out.tokens += mb.tokens();
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
