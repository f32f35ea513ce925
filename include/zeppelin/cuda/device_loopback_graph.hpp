// zeppelin/cuda/device_loopback_graph.hpp
// One CUDA graph of what every rank of a device loopback world (cuda/device_loopback.hpp)
// enqueues: the ranks' passes, their exchanges included, captured together and replayed with
// one launch. Each rank captured on its own would need the others' events (the loopback
// exchange orders a receiver's copy after the sender's event), which CUDA forbids across
// captures; in one capture they are ordinary dependencies.
//   in : world_capture(ranks); inside device_loopback_world::run every rank calls
//        capture(comm, stream, enqueue) once, with the stream enqueue() enqueues on (its
//        compute stream, say) and a callable that enqueues the rank's work
//   out: take() (after run returns) the graph of every rank's work; launch it on any stream
// How: rank 0 begins a relaxed-mode capture on a stream of its own and records an event that
// every rank's stream waits for (so each joins the one capture), the ranks enqueue, and rank 0
// makes its stream wait for an event recorded at the end of every rank's stream, then ends
// the capture. The ranks meet at three barriers; a rank whose enqueue() throws still meets
// them (the capture is then discarded) and rethrows from capture(). Everything enqueue()
// enqueues must be joined into `stream` by its end, as the device attention engine's passes
// are; the rules of cuda/graph.hpp hold (prepare() the engines first: nothing may block or
// allocate outside the stream-ordered allocator). The graph holds one device's work, so a
// replay runs the whole world on the world's GPU. Errors throw cuda_error. nvcc-safe; host
// code (CUDA runtime API).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/graph.hpp>
#include <zeppelin/cuda/stream_set.hpp>

#include <cuda_runtime_api.h>

#include <barrier>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

class world_capture {
 public:
  explicit world_capture(rank_index ranks) : ranks_(ranks), meet_(ranks), ends_(static_cast<std::size_t>(ranks)) {
    ZEPPELIN_EXPECTS(ranks >= 1, "world capture: ranks must be at least 1", {{"ranks", double(ranks)}});
  }

  //! Rank c.rank()'s part of the capture (see the file comment); every rank calls it once.
  template <class F>
  void capture(const device_loopback_comm& c, cudaStream_t stream, F&& enqueue) {
    ZEPPELIN_EXPECTS(c.size() == ranks_, "world capture: the world and the capture have different rank counts",
                     {{"world", double(c.size())}, {"capture", double(ranks_)}});
    const auto me = static_cast<std::size_t>(c.rank());
    std::exception_ptr failed;
    if (me == 0) guard(failed, [&] { begin(); });
    meet_.arrive_and_wait();  // the capture has begun (or failed to)
    if (begun_) {
      guard(failed, [&] {
        start_->wait_on(stream);  // joins the capture
        std::forward<F>(enqueue)();
        ends_[me].emplace();
        ends_[me]->record(stream);
      });
    }
    if (failed) {
      std::lock_guard lock(mutex_);
      any_failed_ = true;
    }
    meet_.arrive_and_wait();  // every rank has enqueued (or failed)
    if (me == 0) guard(failed, [&] { end(); });
    meet_.arrive_and_wait();  // the capture has ended: the ranks' streams may be synchronised again
    if (failed) std::rethrow_exception(failed);
  }

  //! The graph of the world's work (once every rank's capture() returned without throwing).
  [[nodiscard]] device::cuda_graph take() {
    ZEPPELIN_EXPECTS(bool(graph_), "world capture: no graph (the capture failed or has not run)", {});
    return std::move(graph_);
  }

 private:
  template <class G>
  static void guard(std::exception_ptr& failed, G&& g) {
    try {
      g();
    } catch (...) {
      if (!failed) failed = std::current_exception();
    }
  }
  void begin() {
    origin_.emplace(0);
    start_.emplace();
    ZEPPELIN_CUDA_CHECK(cudaStreamBeginCapture(origin_->get(), cudaStreamCaptureModeRelaxed));
    begun_ = true;
    start_->record(origin_->get());
  }
  void end() {
    if (!begun_) return;
    bool complete = !any_failed_;
    for (const auto& e : ends_) {
      if (e) e->wait_on(origin_->get());
      complete = complete && e.has_value();
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(origin_->get(), &graph);
    if (!complete && ended == cudaSuccess) {  // a rank failed: it rethrows its own error
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      return;
    }
    graph_ = device::instantiate_captured(graph, ended);
  }

  rank_index ranks_;
  std::barrier<> meet_;
  std::optional<device::cuda_stream> origin_;
  std::optional<device::cuda_event> start_;
  std::vector<std::optional<device::cuda_event>> ends_;  //!< [rank]: recorded at the end of its work
  bool begun_ = false;  //!< rank 0 began the capture
  std::mutex mutex_;
  bool any_failed_ = false;
  device::cuda_graph graph_;
};

ZEPPELIN_NAMESPACE_END
