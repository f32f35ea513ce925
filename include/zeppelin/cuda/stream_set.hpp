// zeppelin/cuda/stream_set.hpp
// RAII handles of the device execution layer: streams, events and stream-ordered device
// memory, and the stream set one rank works with.
//   cuda_stream     a non-blocking stream of a given priority (cudaStreamCreateWithPriority)
//   cuda_event      a timing-free event (cudaEventDisableTiming) unless timing is asked for
//   device_memory   bytes from the library's stream-ordered pool of the current device
//                   (cuda/memory_pool.hpp: cudaMallocFromPoolAsync on a stream, cudaFreeAsync
//                   on the stream named at release, default: the same stream)
//   stream_set      per rank: `compute` (normal priority) and `comm` (the device's greatest
//                   priority, so communication kernels are scheduled ahead of compute blocks
//                   when both are ready - NCCL's advice for overlapped rings)
//   stream_priorities()  {least, greatest} of the current device
// Ordering helper: wait(consumer, producer, event) records `event` on producer and makes
// consumer wait for it (one cross-stream edge).
// Every call that fails throws cuda_error (ZEPPELIN_CUDA_CHECK); destructors never throw.
// nvcc-safe; host code only (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/memory_pool.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! Stream priority range of the current device: lower numbers are higher priorities.
struct priority_range {
  int least = 0;
  int greatest = 0;
};

[[nodiscard]] inline priority_range stream_priorities() {
  priority_range r;
  ZEPPELIN_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&r.least, &r.greatest));
  return r;
}

//! An owned non-blocking stream.
class cuda_stream {
 public:
  cuda_stream() = default;
  explicit cuda_stream(int priority) { ZEPPELIN_CUDA_CHECK(cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority)); }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  cuda_stream(cuda_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  cuda_stream& operator=(cuda_stream&& o) noexcept {
    if (this != &o) reset(), s_ = std::exchange(o.s_, nullptr);
    return *this;
  }
  ~cuda_stream() { reset(); }
  [[nodiscard]] cudaStream_t get() const noexcept { return s_; }
  operator cudaStream_t() const noexcept { return s_; }  // NOLINT(google-explicit-constructor)
  void synchronize() const { ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  void reset() noexcept {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
};

//! An owned event (no timing unless `timing`).
class cuda_event {
 public:
  explicit cuda_event(bool timing = false) {
    ZEPPELIN_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  cuda_event(cuda_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  cuda_event& operator=(cuda_event&& o) noexcept {
    if (this != &o) reset(), e_ = std::exchange(o.e_, nullptr);
    return *this;
  }
  //! Destroying an event whose record is pending is allowed: CUDA releases it on completion.
  ~cuda_event() { reset(); }
  [[nodiscard]] cudaEvent_t get() const noexcept { return e_; }
  operator cudaEvent_t() const noexcept { return e_; }  // NOLINT(google-explicit-constructor)
  void record(cudaStream_t s) const { ZEPPELIN_CUDA_CHECK(cudaEventRecord(e_, s)); }
  //! Makes `s` wait for the work captured by the last record().
  void wait_on(cudaStream_t s) const { ZEPPELIN_CUDA_CHECK(cudaStreamWaitEvent(s, e_, 0)); }
  void synchronize() const { ZEPPELIN_CUDA_CHECK(cudaEventSynchronize(e_)); }
  //! Milliseconds between two timing events (both recorded and complete).
  [[nodiscard]] static float elapsed_ms(const cuda_event& from, const cuda_event& to) {
    float ms = 0;
    ZEPPELIN_CUDA_CHECK(cudaEventElapsedTime(&ms, from.e_, to.e_));
    return ms;
  }

 private:
  void reset() noexcept {
    if (e_ != nullptr) (void)cudaEventDestroy(e_);
    e_ = nullptr;
  }
  cudaEvent_t e_ = nullptr;
};

//! Records a fresh event on `producer` and makes `consumer` wait for it.
inline void stream_wait(cudaStream_t consumer, cudaStream_t producer) {
  if (consumer == producer) return;
  const cuda_event e;
  e.record(producer);
  e.wait_on(consumer);
}

//! Stream-ordered device bytes from the library's pool: allocated on a stream, usable by any
//! stream ordered after the allocation, freed stream-ordered on release (default: the
//! allocating stream).
class device_memory {
 public:
  device_memory() = default;
  device_memory(std::size_t bytes, cudaStream_t stream) : bytes_(bytes), stream_(stream) {
    if (bytes > 0) ZEPPELIN_CUDA_CHECK(cudaMallocFromPoolAsync(&ptr_, bytes, library_pool(), stream));
  }
  device_memory(const device_memory&) = delete;
  device_memory& operator=(const device_memory&) = delete;
  device_memory(device_memory&& o) noexcept
      : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), stream_(o.stream_) {}
  device_memory& operator=(device_memory&& o) noexcept {
    if (this != &o) {
      reset();
      ptr_ = std::exchange(o.ptr_, nullptr), bytes_ = std::exchange(o.bytes_, 0), stream_ = o.stream_;
    }
    return *this;
  }
  ~device_memory() { reset(); }
  //! Moves the stream that frees the memory (it must be ordered after every use).
  void free_on(cudaStream_t s) noexcept { stream_ = s; }
  [[nodiscard]] void* get() const noexcept { return ptr_; }
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(ptr_);
  }
  [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

 private:
  void reset() noexcept {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

//! The streams of one rank: compute at normal priority, communication at the greatest.
struct stream_set {
  cuda_stream compute;
  cuda_stream comm;

  //! Creates both streams on the current device.
  [[nodiscard]] static stream_set create(bool high_priority_comm = true) {
    const priority_range r = stream_priorities();
    return stream_set{cuda_stream(r.least), cuda_stream(high_priority_comm ? r.greatest : r.least)};
  }
  void synchronize() const {
    compute.synchronize();
    comm.synchronize();
  }
};

}  // namespace device
ZEPPELIN_NAMESPACE_END
