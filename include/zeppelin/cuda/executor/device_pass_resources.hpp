// zeppelin/cuda/executor/device_pass_resources.hpp
// What the device attention engine keeps of one rank across passes, so that a pass does no
// plan-time work: the rank's launch descriptors on the device (uploaded once, from pinned
// memory, asynchronously), and per pass kind the arenas, the launches' scratch, the fp32
// accumulators, the program's compute streams and the events of the stream structure.
//   in : the sizes the device backend (cuda/executor/device_backend.hpp) computes from the
//        program on a rank's first pass of a kind
//   out: the same device memory, streams and events on every later pass of that kind
// Ordering: a pass of a kind starts after the previous pass of that kind on the rank has
// ended (its caller's stream waits for the event recorded at that pass's end), so passes may
// be enqueued on different streams; inside a CUDA graph capture no such event is recorded or
// waited for, and the replays of a captured pass must be ordered with the rank's other passes
// of that kind by the caller (one stream does it). The engine must outlive the work it
// enqueued: destruction waits for the last eager pass of each kind, not for graph replays.
// Memory comes from the library's pool (cuda/memory_pool.hpp) on the first pass's stream and
// goes back to it at destruction. One device per rank; a rank's passes are enqueued by one
// thread at a time. nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/stream_set.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! Page-locked host bytes (cudaMallocHost): the source of asynchronous uploads.
class pinned_bytes {
 public:
  pinned_bytes() = default;
  explicit pinned_bytes(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) ZEPPELIN_CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
  }
  pinned_bytes(const pinned_bytes&) = delete;
  pinned_bytes& operator=(const pinned_bytes&) = delete;
  pinned_bytes(pinned_bytes&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  pinned_bytes& operator=(pinned_bytes&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr), bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~pinned_bytes() { reset(); }
  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(ptr_); }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

 private:
  void reset() noexcept {
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

//! True while `s` is being captured into a CUDA graph.
[[nodiscard]] inline bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  ZEPPELIN_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace device

//! One rank's resources of one pass kind (see the file comment). The device backend fills
//! them on the rank's first pass of the kind (`built` false) and reuses them after.
struct device_pass_resources {
  bool built = false;
  std::vector<char> fp32_arena;                                    //!< [arena]: kept in fp32 (a launch's O or dQ)
  std::vector<device::device_memory> arenas;                       //!< [arena]
  std::vector<device::cuda_stream> owned;                          //!< [program stream], when the program has several
  std::vector<device::device_memory> part_o, part_lse;             //!< forward: per stream, a kernel's partial O and LSE
  std::vector<device::device_memory> lse_rows, delta;              //!< launches over lanes: per stream
  std::vector<device::device_memory> accumulators;                 //!< the engine's fp32 O, or dQ, dK, dV and delta
  std::vector<device::cuda_event> events;                          //!< [operation of a segment]
  std::vector<device::cuda_event> joins;                           //!< [program stream + 1]: the segment end's joins
  device::cuda_event start;                                        //!< a segment's start on the caller's stream
  device::cuda_event done;                                         //!< the last eager pass's end
  bool ran = false;                                                //!< `done` was recorded
  //! Kept by an engine across passes: its memory is freed on the legacy stream at destruction
  //! (after the last eager pass), since the streams that allocated it may be gone. Otherwise
  //! (one backend's, as the device remap's) on the stream that allocated it, in stream order.
  bool kept = false;

  device_pass_resources() = default;
  explicit device_pass_resources(bool kept_across_passes) : kept(kept_across_passes) {}
  device_pass_resources(const device_pass_resources&) = delete;
  device_pass_resources& operator=(const device_pass_resources&) = delete;
  device_pass_resources(device_pass_resources&&) = delete;
  device_pass_resources& operator=(device_pass_resources&&) = delete;
  ~device_pass_resources() {
    if (!kept) return;
    if (ran) (void)cudaEventSynchronize(done);
    for (auto* group : {&arenas, &part_o, &part_lse, &lse_rows, &delta, &accumulators})
      for (device::device_memory& m : *group) m.free_on(nullptr);
  }

  //! Orders the pass about to be enqueued on `stream` after the previous eager pass.
  void begin_pass(cudaStream_t stream) const {
    if (ran && !device::is_capturing(stream)) done.wait_on(stream);
  }
  //! Marks the end of an eager pass enqueued on `stream`.
  void end_pass(cudaStream_t stream) {
    if (device::is_capturing(stream)) return;
    done.record(stream);
    ran = true;
  }
  //! `count` events for a segment's operations (grows, never shrinks).
  void reserve_events(std::size_t count) {
    while (events.size() < count) events.emplace_back();
  }
};

//! One rank's launch descriptors on the device: uploaded on the rank's first pass, kept.
class device_descriptors {
 public:
  //! The device copy of `host`, enqueued on `stream` the first time (from pinned memory).
  [[nodiscard]] const std::byte* upload(std::span<const std::byte> host, cudaStream_t stream) {
    if (uploaded_ || host.empty()) return static_cast<const std::byte*>(device_.get());
    pinned_ = device::pinned_bytes(host.size());
    std::memcpy(pinned_.data(), host.data(), host.size());
    device_ = device::device_memory(host.size(), stream);
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(device_.get(), pinned_.data(), host.size(), cudaMemcpyHostToDevice, stream));
    device_.free_on(nullptr);
    uploaded_ = true;
    return static_cast<const std::byte*>(device_.get());
  }
  device_descriptors() = default;
  device_descriptors(const device_descriptors&) = delete;
  device_descriptors& operator=(const device_descriptors&) = delete;

 private:
  device::pinned_bytes pinned_;
  device::device_memory device_;
  bool uploaded_ = false;
};

//! Everything the engine keeps of one rank. The passes' resources are destroyed first: they
//! wait for the last eager passes, which read the descriptors.
struct device_rank_resources {
  device_descriptors descriptors;
  device_pass_resources forward{true}, backward{true};
  [[nodiscard]] device_pass_resources& of(bool forward_pass) noexcept { return forward_pass ? forward : backward; }
  [[nodiscard]] const device_pass_resources& of(bool forward_pass) const noexcept { return forward_pass ? forward : backward; }
};

//! Per rank, what an engine keeps, created by the rank's first pass (on its thread and
//! device); each slot is touched only by its rank's thread. A copy keeps nothing: it is
//! another engine, and allocates its own.
class device_resources_per_rank {
 public:
  explicit device_resources_per_rank(std::size_t ranks = 0) : slots_(ranks) {}
  device_resources_per_rank(const device_resources_per_rank& o) : slots_(o.slots_.size()) {}
  device_resources_per_rank& operator=(const device_resources_per_rank& o) {
    if (this != &o) slots_ = std::vector<std::unique_ptr<device_rank_resources>>(o.slots_.size());
    return *this;
  }
  device_resources_per_rank(device_resources_per_rank&&) noexcept = default;
  device_resources_per_rank& operator=(device_resources_per_rank&&) noexcept = default;
  ~device_resources_per_rank() = default;

  //! Rank r's resources, created on first use.
  [[nodiscard]] device_rank_resources& of(std::size_t r) {
    auto& slot = slots_.at(r);
    if (!slot) slot = std::make_unique<device_rank_resources>();
    return *slot;
  }
  //! Rank r's resources, or nullptr before its first pass.
  [[nodiscard]] const device_rank_resources* find(std::size_t r) const { return slots_.at(r).get(); }

 private:
  std::vector<std::unique_ptr<device_rank_resources>> slots_;
};

ZEPPELIN_NAMESPACE_END
