// zeppelin/comm/host_loopback.hpp
// The host loopback world: N ranks as std::threads in one process, exchanging real buffers
// through one mailbox per ordered (src, dst) pair. It models comm/communicator.hpp.
//   in : the rank count, GPUs per node (node_of(r) = r / gpus_per_node), a watchdog timeout,
//        and a function run on every rank: fn(host_loopback_comm&)
//   out: run() returns when every rank has returned; the first failure of any rank (an
//        exception of fn, a comm_timeout, a comm_mismatch) is rethrown to the caller after
//        all threads have been joined; the others stop with comm_aborted (never a hang and
//        never std::terminate).
// Semantics (NCCL's, see communicator.hpp): sends are copied into the destination's mailbox
// at group_end (a group never blocks on its own sends); the group's receives then wait until
// every one is matched, FIFO per ordered pair; a matched send of another size is a
// comm_mismatch. A waiting rank fails at once with comm_timeout when it can never be served:
// every rank still running waits on an unsatisfiable group (a deadlock; the message lists
// each waiting rank, its peer and step), or its peer has already returned; otherwise after
// `timeout`. Messages still in a mailbox when every rank has returned are a comm_mismatch.
// Matching, waits and failures: comm/detail/mailbox.hpp (shared with the device loopback world).
// One mutex guards the world: this is a correctness harness, not a performance model.
#pragma once

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/comm/detail/mailbox.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {
struct loopback_message {
  std::vector<std::byte> data;
  std::string step;
};
using loopback_state = mailbox_world<loopback_message>;
}  // namespace detail

//! One rank's handle on a host loopback world (created by host_loopback_world::run).
class host_loopback_comm : public detail::mailbox_comm<host_loopback_comm, detail::loopback_message> {
 public:
  //! Ends a group: delivers its sends, then waits until every receive is matched (see the
  //! file comment for the failure modes).
  void group_end(std::string_view step) {
    std::vector<posted_send> sends;
    std::vector<posted_recv> recvs;
    if (!close_group(sends, recvs)) return;
    auto& w = *world_;
    std::unique_lock lock(w.mutex);
    w.check_open(rank_, step);
    for (const auto& s : sends)
      w.box(rank_, s.peer).push_back({std::vector<std::byte>(s.bytes.begin(), s.bytes.end()), std::string(step)});
    if (!sends.empty()) w.changed.notify_all();
    if (recvs.empty()) return;
    std::vector<detail::mailbox_need> needs;  // messages needed per peer
    for (const auto& r : recvs) {
      bool found = false;
      for (auto& n : needs)
        if (n.peer == r.peer) ++n.messages, found = true;
      if (!found) needs.push_back({r.peer, 1, nullptr});
    }
    w.wait(lock, rank_, std::move(needs), step);
    for (const auto& r : recvs) {
      const detail::loopback_message m = w.take(r.peer, rank_);
      if (m.data.size() != r.bytes.size()) w.mismatch(rank_, r.peer, r.bytes.size(), m.data.size(), m.step, step);
      if (!m.data.empty()) std::memcpy(r.bytes.data(), m.data.data(), m.data.size());
    }
  }

 private:
  friend struct host_loopback_world;
  host_loopback_comm(std::shared_ptr<detail::loopback_state> state, rank_index rank, int gpus_per_node)
      : mailbox_comm(std::move(state), rank, gpus_per_node) {}
};
static_assert(communicator<host_loopback_comm>);

//! N ranks as threads in this process. Regular configuration; run() may be called many times
//! (each run starts with empty mailboxes).
struct host_loopback_world {
  rank_index ranks = 1;
  //! node_of(r) = r / gpus_per_node; 0 means one node holding every rank.
  int gpus_per_node = 0;
  //! How long a receive may wait before the run fails with comm_timeout.
  std::chrono::milliseconds timeout{10000};

  //! Runs fn(host_loopback_comm&) on `ranks` threads and returns when all have returned.
  //! Rethrows the first failure (see the file comment). Throws invalid_argument for
  //! ranks < 1, a gpus_per_node that does not divide ranks, or a non-positive timeout.
  template <class F>
  void run(F&& fn) const {
    const int per_node = detail::loopback_ranks_per_node("host loopback", ranks, gpus_per_node, timeout);
    auto st = std::make_shared<detail::loopback_state>("host loopback", ranks, timeout);
    st->run_ranks([&fn, &st, per_node](rank_index r) {
      host_loopback_comm comm(st, r, per_node);
      fn(comm);
      comm.check_closed();
    });
  }
};

ZEPPELIN_NAMESPACE_END
