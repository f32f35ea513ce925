// zeppelin/cost/attention_time_model.hpp
// Attention kernel time: FLOPs over an achieved-throughput profile, with tile padding.
// (Includes cost/linear_time_model.hpp, the GEMM counterpart, for convenience.)
//   in:  query rows and (query, key) pairs of one attention call, heads, head dim
//        (or a model_config for one layer)
//   out: seconds
//
// Attention (WLB-LLM, section 5.2 and Fig. 10): FlashAttention splits the queries into tiles
// of 128 rows and a tile always computes all its rows, so
//   padded_rows     = ceil(query_rows / tile_rows) * tile_rows
//   executed FLOPs  = FLOPs(pairs) * padded_rows / query_rows   (each padding row costs as
//                                                                much as an average real row)
//   seconds         = executed FLOPs / table.at(padded_rows)
// Hence the latency of a call whose rows each see a fixed number of keys is flat for
// 1..128 query rows and rises above, as Fig. 10 (left) shows. The table is indexed by the
// query rows of the call (all documents of one varlen launch together, or one block).
//
// Default tables (H100 SXM, FlashAttention 2, bf16, head dim 128; x = query rows; values in
// TFLOP/s) are built from public FlashAttention-2 benchmark figures (the FlashAttention
// repository's H100 benchmarks and the FlashAttention-2 paper):
//   forward   1k rows: ~45 (varlen causal, 1k total)     16k: 335 (dense causal 16k)
//             32k: ~345 (varlen causal, 32k total)
//   backward  8k: ~205, 32k: ~262 (varlen causal, 8k / 32k total)
// Between 1k and 16k the forward rate grows geometrically (x1.652 per doubling, the ratio
// that joins the two anchors) and the same ratio continues down to one 128-row tile. Below
// its first anchor (8k) the backward table reuses the forward curve scaled to meet it
// (x 205/202.8). Every segment keeps x / rate(x) non-decreasing (more rows never take less
// time: throughput_table::time_monotone()), which needs at most x1.69 per doubling.
// Other GPUs: see for_gpu().
// Host-only; nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/cost/linear_time_model.hpp>
#include <zeppelin/cost/throughput_table.hpp>

#include <cmath>
#include <concepts>
#include <cstdint>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

namespace throughput_profiles {
//! Dense bf16 tensor-core peaks the profiles are tied to (NVIDIA H100 SXM and A100/A800 SXM
//! datasheets; also core/topology_presets.hpp gpus::).
inline constexpr double h100_peak_flops = 989e12;
inline constexpr double a800_peak_flops = 312e12;

//! FlashAttention 2 causal forward on H100 SXM (see the file header for the derivation).
inline throughput_table h100_fa2_forward() {
  return {{128, 9.98e12},     // 45 / 1.652^3: one tile per head, launch-latency bound
          {256, 16.49e12},    // 45 / 1.652^2
          {512, 27.24e12},    // 45 / 1.652
          {1024, 45e12},      // FlashAttention-2 H100 benchmarks: FA2 varlen causal fwd, 1k total, ~45
          {2048, 74.33e12},   // geometric between the 1k and 16k anchors
          {4096, 122.8e12},
          {8192, 202.8e12},
          {16384, 335e12},    // FlashAttention-2 H100 benchmarks: FA2 dense causal fwd 16k, 335
          {32768, 345e12}};   // FlashAttention-2 H100 benchmarks: FA2 varlen causal fwd, 32k total, ~345
}

//! FlashAttention 2 causal backward on H100 SXM (see the file header for the derivation).
inline throughput_table h100_fa2_backward() {
  return {{128, 10.09e12},    // forward curve x (205 / 202.8) below the 8k anchor
          {256, 16.67e12},
          {512, 27.54e12},
          {1024, 45.49e12},
          {2048, 75.14e12},
          {4096, 124.1e12},
          {8192, 205e12},     // FlashAttention-2 H100 benchmarks: FA2 varlen causal bwd, 8k total, ~205
          {32768, 262e12}};   // FlashAttention-2 H100 benchmarks: FA2 varlen causal bwd, 32k total, ~262
}

//! Ampere factor applied to the H100 FA2 curves. FlashAttention-2 reaches "50-73% of the
//! theoretical maximum FLOPs/s on A100" (Dao, FlashAttention-2, ICLR 2024, abstract) while on
//! H100 it peaks near 345/989 = 35% (FlashAttention-2 H100 benchmarks): FA2 has no Hopper-specific
//! path (no wgmma/TMA). So the curves are moved to A800 by putting their best point at 73%
//! of the A800 peak (0.73 * 312 / 345 = 0.660), not by the bare peak ratio 312/989 = 0.315,
//! which would halve FA2's published A100 throughput (~230 TFLOP/s forward).
inline constexpr double a800_fa2_scale = 0.73 * a800_peak_flops / 345e12;
}  // namespace throughput_profiles

//! Attention kernel time from query rows and pairs; see the file header.
struct attention_time_model {
  //! Query rows per tile: FlashAttention's forward tile (WLB-LLM section 5.2: "the tile size
  //! is set to 128"); its backward also walks 128-row query blocks for head dim 128.
  int tile_rows = 128;
  throughput_table forward = throughput_profiles::h100_fa2_forward();
  throughput_table backward = throughput_profiles::h100_fa2_backward();

  //! FlashAttention 2 on H100 SXM (the default tables).
  [[nodiscard]] static attention_time_model h100_fa2() { return {}; }

  //! FlashAttention 2 on A800 / A100 SXM: the H100 curves x throughput_profiles::a800_fa2_scale.
  [[nodiscard]] static attention_time_model a800_fa2() {
    attention_time_model m;
    m.forward = m.forward.scaled(throughput_profiles::a800_fa2_scale);
    m.backward = m.backward.scaled(throughput_profiles::a800_fa2_scale);
    return m;
  }

