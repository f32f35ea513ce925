// kernels/attention_backward_bf16.cu
// Explicit instantiations: varlen attention backward and its delta preprocess, bf16 inputs,
// head dims 64 and 128.
#include <zeppelin/cuda/attention_backward.cuh>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
template cudaError_t launch_attention_backward_preprocess<dtype::bf16>(const attention_preprocess_params&, cudaStream_t);
template cudaError_t launch_attention_backward<dtype::bf16, 64>(const attention_backward_params&, cudaStream_t);
template cudaError_t launch_attention_backward<dtype::bf16, 128>(const attention_backward_params&, cudaStream_t);
}  // namespace device
ZEPPELIN_NAMESPACE_END
