// zeppelin/cuda/executor/remap.hpp
// Device execution of ANY relayout_plan (remap/layout.hpp): the dispatch (loader layout -> the
// plan's attention layout, exec/relayout.hpp make_dispatch_plan), Zeppelin's remap (attention
// layout <-> token-balanced layout) and their inverse().
//   in : a device_communicator c, the plan x (identical on every rank), the rank's source rows
//        (x.ranks[me].source_tokens rows of row_bytes bytes, device) and target buffer
//        (x.ranks[me].target_tokens rows), the stream the rows are produced and consumed on
//   out: target filled, in stream order on `stream` (nothing waits on the host).
// The rows move as the execution program of the remap (program/remap_program.hpp: pack the
// segments for each peer in ascending peer order, keep the segments that stay, one phase on
// c.stream(), unpack) on the device backend (cuda/executor/device_backend.hpp): exactly what
// the host's execute_relayout runs, so host and device ranks interoperate.
// nvcc-safe; host code: links zeppelin::kernels.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/dtype.hpp>
#include <zeppelin/cuda/executor/device_backend.hpp>
#include <zeppelin/program/driver.hpp>
#include <zeppelin/program/remap_program.hpp>
#include <zeppelin/remap/layout.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Runs remap plan x on the calling rank (see the file comment). Every rank of c must call it
//! with the same x. Throws invalid_argument when x and c disagree on the rank count or
//! row_bytes is 0.
template <device_communicator C>
void execute_remap_device(C& c, const relayout_plan& x, const void* source, void* target, std::size_t row_bytes, cudaStream_t stream,
                          std::string_view step) {
  ZEPPELIN_EXPECTS(static_cast<rank_index>(x.ranks.size()) == c.size() && row_bytes >= 1 && row_bytes <= (std::size_t{1} << 30),
                   "device remap: the plan and the communicator have different rank counts, or a bad row size",
                   {{"plan_ranks", double(x.ranks.size())}, {"ranks", double(c.size())}, {"row_bytes", double(row_bytes)}});
  // a row of row_bytes bytes is a `q` row of a row_bytes-head, one-byte shape
  const execution_program prog =
      make_remap_program(x, wire_format::for_shape(static_cast<std::int32_t>(row_bytes), 1, 1, 1), row_kind::q);
  device_tensors t;
  t.remap_source = source;
  t.remap_target = target;
  const std::vector<device::launch_csr> no_launches;
  device_pass_resources resources;  // this call's: freed in stream order on `stream`
  device_backend<C> backend(prog, pass_kind::forward, c, stream, attention_dims{static_cast<std::int32_t>(row_bytes), 1, 1, 0},
                            device::dtype::bf16, t, no_launches, nullptr, resources, nullptr, step);
  run_segment(prog, pass_kind::forward, 0, backend);
}

ZEPPELIN_NAMESPACE_END
