// zeppelin/cuda/executor/remap.hpp
// Device execution of ANY remap_plan (remap/layout.hpp): the dispatch (loader layout -> the
// plan's attention layout, exec/relayout.hpp make_dispatch_plan), Zeppelin's remap (attention
// layout <-> token-balanced layout) and their inverse(), as one alltoallv.
//   in : a device_communicator c, the plan x (identical on every rank), the rank's source rows
//        (x.ranks[me].source_tokens rows of row_bytes bytes, device) and target buffer
//        (x.ranks[me].target_tokens rows), the compute stream the rows are produced and
//        consumed on, a transport policy (direct, or routed through proxies)
//   out: target filled, in stream order on `stream` (nothing waits on the host).
// Steps (all stream-ordered): the host turns the segments into token runs (cuda/token_runs.hpp)
// - pack: my segments for each peer, packed in ascending peer order in the sender's source
// order; keep: segments that stay, source -> target; unpack: received bytes -> target rows -
// uploads them once, runs pack + keep with copy_token_runs (vectorised) on `stream`, the
// exchange on c.stream() (every rank builds the same transfer list from x: src-major, then
// dst), then unpack on `stream`. The packing is exec/relayout.hpp's make_remap_packing, the one
// execute_remap uses, so a host and a device rank would interoperate.
// nvcc-safe; host code: links zeppelin::kernels (copy_token_runs).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/device_transport.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/cuda/token_copy.hpp>
#include <zeppelin/cuda/token_runs.hpp>
#include <zeppelin/exec/relayout.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/remap/layout.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
// copies runs[first, first + count) of the uploaded run array
inline void copy_runs(const device::token_run* runs_dev, std::span<const device::token_run> runs, std::size_t first,
                      std::size_t count, void* dst, const void* src, std::size_t row_bytes, cudaStream_t stream) {
  if (count == 0) return;
  device::token_copy_params p;
  p.runs = runs_dev + first;
  p.num_runs = static_cast<std::int64_t>(count);
  p.dst = dst;
  p.src = src;
  p.row_bytes = row_bytes;
  p.longest_run = device::longest_run(runs.subspan(first, count));
  p.algorithm = device::copy_algorithm::vectorized;
  ZEPPELIN_CUDA_CHECK(device::copy_token_runs(p, stream));
}
}  // namespace detail

//! The phase's transfers of remap plan x: for every source rank (ascending) and destination
//! (ascending, != source) the bytes it ships. Identical on every rank.
[[nodiscard]] inline std::vector<transfer> remap_transfers(const remap_plan& x, std::size_t row_bytes) {
  std::vector<transfer> out;
  const auto n = x.ranks.size();
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<std::int64_t> bytes(n, 0);
    for (const auto& s : x.ranks[r].sends)
      if (s.to != static_cast<rank_index>(r)) bytes[static_cast<std::size_t>(s.to)] += s.range.size() * static_cast<std::int64_t>(row_bytes);
    for (std::size_t p = 0; p < n; ++p)
      if (bytes[p] > 0) out.push_back({static_cast<rank_index>(r), static_cast<rank_index>(p), bytes[p]});
  }
  return out;
}

//! Runs remap plan x on the calling rank (see the file comment). Every rank of c must call it
//! with the same x. Throws invalid_argument when x and c disagree on the rank count or
//! row_bytes is 0.
template <device_communicator C, class Transport = device_direct_transport>
  requires device_transport_for<Transport, C>
void execute_remap_device(C& c, const remap_plan& x, const void* source, void* target, std::size_t row_bytes,
                          cudaStream_t stream, std::string_view step, const Transport& transport = {}) {
  const rank_index me = c.rank();
  ZEPPELIN_EXPECTS(static_cast<rank_index>(x.ranks.size()) == c.size() && row_bytes >= 1,
                   "device remap: the plan and the communicator have different rank counts",
                   {{"plan_ranks", double(x.ranks.size())}, {"ranks", double(c.size())}, {"row_bytes", double(row_bytes)}});
  const rank_remap& mine = x.ranks[static_cast<std::size_t>(me)];
  const remap_packing pk = make_remap_packing(x, me);
  // runs: [pack..., keep..., unpack...]; runs fuse only within a section (different buffers)
  std::vector<device::token_run> runs;
  std::size_t section = 0;
  const auto append = [&](device::token_run r) {
    if (runs.size() == section) {
      if (r.length > 0) runs.push_back(r);
    } else {
      device::detail::append_run(runs, r);
    }
  };
  std::vector<token_count> cursor(pk.send_at);
  for (const auto& s : mine.sends)
    if (s.to != me) {
      auto& at = cursor[static_cast<std::size_t>(s.to)];
      append({s.from_offset, at, s.range.size()});
      at += s.range.size();
    }
  const std::size_t pack_runs = section = runs.size();
  for (const auto& s : mine.sends)
    if (s.to == me) append({s.from_offset, s.to_offset, s.range.size()});
  const std::size_t keep_end = section = runs.size();
  token_count at = 0;
  for (const remap_segment* s : pk.incoming) {
    append({at, s->to_offset, s->range.size()});
    at += s->range.size();
  }
  const std::span<const device::token_run> host_runs(runs);
  device::device_memory runs_dev(runs.size() * sizeof(device::token_run), stream);
  device::device_memory out(static_cast<std::size_t>(pk.send_total) * row_bytes, stream);
  device::device_memory in(static_cast<std::size_t>(pk.recv_total) * row_bytes, stream);
  if (!runs.empty())
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(runs_dev.get(), runs.data(), runs.size() * sizeof(device::token_run),
                                        cudaMemcpyHostToDevice, stream));
  const auto* rd = runs_dev.as<device::token_run>();
  detail::copy_runs(rd, host_runs, 0, pack_runs, out.get(), source, row_bytes, stream);
  detail::copy_runs(rd, host_runs, pack_runs, keep_end - pack_runs, target, source, row_bytes, stream);

  const std::vector<transfer> all = remap_transfers(x, row_bytes);
  std::vector<std::span<const std::byte>> send(all.size());
  std::vector<std::span<std::byte>> recv(all.size());
  auto* out_bytes = out.as<std::byte>();
  auto* in_bytes = in.as<std::byte>();
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto b = static_cast<std::size_t>(all[i].bytes);
    if (all[i].src == me) send[i] = {out_bytes + static_cast<std::size_t>(pk.send_at[static_cast<std::size_t>(all[i].dst)]) * row_bytes, b};
    if (all[i].dst == me) recv[i] = {in_bytes + static_cast<std::size_t>(pk.recv_at[static_cast<std::size_t>(all[i].src)]) * row_bytes, b};
  }
  if (!all.empty()) {
    device::stream_wait(c.stream(), stream);
    transport.exchange(c, std::span<const transfer>(all), std::span<const std::span<const std::byte>>(send),
                       std::span<const std::span<std::byte>>(recv), step);
    device::stream_wait(stream, c.stream());
  }
  detail::copy_runs(rd, host_runs, keep_end, runs.size() - keep_end, target, in.get(), row_bytes, stream);
  // runs_dev, out and in are freed on `stream`, after the unpack and (by the wait) the exchange
}

ZEPPELIN_NAMESPACE_END
