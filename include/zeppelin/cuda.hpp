// zeppelin/cuda.hpp
// Umbrella header of the device layer (namespace zeppelin::device).
// From any translation unit (host compiler with the CUDA include path, or nvcc): the host
// facades, parameter structs and plans: attention, lse_merge, token_copy / token_runs, cast,
// dtype dispatch and ZEPPELIN_CUDA_CHECK. Link zeppelin::kernels for the instantiated kernels.
// Under nvcc the kernel definitions (.cuh) are included too, so a .cu can instantiate any
// supported configuration itself without zeppelin::kernels.
#pragma once

#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/attention_params.hpp>
#include <zeppelin/cuda/cast.hpp>
#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/lse_merge.hpp>
#include <zeppelin/cuda/token_copy.hpp>
#include <zeppelin/cuda/token_runs.hpp>

#if defined(__CUDACC__)
#include <zeppelin/cuda/attention_backward.cuh>
#include <zeppelin/cuda/attention_forward.cuh>
#include <zeppelin/cuda/cast.cuh>
#include <zeppelin/cuda/lse_merge.cuh>
#include <zeppelin/cuda/token_copy.cuh>
#endif
