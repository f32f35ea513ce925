// kernels/lse_merge_cast.cu
// Explicit instantiations: LSE merge for fp32 / bf16 / fp16 partials, fp32 -> bf16 / fp16 cast.
#include <zeppelin/cuda/cast.cuh>
#include <zeppelin/cuda/lse_merge.cuh>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
template cudaError_t launch_lse_merge<partial_type::fp32>(const lse_merge_params&, cudaStream_t);
template cudaError_t launch_lse_merge<partial_type::bf16>(const lse_merge_params&, cudaStream_t);
template cudaError_t launch_lse_merge<partial_type::fp16>(const lse_merge_params&, cudaStream_t);
template cudaError_t launch_cast_from_f32<dtype::bf16>(void*, const float*, std::int64_t, cudaStream_t);
template cudaError_t launch_cast_from_f32<dtype::fp16>(void*, const float*, std::int64_t, cudaStream_t);
}  // namespace device
ZEPPELIN_NAMESPACE_END
