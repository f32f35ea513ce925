// [gpu] The library's memory pool: what device_memory frees stays mapped across
// synchronisations (the device's default pool would give it back), trim_library_pool gives it
// back, destroy_library_pool makes the next allocation start a fresh pool.
#include "gpu_support.hpp"

#include <zeppelin/cuda/memory_pool.hpp>
#include <zeppelin/cuda/stream_set.hpp>

#include <cstdint>

using namespace zeppelin;

namespace {
std::uint64_t reserved_bytes(cudaMemPool_t pool) {
  std::uint64_t v = 0;
  ZEPPELIN_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v));
  return v;
}
std::uint64_t used_bytes(cudaMemPool_t pool) {
  std::uint64_t v = 0;
  ZEPPELIN_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v));
  return v;
}
}  // namespace

TEST_CASE("library pool: freed memory stays mapped across a synchronisation until trimmed", "[gpu][pool]") {
  ZEPPELIN_REQUIRE_GPU();
  constexpr std::size_t bytes = std::size_t{64} << 20;
  const device::cuda_stream stream(0);
  const cudaMemPool_t pool = device::library_pool();
  CHECK(pool == device::library_pool());  // one pool per device
  CHECK(pool != nullptr);
  {
    const device::device_memory m(bytes, stream);
    CHECK(m.get() != nullptr);
    stream.synchronize();
    CHECK(used_bytes(pool) >= bytes);
  }
  stream.synchronize();
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
  CHECK(used_bytes(pool) == 0);
  CHECK(reserved_bytes(pool) >= bytes);  // kept: the release threshold is UINT64_MAX
  device::trim_library_pool(0);
  CHECK(reserved_bytes(pool) == 0);
}

TEST_CASE("library pool: a destroyed pool is replaced by a fresh one on the next allocation", "[gpu][pool]") {
  ZEPPELIN_REQUIRE_GPU();
  const device::cuda_stream stream(0);
  {
    const device::device_memory m(std::size_t{1} << 20, stream);
    stream.synchronize();
  }
  stream.synchronize();
  device::destroy_library_pool();
  device::destroy_library_pool();  // none left: a no-op
  const device::device_memory m(std::size_t{1} << 20, stream);
  CHECK(m.get() != nullptr);
  std::uint64_t threshold = 0;
  ZEPPELIN_CUDA_CHECK(cudaMemPoolGetAttribute(device::library_pool(), cudaMemPoolAttrReleaseThreshold, &threshold));
  CHECK(threshold == UINT64_MAX);
  stream.synchronize();
}
