// zeppelin/pack/packed_stream.hpp
// Trains a stream of documents with a packing method (pack/packing_methods.hpp) on the step
// simulator: every iteration the method's packer forms the global batch's micro-batches, its
// CP layout policy lays each out, and the iteration's step plan (step/make_plan.hpp) is
// priced by the one step simulator (sim/simulate_step.hpp): TP, CP, PP and DP traffic
// included.
//   in : the method, document lengths in stream order, the context window, the step shape
//        (its layout gives TP, CP, PP, DP; its schedule, TP mode and gradient sync), a
//        checkpoint policy, the model, the cluster, the cost model, simulator options
//   out: packed_stream_result: the packing run (pack/stream.hpp), per iteration the
//        simulated seconds and WLB-LLM's latency imbalance, totals and throughput
// One iteration: a global batch is PP x DP sequences of the context (WLB-LLM section 6.1),
// so N = PP x DP micro-batches per iteration and PP x DP x context tokens arrive per
// iteration. The packer's non-empty micro-batches, in its order, are cut into DP
// consecutive runs, one per replica (a replica gets PP of them when none is empty). An
// iteration with fewer non-empty micro-batches than DP (the end of a stream) runs on as
// many replicas as it has micro-batches (its gradient sync is that small); an iteration
// without any is not run (0 s). The whole stream is trained, the packer's flush included,
// so every method trains every token once and total seconds compare methods directly.
// Errors: invalid_argument for context < 1, a document longer than the method's L_max, an
// invalid method or shape; infeasible when a micro-batch does not fit in GPU memory (from
// the simulator); what the packer, the layouts and the simulator throw.
// Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/pack/packing.hpp>
#include <zeppelin/pack/packing_methods.hpp>
#include <zeppelin/pack/stream.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/make_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct packed_stream_result {
  packing_run packing;                    //!< the packer's iterations, delays (pack/stream.hpp)
  std::vector<double> iteration_seconds;  //!< per packed iteration; 0 for one without documents
  std::vector<double> latency_imbalance;  //!< per packed iteration: max / mean micro-batch forward latency (1 if empty)
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

//! The micro-batches of one packed iteration as at most `dp` replicas of whole-document
//! pieces (see the file comment); empty when it holds no document.
[[nodiscard]] inline std::vector<std::vector<std::vector<step_piece>>> replicas_of(const packed_iteration& it, std::span<const token_count> lengths,
                                                                                   int dp) {
  ZEPPELIN_EXPECTS(dp >= 1, "the data-parallel degree must be >= 1", {{"dp", double(dp)}});
  std::vector<std::vector<step_piece>> filled;
  for (const packed_micro_batch& mb : it.micro_batches) {
    if (mb.documents.empty()) continue;
    auto& pieces = filled.emplace_back();
    for (const std::int64_t i : mb.documents) {
      ZEPPELIN_EXPECTS(i >= 0 && static_cast<std::size_t>(i) < lengths.size(), "a packed document index is outside the stream",
                       {{"index", double(i)}, {"documents", double(lengths.size())}});
      pieces.push_back({i, 0, lengths[static_cast<std::size_t>(i)]});
    }
  }
  const std::size_t count = filled.size();
  const std::size_t replicas = std::min(count, static_cast<std::size_t>(dp));
  std::vector<std::vector<std::vector<step_piece>>> out(replicas);
  for (std::size_t r = 0; r < replicas; ++r)
    for (std::size_t k = r * count / replicas; k < (r + 1) * count / replicas; ++k) out[r].push_back(std::move(filled[k]));
  return out;
}

//! The step plan of one packed iteration on `cluster` (see the file comment), or nothing for
//! an iteration without documents. The plan's documents are the whole stream's lengths.
template <checkpoint_policy C>
[[nodiscard]] std::optional<step_plan> packed_iteration_step_plan(const packed_iteration& it, std::span<const token_count> lengths,
                                                                  const packing_method& method, step_shape shape, const C& checkpoint,
                                                                  const model_config& model, const topology& cluster) {
  std::vector<std::vector<std::vector<step_piece>>> replicas = replicas_of(it, lengths, shape.layout.dp);
  if (replicas.empty()) return std::nullopt;
  shape.layout.dp = static_cast<int>(replicas.size());
  // the plan names only the iteration's documents: renumber them densely
  std::vector<token_count> documents;
  for (auto& replica : replicas)
    for (auto& mb : replica)
      for (step_piece& x : mb) {
        x.document = static_cast<std::int64_t>(documents.size());
        documents.push_back(x.end);
      }
  return make_step_plan(cluster, model, std::move(documents), std::move(replicas), shape, method.layout, checkpoint);
}

//! Trains `lengths` with `method` (see the file comment).
template <checkpoint_policy C>
[[nodiscard]] packed_stream_result simulate_packed_stream(const packing_method& method, std::span<const token_count> lengths, token_count context,
                                                          const step_shape& shape, const C& checkpoint, const model_config& model,
                                                          const topology& cluster, const sim_cost_model& cost, const step_sim_options& options = {},
                                                          const step_program_options& program = {}) {
  validate(shape.layout);
  const packing_limits limits{.micro_batches = shape.layout.pp * shape.layout.dp, .max_tokens = max_tokens_of(method, context)};
  packed_stream_result out;
  out.packing = pack_stream(method.packer, lengths, limits, {.tokens_per_iteration = limits.micro_batches * context});
  for (const packed_iteration& it : out.packing.iterations) {
    const std::optional<step_plan> plan = packed_iteration_step_plan(it, lengths, method, shape, checkpoint, model, cluster);
    if (!plan) {
      out.iteration_seconds.push_back(0);
      out.latency_imbalance.push_back(1);
      continue;
    }
    const step_sim_result r = simulate_step(make_step_program(*plan, cluster, model, program), cluster, cost, options);
    out.iteration_seconds.push_back(r.iteration_s);
    out.latency_imbalance.push_back(r.latency_imbalance);
    out.seconds += r.iteration_s;
    for (const token_count d : plan->documents) out.tokens += d;
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
