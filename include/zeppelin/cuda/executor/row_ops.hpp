// zeppelin/cuda/executor/row_ops.hpp
// The element-wise device operations the CUDA executors need besides the attention, merge,
// cast and copy kernels of cuda/:
//   fill(dst, value, n)        dst[i] = value           (e.g. LSE accumulators to -inf)
//   add(dst, src, n)           dst[i] += src[i]         (e.g. a received partial dK/dV added to
//                                                        the one computed while it travelled)
//   copy_head_block(b)         heads of rows of one buffer -> heads of rows of another
//   add_head_block(b)          the same, added (to += from)
// fill and add take fp32 arrays. A head block (the execution program's copy_heads / add_heads,
// and the layout changes of the all-to-all collective's launches) is strided on both sides:
// element (i, h, e), i < rows, h < heads, e < head_elements, is
//   from[i * from_row_stride + h * from_head_stride + e]  ->  to[i * to_row_stride + h * to_head_stride + e]
// (strides in elements of each side's type), converted through fp32 when the types differ
// (16-bit results rounded to nearest even). Row-major buffers ([rows][heads][head_elements])
// have row stride heads x head_elements and head stride head_elements; a head-major LSE
// ([heads][rows]) row stride 1 and head stride rows. The destination elements of one block
// must be distinct (true for any such layout). Definitions in row_ops.cuh (grid-stride;
// fill / add with float4 accesses when both pointers are 16-byte aligned), instantiated in
// zeppelin::kernels (kernels/executor_row_ops.cu). Every function returns cudaError_t
// (cudaErrorInvalidValue for negative counts, null pointers with work to do, an unknown
// element type) and never throws. nvcc-safe; host code.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/dtype.hpp>

#include <boost/mp11/algorithm.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

template <class T>
cudaError_t launch_fill(T* dst, T value, std::int64_t n, cudaStream_t stream);
template <class T>
cudaError_t launch_add(T* dst, const T* src, std::int64_t n, cudaStream_t stream);

//! dst[i] = value for i < n.
inline cudaError_t fill_f32(float* dst, float value, std::int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && dst == nullptr)) return cudaErrorInvalidValue;
  return n == 0 ? cudaSuccess : launch_fill<float>(dst, value, n, stream);
}

//! dst[i] += src[i] for i < n (dst and src must not overlap partially).
inline cudaError_t add_f32(float* dst, const float* src, std::int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (dst == nullptr || src == nullptr))) return cudaErrorInvalidValue;
  return n == 0 ? cudaSuccess : launch_add<float>(dst, src, n, stream);
}

//! Element type of a buffer a head block reads or writes.
enum class element_type : std::uint8_t { fp32 = 0, bf16 = 1, fp16 = 2 };
inline constexpr std::size_t element_types = 3;

[[nodiscard]] constexpr element_type element_of(dtype t) noexcept { return t == dtype::bf16 ? element_type::bf16 : element_type::fp16; }
[[nodiscard]] constexpr std::size_t size_of(element_type t) noexcept { return t == element_type::fp32 ? 4 : 2; }

//! One strided block of heads (see the file comment); `from` and `to` point at element
//! (0, 0, 0) of the block.
struct head_block {
  const void* from = nullptr;
  element_type from_type = element_type::fp32;
  std::int64_t from_row_stride = 0, from_head_stride = 0;
  void* to = nullptr;
  element_type to_type = element_type::fp32;
  std::int64_t to_row_stride = 0, to_head_stride = 0;
  std::int64_t rows = 0;
  std::int32_t heads = 0;
  std::int64_t head_elements = 0;
};

//! Kernel launcher for one (destination type, source type, add) combination (row_ops.cuh).
template <element_type To, element_type From, bool Add>
cudaError_t launch_move_heads(const head_block& b, cudaStream_t stream);

namespace detail {
template <bool Add>
cudaError_t move_heads(const head_block& b, cudaStream_t stream) {
  if (b.rows < 0 || b.heads < 0 || b.head_elements < 0) return cudaErrorInvalidValue;
  if (static_cast<std::size_t>(b.from_type) >= element_types || static_cast<std::size_t>(b.to_type) >= element_types)
    return cudaErrorInvalidValue;
  if (b.rows == 0 || b.heads == 0 || b.head_elements == 0) return cudaSuccess;
  if (b.from == nullptr || b.to == nullptr) return cudaErrorInvalidValue;
  using boost::mp11::mp_with_index;
  return mp_with_index<element_types>(static_cast<std::size_t>(b.to_type), [&](auto to) {
    return mp_with_index<element_types>(static_cast<std::size_t>(b.from_type), [&](auto from) {
      return launch_move_heads<static_cast<element_type>(decltype(to)::value), static_cast<element_type>(decltype(from)::value), Add>(
          b, stream);
    });
  });
}
}  // namespace detail

//! to(i, h, e) = from(i, h, e) over the block (see the file comment).
inline cudaError_t copy_head_block(const head_block& b, cudaStream_t stream) { return detail::move_heads<false>(b, stream); }

//! to(i, h, e) += from(i, h, e) over the block, summed in fp32.
inline cudaError_t add_head_block(const head_block& b, cudaStream_t stream) { return detail::move_heads<true>(b, stream); }

}  // namespace device
ZEPPELIN_NAMESPACE_END
