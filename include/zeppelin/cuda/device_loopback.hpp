// zeppelin/cuda/device_loopback.hpp
// The device loopback world: N ranks on ONE GPU, one host thread and one stream_set per rank,
// so every distributed device path (NCCL-style grouped send/recv on a communication stream,
// overlapped with compute on another) runs and is tested on a single GPU. It models
// device_communicator (cuda/device_communicator.hpp).
//   in : ranks, gpus_per_node (node_of(r) = r / gpus_per_node; 0 = one node), the device, a
//        host-side watchdog timeout, and fn(device_loopback_comm&) run on every rank; the
//        rank's compute stream is comm.compute_stream()
//   out: run() returns once every rank has returned AND its streams have drained; the first
//        failure (an exception of fn, comm_timeout, comm_mismatch, cuda_error) is rethrown
//        after all threads joined; the other ranks stop with comm_aborted.
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
// a comm_mismatch. One mutex guards the world (a correctness and overlap harness).
// nvcc-safe; host code (CUDA runtime API).
#pragma once

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/stream_set.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
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

enum class device_wait_kind : unsigned char { none, message, delivery };

struct device_loopback_state {
  rank_index ranks = 0;
  std::chrono::milliseconds timeout{};
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::deque<device_message>> boxes;  // [src * ranks + dst]
  std::vector<bool> finished;
  // what a blocked rank waits for (kind none: running)
  std::vector<device_wait_kind> wait_kind;
  std::vector<rank_index> wait_peer;
  std::vector<std::shared_ptr<device_delivery>> wait_delivery;
  std::vector<std::string> wait_step;
  bool aborted = false;
  std::exception_ptr failure;
  rank_index failed_rank = -1;

  std::deque<device_message>& box(rank_index src, rank_index dst) {
    return boxes[static_cast<std::size_t>(src) * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(dst)];
  }
  [[nodiscard]] bool served(rank_index r) {
    const auto i = static_cast<std::size_t>(r);
    switch (wait_kind[i]) {
      case device_wait_kind::none: return true;
      case device_wait_kind::message: return !box(wait_peer[i], r).empty();
      case device_wait_kind::delivery: return wait_delivery[i]->copied;
    }
    return true;
  }
  //! Every live rank is blocked on something that is not there: nothing can change.
  [[nodiscard]] bool deadlocked() {
    bool any = false;
    for (rank_index r = 0; r < ranks; ++r) {
      if (finished[static_cast<std::size_t>(r)]) continue;
      if (wait_kind[static_cast<std::size_t>(r)] == device_wait_kind::none || served(r)) return false;
      any = true;
    }
    return any;
  }
  void fail(std::exception_ptr e, rank_index r) {
    if (!aborted) {
      aborted = true;
      failure = std::move(e);
      failed_rank = r;
    }
    changed.notify_all();
  }
};

}  // namespace detail

//! One rank's handle on a device loopback world (created by device_loopback_world::run).
class device_loopback_comm {
 public:
  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  [[nodiscard]] rank_index size() const noexcept { return state_->ranks; }
  [[nodiscard]] int node_of(rank_index r) const {
    check_peer(r);
    return r / gpus_per_node_;
  }
  [[nodiscard]] int gpus_per_node() const noexcept { return gpus_per_node_; }
  //! The communication stream (greatest priority).
  [[nodiscard]] cudaStream_t stream() const noexcept { return streams_->comm.get(); }
  //! The rank's compute stream.
  [[nodiscard]] cudaStream_t compute_stream() const noexcept { return streams_->compute.get(); }
  [[nodiscard]] const device::stream_set& streams() const noexcept { return *streams_; }

  void group_start() noexcept { ++depth_; }
  //! Posts a send of device bytes; it is delivered when the outermost group ends.
  void send(std::span<const std::byte> bytes, rank_index peer) {
    check_peer(peer);
    sends_.push_back({bytes, peer});
    if (depth_ == 0) group_end("ungrouped");
  }
  //! Posts a receive of exactly bytes.size() device bytes.
  void recv(std::span<std::byte> bytes, rank_index peer) {
    check_peer(peer);
    recvs_.push_back({bytes, peer});
    if (depth_ == 0) group_end("ungrouped");
  }

