// examples/train_gpt/device_attention.hpp
// train_gpt on GPUs: what a rank of a device world (the device loopback world, or one process
// per GPU over NCCL) runs in place of the host engine, with the model's token-local layers
// unchanged (gpt.hpp, fp32 on the host):
//   device_step        one step's CUDA engine (bf16, fp32 accumulators), built from the host
//                      plan_step's plan and program options, so both engines run the same
//                      program and place the same rows
//   device_dispatch_rows   the rank's loader rows moved to the linear layout on the device
//                      (execute_remap_device: the host dispatch's plan)
//   device_attention   one layer's attention (the attention object of step.hpp's layer_forward
//                      and layer_backward): the packed Q|K|V rows uploaded in bf16, moved to the
//                      attention layout on the device (cuda/executor/linear_layout.hpp), split
//                      into Q, K, V, the engine's forward (rings, all-gathers, all-to-alls as
//                      planned), O moved back to the linear layout; the backward the same way
//                      with dO in and dQ|dK|dV out. The attention-layout Q, K, V, O (bf16) and
//                      LSE (fp32) go into the layer's cache as floats, which hold them exactly,
//                      so the backward uploads the forward's very values.
//   device_gather      every rank's gradients (the gradient all-reduce) over the device
//                      communicator
// Every call is collective over the plan's device communicator and returns once its results
// are on the host (it synchronises `stream` or the communicator's stream).
// Host code: the CUDA runtime API and zeppelin::kernels.
#pragma once

#include "step.hpp"

#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/cuda/executor/device_staging.hpp>
#include <zeppelin/cuda/executor/linear_layout.hpp>
#include <zeppelin/cuda/executor/remap.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/plan_agreement.hpp>

#include <cuda_runtime_api.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace train_gpt {

//! fp32 -> bf16 bits, rounded to nearest even (a NaN stays a NaN).
inline std::uint16_t to_bf16(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
//! bf16 bits -> fp32 (exact).
inline float from_bf16(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t{b} << 16); }

namespace device_io {
// `values` to the device on `stream`: upload_bf16 rounds them to bf16, upload copies them as they are.
inline device::device_memory upload_bf16(const std::vector<float>& values, cudaStream_t stream) {
  std::vector<std::uint16_t> bits(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) bits[i] = to_bf16(values[i]);
  device::device_memory d(bits.size() * sizeof(std::uint16_t), stream);
  if (!bits.empty()) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(d.get(), bits.data(), d.bytes(), cudaMemcpyHostToDevice, stream));
  // a copy from pageable memory returns once the source is staged: `bits` may go
  return d;
}
template <class T>
device::device_memory upload(const std::vector<T>& values, cudaStream_t stream) {
  device::device_memory d(values.size() * sizeof(T), stream);
  if (!values.empty()) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(d.get(), values.data(), d.bytes(), cudaMemcpyHostToDevice, stream));
  return d;
}
// `count` bf16 values of `d` as floats, once `stream` has drained.
inline std::vector<float> download_bf16(const device::device_memory& d, std::size_t count, cudaStream_t stream) {
  std::vector<std::uint16_t> bits(count);
  if (count > 0) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(bits.data(), d.get(), count * sizeof(std::uint16_t), cudaMemcpyDeviceToHost, stream));
  ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> out(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = from_bf16(bits[i]);
  return out;
}
template <class T>
std::vector<T> download(const device::device_memory& d, std::size_t count, cudaStream_t stream) {
  std::vector<T> out(count);
  if (count > 0) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(out.data(), d.get(), count * sizeof(T), cudaMemcpyDeviceToHost, stream));
  ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return out;
}
// Columns [from, from + width) of `rows` rows of `row` bf16 elements <-> a dense [rows][width]
// tensor, on `stream`.
inline void copy_columns(void* dst, std::size_t dst_row, std::size_t dst_from, const void* src, std::size_t src_row, std::size_t src_from,
                         std::size_t width, std::size_t rows, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  constexpr std::size_t e = sizeof(std::uint16_t);
  ZEPPELIN_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<std::byte*>(dst) + dst_from * e, dst_row * e,
                                        static_cast<const std::byte*>(src) + src_from * e, src_row * e, width * e, rows,
                                        cudaMemcpyDeviceToDevice, stream));
}
}  // namespace device_io

// One step's CUDA engine, beside the host step it was built from.
struct device_step {
  const planned_step<float>& host;
  device_attention_engine engine;
};

//! The bf16 CUDA engine of `step` (its plan, batch and program options on topology t). Throws
//! invalid_argument when the model's head dim has no kernel (64 and 128 have), or if the two
//! engines' programs would place the linear layout differently.
inline device_step make_device_step(const planned_step<float>& step, const topology& t, const gpt_config& cfg) {
  const attention_dims dims{.heads = cfg.heads, .kv_heads = cfg.kv_heads, .head_dim = cfg.head_dim()};
  device_step out{step, device_attention_engine(step.layout, step.data.lengths, t, dims, device::dtype::bf16, step.options)};
  ZEPPELIN_EXPECTS(linear_layout(step.layout, out.engine.program()) == linear_layout(step.layout, step.engine.program()),
                   "the device and host programs of one plan place the linear layout differently", {});
  return out;
}

