// zeppelin/sim/cost_model.hpp
// The prices the step simulator uses, in one value: attention kernels (FlashAttention-2
// tables with tile effects), linear modules (a fraction of the GPU's dense peak) and links
// (latency + bytes / bandwidth, max-min shared by the simulator), and the SM contention
// between NCCL kernels and compute (sim/sm_contention.hpp, on by default).
//   in : a gpu_spec (or a topology, whose GPU is read)
//   out: sim_cost_model{.attention, .linear, .link, .contention}
// Every member is a small regular value type from cost/; change one with a designated
// initialiser or by assignment (e.g. cost.linear.efficiency = 0.5). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/cost/linear_time_model.hpp>
#include <zeppelin/sim/sm_contention.hpp>

ZEPPELIN_NAMESPACE_BEGIN

//! What one step of the simulator costs: kernels and links.
struct sim_cost_model {
  attention_time_model attention{};  //!< attention call seconds from query rows and pairs
  linear_time_model linear{};        //!< GEMM seconds from FLOPs
  link_model link{};                 //!< transfer seconds (bandwidths come from the topology)
  sm_contention contention{};        //!< compute at (1 - f) while the GPU's NCCL work runs

  //! FlashAttention-2 tables for `gpu` (attention_time_model::for_gpu), the default GEMM
  //! efficiency, the topology's links and the default SM contention.
  [[nodiscard]] static sim_cost_model for_gpu(const gpu_spec& gpu) {
    return {attention_time_model::for_gpu(gpu), linear_time_model{}, link_model{}, sm_contention{}};
  }
  //! for_gpu(t.gpu()).
  [[nodiscard]] static sim_cost_model for_topology(const topology& t) { return for_gpu(t.gpu()); }

  friend bool operator==(const sim_cost_model&, const sim_cost_model&) = default;
};

ZEPPELIN_NAMESPACE_END
