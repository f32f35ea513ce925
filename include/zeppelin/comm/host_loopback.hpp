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
// One mutex guards the world: this is a correctness harness, not a performance model.
#pragma once

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstring>
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

struct loopback_message {
  std::vector<std::byte> data;
  std::string step;
};

enum class loopback_status : unsigned char { running, waiting, finished };

struct loopback_state {
  rank_index ranks = 0;
  std::chrono::milliseconds timeout{};
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::deque<loopback_message>> boxes;  // [src * ranks + dst]
  std::vector<loopback_status> status;
  std::vector<std::vector<std::pair<rank_index, std::size_t>>> needs;  // waiting rank: (peer, messages needed)
  std::vector<std::string> waiting_step;
  bool aborted = false;
  std::exception_ptr failure;
  rank_index failed_rank = -1;

  std::deque<loopback_message>& box(rank_index src, rank_index dst) {
    return boxes[static_cast<std::size_t>(src) * static_cast<std::size_t>(ranks) + static_cast<std::size_t>(dst)];
  }
  [[nodiscard]] bool satisfiable(rank_index r) {
    for (const auto& [peer, n] : needs[static_cast<std::size_t>(r)])
      if (box(peer, r).size() < n) return false;
    return true;
  }
  //! Every rank is finished or waits on a group that cannot complete: nothing can change.
  [[nodiscard]] bool deadlocked() {
    bool any_waiting = false;
    for (rank_index r = 0; r < ranks; ++r) {
      const auto s = status[static_cast<std::size_t>(r)];
      if (s == loopback_status::running) return false;
      if (s == loopback_status::waiting) {
        if (satisfiable(r)) return false;
        any_waiting = true;
      }
    }
    return any_waiting;
  }
  //! Records the first failure and wakes every waiting rank. Call with the mutex held.
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

//! One rank's handle on a host loopback world (created by host_loopback_world::run).
class host_loopback_comm {
 public:
  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  [[nodiscard]] rank_index size() const noexcept { return state_->ranks; }
  //! Node of rank r: r / gpus_per_node. Throws invalid_argument for a rank outside the world.
  [[nodiscard]] int node_of(rank_index r) const {
    check_peer(r);
    return r / gpus_per_node_;
  }
  [[nodiscard]] int gpus_per_node() const noexcept { return gpus_per_node_; }

  void group_start() noexcept { ++depth_; }

  //! Posts a send; the bytes are copied when the group ends.
  void send(std::span<const std::byte> bytes, rank_index peer) {
    check_peer(peer);
    sends_.push_back({bytes, peer});
    if (depth_ == 0) group_end("ungrouped");
  }
  //! Posts a receive of exactly bytes.size() bytes.
  void recv(std::span<std::byte> bytes, rank_index peer) {
    check_peer(peer);
    recvs_.push_back({bytes, peer});
    if (depth_ == 0) group_end("ungrouped");
  }

