// kernels/executor_row_ops.cu
// Explicit instantiations: the fp32 fill and add of the CUDA executors, and the head blocks for
// every (destination, source) pair of element types, copied and added
// (cuda/executor/row_ops.hpp).
#include <zeppelin/cuda/executor/row_ops.cuh>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {
template cudaError_t launch_fill<float>(float*, float, std::int64_t, cudaStream_t);
template cudaError_t launch_add<float>(float*, const float*, std::int64_t, cudaStream_t);

#define ZEPPELIN_INSTANTIATE_MOVE_HEADS(TO, FROM)                                                                  \
  template cudaError_t launch_move_heads<element_type::TO, element_type::FROM, false>(const head_block&, cudaStream_t); \
  template cudaError_t launch_move_heads<element_type::TO, element_type::FROM, true>(const head_block&, cudaStream_t);
ZEPPELIN_INSTANTIATE_MOVE_HEADS(fp32, fp32)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(fp32, bf16)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(fp32, fp16)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(bf16, fp32)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(bf16, bf16)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(bf16, fp16)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(fp16, fp32)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(fp16, bf16)
ZEPPELIN_INSTANTIATE_MOVE_HEADS(fp16, fp16)
#undef ZEPPELIN_INSTANTIATE_MOVE_HEADS
}  // namespace device
ZEPPELIN_NAMESPACE_END
