// python/capi/zeppelin_capi_cuda.cpp
// The device entry points of zeppelin_capi.h over the kernels of zeppelin::kernels (host
// facades of zeppelin/cuda/attention.hpp): parameters are checked with the library's
// validate(), so a bad launch fails with a message naming the number, never a CUDA error
// code alone. Built only with CUDA (zeppelin_capi_host_only.cpp stands in otherwise).
#include "capi_support.hpp"
#include "zeppelin_capi.h"

#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/error.hpp>

#include <cmath>
#include <cstdint>

namespace {

zeppelin::device::dtype device_dtype(std::int32_t dtype) {
  if (dtype == 2) return zeppelin::device::dtype::bf16;
  if (dtype == 3) return zeppelin::device::dtype::fp16;
  ZEPPELIN_THROW(invalid_argument, "zeppelin cuda attention: dtype must be 2 (bfloat16) or 3 (float16)", {{"dtype", double(dtype)}});
}

zeppelin::device::attention_blocks blocks_of(std::int32_t dtype, std::int32_t heads, std::int32_t kv_heads, std::int32_t head_dim,
                                            double scale, std::int32_t blocks, const std::int32_t* cu_q, const std::int32_t* cu_k,
                                            const std::int64_t* q_offset, const std::int64_t* k_offset, std::int64_t total_q,
                                            const void* q, const void* k, const void* v, std::int64_t lse_stride) {
  zeppelin::device::attention_blocks b;
  b.q = q, b.k = k, b.v = v, b.cu_seqlens_q = cu_q, b.cu_seqlens_k = cu_k, b.q_offset = q_offset, b.k_offset = k_offset;
  b.mask = zeppelin::block_mask::causal, b.num_blocks = blocks, b.heads = heads, b.kv_heads = kv_heads, b.head_dim = head_dim;
  b.total_q = total_q, b.lse_stride = lse_stride;
  b.softmax_scale = static_cast<float>(scale > 0 ? scale : 1.0 / std::sqrt(double(head_dim > 0 ? head_dim : 1)));
  b.type = device_dtype(dtype);
  return b;
}

void check_launch(cudaError_t e, const char* what) {
  if (e != cudaSuccess) zeppelin::device::throw_on_cuda_error(e, what, __FILE__, __LINE__);
}

}  // namespace

extern "C" {

int32_t zeppelin_capi_has_cuda(void) { return 1; }

int zeppelin_cuda_attention_forward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim, double scale, int32_t blocks,
                                    const int32_t* cu_q, const int32_t* cu_k, const int64_t* q_offset, const int64_t* k_offset,
                                    int32_t max_seqlen_q, int64_t total_q, const void* q, const void* k, const void* v, void* o,
                                    float* o_f32, float* lse, int64_t lse_stride, void* stream) {
  return zeppelin::capi::guarded([&] {
    zeppelin::device::attention_forward_params p{};
    static_cast<zeppelin::device::attention_blocks&>(p) =
        blocks_of(dtype, heads, kv_heads, head_dim, scale, blocks, cu_q, cu_k, q_offset, k_offset, total_q, q, k, v, lse_stride);
    p.o = o, p.o_f32 = o_f32, p.lse = lse, p.max_seqlen_q = max_seqlen_q;
    zeppelin::device::validate(p);
    check_launch(zeppelin::device::attention_forward(p, static_cast<cudaStream_t>(stream)), "zeppelin attention_forward");
  });
}

int zeppelin_cuda_attention_preprocess(int32_t dtype, int64_t rows, int32_t heads, int32_t head_dim, const void* o, const void* d_o,
                                       float* delta, int64_t delta_stride, void* stream) {
  return zeppelin::capi::guarded([&] {
    zeppelin::device::attention_preprocess_params p{};
    p.o = o, p.dout = d_o, p.delta = delta, p.rows = rows, p.heads = heads, p.head_dim = head_dim;
    p.delta_stride = delta_stride, p.type = device_dtype(dtype);
    zeppelin::device::validate(p);
    check_launch(zeppelin::device::attention_backward_preprocess(p, static_cast<cudaStream_t>(stream)),
                 "zeppelin attention_backward_preprocess");
  });
}

int zeppelin_cuda_attention_backward(int32_t dtype, int32_t heads, int32_t kv_heads, int32_t head_dim, double scale, int32_t blocks,
                                     const int32_t* cu_q, const int32_t* cu_k, const int64_t* q_offset, const int64_t* k_offset,
                                     int32_t max_seqlen_k, int64_t total_q, const void* q, const void* k, const void* v,
                                     const void* d_o, const float* lse, const float* delta, int64_t lse_stride, float* dq_accum,
                                     float* dk_accum, float* dv_accum, void* stream) {
  return zeppelin::capi::guarded([&] {
    zeppelin::device::attention_backward_params p{};
    static_cast<zeppelin::device::attention_blocks&>(p) =
        blocks_of(dtype, heads, kv_heads, head_dim, scale, blocks, cu_q, cu_k, q_offset, k_offset, total_q, q, k, v, lse_stride);
    p.dout = d_o, p.lse = lse, p.delta = delta, p.dq_accum = dq_accum, p.dk_accum = dk_accum, p.dv_accum = dv_accum;
    p.max_seqlen_k = max_seqlen_k;
    zeppelin::device::validate(p);
    check_launch(zeppelin::device::attention_backward(p, static_cast<cudaStream_t>(stream)), "zeppelin attention_backward");
  });
}

}  // extern "C"
