// zeppelin/sim/step_memory.hpp
// Per-rank memory of a step program: model states plus what its blocks keep between forward
// and backward, walked along the rank's ops (the program, not a schedule).
//   in : a step program, memory_settings (bytes per state, sequence parallelism; the ZeRO
//        stage and the shards follow the plan's gradient sync: all_reduce 0,
//        sharded_optimizer 1 over the replicas' CP ranks, fully_sharded 3 over the stage's CP
//        ranks, switching 1 over every rank of the cluster: a stage's states over
//        N / (tp pp) of what one GPU holds)
//   out: per rank its peak: model states (cost/pipeline_memory.hpp, the stage's virtual
//        stages), plus at every forward block the activations it keeps (the CP rank's rows
//        of the linear modules x cp, the memory model's per-token bytes for the virtual
//        stage and its recomputed layers) and the K/V context it keeps for the document's
//        later slices (2 x kv_heads / tp x head_dim activations per row and layer), freed at
//        the block's backward; a backward that recomputes holds one layer's activations on
//        top while it runs
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/step/program.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A rank's memory peak.
struct rank_memory_peak {
  double model_state_bytes = 0;
  double peak_bytes = 0;        //!< model states + the most kept at once
  std::int32_t micro_batch = -1;  //!< the block running at the peak (-1: states alone)
  std::int32_t virtual_stage = -1;
  friend constexpr bool operator==(const rank_memory_peak&, const rank_memory_peak&) = default;
};

//! The memory model of replica `r` of `prog` under `settings` (see the file comment).
[[nodiscard]] inline pipeline_memory_model step_memory_model(const step_program& prog, std::int32_t r, memory_settings settings) {
  const step_replica& rep = prog.replica(r);
  const int cps = [&] {
    int n = 0;
    for (const step_replica& x : prog.plan.replicas) n += x.cp;
    return n;
  }();
  switch (prog.plan.sync) {
    case gradient_sync::all_reduce: settings.zero_stage = 0; break;
    case gradient_sync::sharded_optimizer: settings.zero_stage = 1, settings.zero_shards = cps; break;
    case gradient_sync::fully_sharded: settings.zero_stage = 3, settings.zero_shards = rep.cp; break;
    case gradient_sync::switching: settings.zero_stage = 1, settings.zero_shards = std::max(1.0, double(prog.num_ranks()) / (rep.tp * rep.pp)); break;
  }
  settings.sequence_parallel = rep.tp_mode == tp_collectives::sequence_parallel;
  return {prog.model, parallel_layout{rep.tp, rep.cp, rep.pp, 1}, settings};
}

//! Per global rank, its peak (ranks that run nothing: zeros).
[[nodiscard]] inline std::vector<rank_memory_peak> step_memory_peaks(const step_program& prog, const memory_settings& settings) {
  std::vector<rank_memory_peak> out(prog.ranks.size());
  std::vector<pipeline_memory_model> models;
  for (std::size_t r = 0; r < prog.plan.replicas.size(); ++r) models.push_back(step_memory_model(prog, static_cast<std::int32_t>(r), settings));
  for (std::size_t g = 0; g < prog.ranks.size(); ++g) {
    const step_position& at = prog.positions[g];
    if (at.replica < 0) continue;
    const step_replica& rep = prog.replica(at.replica);
    const pipeline_memory_model& mm = models[static_cast<std::size_t>(at.replica)];
    const int PV = static_cast<int>(rep.layers.size());
    rank_memory_peak& peak = out[g];
    for (int v = at.stage; v < PV; v += rep.pp)
      peak.model_state_bytes += mm.model_state_bytes(stage_slice{rep.layers[static_cast<std::size_t>(v)], v == 0, v == PV - 1});
    peak.peak_bytes = peak.model_state_bytes;
    const double context_row_layer = 2.0 * (prog.model.kv_heads / rep.tp) * prog.model.head_dim * prog.model.bytes_per_element;
    const auto kept = [&](const step_block& b) {
      const step_layout& lay = prog.layout(b.replica, b.micro_batch);
      const auto c = static_cast<std::size_t>(at.cp);
      const stage_slice slice{b.layers, b.first, b.last};
      double bytes = mm.activation_bytes(lay.linear_rows[c] * rep.cp, slice, rep.recomputed(b.virtual_stage, b.micro_batch));
      const step_micro_batch& mb = rep.micro_batches[static_cast<std::size_t>(b.micro_batch)];
      for (std::size_t i = 0; i < mb.pieces.size(); ++i)
        if (mb.pieces[i].end < prog.plan.documents[static_cast<std::size_t>(mb.pieces[i].document)])
          bytes += static_cast<double>(lay.piece_rows[c][i]) * context_row_layer * b.layers;
      return bytes;
    };
    double held = 0;
    for (const step_op& op : prog.ranks[g]) {
      if (op.kind != step_op_kind::block) continue;
      const step_block& b = prog.blocks[static_cast<std::size_t>(op.index)];
      const double k = kept(b);
      double now = held;
      if (b.pass == step_pass::forward) {
        held += k;
        now = held;
      } else if (b.recomputed > 0) {
        now += mm.recompute_buffer_bytes(prog.layout(b.replica, b.micro_batch).linear_rows[static_cast<std::size_t>(at.cp)] * rep.cp);
      }
      if (peak.model_state_bytes + now > peak.peak_bytes) peak = {peak.model_state_bytes, peak.model_state_bytes + now, b.micro_batch, b.virtual_stage};
      if (b.pass == step_pass::backward) held = std::max(0.0, held - k);
    }
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
