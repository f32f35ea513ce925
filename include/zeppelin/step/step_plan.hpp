// zeppelin/step/step_plan.hpp
// The step plan: everything one training iteration runs, as plain data. The one input of
// the step program (step/build.hpp), which the simulator and the host runner both run.
//   documents   the iteration's document lengths (indices are what pieces name)
//   replicas    pipeline replicas, each on ranks of its own, each with its own degrees:
//               tp x cp ranks per stage, pp stages (replicas may differ, as in Hydraulis)
//     ranks          rank of (tp index t, cp index c, stage s) at ranks[(s * cp + c) * tp + t]
//                    (Megatron-LM's order inside a replica: TP fastest, then CP, then PP)
//     layers         per virtual stage v (v = chunk * pp + stage, chunk < virtual stages of
//                    the schedule) the layers it holds, in model order; they add up to the
//                    model's layers
//     tp_mode        how TP's collectives run: all-reduce, or sequence parallelism
//                    (reduce-scatter and all-gather, Korthikanti et al.)
//     schedule       the pipeline schedule policy (any_pipeline_schedule: GPipe, 1F1B,
//                    interleaved, chunk-level 1F1B with its slice chains)
//     micro_batches  in the order they enter the pipeline; each a list of pieces (whole
//                    documents, or slices of documents that attend to the tokens before them,
//                    InfiniPipe's chunks) and its CP layout: a `plan` over the replica's cp
//                    ranks whose batch is the pieces' token counts (sequence i = piece i),
//                    from any partitioner; the same layout on every stage and TP index
//     recompute      per (virtual stage, micro-batch) the layers recomputed in backward
//                    (recompute[v * micro_batches + k]), from any checkpoint policy
//   sync        how gradients meet: all_reduce across the replicas and CP ranks holding the
//               same parameters; sharded_optimizer (reduce-scatter the gradients, all-gather
//               the updated parameters: ZeRO-1/2, Megatron-LM's distributed optimizer);
//               fully_sharded (ZeRO-3: every layer's parameters all-gathered before its
//               forward and backward, its gradients reduce-scattered after the backward);
//               switching (Hydraulis: fp32 master states sharded over every rank of the job,
//               parameters pulled as mutual slices before the step, gradients pushed after)
// validate (step/validate.hpp) checks every invariant; fingerprint (step/fingerprint.hpp)
// hashes it; step/step_plan_json.hpp and step/step_plan_bytes.hpp write and read it.
// nvcc-safe (host-only data).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! How a stage's tensor-parallel group combines its partial results.
enum class tp_collectives : std::uint8_t {
  all_reduce = 0,         //!< Megatron-LM TP: all-reduce after the row-parallel GEMMs
  sequence_parallel = 1,  //!< with sequence parallelism: reduce-scatter and all-gather
};

[[nodiscard]] constexpr std::string_view to_string(tp_collectives m) noexcept {
  return m == tp_collectives::sequence_parallel ? "sequence_parallel" : "all_reduce";
}

//! How the ranks that hold the same parameters bring their gradients together.
enum class gradient_sync : std::uint8_t {
  all_reduce = 0,         //!< ring all-reduce of the gradients (ZeRO-0)
  sharded_optimizer = 1,  //!< reduce-scatter gradients, all-gather parameters (ZeRO-1/2)
  fully_sharded = 2,      //!< ZeRO-3: per layer, all-gather parameters, reduce-scatter gradients
  switching = 3,          //!< Hydraulis: pull parameter slices, push gradient slices (all ranks)
};

[[nodiscard]] constexpr std::string_view to_string(gradient_sync s) noexcept {
  switch (s) {
    case gradient_sync::all_reduce: return "all_reduce";
    case gradient_sync::sharded_optimizer: return "sharded_optimizer";
    case gradient_sync::fully_sharded: return "fully_sharded";
    case gradient_sync::switching: return "switching";
  }
  return "?";
}

//! Tokens [begin, end) of document `document`, which attend to tokens [0, end) of it: the
//! first `begin` of them (the context) were computed by the document's earlier slices.
struct step_piece {
  std::int64_t document = 0;
  token_count begin = 0;
  token_count end = 0;
  [[nodiscard]] constexpr token_count tokens() const noexcept { return end - begin; }
  [[nodiscard]] constexpr token_count context() const noexcept { return begin; }
  friend constexpr bool operator==(const step_piece&, const step_piece&) = default;
};

//! One micro-batch of a replica: its pieces and its CP layout (see the file comment).
struct step_micro_batch {
  std::vector<step_piece> pieces;
  plan layout;  //!< over the replica's cp ranks; sequence i of its batch is pieces[i]

  [[nodiscard]] token_count tokens() const noexcept {
    token_count n = 0;
    for (const step_piece& p : pieces) n += p.tokens();
    return n;
  }
  friend bool operator==(const step_micro_batch&, const step_micro_batch&) = default;
};

//! One pipeline replica (see the file comment).
struct step_replica {
  int tp = 1;
  int cp = 1;
  int pp = 1;
  std::vector<rank_index> ranks;  //!< tp x cp x pp global ranks: (t, c, s) at (s * cp + c) * tp + t
  std::vector<int> layers;        //!< per virtual stage: pp x (the schedule's virtual stages)
  tp_collectives tp_mode = tp_collectives::all_reduce;
  any_pipeline_schedule schedule{};
  std::vector<step_micro_batch> micro_batches;
  std::vector<std::int32_t> recompute;  //!< [virtual stage x micro_batches + micro-batch]

  [[nodiscard]] int virtual_stages() const noexcept { return pp > 0 ? static_cast<int>(layers.size()) / pp : 0; }
  [[nodiscard]] int micro_batch_count() const noexcept { return static_cast<int>(micro_batches.size()); }
  //! The global rank of (t, c, s).
  [[nodiscard]] rank_index rank_of(int t, int c, int s) const {
    return ranks[(static_cast<std::size_t>(s) * static_cast<std::size_t>(cp) + static_cast<std::size_t>(c)) * static_cast<std::size_t>(tp) +
                 static_cast<std::size_t>(t)];
  }
  //! Layers recomputed by virtual stage v for micro-batch k.
  [[nodiscard]] int recomputed(int v, int k) const {
    return recompute[static_cast<std::size_t>(v) * micro_batches.size() + static_cast<std::size_t>(k)];
  }
  //! The first layer of virtual stage v.
  [[nodiscard]] int first_layer(int v) const noexcept {
    int first = 0;
    for (int u = 0; u < v; ++u) first += layers[static_cast<std::size_t>(u)];
    return first;
  }
  friend bool operator==(const step_replica&, const step_replica&) = default;
};

struct step_plan {
  int nodes = 0;                        //!< the cluster the ranks index (nodes x gpus_per_node)
  int gpus_per_node = 0;
  std::vector<token_count> documents;   //!< the iteration's document lengths
  std::vector<step_replica> replicas;
  gradient_sync sync = gradient_sync::all_reduce;

  [[nodiscard]] rank_index num_ranks() const noexcept { return static_cast<rank_index>(nodes * gpus_per_node); }
  friend bool operator==(const step_plan&, const step_plan&) = default;
};

ZEPPELIN_NAMESPACE_END