  //! Ends a group: delivers its sends, then waits until every receive is matched (see the
  //! file comment for the failure modes). An unbalanced group_end throws invalid_argument.
  void group_end(std::string_view step) {
    if (depth_ > 0) --depth_;
    if (depth_ > 0) return;
    auto sends = std::move(sends_);
    auto recvs = std::move(recvs_);
    sends_.clear();
    recvs_.clear();
    auto& st = *state_;
    std::unique_lock lock(st.mutex);
    if (st.aborted) throw_aborted(step);
    for (const auto& s : sends)
      st.box(rank_, s.peer).push_back({std::vector<std::byte>(s.bytes.begin(), s.bytes.end()), std::string(step)});
    if (!sends.empty()) st.changed.notify_all();
    if (recvs.empty()) return;

    auto& needs = st.needs[static_cast<std::size_t>(rank_)];
    needs.clear();
    for (const auto& r : recvs) {
      bool found = false;
      for (auto& [peer, n] : needs)
        if (peer == r.peer) ++n, found = true;
      if (!found) needs.emplace_back(r.peer, 1);
    }
    st.status[static_cast<std::size_t>(rank_)] = detail::loopback_status::waiting;
    st.waiting_step[static_cast<std::size_t>(rank_)] = std::string(step);
    const auto deadline = std::chrono::steady_clock::now() + st.timeout;
    struct leave_waiting {
      detail::loopback_state& st;
      rank_index r;
      ~leave_waiting() {
        st.status[static_cast<std::size_t>(r)] = detail::loopback_status::running;
        st.needs[static_cast<std::size_t>(r)].clear();
      }
    } guard{st, rank_};
    st.changed.notify_all();  // a waiting rank may complete a deadlock another rank can see
    for (;;) {
      if (st.aborted) throw_aborted(step);
      if (st.satisfiable(rank_)) break;
      for (const auto& [peer, n] : needs)
        if (st.box(peer, rank_).size() < n && st.status[static_cast<std::size_t>(peer)] == detail::loopback_status::finished)
          fail_locked(comm_timeout(describe("host loopback: rank " + std::to_string(rank_) + " waits for a message from rank " +
                                               std::to_string(peer) + ", which has already returned",
                                           step),
                                   rank_, peer, std::string(step), __FILE__, __LINE__));
      if (st.deadlocked()) {
        std::ostringstream msg;
        msg << "host loopback: deadlock, every running rank waits for a message that was never sent:";
        for (rank_index r = 0; r < st.ranks; ++r)
          if (st.status[static_cast<std::size_t>(r)] == detail::loopback_status::waiting)
            for (const auto& [peer, n] : st.needs[static_cast<std::size_t>(r)])
              if (st.box(peer, r).size() < n)
                msg << " rank " << r << " <- rank " << peer << " at step '" << st.waiting_step[static_cast<std::size_t>(r)]
                    << "';";
        fail_locked(comm_timeout(msg.str(), rank_, first_missing(), std::string(step), __FILE__, __LINE__));
      }
      if (st.changed.wait_until(lock, deadline) == std::cv_status::timeout && !st.aborted && !st.satisfiable(rank_)) {
        const rank_index peer = first_missing();
        fail_locked(comm_timeout(describe("host loopback: rank " + std::to_string(rank_) + " timed out after " +
                                              std::to_string(st.timeout.count()) + " ms waiting for a message from rank " +
                                              std::to_string(peer),
                                          step),
                                 rank_, peer, std::string(step), __FILE__, __LINE__));
      }
    }
    for (const auto& r : recvs) {
      auto& box = st.box(r.peer, rank_);
      detail::loopback_message m = std::move(box.front());
      box.pop_front();
      if (m.data.size() != r.bytes.size())
        fail_locked(comm_mismatch(describe("host loopback: rank " + std::to_string(rank_) + " posted a receive of " +
                                               std::to_string(r.bytes.size()) + " bytes from rank " + std::to_string(r.peer) +
                                               " that matched a send of " + std::to_string(m.data.size()) +
                                               " bytes posted at step '" + m.step + "'",
                                           step),
                                  {{"rank", static_cast<double>(rank_)},
                                   {"peer", static_cast<double>(r.peer)},
                                   {"recv_bytes", static_cast<double>(r.bytes.size())},
                                   {"send_bytes", static_cast<double>(m.data.size())}},
                                  std::string(step), __FILE__, __LINE__));
      if (!m.data.empty()) std::memcpy(r.bytes.data(), m.data.data(), m.data.size());
    }
  }

 private:
  friend class host_loopback_world;
  host_loopback_comm(std::shared_ptr<detail::loopback_state> state, rank_index rank, int gpus_per_node)
      : state_(std::move(state)), rank_(rank), gpus_per_node_(gpus_per_node) {}

