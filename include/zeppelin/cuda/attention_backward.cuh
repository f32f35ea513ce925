// zeppelin/cuda/attention_backward.cuh
// Varlen attention backward (FlashAttention-2 algorithm) with tensor-core MMA, sm_80+.
// In:  attention_backward_params (attention_params.hpp): Q, K, V, dO (bf16 | fp16), the GLOBAL
//      LSE (natural log) and delta = rowsum(dO * O) from attention_backward_preprocess.
// Out: dq_accum += scale * dS K (fp32, atomicAdd), dk_accum += scale * dS^T Q and
//      dv_accum += P^T dO (fp32, exclusive read-modify-write), and/or dk, dv in the dtype.
// Preprocess: one warp per (row, head), 16-byte loads, delta[h][row] = sum_d dO * O.
// Main kernel: one CTA of 8 warps per (128-key tile, KV head, block), started longest-first
// (detail/tile_order.cuh): every KV head's and block's first key tile (under a causal mask the
// one every query tile sees), then every second, and so on. The CTA walks every query head of
// its GQA group and every 64-query tile that can see its keys (causal: from the first query
// whose position reaches the tile's first key), so it owns its keys' dK / dV exclusively. Warp w
// owns keys 16w..16w+15 and holds their dK and dV accumulators (16 x D fp32 each) in registers for
// the whole walk. Per step (query head, 64-query tile):
//   S^T = K Q^T -> P^T = exp2(S^T * scale * log2 e - LSE * log2 e)   (masked -> 0, fp32)
//   dV += P^T dO;  dP^T = V dO^T;  dS^T = P^T (dP^T - delta)          (all per warp, registers)
//   dS^T -> shared memory;  dK += dS^T Q;  dQ = dS K, each warp 16 query rows x D/2 columns
//   over the CTA's 128 keys (each dS^T fragment loaded once for all of the warp's columns)
//   -> atomicAdd (8-byte reductions on sm_90)
// Pipeline: Q / dO / LSE / delta are double-buffered. Right after the barrier that publishes
// step s, the CTA issues the cp.async copies of step s + 1's Q and dO into the other buffer and
// the global loads of its LSE and delta into registers (stored, as LSE * log2 e with -inf -> +inf
// and +inf / 0 past the last query, before the mid-step barrier), so the copies overlap all of
// step s. Two barriers per step: the top one (step data visible; the other buffer and dS^T
// free) and the mid one (dS^T complete for dQ).
// Shared memory: K, V tiles of 128 rows and 2 x (Q, dO) tiles of 64 rows, all of D + 8
// columns; dS^T 128 x 72; 2 x (LSE, delta) of 64 floats (155 KiB for D = 128, under the
// 163 KiB of sm_80; 91 KiB for D = 64). 128 keys per CTA halve the dQ reductions and the
// Q / dO loads per FLOP of 64 (the FlashAttention-2 tiling).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/attention_params.hpp>
#include <zeppelin/cuda/detail/block_info.cuh>
#include <zeppelin/cuda/detail/dynamic_smem_launch.hpp>
#include <zeppelin/cuda/detail/mma.cuh>
#include <zeppelin/cuda/detail/tile.cuh>
#include <zeppelin/cuda/detail/tile_order.cuh>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
namespace detail {

template <int HeadDim>
struct backward_traits {
  static constexpr int block_m = 64;   // query rows per step of the walk
  static constexpr int block_n = 128;  // keys per CTA (16 per warp)
  static constexpr int warps = block_n / 16;
  static constexpr int threads = warps * 32;
  // dQ of a step: warp w computes query rows 16 (w % dq_row_blocks) .. + 15 of the tile over
  // the columns of column group w / dq_row_blocks
  static constexpr int dq_row_blocks = block_m / 16;
  static constexpr int dq_col_groups = warps / dq_row_blocks;
  static_assert(warps % dq_row_blocks == 0 && (HeadDim / 16) % dq_col_groups == 0, "dQ split over the warps");
  static constexpr int smem_stride = HeadDim + 8;
  static constexpr int ds_stride = block_m + 8;
  static constexpr int stages = 2;  // Q / dO / LSE / delta buffers: step s + 1 loads during step s
  static constexpr std::size_t smem_bytes = std::size_t{2 * block_n + stages * 2 * block_m} * smem_stride * 2 +
                                            std::size_t{block_n} * ds_stride * 2 + std::size_t{stages} * 2 * block_m * sizeof(float);
};

inline constexpr float bwd_log2e = 1.4426950408889634f;

template <dtype T>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(256) attention_backward_preprocess_kernel(const attention_preprocess_params p) {
  using E = cuda_type_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t pairs = p.rows * p.heads;
  const std::int64_t stride = p.delta_stride != 0 ? p.delta_stride : p.rows;
  const std::int64_t warps_total = std::int64_t{gridDim.x} * (blockDim.x / 32);
  for (std::int64_t pair = std::int64_t{blockIdx.x} * (blockDim.x / 32) + threadIdx.x / 32; pair < pairs; pair += warps_total) {
    const std::int64_t row = pair / p.heads;
    const int h = static_cast<int>(pair % p.heads);
    const E* o = static_cast<const E*>(p.o) + pair * p.head_dim;
    const E* d_o = static_cast<const E*>(p.dout) + pair * p.head_dim;
    float sum = 0.0f;
    for (int c = lane * 8; c < p.head_dim; c += 32 * 8) {
      const uint4 ov = *reinterpret_cast<const uint4*>(o + c);
      const uint4 dv = *reinterpret_cast<const uint4*>(d_o + c);
      const E* oe = reinterpret_cast<const E*>(&ov);
      const E* de = reinterpret_cast<const E*>(&dv);
#pragma unroll
      for (int i = 0; i < 8; ++i) sum = fmaf(to_float<T>(oe[i]), to_float<T>(de[i]), sum);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) p.delta[std::int64_t{h} * stride + row] = sum;
  }
}

template <dtype T, int D>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(backward_traits<D>::threads)
    attention_backward_kernel(const attention_backward_params p, const int first_rank) {
  using traits = backward_traits<D>;
  using E = cuda_type_t<T>;
  constexpr int BM = traits::block_m;
  constexpr int BN = traits::block_n;
  constexpr int S = traits::smem_stride;
  constexpr int SD = traits::ds_stride;
  constexpr int threads = traits::threads;
  constexpr int stages = traits::stages;
  static_assert(stages == 2, "the walk alternates between two Q / dO buffers");
  static_assert(BM <= threads, "one thread per query row loads LSE and delta");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* sk = reinterpret_cast<E*>(smem_raw);
  E* sv = sk + BN * S;
  E* sqdo = sv + BN * S;                                 // [stage][Q | dO][BM][S]
  E* sds = sqdo + stages * 2 * BM * S;                   // dS^T [key][query]
  float* s_lse = reinterpret_cast<float*>(sds + BN * SD);  // [stage][BM], LSE * log2 e; +inf = row contributes nothing
  float* s_delta = s_lse + stages * BM;                  // [stage][BM]

  const int kvh = static_cast<int>(blockIdx.x);
  const block_info blk = load_block_info(p.cu_seqlens_q, p.cu_seqlens_k, p.q_offset, p.k_offset, p.masks, p.mask,
                                         static_cast<int>(blockIdx.y));
  const int n0 = tile_rank_of(first_rank) * BN;  // rank 0: the first key tile (the longest causal walk)
  if (n0 >= blk.k_len) return;
  const int keys = min(BN, blk.k_len - n0);
  const int group = p.heads / p.kv_heads;
  const bool causal = blk.mask == block_mask::causal;

  // Query tiles [m_lo, m_hi) can see some key of this tile.
  int m_lo = 0;
  int m_hi = 0;
  if (blk.mask != block_mask::none) {
    m_hi = (blk.q_len + BM - 1) / BM;
    if (causal) {
      const int first_query = max(0, n0 - blk.delta);
      m_lo = first_query >= blk.q_len ? m_hi : first_query / BM;
    }
  }
  const int tiles_per_head = m_hi - m_lo;
  const int steps = tiles_per_head * group;

  const std::int64_t q_row_stride = std::int64_t{p.heads} * D;
  const std::int64_t kv_row_stride = std::int64_t{p.kv_heads} * D;
  const std::int64_t lse_stride = p.lse_stride != 0 ? p.lse_stride : p.total_q;
  const std::int64_t kv_offset = (std::int64_t{blk.k_begin} + n0) * kv_row_stride + std::int64_t{kvh} * D;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane >> 2;
  const int t = lane & 3;
  const float scale_log2 = p.softmax_scale * bwd_log2e;

  // Walk step -> (query head, first query row of the tile).
  auto head_of = [&](int step) { return kvh * group + step / tiles_per_head; };
  auto m0_of = [&](int step) { return (m_lo + step % tiles_per_head) * BM; };

  // Q and dO of walk step `step` -> buffer `stage` (cp.async, one committed group).
  auto fetch_tiles = [&](int step, int stage) {
    const int h = head_of(step);
    const int m0 = m0_of(step);
    const int rows = min(BM, blk.q_len - m0);
    const std::int64_t q_offset = (std::int64_t{blk.q_begin} + m0) * q_row_stride + std::int64_t{h} * D;
    E* sq = sqdo + stage * 2 * BM * S;
    load_tile_async<BM, D, S, threads>(sq, static_cast<const E*>(p.q) + q_offset, q_row_stride, rows);
    load_tile_async<BM, D, S, threads>(sq + BM * S, static_cast<const E*>(p.dout) + q_offset, q_row_stride, rows);
    cp_async_commit();
  };
  // Raw LSE and delta of query row `tid` of walk step `step` (threads tid < BM); rows past the
  // end read as LSE = +inf, delta = 0.
  auto load_stats = [&](int step, float& lse, float& delta) {
    lse = INFINITY;
    delta = 0.0f;
    const int m0 = m0_of(step);
    if (tid < BM && m0 + tid < blk.q_len) {
      const std::int64_t at = std::int64_t{head_of(step)} * lse_stride + blk.q_begin + m0 + tid;
      lse = p.lse[at];
      delta = p.delta[at];
    }
  };
  auto store_stats = [&](int stage, float lse, float delta) {
    if (tid < BM) {
      s_lse[stage * BM + tid] = lse == -INFINITY ? INFINITY : lse * bwd_log2e;  // a row that saw no key has P = 0
      s_delta[stage * BM + tid] = delta;
    }
  };

  load_tile_async<BN, D, S, threads>(sk, static_cast<const E*>(p.k) + kv_offset, kv_row_stride, keys);
  load_tile_async<BN, D, S, threads>(sv, static_cast<const E*>(p.v) + kv_offset, kv_row_stride, keys);
  cp_async_commit();
  if (steps > 0) {
    fetch_tiles(0, 0);
    float lse, delta;
    load_stats(0, lse, delta);
    store_stats(0, lse, delta);
  }

  float dk[D / 8][4];
  float dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
  }

  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const int h = head_of(step);
    const int m0 = m0_of(step);
    const E* sq = sqdo + stage * 2 * BM * S;
    const E* sdo = sq + BM * S;
    const float* lse_s = s_lse + stage * BM;
    const float* delta_s = s_delta + stage * BM;
    cp_async_wait<0>();
    // Q, dO, LSE, delta of this step are visible; every warp is done with the last step (its
    // buffer, the other stage, and dS^T are free).
    __syncthreads();

