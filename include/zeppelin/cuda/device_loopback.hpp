// zeppelin/cuda/device_loopback.hpp
// The device loopback world: N ranks on ONE GPU, one host thread and one stream_set per rank,
// so every distributed device path (NCCL-style grouped send/recv on a communication stream,
// overlapped with compute on another) runs and is tested on a single GPU. It models
// device_communicator (cuda/device_communicator.hpp).
//   in : ranks, gpus_per_node (node_of(r) = r / gpus_per_node; 0 = one node), the device, a
//        host-side watchdog timeout, and fn(device_loopback_comm&) run on every rank; the
//        rank's compute stream is comm.compute_stream()
//        (fn is copied or moved into the world)
//   out: run() returns once every rank has returned AND its streams have drained. Otherwise
//        it throws the first failure: rank_failed when fn threw on a rank (cuda_error too;
//        "rank R failed at step 'S': <what()>", the original nested), or the world's
//        comm_timeout / comm_mismatch; the other ranks stop with comm_aborted. A rank stuck
//        outside the communicator is left running detached and reported as comm_timeout, as
//        in the host loopback world (comm/host_loopback.hpp: the watchdog, and what a
//        detached rank's fn must keep alive).
// Semantics (NCCL's): group_end(step)
//   1. records a `ready` event on the sender's comm stream and posts every send of the group
//      (device pointer, size, event) to the mailbox of its ordered (src, dst) pair;
//   2. matches each receive FIFO per pair (waiting on the host for the message): the
//      receiver's comm stream waits for `ready`, copies the bytes (cudaMemcpyAsync, device to
//      device) and records a `copied` event that it hands back to the message;
//   3. waits (host) until every send of the group was copied and makes the sender's comm stream
//      wait for each `copied` event: the sender's group completes in stream order only after
//      its receivers have read the data, as an NCCL send kernel does.
// Host waits are on the peers' posting, never on device completion, so a group costs no
// device synchronisation. A rank that can never be served fails at once with comm_timeout
// (every live rank waits on something no one can provide, or the peer has returned), else
// after `timeout`; a size mismatch is comm_mismatch; messages left unreceived at the end are
// a comm_mismatch (matching, waits, failures and the watchdog: comm/detail/mailbox.hpp,
// shared with the host loopback world). One mutex guards the mailboxes and waits; every CUDA call
// (event record and wait, copy) is made outside it, so a rank's enqueueing never waits for
// another rank's (a correctness and overlap harness).
// nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/comm/detail/mailbox.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/stream_set.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

// shared by the sender (waits for `copied`) and the receiver (sets it)
struct device_delivery {
  bool copied = false;
  std::shared_ptr<device::cuda_event> event;  // recorded on the receiver's comm stream after the copy
};

struct device_message {
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::string step;
  std::shared_ptr<device::cuda_event> ready;  // recorded on the sender's comm stream
  std::shared_ptr<device_delivery> delivery;
};

using device_loopback_state = mailbox_world<device_message>;

}  // namespace detail

//! One rank's handle on a device loopback world (created by device_loopback_world::run).
class device_loopback_comm : public detail::mailbox_comm<device_loopback_comm, detail::device_message> {
 public:
  //! The communication stream (greatest priority).
  [[nodiscard]] cudaStream_t stream() const noexcept { return streams_->comm.get(); }
  //! The rank's compute stream.
  [[nodiscard]] cudaStream_t compute_stream() const noexcept { return streams_->compute.get(); }
  [[nodiscard]] const device::stream_set& streams() const noexcept { return *streams_; }

