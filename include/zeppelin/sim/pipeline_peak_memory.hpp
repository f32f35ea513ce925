// zeppelin/sim/pipeline_peak_memory.hpp
// Peak memory of every pipeline stage over one iteration, walking the stage's op order.
//   in : a pipeline_schedule, the model chunks (cost/layer_split.hpp split_model into
//        stages x virtual_stages), the memory model (cost/pipeline_memory.hpp), a checkpoint
//        policy, and the micro-batches' tokens (schedule.micro_batch_tokens)
//   out: per stage: model states (the stage's chunks) plus the largest sum, over the op
//        order, of the activations kept by the (micro-batch, chunk)s whose forward has run and
//        whose backward has not, plus the transient of the op running (the one layer a
//        backward recomputes at a time); the op, micro-batch and bytes at that peak.
// A forward's activations count from its start (they are being written); a backward frees
// them at its end. Host-only.
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct stage_memory_peak {
  double model_state_bytes = 0;  //!< parameters, gradients, optimizer states of the stage's chunks
  double peak_bytes = 0;         //!< model states + the largest activation footprint
  int micro_batch = -1;          //!< micro-batch of the op running at the peak
  int chunk = -1;
  std::size_t op = 0;            //!< index of that op in the stage's op list
  int in_flight = 0;             //!< (micro-batch, chunk)s holding activations at the peak
};

//! The layers the checkpoint policy recomputes for (stage, chunk, micro-batch), checked
//! against the chunk's layers. Throws invalid_argument for a count outside [0, layers].
template <checkpoint_policy C>
[[nodiscard]] int recomputed_layers_at(const C& policy, const std::vector<stage_slice>& slices, int stages, int stage, int chunk,
                                       int micro_batch) {
  int earlier = 0;
  for (int c = 0; c < chunk; ++c) earlier += slices[static_cast<std::size_t>(c * stages + stage)].layers;
  const int layers = slices[static_cast<std::size_t>(chunk * stages + stage)].layers;
  const int r = policy.recomputed_layers({stage, chunk, micro_batch, layers, earlier});
  ZEPPELIN_EXPECTS(r >= 0 && r <= layers, "a checkpoint policy recomputed more layers than the chunk holds",
                   {{"stage", double(stage)}, {"chunk", double(chunk)}, {"recomputed", double(r)}, {"layers", double(layers)}});
  return r;
}

//! Per stage peak (see the file comment). Throws invalid_argument when `slices` does not
//! hold stages x virtual_stages chunks, or what the memory model and the policy throw.
template <checkpoint_policy C>
[[nodiscard]] std::vector<stage_memory_peak> pipeline_peak_memory(const pipeline_schedule& s, const std::vector<stage_slice>& slices,
                                                                  const pipeline_memory_model& memory, const C& checkpoint) {
  ZEPPELIN_EXPECTS(slices.size() == static_cast<std::size_t>(s.stages) * static_cast<std::size_t>(s.virtual_stages),
                   "one model chunk per (stage, virtual stage) is needed",
                   {{"chunks", double(slices.size())}, {"stages", double(s.stages)}, {"virtual_stages", double(s.virtual_stages)}});
  std::vector<stage_memory_peak> out(static_cast<std::size_t>(s.stages));
  for (int p = 0; p < s.stages; ++p) {
    stage_memory_peak& peak = out[static_cast<std::size_t>(p)];
    for (int c = 0; c < s.virtual_stages; ++c)
      peak.model_state_bytes += memory.model_state_bytes(slices[static_cast<std::size_t>(c * s.stages + p)]);
    peak.peak_bytes = peak.model_state_bytes;
    double held = 0;
    int in_flight = 0;
    // bytes per token kept by each (chunk, recomputed layers) of this stage, computed once
    std::vector<std::vector<double>> per_token(static_cast<std::size_t>(s.virtual_stages));
    const auto& ops = s.ops[static_cast<std::size_t>(p)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const pipeline_op& op = ops[i];
      if (!is_compute(op.kind)) continue;
      const stage_slice& slice = slices[static_cast<std::size_t>(op.chunk * s.stages + p)];
      const int r = recomputed_layers_at(checkpoint, slices, s.stages, p, op.chunk, op.micro_batch);
      auto& row = per_token[static_cast<std::size_t>(op.chunk)];
      if (row.empty()) row.assign(static_cast<std::size_t>(slice.layers) + 1, -1.0);
      double& rate = row[static_cast<std::size_t>(r)];
      if (rate < 0) rate = memory.activation_bytes_per_token(slice, r);
      const double kept = static_cast<double>(op.tokens) * rate;
      double now = 0;
      if (op.kind == pipeline_op_kind::forward) {
        held += kept;
        ++in_flight;
        now = held;
      } else {
        now = held + (r > 0 ? memory.recompute_buffer_bytes(op.tokens) : 0.0);
      }
      if (peak.model_state_bytes + now > peak.peak_bytes)
        peak = {peak.model_state_bytes, peak.model_state_bytes + now, op.micro_batch, op.chunk, i, in_flight};
      if (op.kind == pipeline_op_kind::backward) {
        held = std::max(0.0, held - kept);
        --in_flight;
      }
    }
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