  struct posted_send {
    std::span<const std::byte> bytes;
    rank_index peer;
  };
  struct posted_recv {
    std::span<std::byte> bytes;
    rank_index peer;
  };

  void check_peer(rank_index peer) const {
    ZEPPELIN_EXPECTS(peer >= 0 && peer < state_->ranks, "host loopback: peer rank outside the world",
                     {{"rank", static_cast<double>(rank_)}, {"peer", static_cast<double>(peer)},
                      {"ranks", static_cast<double>(state_->ranks)}});
  }
  static std::string describe(std::string text, std::string_view step) {
    return text + " at step '" + std::string(step) + "'";
  }
  rank_index first_missing() {
    for (const auto& [peer, n] : state_->needs[static_cast<std::size_t>(rank_)])
      if (state_->box(peer, rank_).size() < n) return peer;
    return -1;
  }
  template <class E>
  [[noreturn]] void fail_locked(E e) {
    state_->fail(std::make_exception_ptr(e), rank_);
    throw e;
  }
  [[noreturn]] void throw_aborted(std::string_view step) {
    throw comm_aborted(describe("host loopback: rank " + std::to_string(rank_) + " stopped because rank " +
                                    std::to_string(state_->failed_rank) + " failed",
                                step),
                       {{"rank", static_cast<double>(rank_)}, {"failed_rank", static_cast<double>(state_->failed_rank)}},
                       std::string(step), __FILE__, __LINE__);
  }

  std::shared_ptr<detail::loopback_state> state_;
  rank_index rank_;
  int gpus_per_node_;
  int depth_ = 0;
  std::vector<posted_send> sends_;
  std::vector<posted_recv> recvs_;
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
    ZEPPELIN_EXPECTS(ranks >= 1, "host loopback: a world needs at least one rank", {{"ranks", static_cast<double>(ranks)}});
    const int per_node = gpus_per_node == 0 ? ranks : gpus_per_node;
    ZEPPELIN_EXPECTS(per_node >= 1 && ranks % per_node == 0, "host loopback: gpus_per_node must divide the rank count",
                     {{"ranks", static_cast<double>(ranks)}, {"gpus_per_node", static_cast<double>(gpus_per_node)}});
    ZEPPELIN_EXPECTS(timeout.count() > 0, "host loopback: the timeout must be positive",
                     {{"timeout_ms", static_cast<double>(timeout.count())}});
    auto st = std::make_shared<detail::loopback_state>();
    const auto n = static_cast<std::size_t>(ranks);
    st->ranks = ranks;
    st->timeout = timeout;
    st->boxes.resize(n * n);
    st->status.assign(n, detail::loopback_status::running);
    st->needs.resize(n);
    st->waiting_step.resize(n);

    auto body = [&fn, st, per_node](rank_index r) {
      host_loopback_comm comm(st, r, per_node);
      try {
        fn(comm);
        ZEPPELIN_EXPECTS(comm.depth_ == 0, "host loopback: a rank returned inside a group (group_start without group_end)",
                         {{"rank", static_cast<double>(r)}, {"depth", static_cast<double>(comm.depth_)}});
      } catch (const comm_aborted&) {
        // the cause was recorded by the rank that failed first
      } catch (...) {
        std::lock_guard lock(st->mutex);
        st->fail(std::current_exception(), r);
      }
      std::lock_guard lock(st->mutex);
      st->status[static_cast<std::size_t>(r)] = detail::loopback_status::finished;
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
          throw comm_mismatch("host loopback: " + std::to_string(box.size()) + " message(s) from rank " + std::to_string(src) +
                                  " to rank " + std::to_string(dst) + " were never received (first sent at step '" +
                                  box.front().step + "')",
                              {{"src", static_cast<double>(src)}, {"dst", static_cast<double>(dst)},
                               {"messages", static_cast<double>(box.size())}},
                              box.front().step, __FILE__, __LINE__);
  }
};

ZEPPELIN_NAMESPACE_END
