// zeppelin/cuda/attention_forward.cuh
// Varlen attention forward (FlashAttention-2 algorithm) with tensor-core MMA, sm_80+.
// In:  attention_forward_params (attention_params.hpp): Q [total_q][heads][D], K/V
//      [total_k][kv_heads][D] (bf16 | fp16), CSR blocks with positions and masks.
// Out: O [total_q][heads][D] (input dtype and/or fp32), LSE [heads][lse_stride] (natural log).
// Work decomposition (the FlashAttention-2 tiling): one CTA of 4 warps per (128-query tile,
// head, block), two CTAs per SM, started longest-first (detail/tile_order.cuh): the last query
// tile (counted from max_seqlen_q: the longest causal rows) of every head and block, then the
// second-to-last, and so on. Warp w owns query rows
// 32w..32w+31 as two m16 atoms, so every K or V fragment read from shared memory feeds two
// MMAs; its O accumulator (32 x D fp32) stays in registers, and its Q fragments are re-read
// from shared memory per K tile (registers hold the two atoms' O and S instead). K/V tiles of
// 64 keys are streamed through shared memory with cp.async: V_j loads during S = Q K_j^T,
// K_{j+1} during the softmax and O += P V_j. S and P stay in registers (the S accumulator
// fragment is the A fragment of P V). Online softmax in fp32 with the SFU's exp2 and
// scale * log2(e); LSE is written in natural log: (m * scale * log2 e + log2 l) * ln 2. The
// epilogue stages O in the dtype through the Q tile's shared memory, so that every thread
// stores 16 contiguous bytes (o 16-byte aligned, o_f32 8-byte aligned). Shared memory:
// (128 + 2 * 64) rows of D + 8 elements (69.6 KB for D = 128, 36.9 KB for D = 64).
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
struct forward_traits {
  static constexpr int block_m = 128;  // query rows per CTA: K/V tiles are reused by 128 rows
  static constexpr int block_n = 64;   // keys per K/V tile
  static constexpr int warp_rows = 32;  // query rows per warp: two m16 atoms share each K / V fragment
  static constexpr int atoms = warp_rows / 16;
  static constexpr int warps = block_m / warp_rows;
  static constexpr int threads = warps * 32;
  static constexpr int min_ctas_per_sm = 2;  // 4 warps each; registers allow two CTAs
  static constexpr int smem_stride = HeadDim + 8;
  static constexpr std::size_t smem_bytes = std::size_t{block_m + 2 * block_n} * smem_stride * 2;
};

inline constexpr float log2e = 1.4426950408889634f;
inline constexpr float ln2 = 0.6931471805599453f;

template <dtype T, int D>
__global__ ZEPPELIN_HIDDEN void __launch_bounds__(forward_traits<D>::threads, forward_traits<D>::min_ctas_per_sm)
    attention_forward_kernel(const attention_forward_params p, const int first_rank) {
  using traits = forward_traits<D>;
  using E = cuda_type_t<T>;
  constexpr int BM = traits::block_m;
  constexpr int BN = traits::block_n;
  constexpr int S = traits::smem_stride;
  constexpr int MI = traits::atoms;
  constexpr int threads = traits::threads;

  extern __shared__ __align__(16) unsigned char smem_raw[];
  E* sq = reinterpret_cast<E*>(smem_raw);
  E* sk = sq + BM * S;
  E* sv = sk + BN * S;

  const int h = static_cast<int>(blockIdx.x);
  const block_info blk = load_block_info(p.cu_seqlens_q, p.cu_seqlens_k, p.q_offset, p.k_offset, p.masks, p.mask,
                                         static_cast<int>(blockIdx.y));
  // rank 0: the launch's last query tile (the longest causal rows of the longest blocks)
  const int m0 = ((p.max_seqlen_q + BM - 1) / BM - 1 - tile_rank_of(first_rank)) * BM;
  if (m0 >= blk.q_len) return;
  const int rows = min(BM, blk.q_len - m0);
  const int kvh = h / (p.heads / p.kv_heads);

  // Keys [0, k_end) can be visible to some query of the tile.
  int k_end = 0;
  if (blk.mask == block_mask::full) {
    k_end = blk.k_len;
  } else if (blk.mask == block_mask::causal) {
    k_end = max(0, min(blk.k_len, m0 + rows - 1 + blk.delta + 1));
  }
  const int n_tiles = (k_end + BN - 1) / BN;

  const std::int64_t q_row_stride = std::int64_t{p.heads} * D;
  const std::int64_t kv_row_stride = std::int64_t{p.kv_heads} * D;
  const E* q_base = static_cast<const E*>(p.q) + (std::int64_t{blk.q_begin} + m0) * q_row_stride + std::int64_t{h} * D;
  const E* k_base = static_cast<const E*>(p.k) + std::int64_t{blk.k_begin} * kv_row_stride + std::int64_t{kvh} * D;
  const E* v_base = static_cast<const E*>(p.v) + std::int64_t{blk.k_begin} * kv_row_stride + std::int64_t{kvh} * D;

  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane >> 2;
  const int t = lane & 3;
  const float scale_log2 = p.softmax_scale * log2e;
  const int warp_row0 = m0 + warp * traits::warp_rows;
  const bool causal = blk.mask == block_mask::causal;
  // This lane's ldmatrix row addresses (bytes, shared state space) at fragment (0, 0) of the
  // warp's Q rows, of K (non-transposed B) and of V (transposed B).
  constexpr int row_bytes = S * 2;
  const std::uint32_t q_frag = smem_address(sq) + ((warp * traits::warp_rows + (lane & 15)) * S + (lane >> 4) * 8) * 2;
  const std::uint32_t k_frag = smem_address(sk) + (((lane & 7) + (lane >> 4) * 8) * S + ((lane >> 3) & 1) * 8) * 2;
  const std::uint32_t v_frag = smem_address(sv) + (((lane & 7) + ((lane >> 3) & 1) * 8) * S + (lane >> 4) * 8) * 2;

  // Atom i of the warp covers query rows warp_row0 + 16 i + g (r = 0) and + 8 (r = 1).
  float o[MI][D / 8][4];
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int d = 0; d < D / 8; ++d) o[i][d][0] = o[i][d][1] = o[i][d][2] = o[i][d][3] = 0.0f;
  }
  float row_max[MI][2];
  float row_sum[MI][2];