    // Prefetch the next step into the other stage: the copies overlap this whole step. LSE and
    // delta travel in registers and are stored before the mid-step barrier.
    const bool has_next = step + 1 < steps;
    float next_lse = INFINITY;
    float next_delta = 0.0f;
    if (has_next) {
      fetch_tiles(step + 1, stage ^ 1);
      load_stats(step + 1, next_lse, next_delta);
    }

    // S^T = K Q^T for this warp's 16 keys x BM queries.
    float pt[BM / 8][4];
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) pt[j][0] = pt[j][1] = pt[j][2] = pt[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t a[4];
      ldmatrix_x4(a, sk + (warp * 16 + (lane & 15)) * S + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int np = 0; np < BM / 16; ++np) {
        std::uint32_t r[4];
        ldmatrix_x4(r, sq + (np * 16 + (lane & 7) + (lane >> 4) * 8) * S + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_16816<T>(pt[2 * np], a, r[0], r[1]);
        mma_16816<T>(pt[2 * np + 1], a, r[2], r[3]);
      }
    }

    // P^T from the global LSE; masked pairs -> 0. Element (j, e): key row warp*16 + g + 8*(e/2),
    // query column 8j + 2t + e%2 (tile-local).
    const int warp_key0 = n0 + warp * 16;
    const bool need_mask = warp_key0 + 16 > blk.k_len || (causal && warp_key0 + 15 > m0 + blk.delta);
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = warp_key0 + g + (e >> 1) * 8;
        const int query = m0 + j * 8 + 2 * t + (e & 1);
        float value = exp2f(fmaf(pt[j][e], scale_log2, -lse_s[j * 8 + 2 * t + (e & 1)]));
        if (need_mask && (key >= blk.k_len || (causal && key > query + blk.delta))) value = 0.0f;
        pt[j][e] = value;
      }
    }

    // dV += P^T dO.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      const std::uint32_t a[4] = {pack2<T>(pt[2 * kk][0], pt[2 * kk][1]), pack2<T>(pt[2 * kk][2], pt[2 * kk][3]),
                                  pack2<T>(pt[2 * kk + 1][0], pt[2 * kk + 1][1]), pack2<T>(pt[2 * kk + 1][2], pt[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        std::uint32_t r[4];
        ldmatrix_x4_trans(r, sdo + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + dp * 16 + (lane >> 4) * 8);
        mma_16816<T>(dv[2 * dp], a, r[0], r[1]);
        mma_16816<T>(dv[2 * dp + 1], a, r[2], r[3]);
      }
    }

    // dP^T = V dO^T, then dS^T = P^T (dP^T - delta) in place of P^T (fp32 P, as in FlashAttention-2).
    {
      float dpt[BM / 8][4];
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) dpt[j][0] = dpt[j][1] = dpt[j][2] = dpt[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        std::uint32_t a[4];
        ldmatrix_x4(a, sv + (warp * 16 + (lane & 15)) * S + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < BM / 16; ++np) {
          std::uint32_t r[4];
          ldmatrix_x4(r, sdo + (np * 16 + (lane & 7) + (lane >> 4) * 8) * S + kk * 16 + ((lane >> 3) & 1) * 8);
          mma_16816<T>(dpt[2 * np], a, r[0], r[1]);
          mma_16816<T>(dpt[2 * np + 1], a, r[2], r[3]);
        }
      }
