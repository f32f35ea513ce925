// tests/package/consumer/main.cu
// A user's CUDA program on zeppelin::cuda: nvcc-safe zeppelin headers, CUB and NCCL headers
// in one .cu, linked against the CUDA runtime and NCCL. Counts causal pairs on the device
// when there is one; on a machine without a GPU it checks the host side only.
// Exit status 0 when everything behaves; a message and 1 otherwise.
#include <zeppelin/core.hpp>
#include <zeppelin/cost/causal_pairs.hpp>

#include <cub/device/device_reduce.cuh>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <iostream>

namespace {

int fail(const char* what) {
  std::cerr << "zeppelin_consumer_cuda: " << what << '\n';
  return 1;
}

__global__ void count_pairs(std::int64_t length, std::int64_t* out) {
  *out = zeppelin::causal_pairs(zeppelin::token_range{0, length}, zeppelin::token_range{0, length});
}

}  // namespace

int main() {
  int nccl_version = 0;
  if (ncclGetVersion(&nccl_version) != ncclSuccess || nccl_version < 20000) return fail("ncclGetVersion failed");

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cout << "zeppelin_consumer_cuda: ok (NCCL " << nccl_version << ", no GPU: device part skipped)\n";
    return 0;
  }
  std::int64_t* d_out = nullptr;
  std::int64_t pairs = 0;
  if (cudaMalloc(&d_out, sizeof(std::int64_t)) != cudaSuccess) return fail("cudaMalloc failed");
  count_pairs<<<1, 1>>>(4096, d_out);
  const bool copied = cudaMemcpy(&pairs, d_out, sizeof pairs, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(d_out);
  if (!copied) return fail("kernel or copy failed");
  if (pairs != zeppelin::causal_pairs(4096)) return fail("device causal_pairs differs from the host");
  std::cout << "zeppelin_consumer_cuda: ok (NCCL " << nccl_version << ", " << devices << " GPU(s), " << pairs << " pairs)\n";
  return 0;
}
