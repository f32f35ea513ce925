// zeppelin/cuda/attention.hpp
// Host facade of the varlen attention kernels: attention_forward, attention_backward_preprocess,
// attention_backward pick the (dtype, head dim) instantiation at run time (dtype.hpp,
// Boost.MP11) and launch it on a stream. Parameters and layouts: attention_params.hpp.
// Every facade returns a cudaError_t and never throws (graph-capture friendly); an invalid
// parameter set returns cudaErrorInvalidValue before launching anything (call validate(p) for
// an exception naming the offending number). Kernel definitions: attention_forward.cuh and
// attention_backward.cuh; link zeppelin::kernels (kernels/*.cu) or include those in a .cu.
// Usage:
//   ZEPPELIN_CUDA_CHECK(zeppelin::device::attention_forward(params, stream));
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/attention_params.hpp>
#include <zeppelin/cuda/dtype.hpp>

#include <cuda_runtime_api.h>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! Runs the forward pass on `stream`. Returns cudaErrorInvalidValue when check(p) fails.
inline cudaError_t attention_forward(const attention_forward_params& p, cudaStream_t stream) {
  if (check(p)) return cudaErrorInvalidValue;
  return dispatch_attention(p.type, p.head_dim,
                            [&](auto t, auto d) { return launch_attention_forward<decltype(t)::value, decltype(d)::value>(p, stream); });
}

//! Computes delta = rowsum(dO * O) on `stream`. Returns cudaErrorInvalidValue when check(p) fails.
inline cudaError_t attention_backward_preprocess(const attention_preprocess_params& p, cudaStream_t stream) {
  if (check(p)) return cudaErrorInvalidValue;
  return p.type == dtype::bf16 ? launch_attention_backward_preprocess<dtype::bf16>(p, stream)
                               : launch_attention_backward_preprocess<dtype::fp16>(p, stream);
}

//! Runs the backward pass on `stream` (after attention_backward_preprocess). Returns
//! cudaErrorInvalidValue when check(p) fails.
inline cudaError_t attention_backward(const attention_backward_params& p, cudaStream_t stream) {
  if (check(p)) return cudaErrorInvalidValue;
  return dispatch_attention(p.type, p.head_dim,
                            [&](auto t, auto d) { return launch_attention_backward<decltype(t)::value, decltype(d)::value>(p, stream); });
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
