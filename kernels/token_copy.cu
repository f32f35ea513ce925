// kernels/token_copy.cu
// Explicit instantiations: token-run gather / scatter (CUB batched memcpy, vectorised kernel).
#include <zeppelin/cuda/token_copy.cuh>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
template cudaError_t launch_copy_token_runs<copy_algorithm::cub_batched>(const token_copy_params&, std::size_t*, cudaStream_t);
template cudaError_t launch_copy_token_runs<copy_algorithm::vectorized>(const token_copy_params&, std::size_t*, cudaStream_t);
}  // namespace device
ZEPPELIN_NAMESPACE_END