#pragma unroll
  for (int i = 0; i < MI; ++i) row_max[i][0] = row_max[i][1] = -INFINITY, row_sum[i][0] = row_sum[i][1] = 0.0f;

  if (n_tiles > 0) {
    load_tile_async<BM, D, S, threads>(sq, q_base, q_row_stride, rows);
    load_tile_async<BN, D, S, threads>(sk, k_base, kv_row_stride, min(BN, blk.k_len));
  }
  cp_async_commit();

  for (int n = 0; n < n_tiles; ++n) {
    const int n0 = n * BN;
    __syncthreads();  // every warp is done reading sv (previous P V)
    load_tile_async<BN, D, S, threads>(sv, v_base + n0 * kv_row_stride, kv_row_stride, min(BN, blk.k_len - n0));
    cp_async_commit();
    cp_async_wait<1>();  // Q and K_n have landed (V_n may still be in flight)
    __syncthreads();

    // S = Q K_n^T: each K fragment feeds both atoms; Q fragments come from shared memory
    // (keeping them in registers would leave no room for the two atoms' O accumulators).
    float s[MI][BN / 8][4];
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) s[i][j][0] = s[i][j][1] = s[i][j][2] = s[i][j][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t qf[MI][4];
#pragma unroll
      for (int i = 0; i < MI; ++i)
        ldmatrix_x4(qf[i], q_frag + i * 16 * row_bytes + kk * 32);
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        std::uint32_t r[4];
        ldmatrix_x4(r, k_frag + np * 16 * row_bytes + kk * 32);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          mma_16816<T>(s[i][2 * np], qf[i], r[0], r[1]);
          mma_16816<T>(s[i][2 * np + 1], qf[i], r[2], r[3]);
        }
      }
    }

    __syncthreads();  // every warp is done reading sk
    if (n + 1 < n_tiles)
      load_tile_async<BN, D, S, threads>(sk, k_base + (n0 + BN) * kv_row_stride, kv_row_stride, min(BN, blk.k_len - n0 - BN));
    cp_async_commit();  // possibly empty: keeps the group count uniform

#pragma unroll
    for (int i = 0; i < MI; ++i) {
      // Mask: keys past the block, and (causal) keys after the query. Warp-uniform test.
      const int atom_row0 = warp_row0 + i * 16;
      if (n0 + BN > blk.k_len || (causal && n0 + BN - 1 > atom_row0 + blk.delta)) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = atom_row0 + g + (e >> 1) * 8;
            const int col = n0 + j * 8 + 2 * t + (e & 1);
            if (col >= blk.k_len || (causal && col > row + blk.delta)) s[i][j][e] = -INFINITY;
          }
        }
      }

      // Online softmax over rows g (r = 0) and g + 8 (r = 1) of the atom.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[i][r];
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) mx = fmaxf(mx, fmaxf(s[i][j][2 * r], s[i][j][2 * r + 1]));
        mx = quad_max(mx);
        const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
        const float correction = exp2_approx(row_max[i][r] * scale_log2 - m_scaled);
        row_max[i][r] = mx;
        row_sum[i][r] *= correction;