//! The calling rank's loader rows moved to the linear layout on the device (collective).
template <device_communicator C>
linear_rows device_dispatch_rows(C& c, const device_step& step, cudaStream_t stream) {
  const auto ri = static_cast<std::size_t>(c.rank());
  const std::vector<std::int64_t> mine = loader_rows(step.host, c.rank());
  const auto n = static_cast<std::size_t>(step.host.dispatch.ranks[ri].target_tokens);
  const device::device_memory source = device_io::upload(mine, stream);
  const device::device_memory target(n * 3 * sizeof(std::int64_t), stream);
  execute_remap_device(c, step.host.dispatch, source.get(), target.get(), 3 * sizeof(std::int64_t), stream, "dispatch");
  return unpack_rows(device_io::download<std::int64_t>(target, n * 3, stream), static_cast<std::size_t>(step.engine.rows(c.rank())));
}

//! Every rank's `flat`, rank by rank, gathered over the device communicator (on its stream).
template <device_communicator C>
std::vector<float> device_gather(C& c, const std::vector<float>& flat) {
  const auto R = static_cast<std::size_t>(c.size()), bytes = flat.size() * sizeof(float);
  const device::device_memory mine = device_io::upload(flat, c.stream());
  const device::device_memory all(R * bytes, c.stream());
  all_gather_bytes(c, std::span<const std::byte>(mine.as<const std::byte>(), bytes), std::span<std::byte>(all.as<std::byte>(), R * bytes),
                   device_staging{}, "gradient all-reduce");
  std::vector<float> out(R * flat.size());
  if (!out.empty()) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(out.data(), all.get(), R * bytes, cudaMemcpyDeviceToHost, c.stream()));
  c.synchronize("gradient all-reduce");
  return out;
}

//! One layer's attention on the device (see the file comment): the attention object of
//! layer_forward / layer_backward for a rank of a device world.
template <device_communicator C>
struct device_attention {
  C& c;
  const gpt_config& cfg;
  const device_step& step;
  const linear_rows& rows;
  cudaStream_t stream;

  std::vector<float> forward(const std::vector<float>& qkv_rows, layer_cache<float>& k) const {
    using device::device_memory;
    const auto D = static_cast<std::size_t>(cfg.dim), H = static_cast<std::size_t>(cfg.heads), kvw = static_cast<std::size_t>(cfg.kv_width());
    const std::size_t qkv = D + 2 * kvw, n = rows.n, na = rows.na, e = sizeof(std::uint16_t);
    const device_memory linear = device_io::upload_bf16(qkv_rows, stream);
    const device_memory packed(na * qkv * e, stream), q(na * D * e, stream), kk(na * kvw * e, stream), v(na * kvw * e, stream);
    const device_memory o(na * D * e, stream), lse(na * H * sizeof(float), stream), o_linear(n * D * e, stream);
    to_attention_layout(step.engine, c, step.host.layout, pass_kind::forward, linear.get(), packed.get(), qkv * e, stream);
    device_io::copy_columns(q.get(), D, 0, packed.get(), qkv, 0, D, na, stream);
    device_io::copy_columns(kk.get(), kvw, 0, packed.get(), qkv, D, kvw, na, stream);
    device_io::copy_columns(v.get(), kvw, 0, packed.get(), qkv, D + kvw, kvw, na, stream);
    step.engine.forward(c, device_forward_io{.q = q.get(), .k = kk.get(), .v = v.get(), .o = o.get(), .lse = lse.as<float>()}, stream);
    to_linear_layout(step.engine, c, step.host.layout, pass_kind::forward, o.get(), o_linear.get(), D * e, stream);
    k.aq = device_io::download_bf16(q, na * D, stream);
    k.ak = device_io::download_bf16(kk, na * kvw, stream);
    k.av = device_io::download_bf16(v, na * kvw, stream);
    k.ao = device_io::download_bf16(o, na * D, stream);
    k.lse = device_io::download<float>(lse, na * H, stream);
    return device_io::download_bf16(o_linear, n * D, stream);
  }

  std::vector<float> backward(const std::vector<float>& d_o, const layer_cache<float>& k) const {
    using device::device_memory;
    const auto D = static_cast<std::size_t>(cfg.dim), kvw = static_cast<std::size_t>(cfg.kv_width());
    const std::size_t qkv = D + 2 * kvw, n = rows.n, na = rows.na, e = sizeof(std::uint16_t);
    // the forward's tensors, exactly (bf16 values held in floats, the fp32 LSE)
    const device_memory q = device_io::upload_bf16(k.aq, stream), kk = device_io::upload_bf16(k.ak, stream);
    const device_memory v = device_io::upload_bf16(k.av, stream), o = device_io::upload_bf16(k.ao, stream);
    const device_memory lse = device_io::upload(k.lse, stream), linear = device_io::upload_bf16(d_o, stream);
    const device_memory a_do(na * D * e, stream), dq(na * D * e, stream), dk(na * kvw * e, stream), dv(na * kvw * e, stream);
    const device_memory packed(na * qkv * e, stream), grad(n * qkv * e, stream);
    to_attention_layout(step.engine, c, step.host.layout, pass_kind::backward, linear.get(), a_do.get(), D * e, stream);
    step.engine.backward(c,
                         device_backward_io{.q = q.get(), .k = kk.get(), .v = v.get(), .o = o.get(), .d_o = a_do.get(),
                                            .lse = lse.as<float>(), .dq = dq.get(), .dk = dk.get(), .dv = dv.get()},
                         stream);
    device_io::copy_columns(packed.get(), qkv, 0, dq.get(), D, 0, D, na, stream);
    device_io::copy_columns(packed.get(), qkv, D, dk.get(), kvw, 0, kvw, na, stream);
    device_io::copy_columns(packed.get(), qkv, D + kvw, dv.get(), kvw, 0, kvw, na, stream);
    to_linear_layout(step.engine, c, step.host.layout, pass_kind::backward, packed.get(), grad.get(), qkv * e, stream);
    return device_io::download_bf16(grad, n * qkv, stream);
  }
};

}  // namespace train_gpt
