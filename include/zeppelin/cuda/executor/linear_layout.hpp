// zeppelin/cuda/executor/linear_layout.hpp
// The device counterpart of exec/linear_layout.hpp's to_attention_layout / to_linear_layout,
// for a trainer built on device_attention_engine: a rank's rows, in device memory, moved
// between the linear modules' layout (linear_layout(plan, engine.program()) order) and the
// attention layout (the engine's rows): the program's remap segment of each remapped
// micro-batch, a device-to-device copy of each shard of the others. The pieces are the ones the
// host applies (exec/linear_layout.hpp, detail::layout_moves), so host and device ranks place
// every row alike.
//   in : the device engine, a device_communicator c, the plan the engine was built from, the
//        pass, `from` and `to` device buffers of row_bytes-byte rows (linear: the rank's linear
//        rows; attention: engine.rows(rank) rows), the stream the rows are produced and
//        consumed on
//   out: `to` filled in stream order on `stream` (nothing waits on the host)
// The row kinds follow the engine's remap: forward remap_in Q|K|V rows, remap_out O rows;
// backward remap_in dO rows, remap_out dQ|dK|dV rows, in the engine's dtype; row_bytes must
// be that kind's row size. Every rank of c must call a move that crosses ranks (a remapped
// micro-batch). Throws invalid_argument for row_bytes 0, and what the engine's remap throws.
// nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/exec/linear_layout.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
// `kind` remap_in reads linear rows and writes attention rows; remap_out the reverse.
template <device_communicator C>
void move_device_rows(const device_attention_engine& engine, C& c, const plan& p, pass_kind pass, segment_kind kind, const void* from,
                      void* to, std::size_t row_bytes, cudaStream_t stream) {
  ZEPPELIN_EXPECTS(row_bytes > 0, "device linear layout: rows need a size in bytes", {{"row_bytes", 0.0}});
  const std::vector<layout_move> moves = layout_moves(p, engine.program(), c.rank());
  const bool into_attention = kind == segment_kind::remap_in;
  const auto* src = static_cast<const std::byte*>(from);
  auto* dst = static_cast<std::byte*>(to);
  for (const layout_move& m : moves) {
    const std::size_t l = static_cast<std::size_t>(m.linear_row) * row_bytes, bytes = static_cast<std::size_t>(m.rows) * row_bytes;
    if (m.remapped) {
      if (into_attention) engine.remap(c, pass, m.micro_batch, kind, src + l, dst, stream);
      else engine.remap(c, pass, m.micro_batch, kind, src, dst + l, stream);
      continue;
    }
    if (bytes == 0) continue;
    const std::size_t a = static_cast<std::size_t>(m.attention_row) * row_bytes;
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(into_attention ? dst + a : dst + l, into_attention ? src + l : src + a, bytes,
                                        cudaMemcpyDeviceToDevice, stream));
  }
}
}  // namespace detail

//! Rows of the calling rank's linear layout -> its attention layout (see the file comment).
template <device_communicator C>
void to_attention_layout(const device_attention_engine& engine, C& c, const plan& p, pass_kind pass, const void* linear_rows,
                         void* attention_rows, std::size_t row_bytes, cudaStream_t stream) {
  detail::move_device_rows(engine, c, p, pass, segment_kind::remap_in, linear_rows, attention_rows, row_bytes, stream);
}

//! Rows of the calling rank's attention layout -> its linear layout (see the file comment).
template <device_communicator C>
void to_linear_layout(const device_attention_engine& engine, C& c, const plan& p, pass_kind pass, const void* attention_rows,
                      void* linear_rows, std::size_t row_bytes, cudaStream_t stream) {
  detail::move_device_rows(engine, c, p, pass, segment_kind::remap_out, attention_rows, linear_rows, row_bytes, stream);
}

ZEPPELIN_NAMESPACE_END
