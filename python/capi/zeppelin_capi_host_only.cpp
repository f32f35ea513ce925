// python/capi/zeppelin_capi_host_only.cpp
// The device entry points of zeppelin_capi.h in a build without CUDA: each fails with a
// message saying so (zeppelin_capi_has_cuda() == 0), so a caller learns why, not a missing symbol.
#include "capi_support.hpp"
#include "zeppelin_capi.h"

namespace {

[[noreturn]] void no_cuda() {
  ZEPPELIN_THROW(invalid_argument,
                 "zeppelin: this libzeppelin_capi was built without CUDA (configure with a CUDA toolkit to run on GPU tensors)",
                 {});
}

}  // namespace

extern "C" {

int32_t zeppelin_capi_has_cuda(void) { return 0; }

int zeppelin_cuda_attention_forward(int32_t, int32_t, int32_t, int32_t, double, int32_t, const int32_t*, const int32_t*,
                                    const int64_t*, const int64_t*, int32_t, int64_t, const void*, const void*, const void*, void*,
                                    float*, float*, int64_t, void*) {
  return zeppelin::capi::guarded([] { no_cuda(); });
}

int zeppelin_cuda_attention_preprocess(int32_t, int64_t, int32_t, int32_t, const void*, const void*, float*, int64_t, void*) {
  return zeppelin::capi::guarded([] { no_cuda(); });
}

int zeppelin_cuda_attention_backward(int32_t, int32_t, int32_t, int32_t, double, int32_t, const int32_t*, const int32_t*,
                                     const int64_t*, const int64_t*, int32_t, int64_t, const void*, const void*, const void*,
                                     const void*, const float*, const float*, int64_t, float*, float*, float*, void*) {
  return zeppelin::capi::guarded([] { no_cuda(); });
}

}  // extern "C"
