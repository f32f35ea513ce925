// zeppelin/cuda/detail/tile_order.cuh
// The order in which the attention kernels' CTAs start. A launch has one CTA per (tile, head,
// block); the hardware starts CTAs in linear order (blockIdx.x fastest, then y, then z), and
// each SM takes the next one as soon as it has room. With the grid (heads, blocks, tile ranks),
// every head's and block's rank-0 tile starts before any rank-1 tile, and so on; the kernels
// give rank 0 to their longest tiles under a causal mask (the forward: the launch's last query
// tile, counted from max_seqlen_q, the longest rows of its longest blocks; the backward: every
// block's first key tile), so the launch is longest-first list scheduling over the SMs, as
// FlashAttention-3's tile scheduler does for causal masks. With the tile fastest (the grid
// (tiles, heads, blocks)), the long tiles of the last heads started only after every tile of
// the heads before them, and a launch of a few waves ended on a tail of those few. What it
// costs: CTAs of one head no longer run side by side over the same rows, which shows where the
// launch is many waves long (bench/README.md, "GPU benches", has both sides).
// Head, block and rank stay special registers (blockIdx), which the compiler re-reads instead
// of keeping live; a launch of more than 65535 tile ranks (grid z) is made as several launches
// of at most 65535 ranks each, the later ones starting at `first_rank`.
//   for_tile_launches(tiles, launch)   host: launch(first_rank, ranks) per run of ranks, in order
//   tile_grid(heads, blocks, ranks)    host: the grid of one launch
//   tile_rank_of(first_rank)           device: this CTA's tile rank (head: blockIdx.x, block:
//                                      blockIdx.y)
#pragma once

#include <zeppelin/core/config.hpp>

#include <cuda_runtime.h>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device::detail {

inline constexpr int max_ranks_per_launch = 65535;

//! The grid of one launch: x heads, y blocks, z tile ranks.
inline dim3 tile_grid(int heads, int blocks, int ranks) {
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>(blocks), static_cast<unsigned>(ranks));
}

//! Calls launch(first_rank, ranks) for consecutive runs of at most max_ranks_per_launch of
//! `tiles` tile ranks; returns the first error.
template <class Launch>
cudaError_t for_tile_launches(int tiles, Launch launch) {
  for (int first = 0; first < tiles; first += max_ranks_per_launch) {
    const int ranks = tiles - first < max_ranks_per_launch ? tiles - first : max_ranks_per_launch;
    if (const cudaError_t e = launch(first, ranks); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

#if defined(__CUDACC__)
//! This CTA's tile rank (0: the longest tile of its head and block).
__device__ __forceinline__ int tile_rank_of(int first_rank) { return first_rank + static_cast<int>(blockIdx.z); }
#endif

}  // namespace device::detail
ZEPPELIN_NAMESPACE_END