#pragma unroll
      for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) pt[j][e] = pt[j][e] * (dpt[j][e] - delta_s[j * 8 + 2 * t + (e & 1)]);
      }
    }

    // dS^T -> shared memory (for dQ), then dK += dS^T Q.
#pragma unroll
    for (int j = 0; j < BM / 8; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<std::uint32_t*>(sds + (warp * 16 + g + r * 8) * SD + j * 8 + 2 * t) =
            pack2<T>(pt[j][2 * r], pt[j][2 * r + 1]);
    }
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      const std::uint32_t a[4] = {pack2<T>(pt[2 * kk][0], pt[2 * kk][1]), pack2<T>(pt[2 * kk][2], pt[2 * kk][3]),
                                  pack2<T>(pt[2 * kk + 1][0], pt[2 * kk + 1][1]), pack2<T>(pt[2 * kk + 1][2], pt[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        std::uint32_t r[4];
        ldmatrix_x4_trans(r, sq + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + dp * 16 + (lane >> 4) * 8);
        mma_16816<T>(dk[2 * dp], a, r[0], r[1]);
        mma_16816<T>(dk[2 * dp + 1], a, r[2], r[3]);
      }
    }

    // The next step's LSE and delta -> the other stage (read only after the next top barrier).
    if (has_next) store_stats(stage ^ 1, next_lse, next_delta);
    __syncthreads();  // dS^T is complete

    // dQ rows 16b..16b+15 of the tile (b = warp % dq_row_blocks) = dS (16 x BN, from dS^T)
    // K (BN x D), over this warp's column group: each dS fragment is loaded once and feeds all
    // of the group's 16-column blocks.
    constexpr int dq_steps = D / 16 / traits::dq_col_groups;
    const int row_block = warp % traits::dq_row_blocks;
    const int dp0 = warp / traits::dq_row_blocks * dq_steps;
    float acc[dq_steps][2][4];
#pragma unroll
    for (int s = 0; s < dq_steps; ++s) {
#pragma unroll
      for (int half = 0; half < 2; ++half) acc[s][half][0] = acc[s][half][1] = acc[s][half][2] = acc[s][half][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      std::uint32_t a[4];
      ldmatrix_x4_trans(a, sds + (kk * 16 + (lane & 7) + (lane >> 4) * 8) * SD + row_block * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int s = 0; s < dq_steps; ++s) {
        std::uint32_t r[4];
        ldmatrix_x4_trans(r, sk + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + (dp0 + s) * 16 + (lane >> 4) * 8);
        mma_16816<T>(acc[s][0], a, r[0], r[1]);
        mma_16816<T>(acc[s][1], a, r[2], r[3]);
      }
    }
    const int q_row0 = m0 + row_block * 16 + g;
    float* dq_base = p.dq_accum + (std::int64_t{blk.q_begin} + q_row0) * q_row_stride + std::int64_t{h} * D;
#pragma unroll
    for (int s = 0; s < dq_steps; ++s) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int col = (dp0 + s) * 16 + half * 8 + 2 * t;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if (q_row0 + r * 8 >= blk.q_len) continue;
          float* at = dq_base + std::int64_t{r * 8} * q_row_stride + col;
          const float x = acc[s][half][2 * r] * p.softmax_scale, y = acc[s][half][2 * r + 1] * p.softmax_scale;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
          atomicAdd(reinterpret_cast<float2*>(at), make_float2(x, y));  // one 8-byte reduction (sm_90+)
#else
          atomicAdd(at, x);
          atomicAdd(at + 1, y);
#endif
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: this warp's 16 keys of dK (scaled) and dV.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = n0 + warp * 16 + g + r * 8;
    if (key >= blk.k_len) continue;
    const std::int64_t base = (std::int64_t{blk.k_begin} + key) * kv_row_stride + std::int64_t{kvh} * D;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      const int col = d * 8 + 2 * t;
      const float k0 = dk[d][2 * r] * p.softmax_scale;
      const float k1 = dk[d][2 * r + 1] * p.softmax_scale;
      const float v0 = dv[d][2 * r];
      const float v1 = dv[d][2 * r + 1];
      if (p.dk_accum != nullptr) {
        float2* at = reinterpret_cast<float2*>(p.dk_accum + base + col);
        const float2 old = *at;
        *at = make_float2(old.x + k0, old.y + k1);
      }
      if (p.dv_accum != nullptr) {
        float2* at = reinterpret_cast<float2*>(p.dv_accum + base + col);
        const float2 old = *at;
        *at = make_float2(old.x + v0, old.y + v1);
      }
      if (p.dk != nullptr) *reinterpret_cast<std::uint32_t*>(static_cast<E*>(p.dk) + base + col) = pack2<T>(k0, k1);
      if (p.dv != nullptr) *reinterpret_cast<std::uint32_t*>(static_cast<E*>(p.dv) + base + col) = pack2<T>(v0, v1);
    }
  }
}

}  // namespace detail

