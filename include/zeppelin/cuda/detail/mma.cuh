// zeppelin/cuda/detail/mma.cuh
// The warp-level building blocks of the attention kernels (sm_80 and newer), as inline PTX:
//   cp_async_16        16-byte global -> shared copy, zero-filled when the source is invalid
//   cp_async_commit / cp_async_wait<N>
//   ldmatrix_x4 / ldmatrix_x4_trans   four 8x8 b16 tiles from shared memory into registers
//   mma_16816<T>       D(16x8, fp32) += A(16x16, T, row) * B(16x8, T, col), T = bf16 | fp16
//   pack2<T>(a, b)     two floats -> one 32-bit register of two T (a in the low half)
//   exp2_approx(x)     2^x on the SFU
// Fragment layouts (PTX ISA, "mma.m16n8k16"), lane = 4 * g + t:
//   A: a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B: b0 = (k = 2t..2t+1, n = g), b1 = (k = 2t+8.., n = g)
//   C: c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/dtype.hpp>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device::detail {

//! The CUDA type of a dtype.
template <dtype T>
struct cuda_type;
template <>
struct cuda_type<dtype::bf16> {
  using type = __nv_bfloat16;
};
template <>
struct cuda_type<dtype::fp16> {
  using type = __half;
};
template <dtype T>
using cuda_type_t = typename cuda_type<T>::type;

#if defined(__CUDACC__)

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

//! Copies 16 bytes from `src` (global) to `dst` (shared); with `valid` false writes 16 zero
//! bytes and reads nothing (src must still be a mapped address; callers pass a base pointer).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

//! Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

//! Lanes 8i..8i+7 give the row addresses of tile i (shared-state-space addresses,
//! smem_address: one 32-bit register per lane where a generic pointer takes two, which matters
//! in kernels at the 255-register limit); register i receives tile i (lane 4g+t holds row g,
//! columns 2t, 2t+1).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) { ldmatrix_x4(r, smem_address(row)); }

//! As ldmatrix_x4, transposed: lane 4g+t holds rows 2t, 2t+1 of column g of each tile.
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  ldmatrix_x4_trans(r, smem_address(row));
}

template <dtype T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (T == dtype::bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

template <dtype T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (T == dtype::bf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

template <dtype T>
__device__ __forceinline__ float to_float(cuda_type_t<T> x) {
  if constexpr (T == dtype::bf16) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}

template <dtype T>
__device__ __forceinline__ cuda_type_t<T> from_float(float x) {
  if constexpr (T == dtype::bf16) {
    return __float2bfloat16_rn(x);
  } else {
    return __float2half_rn(x);
  }
}

//! 2^x by the SFU (ex2.approx.ftz: relative error ~2^-22, 2^-inf = +0), the softmax's exponent.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

//! Sum / max over the 4 lanes of a quad (lanes 4g .. 4g+3), the owners of one C-fragment row.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}

#endif  // __CUDACC__

}  // namespace device::detail
ZEPPELIN_NAMESPACE_END
