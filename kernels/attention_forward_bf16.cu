// kernels/attention_forward_bf16.cu
// Explicit instantiations: varlen attention forward, bf16 inputs, head dims 64 and 128.
#include <zeppelin/cuda/attention_forward.cuh>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
template cudaError_t launch_attention_forward<dtype::bf16, 64>(const attention_forward_params&, cudaStream_t);
template cudaError_t launch_attention_forward<dtype::bf16, 128>(const attention_forward_params&, cudaStream_t);
}  // namespace device
ZEPPELIN_NAMESPACE_END