template <dtype T>
cudaError_t launch_attention_backward_preprocess(const attention_preprocess_params& p, cudaStream_t stream) {
  static_assert(T == dtype::bf16 || T == dtype::fp16, "attention_backward_preprocess: bf16 or fp16");
  const std::int64_t pairs = p.rows * p.heads;
  if (pairs == 0) return cudaSuccess;
  constexpr int threads = 256;
  constexpr std::int64_t warps_per_block = threads / 32;
  const std::int64_t blocks = (pairs + warps_per_block - 1) / warps_per_block;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 * 16 ? blocks : 65536 * 16);  // grid-stride beyond
  detail::attention_backward_preprocess_kernel<T><<<grid, threads, 0, stream>>>(p);
  return cudaGetLastError();
}

template <dtype T, int HeadDim>
cudaError_t launch_attention_backward(const attention_backward_params& p, cudaStream_t stream) {
  static_assert(is_supported_attention_config<T, HeadDim>, "attention_backward: no kernel for this (dtype, head dim)");
  using traits = detail::backward_traits<HeadDim>;
  if (p.num_blocks == 0 || p.max_seqlen_k == 0) return cudaSuccess;
  auto* kernel = &detail::attention_backward_kernel<T, HeadDim>;
  static detail::raised_devices raised{0};
  return detail::for_tile_launches((p.max_seqlen_k + traits::block_n - 1) / traits::block_n, [&](int first_rank, int ranks) {
    const dim3 grid = detail::tile_grid(p.kv_heads, p.num_blocks, ranks);
    return detail::launch_with_dynamic_smem(raised, kernel, traits::smem_bytes,
                                            [&] { kernel<<<grid, traits::threads, traits::smem_bytes, stream>>>(p, first_rank); });
  });
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
