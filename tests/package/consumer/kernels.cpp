// tests/package/consumer/kernels.cpp
// A user's host program (.cpp, the host compiler) on zeppelin::kernels: the device facades of
// zeppelin/cuda.hpp resolve to the kernels the installed library instantiated. With a GPU it
// casts a few floats to bf16 on the device and checks them; without one it checks only that
// the program linked and that the facade refuses bad arguments.
// Exit status 0 when everything behaves; a message and 1 otherwise.
#include <zeppelin/cuda.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <iostream>

namespace {

int fail(const char* what) {
  std::cerr << "zeppelin_consumer_kernels: " << what << '\n';
  return 1;
}

}  // namespace

int main() {
  using zeppelin::device::cast_from_f32;
  using zeppelin::device::dtype;
  if (cast_from_f32(nullptr, nullptr, 4, dtype::bf16, nullptr) != cudaErrorInvalidValue)
    return fail("cast_from_f32 accepted null pointers");

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cout << "zeppelin_consumer_kernels: ok (linked; no GPU: device part skipped)\n";
    return 0;
  }
  const float host[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  float* src = nullptr;
  std::uint16_t* dst = nullptr;
  if (cudaMalloc(&src, sizeof host) != cudaSuccess || cudaMalloc(&dst, 4 * sizeof(std::uint16_t)) != cudaSuccess)
    return fail("cudaMalloc failed");
  std::uint16_t out[4] = {};
  const bool ok = cudaMemcpy(src, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess &&
                  cast_from_f32(dst, src, 4, dtype::bf16, nullptr) == cudaSuccess &&
                  cudaMemcpy(out, dst, sizeof out, cudaMemcpyDeviceToHost) == cudaSuccess;
  cudaFree(src);
  cudaFree(dst);
  if (!ok) return fail("the cast kernel or a copy failed");
  for (int i = 0; i < 4; ++i) {  // these values are exact in bf16: the top half of the fp32 bits
    std::uint32_t bits = 0;
    std::memcpy(&bits, &host[i], sizeof bits);
    if (out[i] != static_cast<std::uint16_t>(bits >> 16)) return fail("bf16 value differs from the fp32 input");
  }
  std::cout << "zeppelin_consumer_kernels: ok (" << devices << " GPU(s), 4 values cast on the device)\n";
  return 0;
}