#pragma unroll
        for (int d = 0; d < D / 8; ++d) {
          o[i][d][2 * r] *= correction;
          o[i][d][2 * r + 1] *= correction;
        }
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
          s[i][j][2 * r] = exp2_approx(fmaf(s[i][j][2 * r], scale_log2, -m_scaled));
          s[i][j][2 * r + 1] = exp2_approx(fmaf(s[i][j][2 * r + 1], scale_log2, -m_scaled));
          row_sum[i][r] += s[i][j][2 * r] + s[i][j][2 * r + 1];
        }
      }
    }

    cp_async_wait<1>();  // V_n has landed (K_{n+1} may still be in flight)
    __syncthreads();

    // O += P V_n: the S accumulator fragment is the A fragment of P; each V fragment feeds
    // both atoms.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      std::uint32_t a[MI][4];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        a[i][0] = pack2<T>(s[i][2 * kk][0], s[i][2 * kk][1]);
        a[i][1] = pack2<T>(s[i][2 * kk][2], s[i][2 * kk][3]);
        a[i][2] = pack2<T>(s[i][2 * kk + 1][0], s[i][2 * kk + 1][1]);
        a[i][3] = pack2<T>(s[i][2 * kk + 1][2], s[i][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < D / 16; ++dp) {
        std::uint32_t r[4];
        ldmatrix_x4_trans(r, v_frag + kk * 16 * row_bytes + dp * 32);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
          mma_16816<T>(o[i][2 * dp], a[i], r[0], r[1]);
          mma_16816<T>(o[i][2 * dp + 1], a[i], r[2], r[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  // Epilogue: normalise; O in the input dtype goes through shared memory (the Q tile, no
  // longer read) so that each thread stores 16 contiguous bytes; fp32 O and LSE go directly.
  const std::int64_t lse_stride = p.lse_stride != 0 ? p.lse_stride : p.total_q;
  __syncthreads();  // every warp is done reading sq and sv
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float l = quad_sum(row_sum[i][r]);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int tile_row = warp * traits::warp_rows + i * 16 + g + r * 8;
      const int row = m0 + tile_row;
      const std::int64_t token = std::int64_t{blk.q_begin} + row;
      const bool inside = row < blk.q_len;
#pragma unroll
      for (int d = 0; d < D / 8; ++d) {
        const int col = d * 8 + 2 * t;
        const float v0 = o[i][d][2 * r] * inv;
        const float v1 = o[i][d][2 * r + 1] * inv;
        *reinterpret_cast<std::uint32_t*>(sq + tile_row * S + col) = pack2<T>(v0, v1);
        if (p.o_f32 != nullptr && inside)
          *reinterpret_cast<float2*>(p.o_f32 + (token * p.heads + h) * D + col) = make_float2(v0, v1);
      }
      if (p.lse != nullptr && t == 0 && inside)
        p.lse[std::int64_t{h} * lse_stride + token] = l > 0.0f ? (row_max[i][r] * scale_log2 + log2f(l)) * ln2 : -INFINITY;
    }
  }
  if (p.o != nullptr) {
    __syncthreads();  // the O tile is complete in sq
    constexpr int chunks_per_row = D / 8;
    E* o_base = static_cast<E*>(p.o) + (std::int64_t{blk.q_begin} + m0) * q_row_stride + std::int64_t{h} * D;
#pragma unroll
    for (int c = static_cast<int>(threadIdx.x); c < BM * chunks_per_row; c += threads) {
      const int row = c / chunks_per_row;
      const int col = (c % chunks_per_row) * 8;
      if (row < rows) *reinterpret_cast<uint4*>(o_base + row * q_row_stride + col) = *reinterpret_cast<const uint4*>(sq + row * S + col);
    }
  }
}

}  // namespace detail

template <dtype T, int HeadDim>
cudaError_t launch_attention_forward(const attention_forward_params& p, cudaStream_t stream) {
  static_assert(is_supported_attention_config<T, HeadDim>, "attention_forward: no kernel for this (dtype, head dim)");
  using traits = detail::forward_traits<HeadDim>;
  if (p.num_blocks == 0 || p.max_seqlen_q == 0) return cudaSuccess;
  auto* kernel = &detail::attention_forward_kernel<T, HeadDim>;
  static detail::raised_devices raised{0};
  return detail::for_tile_launches((p.max_seqlen_q + traits::block_m - 1) / traits::block_m, [&](int first_rank, int ranks) {
    const dim3 grid = detail::tile_grid(p.heads, p.num_blocks, ranks);
    return detail::launch_with_dynamic_smem(raised, kernel, traits::smem_bytes,
                                            [&] { kernel<<<grid, traits::threads, traits::smem_bytes, stream>>>(p, first_rank); });
  });
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
