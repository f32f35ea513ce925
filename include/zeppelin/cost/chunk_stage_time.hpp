// zeppelin/cost/chunk_stage_time.hpp
// InfiniPipe's chunk cost model (cost/chunk_cost.hpp) as a stage_time_model
// (cost/stage_time.hpp), so the 4D step simulator (sim/pipeline_simulator.hpp) can run
// chunk-level pipelines.
//   in : a micro_batch standing for a chunk (micro_batch_of_chunk below): its documents the
//        chunk's slice lengths, its cp_shares the d_s Ulysses ranks' equal shares of the
//        chunk's tokens and causal pairs, context included; a stage_slice
//   out: stage_times: forward = T_comp + T_a2a of Eq. 4 for the slice's layers, backward
//        likewise, layer_forward = one layer's forward compute (what recomputing it costs);
//        without the cost model's ZeRO-3 layer floor, since the simulator runs ZeRO-3's
//        gathers and reduce-scatters as flows (sim/pipeline_simulator.hpp)
// Eq. 1 prices a slice [b, e) at a1 (e^2 - b^2) + a2 (e - b); its causal pairs are
// (e^2 - b^2 + e - b) / 2, so over a chunk with P pairs and T tokens the compute is
// (a1 (2P - T) + a2 T) / N + b1 / d_p for L / d_p layers, scaled to the slice's layers.
// Without cp_shares the micro-batch's documents are whole sequences (no context).
// Ulysses splits heads, so every rank does 1/d_s of the work: cp_wait is 0.
// Errors: invalid_argument for an invalid micro-batch or cost model.
// Host-only (model_config holds a string); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/micro_batch.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/stage_time.hpp>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN

//! The micro_batch that stands for chunk `c` on d_s Ulysses ranks (see the file comment).
[[nodiscard]] inline micro_batch micro_batch_of_chunk(const chunk& c, int sp_degree) {
  ZEPPELIN_EXPECTS(sp_degree >= 1, "the SP degree must be at least 1", {{"sp_degree", double(sp_degree)}});
  micro_batch mb;
  std::int64_t pairs = 0;
  for (const chunk_slice& s : c.slices) {
    mb.documents.push_back(s.tokens());
    pairs += causal_pairs(s.end) - causal_pairs(s.begin);
  }
  const token_count tokens = mb.tokens();
  for (int r = 0; r < sp_degree; ++r) {
    const auto share = [&](std::int64_t total) { return total * (r + 1) / sp_degree - total * r / sp_degree; };
    mb.cp_shares.push_back({share(tokens), share(pairs)});
  }
  return mb;
}

struct chunk_stage_time {
  chunk_cost_model cost;

  [[nodiscard]] stage_times times(const micro_batch& mb, const stage_slice& slice) const {
    validate(mb);
    validate(cost);
    const double tokens = static_cast<double>(mb.tokens());
    double pairs = 0;
    if (mb.cp_shares.empty())
      for (const token_count d : mb.documents) pairs += static_cast<double>(causal_pairs(d));
    else
      for (const cp_share& s : mb.cp_shares) pairs += static_cast<double>(s.pairs);
    const double per_layer = 1.0 / (static_cast<double>(cost.layers) * cost.d_s);  // the (1/N) of Eq. 1 for one layer of L / d_p
    const auto compute = [&](const chunk_compute_coefficients& c) { return (c.a1 * (2 * pairs - tokens) + c.a2 * tokens) * per_layer; };
    const double share = static_cast<double>(slice.layers) * cost.d_p / cost.layers;  // of the stage's L / d_p layers
    const double a2a = cost.all_to_all_fixed_seconds() + cost.all_to_all_token_seconds(mb.tokens());
    stage_times t;
    t.layer_forward = compute(cost.forward);
    t.forward = slice.layers * t.layer_forward + share * a2a + cost.forward.b1 / cost.d_p;
    t.backward = slice.layers * compute(cost.backward) + share * a2a + cost.backward.b1 / cost.d_p;
    return t;
  }
  friend bool operator==(const chunk_stage_time&, const chunk_stage_time&) = default;
};
static_assert(stage_time_model<chunk_stage_time>);

ZEPPELIN_NAMESPACE_END
