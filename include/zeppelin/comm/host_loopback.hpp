// zeppelin/comm/host_loopback.hpp
// The host loopback world: N ranks as std::threads in one process, exchanging real buffers
// through one mailbox per ordered (src, dst) pair. It models comm/communicator.hpp.
//   in : the rank count, GPUs per node (node_of(r) = r / gpus_per_node), a watchdog timeout,
//        and a function run on every rank: fn(host_loopback_comm&), copied (or moved) into
//        the world
//   out: run() returns when every rank has returned. Otherwise it throws the first failure:
//        rank_failed when fn threw on a rank ("rank R failed at step 'S': <what()>", where S is
//        the last group the rank passed to the communicator; the original exception nested,
//        std::rethrow_if_nested), or the world's comm_timeout / comm_mismatch; the other ranks
//        stop with comm_aborted. Never std::terminate, and never a hang (see the watchdog).
// Semantics (NCCL's, see communicator.hpp): sends are copied into the destination's mailbox
// at group_end (a group never blocks on its own sends); the group's receives then wait until
// every one is matched, FIFO per ordered pair; a matched send of another size is a
// comm_mismatch. A waiting rank fails at once with comm_timeout when it can never be served:
// every rank still running waits on an unsatisfiable group (a deadlock; the message lists
// each waiting rank, its peer and step), or its peer has already returned; otherwise after
// `timeout` (the message names the peer, the step, and what the peer is doing). Messages
// still in a mailbox when every rank has returned are a comm_mismatch.
// Watchdog: while no rank waits, a rank that neither returns nor calls the communicator for
// `timeout` is stuck (comm_timeout naming it). After a failure the other ranks get `timeout`
// to return; a rank still running then (stuck in a computation, a sleep, a lock) cannot be
// killed: its thread is left running DETACHED and run() throws comm_timeout naming the rank,
// its last step and how long it has been silent (the first failure nested), 2 to 3 x
// `timeout` after the rank went silent. The detached thread co-owns the world and the copy of
// fn, and gets comm_aborted at its next communicator call; but whatever fn refers to (a
// capture by reference, a buffer, a Catch2 section) must outlive it: a fn that may get stuck
// should hold what it touches by value or shared_ptr, or the process should end soon after.
// So `timeout` must exceed any wait a correct run makes and any stretch a rank computes
// without calling the communicator (a peer waiting on it would time out; with no rank
// waiting, the watchdog calls it stuck).
// Matching, waits, failures and the watchdog: comm/detail/mailbox.hpp (shared with the device
// loopback world). One mutex guards the mailboxes and waits; the bytes are copied outside it (a
// rank's sends before it takes the lock, its receives after it has taken their messages), so
// ranks copy in parallel. Still a correctness harness, not a performance model.
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
#include <type_traits>
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
    // the bytes are copied outside the world's lock, so ranks copy in parallel; the lock
    // covers only the mailboxes and the waits
    std::vector<detail::loopback_message> out;
    out.reserve(sends.size());
    for (const auto& s : sends) out.push_back({std::vector<std::byte>(s.bytes.begin(), s.bytes.end()), std::string(step)});
    std::vector<detail::loopback_message> in;
    in.reserve(recvs.size());
    {
      auto& w = *world_;
      std::unique_lock lock(w.mutex);
      w.enter(rank_, step);
      for (std::size_t i = 0; i < sends.size(); ++i) w.box(rank_, sends[i].peer).push_back(std::move(out[i]));
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
        in.push_back(w.take(r.peer, rank_));
        if (in.back().data.size() != r.bytes.size()) w.mismatch(rank_, r.peer, r.bytes.size(), in.back().data.size(), in.back().step, step);
      }
    }
    for (std::size_t i = 0; i < recvs.size(); ++i)
      if (!in[i].data.empty()) std::memcpy(recvs[i].bytes.data(), in[i].data.data(), in[i].data.size());
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
  //! The watchdog: how long a receive may wait, how long a rank may go without calling the
  //! communicator while no rank waits, and how long ranks get to return after a failure.
  std::chrono::milliseconds timeout{10000};

  //! Runs a copy of fn(host_loopback_comm&) on `ranks` threads and returns when all have
  //! returned. Throws the first failure, or comm_timeout for a rank left running (see the
  //! file comment). Throws invalid_argument for ranks < 1, a gpus_per_node that does not
  //! divide ranks, or a non-positive timeout.
  template <class F>
  void run(F&& fn) const {
    const int per_node = detail::loopback_ranks_per_node("host loopback", ranks, gpus_per_node, timeout);
    auto st = std::make_shared<detail::loopback_state>("host loopback", ranks, timeout);
    // the body owns its copy of fn and a share of the world: a detached rank needs neither
    // this frame nor the caller's fn object
    detail::loopback_state::run_ranks(st, [f = std::decay_t<F>(std::forward<F>(fn)), st, per_node](rank_index r) mutable {
      host_loopback_comm comm(st, r, per_node);
      f(comm);
      comm.check_closed();
    });
  }
};

ZEPPELIN_NAMESPACE_END
