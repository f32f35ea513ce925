// zeppelin/cost/linear_time_model.hpp
// Linear-module (GEMM) time: FLOPs over a fixed fraction of the GPU's dense peak.
//   in:  FLOPs (or tokens and a model_config for one layer) and a gpu_spec
//   out: seconds
// GEMMs of training-sized shapes run at a near-constant fraction of peak, so one efficiency
// number (MFU of the linear modules) is the whole model. Host-only; nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/linear_flops.hpp>

#include <cmath>
#include <concepts>

ZEPPELIN_NAMESPACE_BEGIN

//! Linear-module (GEMM) time: FLOPs over a fixed fraction of the GPU's dense peak.
struct linear_time_model {
  //! Achieved fraction of the dense bf16 peak for the linear modules. 0.58 is what the
  //! Zeppelin paper's own Table 3 implies: LLaMA-7B, 4K tokens per H200, "linear" forward
  //! 93-97 ms -> 4096 * 13.2 GFLOP/token (32 layers + LM head, linear_flops.hpp) / 95 ms
  //! = 570 TFLOP/s = 0.58 of 989. Megatron-LM reports 52% of A100 peak end to end
  //! (Narayanan et al., SC'21), FlashAttention-2 GPT training 72% MFU: the same range.
  double efficiency = 0.58;

  //! Seconds to execute `flops` FLOPs on `gpu`: flops / (efficiency * gpu.peak_flops).
  //! Throws invalid_argument for negative or NaN FLOPs, efficiency outside (0, 1], or a
  //! peak that is not finite and positive.
  [[nodiscard]] double seconds(double flops, const gpu_spec& gpu) const {
    ZEPPELIN_EXPECTS(std::isfinite(flops) && flops >= 0, "FLOP counts must be finite and non-negative", {{"flops", flops}});
    ZEPPELIN_EXPECTS(std::isfinite(efficiency) && efficiency > 0 && efficiency <= 1, "GEMM efficiency must be in (0, 1]",
                     {{"efficiency", efficiency}});
    ZEPPELIN_EXPECTS(std::isfinite(gpu.peak_flops) && gpu.peak_flops > 0, "GPU peak FLOP/s must be positive and finite",
                     {{"peak_flops", gpu.peak_flops}});
    return flops / (efficiency * gpu.peak_flops);
  }

  //! Forward seconds of ONE layer's linear modules over `tokens` tokens of model `m`.
  [[nodiscard]] double layer_forward_seconds(token_count tokens, const model_config& m, const gpu_spec& gpu) const {
    ZEPPELIN_EXPECTS(tokens >= 0, "token counts must be non-negative", {{"tokens", double(tokens)}});
    return seconds(static_cast<double>(tokens) * linear_forward_flops_per_token(m), gpu);
  }
  //! Backward seconds of ONE layer's linear modules over `tokens` tokens (2x forward FLOPs).
  [[nodiscard]] double layer_backward_seconds(token_count tokens, const model_config& m, const gpu_spec& gpu) const {
    ZEPPELIN_EXPECTS(tokens >= 0, "token counts must be non-negative", {{"tokens", double(tokens)}});
    return seconds(static_cast<double>(tokens) * linear_backward_flops_per_token(m), gpu);
  }

  friend constexpr bool operator==(const linear_time_model&, const linear_time_model&) = default;
};

//! A GEMM-time model: seconds to execute a FLOP count on a GPU.
template <class T>
concept linear_cost_model = requires(const T& m, double flops, const gpu_spec& gpu) {
  { m.seconds(flops, gpu) } -> std::convertible_to<double>;
};
static_assert(linear_cost_model<linear_time_model>);

ZEPPELIN_NAMESPACE_END