  //! FlashAttention 2 tables for `gpu`: a GPU named A100* or A800* gets a800_fa2() scaled by
  //! peak / 312 TFLOP/s; any other (Hopper: H100, H800, H200, or unknown) gets h100_fa2()
  //! scaled by peak / 989 TFLOP/s, so H100/H800/H200 get the H100 tables unchanged.
  //! Throws invalid_argument for a peak that is not finite and positive.
  [[nodiscard]] static attention_time_model for_gpu(const gpu_spec& gpu) {
    ZEPPELIN_EXPECTS(std::isfinite(gpu.peak_flops) && gpu.peak_flops > 0, "GPU peak FLOP/s must be positive and finite",
                     {{"peak_flops", gpu.peak_flops}});
    const std::string_view name = gpu.name;
    const bool ampere = name.starts_with("A100") || name.starts_with("A800");
    attention_time_model m = ampere ? a800_fa2() : h100_fa2();
    const double ratio = gpu.peak_flops / (ampere ? throughput_profiles::a800_peak_flops : throughput_profiles::h100_peak_flops);
    if (ratio != 1.0) {
      m.forward = m.forward.scaled(ratio);
      m.backward = m.backward.scaled(ratio);
    }
    return m;
  }

  //! query_rows rounded up to a multiple of tile_rows (0 stays 0).
  [[nodiscard]] token_count padded_rows(token_count query_rows) const {
    check_rows(query_rows);
    return (query_rows + tile_rows - 1) / tile_rows * tile_rows;
  }

  //! FLOPs the forward kernel executes, tile padding included.
  [[nodiscard]] double forward_flops(token_count query_rows, std::int64_t pairs, int heads, int head_dim) const {
    check(query_rows, pairs, heads, head_dim);
    if (pairs == 0) return 0.0;
    return attention_forward_flops(pairs, heads, head_dim) * padding_factor(query_rows);
  }
  //! FLOPs the backward kernel executes, tile padding included.
  [[nodiscard]] double backward_flops(token_count query_rows, std::int64_t pairs, int heads, int head_dim) const {
    return attention_backward_ratio * forward_flops(query_rows, pairs, heads, head_dim);
  }

  //! Forward seconds of one attention call: `query_rows` query rows whose unmasked (query,
  //! key) pairs number `pairs`, per query head. 0 when pairs == 0 (nothing to launch).
  //! Throws invalid_argument for negative counts, pairs > 0 with no rows, heads or
  //! head_dim < 1, tile_rows < 1, or an empty table.
  [[nodiscard]] double forward_seconds(token_count query_rows, std::int64_t pairs, int heads, int head_dim) const {
    const double flops = forward_flops(query_rows, pairs, heads, head_dim);
    return flops == 0 ? 0.0 : flops / forward.at(static_cast<double>(padded_rows(query_rows)));
  }
  //! Backward seconds of one attention call (2.5x the forward FLOPs, backward table).
  [[nodiscard]] double backward_seconds(token_count query_rows, std::int64_t pairs, int heads, int head_dim) const {
    const double flops = backward_flops(query_rows, pairs, heads, head_dim);
    return flops == 0 ? 0.0 : flops / backward.at(static_cast<double>(padded_rows(query_rows)));
  }

  //! One layer of `m` (query heads and head dim from the model).
  [[nodiscard]] double forward_seconds(token_count query_rows, std::int64_t pairs, const model_config& m) const {
    validate(m);
    return forward_seconds(query_rows, pairs, m.heads, m.head_dim);
  }
  [[nodiscard]] double backward_seconds(token_count query_rows, std::int64_t pairs, const model_config& m) const {
    validate(m);
    return backward_seconds(query_rows, pairs, m.heads, m.head_dim);
  }

  //! padded_rows / query_rows (query_rows > 0): what tile padding multiplies the FLOPs by.
  [[nodiscard]] double padding_factor(token_count query_rows) const {
    return static_cast<double>(padded_rows(query_rows)) / static_cast<double>(query_rows);
  }

  friend bool operator==(const attention_time_model&, const attention_time_model&) = default;

 private:
  void check_rows(token_count query_rows) const {
    ZEPPELIN_EXPECTS(tile_rows >= 1, "the attention tile needs at least one row", {{"tile_rows", double(tile_rows)}});
    ZEPPELIN_EXPECTS(query_rows >= 0, "query rows must be non-negative", {{"query_rows", double(query_rows)}});
  }
  void check(token_count query_rows, std::int64_t pairs, int heads, int head_dim) const {
    check_rows(query_rows);
    ZEPPELIN_EXPECTS(pairs >= 0, "pair counts must be non-negative", {{"pairs", double(pairs)}});
    ZEPPELIN_EXPECTS(pairs == 0 || query_rows > 0, "pairs without query rows",
                     {{"query_rows", double(query_rows)}, {"pairs", double(pairs)}});
    ZEPPELIN_EXPECTS(heads >= 1 && head_dim >= 1, "heads and head_dim must be positive",
                     {{"heads", double(heads)}, {"head_dim", double(head_dim)}});
  }
};

//! An attention-time model: seconds of one forward / backward attention call from its query
//! rows, unmasked pairs, query heads and head dim.
template <class T>
concept attention_cost_model = requires(const T& m, token_count rows, std::int64_t pairs, int heads, int head_dim) {
  { m.forward_seconds(rows, pairs, heads, head_dim) } -> std::convertible_to<double>;
  { m.backward_seconds(rows, pairs, heads, head_dim) } -> std::convertible_to<double>;
};
static_assert(attention_cost_model<attention_time_model>);

ZEPPELIN_NAMESPACE_END
