// zeppelin/cuda/token_copy.hpp
// Gather / scatter of token rows on the device, driven by a token_run plan (token_runs.hpp).
// In:  runs (device array of token_run), src and dst tensors whose token rows are `row_bytes`
//      apart (e.g. heads * head_dim * sizeof(element) for [tokens][heads][head_dim]).
// Out: dst rows run.dst .. run.dst + run.length = src rows run.src .. (runs must not overlap
//      in dst; src and dst must be distinct buffers).
// Two algorithms (definitions in token_copy.cuh, instantiated in zeppelin::kernels):
//   cub_batched  cub::DeviceMemcpy::Batched over the runs (one buffer per run): balances runs of
//                any size mix; needs temporary storage (copy_token_runs_temp_bytes)
//   vectorized   one CTA per (run, 32 KB slice), 16-byte loads and stores when row_bytes and
//                both bases are 16-byte aligned (else 4, else 1); no temporary storage;
//                needs longest_run (tokens) on the host to size the grid
// Both return cudaError_t and never throw (graph-capture friendly).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/token_runs.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

enum class copy_algorithm : std::uint8_t { cub_batched = 0, vectorized = 1 };

struct token_copy_params {
  const token_run* runs = nullptr;  //!< [num_runs], device memory
  std::int64_t num_runs = 0;
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t row_bytes = 0;        //!< bytes per token row
  std::int64_t longest_run = 0;     //!< tokens; needed by `vectorized` (an upper bound is fine)
  void* temp = nullptr;             //!< device scratch for `cub_batched`
  std::size_t temp_bytes = 0;
  copy_algorithm algorithm = copy_algorithm::cub_batched;
};

//! Launcher of one algorithm (token_copy.cuh). With `temp_query` non-null nothing is launched
//! and the scratch size is written there.
template <copy_algorithm A>
cudaError_t launch_copy_token_runs(const token_copy_params& p, std::size_t* temp_query, cudaStream_t stream);

//! Bytes of device scratch that copy_token_runs needs for `p` (0 for `vectorized`).
inline cudaError_t copy_token_runs_temp_bytes(const token_copy_params& p, std::size_t& bytes) {
  bytes = 0;
  if (p.algorithm == copy_algorithm::vectorized) return cudaSuccess;
  return launch_copy_token_runs<copy_algorithm::cub_batched>(p, &bytes, nullptr);
}

//! Copies every run on `stream`. cudaErrorInvalidValue for null pointers, zero row_bytes or
//! (vectorized) a missing longest_run.
inline cudaError_t copy_token_runs(const token_copy_params& p, cudaStream_t stream) {
  if (p.num_runs < 0 || (p.num_runs > 0 && (p.runs == nullptr || p.dst == nullptr || p.src == nullptr || p.row_bytes == 0)))
    return cudaErrorInvalidValue;
  if (p.num_runs == 0) return cudaSuccess;
  if (p.algorithm == copy_algorithm::vectorized) {
    if (p.longest_run <= 0) return cudaErrorInvalidValue;
    return launch_copy_token_runs<copy_algorithm::vectorized>(p, nullptr, stream);
  }
  return launch_copy_token_runs<copy_algorithm::cub_batched>(p, nullptr, stream);
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
