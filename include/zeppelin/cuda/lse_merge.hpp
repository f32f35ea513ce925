// zeppelin/cuda/lse_merge.hpp
// Merging a block's partial attention output into an fp32 accumulator by log-sum-exp.
// In:  o_acc [rows][heads][head_dim] fp32 and lse_acc [heads][lse_acc_stride] (natural log),
//      o_part [rows][heads][head_dim] (fp32, bf16 or fp16) and lse_part [heads][lse_part_stride].
// Out: o_acc, lse_acc updated in place, in fp32 (as ring-flash-attention's update_out_and_lse):
//      L = max(a, b) + log1p(exp(min(a, b) - max(a, b)));  O = e^(a - L) O_acc + e^(b - L) O_part
//      b = -inf leaves the accumulator as it is; a = -inf copies the part (no NaN from -inf - -inf).
// Start a ring with o_acc = 0, lse_acc = -inf (or the first block's fp32 output and LSE).
// Kernel: one warp per (row, head), 16-byte fp32 accesses (lse_merge.cuh).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! Element type of a partial output.
enum class partial_type : std::uint8_t { fp32 = 0, bf16 = 1, fp16 = 2 };

struct lse_merge_params {
  float* o_acc = nullptr;            //!< [rows][heads][head_dim] fp32, updated
  float* lse_acc = nullptr;          //!< [heads][lse_acc_stride], updated
  const void* o_part = nullptr;      //!< [rows][heads][head_dim], `part_type`
  const float* lse_part = nullptr;   //!< [heads][lse_part_stride]
  std::int64_t rows = 0;
  std::int32_t heads = 0;
  std::int32_t head_dim = 0;         //!< a multiple of 4
  std::int64_t lse_acc_stride = 0;   //!< 0 = rows
  std::int64_t lse_part_stride = 0;  //!< 0 = rows
  partial_type part_type = partial_type::fp32;
};

namespace detail {
struct merge_problem {
  const char* message = nullptr;
  const char* name = "";
  double value = 0.0;
  [[nodiscard]] explicit operator bool() const noexcept { return message != nullptr; }
};
}  // namespace detail

//! First broken precondition (no throw).
[[nodiscard]] inline detail::merge_problem check(const lse_merge_params& p) noexcept {
  if (p.rows < 0) return {"negative row count", "rows", double(p.rows)};
  if (p.heads <= 0) return {"head count must be positive", "heads", double(p.heads)};
  if (p.head_dim <= 0 || p.head_dim % 4 != 0) return {"head_dim must be a positive multiple of 4", "head_dim", double(p.head_dim)};
  if (p.lse_acc_stride != 0 && p.lse_acc_stride < p.rows) return {"lse_acc_stride smaller than rows", "lse_acc_stride", double(p.lse_acc_stride)};
  if (p.lse_part_stride != 0 && p.lse_part_stride < p.rows) return {"lse_part_stride smaller than rows", "lse_part_stride", double(p.lse_part_stride)};
  if (p.part_type != partial_type::fp32 && p.part_type != partial_type::bf16 && p.part_type != partial_type::fp16)
    return {"unknown partial_type", "part_type", double(static_cast<int>(p.part_type))};
  if (p.rows > 0 && (p.o_acc == nullptr || p.lse_acc == nullptr || p.o_part == nullptr || p.lse_part == nullptr))
    return {"null pointer", "rows", double(p.rows)};
  const std::uintptr_t part_alignment = p.part_type == partial_type::fp32 ? 16 : 8;  // 4-element vectors
  if (reinterpret_cast<std::uintptr_t>(p.o_acc) % 16 != 0 || reinterpret_cast<std::uintptr_t>(p.o_part) % part_alignment != 0)
    return {"o_acc must be 16-byte aligned, o_part 16 (fp32) or 8 (16-bit) bytes", "o_part_misalignment",
            double(reinterpret_cast<std::uintptr_t>(p.o_part) % part_alignment)};
  return {};
}

//! Throws zeppelin::invalid_argument naming the first broken precondition.
inline void validate(const lse_merge_params& p) {
  if (const auto problem = check(p)) ZEPPELIN_THROW(invalid_argument, problem.message, {{problem.name, problem.value}});
}

//! Kernel launcher for one partial type (lse_merge.cuh; instantiated in zeppelin::kernels).
template <partial_type Part>
cudaError_t launch_lse_merge(const lse_merge_params& p, cudaStream_t stream);

//! Merges the partial into the accumulator on `stream`; cudaErrorInvalidValue when check(p) fails.
inline cudaError_t lse_merge(const lse_merge_params& p, cudaStream_t stream) {
  if (check(p)) return cudaErrorInvalidValue;
  switch (p.part_type) {
    case partial_type::fp32: return launch_lse_merge<partial_type::fp32>(p, stream);
    case partial_type::bf16: return launch_lse_merge<partial_type::bf16>(p, stream);
    case partial_type::fp16: return launch_lse_merge<partial_type::fp16>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
