// zeppelin/cuda/cast.hpp
// fp32 -> bf16 / fp16 conversion of a device array (e.g. dq_accum -> dQ after the last ring
// round, or an fp32 merged output -> O). In: src[n] fp32; out: dst[n] in `type`, round to
// nearest even. Definition in cast.cuh (grid-stride, 4 elements per thread and step when
// both pointers allow 16 / 8-byte accesses); instantiated in zeppelin::kernels.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/dtype.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

template <dtype T>
cudaError_t launch_cast_from_f32(void* dst, const float* src, std::int64_t n, cudaStream_t stream);

//! dst[i] = (type) src[i] for i < n; cudaErrorInvalidValue for null pointers or n < 0.
inline cudaError_t cast_from_f32(void* dst, const float* src, std::int64_t n, dtype type, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (dst == nullptr || src == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  switch (type) {
    case dtype::bf16: return launch_cast_from_f32<dtype::bf16>(dst, src, n, stream);
    case dtype::fp16: return launch_cast_from_f32<dtype::fp16>(dst, src, n, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
