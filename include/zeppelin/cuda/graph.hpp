// zeppelin/cuda/graph.hpp
// CUDA graphs of enqueued work: capture what a callable enqueues on a stream once, replay it
// with one launch.
//   capture_graph(stream, enqueue)   runs enqueue() with `stream` in capture (thread-local
//                                    mode: other threads may go on using CUDA), ends the
//                                    capture and instantiates it; returns a cuda_graph. On an
//                                    exception from enqueue() or a CUDA error the capture is
//                                    ended and discarded, and the error propagates.
//   cuda_graph::launch(stream)       enqueues one replay on `stream`
//   instantiate_captured(graph, e)   the cuda_graph of an ended capture (shared with
//                                    cuda/device_loopback_graph.hpp)
// A replay does the captured work on the same device memory with the same arguments: the
// pointers a captured pass was given must stay valid and hold the next inputs before each
// replay (write new values into the same buffers; a pass over other buffers needs its own
// capture). What may be captured: work enqueued on `stream` and on streams that join it
// through events recorded after the capture began (the device attention engine's program
// streams do: cuda/executor/device_backend.hpp); no synchronisation, no allocation outside
// the stream-ordered allocator, no host waits on device work. The device attention engine
// checks that a rank was prepared (attention_engine.hpp prepare()) before a pass of it is
// captured. A device communicator's exchanges are captured with the pass when its group_end
// only enqueues on its stream (NCCL's grouped send and receive); the device loopback world's
// ranks are threads that exchange events across their captures, which CUDA does not allow
// (cudaErrorStreamCaptureIsolation): capture one-rank worlds, or one rank per process.
// Errors throw cuda_error. nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/cuda/error.hpp>

#include <cuda_runtime_api.h>

#include <exception>
#include <utility>

ZEPPELIN_NAMESPACE_BEGIN
namespace device {

//! An instantiated CUDA graph (move-only).
class cuda_graph {
 public:
  cuda_graph() = default;
  explicit cuda_graph(cudaGraphExec_t exec) noexcept : exec_(exec) {}
  cuda_graph(const cuda_graph&) = delete;
  cuda_graph& operator=(const cuda_graph&) = delete;
  cuda_graph(cuda_graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  cuda_graph& operator=(cuda_graph&& o) noexcept {
    if (this != &o) {
      reset();
      exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
  }
  ~cuda_graph() { reset(); }

  //! Enqueues one replay on `stream`.
  void launch(cudaStream_t stream) const { ZEPPELIN_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }
  [[nodiscard]] explicit operator bool() const noexcept { return exec_ != nullptr; }
  [[nodiscard]] cudaGraphExec_t get() const noexcept { return exec_; }

 private:
  void reset() noexcept {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  cudaGraphExec_t exec_ = nullptr;
};

//! The executable graph of a captured `graph`, which it destroys (its capture's end status
//! `ended` first: on an error the graph is destroyed and the error thrown).
[[nodiscard]] inline cuda_graph instantiate_captured(cudaGraph_t graph, cudaError_t ended) {
  if (ended != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // the invalidated capture's error, reported here
    ZEPPELIN_CUDA_CHECK(ended);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  ZEPPELIN_CUDA_CHECK(instantiated);
  return cuda_graph(exec);
}

//! The graph of what `enqueue()` enqueues on `stream` (see the file comment).
template <class F>
[[nodiscard]] cuda_graph capture_graph(cudaStream_t stream, F&& enqueue) {
  ZEPPELIN_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    std::forward<F>(enqueue)();
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &graph);  // ends the (possibly invalidated) capture
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  return instantiate_captured(graph, ended);
}

}  // namespace device
ZEPPELIN_NAMESPACE_END
