// zeppelin/sim/sm_contention.hpp
// SM contention between NCCL kernels and the compute they overlap (the "bubbles" of
// Zeppelin 3.3 / Fig. 12.b).
//   in : the GPU (gpu_spec) and the CTAs an NCCL send/recv kernel holds
//   out: slowdown(gpu) = f in [0, 1): while a GPU's own NCCL work is in flight (it is the
//        source or the destination of a flow: its ring sends and receives, the dispatch /
//        transfer / combine legs it serves as a proxy, remap alltoallv), its compute kernels
//        run at (1 - f) of their speed. The event engine applies it (sim/event_engine.hpp).
// Why: NCCL launches one CTA per channel and a CTA occupies a whole SM, which it does not
// share with compute kernels ("NCCL CTAs won't share an SM with compute kernels"; on a DGX
// with 8 NICs at ~190 GB/s NCCL uses 16 SMs: S. Jeaugey, NVIDIA/nccl issue #689). A GEMM or
// an attention kernel sized for the whole GPU then runs its waves on the SMs left:
//   f = nccl_ctas / streaming multiprocessors,
// 16 / 132 = 0.121 on H100 / H800 / H200 (132 SMs, SXM) and 16 / 108 = 0.148 on A100 / A800
// (108 SMs). The default of 16 CTAs is the figure above for a multi-NIC node; send/recv uses
// NCCL_NCHANNELS_PER_NET_PEER (typically 2, NVIDIA/nccl issue #1424) channels per peer and
// more for NVLink peers, so a ring step with a send and a receive, or a proxy serving
// several pieces, sits in that range. Nothing here is fitted to the paper's timings.
// Not modelled: the reverse effect the paper also describes (NCCL kernels waiting for SMs
// held by a running attention kernel before they can start), memory-bandwidth contention.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>

#include <cmath>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! Streaming multiprocessors of a GPU known by name: 108 for A100 / A800, 132 for the SXM
//! Hopper parts (H100, H800, H200); `fallback` for any other name.
[[nodiscard]] inline int streaming_multiprocessors(const gpu_spec& gpu, int fallback = 132) {
  const std::string_view n = gpu.name;
  if (n.starts_with("A100") || n.starts_with("A800")) return 108;
  if (n.starts_with("H100") || n.starts_with("H800") || n.starts_with("H200")) return 132;
  return fallback;
}

//! Compute slowdown while a GPU's own NCCL work is active (see the file comment).
struct sm_contention {
  bool enabled = true;  //!< false: communication never slows compute
  int nccl_ctas = 16;   //!< SMs held by the NCCL kernel of one GPU (NVIDIA/nccl #689)
  int gpu_sms = 0;      //!< SMs of the GPU; 0 = streaming_multiprocessors(gpu)

  //! f: the fraction of compute throughput lost while communicating; 0 when disabled.
  //! Throws invalid_argument unless 0 <= nccl_ctas < SMs and gpu_sms >= 0.
  [[nodiscard]] double slowdown(const gpu_spec& gpu) const {
    if (!enabled) return 0.0;
    const int sms = gpu_sms > 0 ? gpu_sms : streaming_multiprocessors(gpu);
    ZEPPELIN_EXPECTS(gpu_sms >= 0 && nccl_ctas >= 0 && nccl_ctas < sms,
                     "NCCL CTAs must leave some SMs to compute (0 <= nccl_ctas < SMs)",
                     {{"nccl_ctas", double(nccl_ctas)}, {"gpu_sms", double(sms)}});
    return static_cast<double>(nccl_ctas) / sms;
  }
  friend constexpr bool operator==(const sm_contention&, const sm_contention&) = default;
};

ZEPPELIN_NAMESPACE_END