  //! Ends a group (see the file comment); enqueues, never waits for the device.
  void group_end(std::string_view step) {
    if (depth_ > 0) --depth_;
    if (depth_ > 0) return;
    auto sends = std::move(sends_);
    auto recvs = std::move(recvs_);
    sends_.clear();
    recvs_.clear();
    if (sends.empty() && recvs.empty()) return;
    auto& st = *state_;
    std::unique_lock lock(st.mutex);
    if (st.aborted) throw_aborted(step);
    const cudaStream_t comm = stream();
    // 1. post the sends
    std::vector<std::shared_ptr<detail::device_delivery>> deliveries;
    if (!sends.empty()) {
      auto ready = std::make_shared<device::cuda_event>();
      ready->record(comm);
      for (const auto& s : sends) {
        auto d = std::make_shared<detail::device_delivery>();
        deliveries.push_back(d);
        st.box(rank_, s.peer).push_back({s.bytes.data(), s.bytes.size(), std::string(step), ready, d});
      }
      st.changed.notify_all();
    }
    // 2. match the receives in posting order
    for (const auto& r : recvs) {
      wait_for(lock, detail::device_wait_kind::message, r.peer, nullptr, step);
      auto& box = st.box(r.peer, rank_);
      detail::device_message m = std::move(box.front());
      box.pop_front();
      if (m.bytes != r.bytes.size())
        fail_locked(comm_mismatch("device loopback: rank " + std::to_string(rank_) + " posted a receive of " +
                                      std::to_string(r.bytes.size()) + " bytes from rank " + std::to_string(r.peer) +
                                      " that matched a send of " + std::to_string(m.bytes) + " bytes posted at step '" +
                                      m.step + "' at step '" + std::string(step) + "'",
                                  {{"rank", double(rank_)}, {"peer", double(r.peer)}, {"recv_bytes", double(r.bytes.size())},
                                   {"send_bytes", double(m.bytes)}},
                                  std::string(step), __FILE__, __LINE__));
      m.ready->wait_on(comm);
      if (m.bytes > 0) ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(r.bytes.data(), m.data, m.bytes, cudaMemcpyDeviceToDevice, comm));
      m.delivery->event = std::make_shared<device::cuda_event>();
      m.delivery->event->record(comm);
      m.delivery->copied = true;
      st.changed.notify_all();
    }
    // 3. the group completes (in stream order) when the receivers have read every send
    for (std::size_t i = 0; i < deliveries.size(); ++i) {
      wait_for(lock, detail::device_wait_kind::delivery, sends[i].peer, deliveries[i], step);
      deliveries[i]->event->wait_on(comm);
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
      : state_(std::move(state)), rank_(rank), gpus_per_node_(gpus_per_node), streams_(streams) {}

  struct posted_send {
    std::span<const std::byte> bytes;
    rank_index peer;
  };
  struct posted_recv {
    std::span<std::byte> bytes;
    rank_index peer;
  };

  void check_peer(rank_index peer) const {
    ZEPPELIN_EXPECTS(peer >= 0 && peer < state_->ranks, "device loopback: peer rank outside the world",
                     {{"rank", double(rank_)}, {"peer", double(peer)}, {"ranks", double(state_->ranks)}});
  }

  // blocks (mutex held via `lock`) until the wait is served; fails on abort, deadlock, a
  // returned peer or the timeout
  void wait_for(std::unique_lock<std::mutex>& lock, detail::device_wait_kind kind, rank_index peer,
                std::shared_ptr<detail::device_delivery> delivery, std::string_view step) {
    auto& st = *state_;
    const auto me = static_cast<std::size_t>(rank_);
    st.wait_kind[me] = kind;
    st.wait_peer[me] = peer;
    st.wait_delivery[me] = std::move(delivery);
    st.wait_step[me] = std::string(step);
    struct leave {
      detail::device_loopback_state& st;
      std::size_t me;
      ~leave() {
        st.wait_kind[me] = detail::device_wait_kind::none;
        st.wait_delivery[me].reset();
      }
    } guard{st, me};
    const char* what = kind == detail::device_wait_kind::message ? "a message from" : "its send to be received by";
    const auto deadline = std::chrono::steady_clock::now() + st.timeout;
    st.changed.notify_all();  // this wait may complete a deadlock another rank can see
    for (;;) {
      if (st.aborted) throw_aborted(step);
      if (st.served(rank_)) return;
      if (st.finished[static_cast<std::size_t>(peer)])
        fail_locked(comm_timeout("device loopback: rank " + std::to_string(rank_) + " waits for " + what + " rank " +
                                     std::to_string(peer) + ", which has already returned, at step '" + std::string(step) + "'",
                                 rank_, peer, std::string(step), __FILE__, __LINE__));
      if (st.deadlocked()) {
        std::ostringstream msg;
        msg << "device loopback: deadlock, every live rank waits for something no rank will provide:";
        for (rank_index r = 0; r < st.ranks; ++r) {
          const auto i = static_cast<std::size_t>(r);
          if (st.finished[i] || st.wait_kind[i] == detail::device_wait_kind::none) continue;
          msg << " rank " << r << (st.wait_kind[i] == detail::device_wait_kind::message ? " <- rank " : " -> rank ")
              << st.wait_peer[i] << " at step '" << st.wait_step[i] << "';";
        }
        fail_locked(comm_timeout(msg.str(), rank_, peer, std::string(step), __FILE__, __LINE__));
      }
      if (st.changed.wait_until(lock, deadline) == std::cv_status::timeout && !st.aborted && !st.served(rank_))
        fail_locked(comm_timeout("device loopback: rank " + std::to_string(rank_) + " timed out after " +
                                     std::to_string(st.timeout.count()) + " ms waiting for " + what + " rank " +
                                     std::to_string(peer) + " at step '" + std::string(step) + "'",
                                 rank_, peer, std::string(step), __FILE__, __LINE__));
    }
  }
  template <class E>
  [[noreturn]] void fail_locked(E e) {
    state_->fail(std::make_exception_ptr(e), rank_);
    throw e;
  }
  [[noreturn]] void throw_aborted(std::string_view step) {
    throw comm_aborted("device loopback: rank " + std::to_string(rank_) + " stopped because rank " +
                           std::to_string(state_->failed_rank) + " failed, at step '" + std::string(step) + "'",
                       {{"rank", double(rank_)}, {"failed_rank", double(state_->failed_rank)}}, std::string(step), __FILE__,
                       __LINE__);
  }

  std::shared_ptr<detail::device_loopback_state> state_;
  rank_index rank_;
  int gpus_per_node_;
  const device::stream_set* streams_;
  int depth_ = 0;
  std::vector<posted_send> sends_;
  std::vector<posted_recv> recvs_;
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
  //! How long a rank may wait for a peer's posting before the run fails with comm_timeout.
  std::chrono::milliseconds timeout{60000};
  //! Communication streams at the device's greatest priority.
  bool high_priority_comm = true;

  //! Runs fn(device_loopback_comm&) on `ranks` threads; returns when every rank returned and
  //! its streams drained. Rethrows the first failure. Throws invalid_argument for ranks < 1,
  //! a gpus_per_node that does not divide ranks, or a non-positive timeout.
  template <class F>
  void run(F&& fn) const {
    ZEPPELIN_EXPECTS(ranks >= 1, "device loopback: a world needs at least one rank", {{"ranks", double(ranks)}});
    const int per_node = gpus_per_node == 0 ? ranks : gpus_per_node;
    ZEPPELIN_EXPECTS(per_node >= 1 && ranks % per_node == 0, "device loopback: gpus_per_node must divide the rank count",
                     {{"ranks", double(ranks)}, {"gpus_per_node", double(gpus_per_node)}});
    ZEPPELIN_EXPECTS(timeout.count() > 0, "device loopback: the timeout must be positive",
                     {{"timeout_ms", double(timeout.count())}});
    auto st = std::make_shared<detail::device_loopback_state>();
    const auto n = static_cast<std::size_t>(ranks);
    st->ranks = ranks;
    st->timeout = timeout;
    st->boxes.resize(n * n);
    st->finished.assign(n, false);
    st->wait_kind.assign(n, detail::device_wait_kind::none);
    st->wait_peer.assign(n, -1);
    st->wait_delivery.resize(n);
    st->wait_step.resize(n);
    const int dev = device;
    const bool high = high_priority_comm;

    auto body = [&fn, st, per_node, dev, high](rank_index r) {
      try {
        ZEPPELIN_CUDA_CHECK(cudaSetDevice(dev));
        const device::stream_set streams = device::stream_set::create(high);
        device_loopback_comm comm(st, r, per_node, &streams);
        try {
          fn(comm);
          ZEPPELIN_EXPECTS(comm.depth_ == 0, "device loopback: a rank returned inside a group",
                           {{"rank", double(r)}, {"depth", double(comm.depth_)}});
          streams.synchronize();
        } catch (...) {
          (void)cudaStreamSynchronize(streams.compute.get());  // buffers of fn die after this
          (void)cudaStreamSynchronize(streams.comm.get());
          throw;
        }
      } catch (const comm_aborted&) {
        // the cause was recorded by the rank that failed first
      } catch (...) {
        std::lock_guard lock(st->mutex);
        st->fail(std::current_exception(), r);
      }
      std::lock_guard lock(st->mutex);
      st->finished[static_cast<std::size_t>(r)] = true;
      st->changed.notify_all();
    };
    std::vector<std::thread> threads;
    threads.reserve(n);
    try {
      for (rank_index r = 0; r < ranks; ++r) threads.emplace_back(body, r);
    } catch (...) {
      {
        std::lock_guard lock(st->mutex);
        st->fail(std::current_exception(), -1);
      }
      for (auto& t : threads) t.join();
      throw;
    }
    for (auto& t : threads) t.join();
    if (st->failure) std::rethrow_exception(st->failure);
    for (rank_index src = 0; src < ranks; ++src)
      for (rank_index dst = 0; dst < ranks; ++dst)
        if (const auto& box = st->box(src, dst); !box.empty())
          throw comm_mismatch("device loopback: " + std::to_string(box.size()) + " message(s) from rank " + std::to_string(src) +
                                  " to rank " + std::to_string(dst) + " were never received (first sent at step '" +
                                  box.front().step + "')",
                              {{"src", double(src)}, {"dst", double(dst)}, {"messages", double(box.size())}},
                              box.front().step, __FILE__, __LINE__);
  }
};

ZEPPELIN_NAMESPACE_END
