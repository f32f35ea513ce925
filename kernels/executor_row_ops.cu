// kernels/executor_row_ops.cu
// Explicit instantiations: the fp32 fill and add of the CUDA executors (cuda/executor/row_ops.hpp).
#include <zeppelin/cuda/executor/row_ops.cuh>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
template cudaError_t launch_fill<float>(float*, float, std::int64_t, cudaStream_t);
template cudaError_t launch_add<float>(float*, const float*, std::int64_t, cudaStream_t);
}  // namespace device
ZEPPELIN_NAMESPACE_END
