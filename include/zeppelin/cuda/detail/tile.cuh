// zeppelin/cuda/detail/tile.cuh
// Tile movement shared by the attention kernels: `Rows` x `Cols` 16-bit elements from global
// rows (`row_stride` elements apart) into shared memory rows of `SmemStride` elements with
// cp.async, 16 bytes per thread and step; rows >= valid_rows are zero-filled.
// SmemStride = Cols + 8 (16 bytes of padding) keeps ldmatrix's eight 16-byte row reads of a
// warp-quarter in distinct bank groups (row pitch 144 or 272 bytes).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/detail/mma.cuh>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device::detail {

#if defined(__CUDACC__)
template <int Rows, int Cols, int SmemStride, int Threads, class E>
__device__ __forceinline__ void load_tile_async(E* smem, const E* global, std::int64_t row_stride, int valid_rows) {
  static_assert(Cols % 8 == 0, "rows are copied in 16-byte chunks");
  constexpr int chunks_per_row = Cols / 8;
  constexpr int chunks = Rows * chunks_per_row;
#pragma unroll
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += Threads) {
    const int r = c / chunks_per_row;
    const int col = (c % chunks_per_row) * 8;
    const bool valid = r < valid_rows;
    const E* src = valid ? global + r * row_stride + col : global;
    cp_async_16(smem + r * SmemStride + col, src, valid);
  }
}
#endif

}  // namespace device::detail
ZEPPELIN_NAMESPACE_END