  //! Ends a group (see the file comment); enqueues, never waits for the device.
  void group_end(std::string_view step) {
    std::vector<posted_send> sends;
    std::vector<posted_recv> recvs;
    if (!close_group(sends, recvs)) return;
    if (sends.empty() && recvs.empty()) {
      auto& w = *world_;
      std::lock_guard lock(w.mutex);
      w.enter(rank_, step);
      return;
    }
    // CUDA calls (event records and waits, copies) are made outside the world's lock, so one
    // rank's enqueueing never waits on another's; the lock covers the mailboxes and the waits
    const cudaStream_t comm = stream();
    // 1. post the sends
    std::vector<std::shared_ptr<detail::device_delivery>> deliveries;
    std::shared_ptr<device::cuda_event> ready;
    if (!sends.empty()) {
      ready = std::make_shared<device::cuda_event>();
      ready->record(comm);
      for (std::size_t i = 0; i < sends.size(); ++i) deliveries.push_back(std::make_shared<detail::device_delivery>());
    }
    auto& w = *world_;
    std::unique_lock lock(w.mutex);
    w.enter(rank_, step);
    for (std::size_t i = 0; i < sends.size(); ++i)
      w.box(rank_, sends[i].peer).push_back({sends[i].bytes.data(), sends[i].bytes.size(), std::string(step), ready, deliveries[i]});
    if (!sends.empty()) w.changed.notify_all();
    // 2. match the receives in posting order
    for (const auto& r : recvs) {
      w.wait(lock, rank_, {{r.peer, 1, nullptr}}, step);
      detail::device_message m = w.take(r.peer, rank_);
      if (m.bytes != r.bytes.size()) w.mismatch(rank_, r.peer, r.bytes.size(), m.bytes, m.step, step);
      lock.unlock();
      m.ready->wait_on(comm);
      if (m.bytes > 0) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(r.bytes.data(), m.data, m.bytes, cudaMemcpyDeviceToDevice, comm));
      auto copied = std::make_shared<device::cuda_event>();
      copied->record(comm);
      lock.lock();
      m.delivery->event = std::move(copied);
      m.delivery->copied = true;
      w.changed.notify_all();
    }
    // 3. the group completes (in stream order) when the receivers have read every send
    for (std::size_t i = 0; i < deliveries.size(); ++i) {
      w.wait(lock, rank_, {{sends[i].peer, 0, &deliveries[i]->copied}}, step);
      const std::shared_ptr<device::cuda_event> copied = deliveries[i]->event;
      lock.unlock();
      copied->wait_on(comm);
      lock.lock();
    }
  }

  //! Waits until the rank's communication work has completed.
  void synchronize(std::string_view step) {
    const cudaError_t e = cudaStreamSynchronize(stream());
    if (e != cudaSuccess) device::throw_on_cuda_error(e, ("device loopback synchronize at step '" + std::string(step) + "'").c_str(), __FILE__, __LINE__);
  }

 private:
  friend struct device_loopback_world;
  device_loopback_comm(std::shared_ptr<detail::device_loopback_state> state, rank_index rank, int gpus_per_node,
                       const device::stream_set* streams)
      : mailbox_comm(std::move(state), rank, gpus_per_node), streams_(streams) {}

  const device::stream_set* streams_;
};
static_assert(communicator<device_loopback_comm>);
static_assert(device_communicator<device_loopback_comm>);

//! N ranks on one GPU. Regular configuration; run() may be called many times.
struct device_loopback_world {
  rank_index ranks = 1;
  //! node_of(r) = r / gpus_per_node; 0 means one node holding every rank.
  int gpus_per_node = 0;
  //! The CUDA device every rank uses.
  int device = 0;
  //! The watchdog (host side): how long a rank may wait for a peer's posting, how long it may
  //! go without calling the communicator while no rank waits, and how long ranks get to
  //! return after a failure.
  std::chrono::milliseconds timeout{60000};
  //! Communication streams at the device's greatest priority.
  bool high_priority_comm = true;

  //! Runs a copy of fn(device_loopback_comm&) on `ranks` threads; returns when every rank
  //! returned and its streams drained. Throws the first failure, or comm_timeout for a rank
  //! left running (see the file comment). Throws invalid_argument for ranks < 1, a
  //! gpus_per_node that does not divide ranks, or a non-positive timeout.
  template <class F>
  void run(F&& fn) const {
    const int per_node = detail::loopback_ranks_per_node("device loopback", ranks, gpus_per_node, timeout);
    auto st = std::make_shared<detail::device_loopback_state>("device loopback", ranks, timeout);
    const int dev = device;
    const bool high = high_priority_comm;
    // the body owns its copy of fn and a share of the world: a detached rank needs neither
    // this frame nor the caller's fn object
    detail::device_loopback_state::run_ranks(st, [f = std::decay_t<F>(std::forward<F>(fn)), st, per_node, dev, high](
                                                      rank_index r) mutable {
      ZEPPELIN_CUDA_CHECK(cudaSetDevice(dev));
      const device::stream_set streams = device::stream_set::create(high);
      device_loopback_comm comm(st, r, per_node, &streams);
      try {
        f(comm);
        comm.check_closed();
        streams.synchronize();
      } catch (...) {
        (void)cudaStreamSynchronize(streams.compute.get());  // buffers of fn die after this
        (void)cudaStreamSynchronize(streams.comm.get());
        throw;
      }
    });
  }
};

ZEPPELIN_NAMESPACE_END
