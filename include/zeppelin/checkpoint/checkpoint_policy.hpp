// zeppelin/checkpoint/checkpoint_policy.hpp
// Activation checkpointing (recomputation) as a policy: which of a model chunk's layers a
// (stage, micro-batch) recomputes in its backward instead of keeping their activations.
//   in : a checkpoint_site: pipeline stage, model chunk on that stage, micro-batch, the
//        layers the chunk holds and those of the stage's earlier chunks
//   out: recomputed_layers(site) in [0, site.layers]
// A recomputed layer keeps only its input between forward and backward and runs its forward
// again right before its backward (whole-layer recomputation, Megatron-LM's
// --recompute-granularity full --recompute-method block with that many layers). The cost
// model prices the extra forwards (sim/simulate_step.hpp), the memory model
// (cost/pipeline_memory.hpp) the activations kept.
// Models: no_recompute, full_recompute (checkpoint/basic_policies.hpp), selective_recompute
// (checkpoint/selective_recompute.hpp); any_checkpoint_policy picks one at run time.
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>

#include <concepts>

ZEPPELIN_NAMESPACE_BEGIN

//! Where a recomputation decision applies.
struct checkpoint_site {
  int stage = 0;        //!< pipeline stage (0-based)
  int chunk = 0;        //!< model chunk on the stage (virtual pipelines; else 0)
  int micro_batch = 0;  //!< micro-batch index
  int layers = 0;       //!< transformer layers of the chunk
  int earlier_layers = 0;  //!< layers of the stage's chunks before this one (0 without chunks)
  friend bool operator==(const checkpoint_site&, const checkpoint_site&) = default;
};

template <class C>
concept checkpoint_policy = std::regular<C> && requires(const C& c, const checkpoint_site& site) {
  { c.recomputed_layers(site) } -> std::same_as<int>;
};

ZEPPELIN_NAMESPACE_END
