// zeppelin/comm/detail/mailbox.hpp
// The matching and failure rules shared by the loopback worlds (comm/host_loopback.hpp: ranks
// as host threads; cuda/device_loopback.hpp: ranks on one GPU). What a message holds (bytes,
// a device pointer and events) and how a group completes stay with each world.
//   mailbox_world<Message>   one FIFO mailbox per ordered (src, dst) pair under one mutex, the
//                            ranks' waits, the first failure, and run_ranks(): `ranks` threads,
//                            failures collected, leftover messages reported
//   mailbox_comm<D, Message> a rank's handle (CRTP): rank, size, node_of, grouped posting of
//                            sends and receives (an operation outside a group is a group of
//                            one labelled "ungrouped"); D::group_end does the delivery
// Waits: a rank blocks until every mailbox_need is met: `messages` messages queued from
// `peer`, or *taken set (the peer has received our send). It fails at once with comm_timeout
// when it can never be served - every live rank waits on something no rank will provide (a
// deadlock; the message lists each waiting rank, its peer and step) or the peer has returned -
// else after the timeout; once a rank failed, every other stops with comm_aborted. A matched
// send of another size is a comm_mismatch; so are messages left when every rank returned.
// nvcc-safe (host code).
#pragma once

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <sstream>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! One condition a blocked rank waits for.
struct mailbox_need {
  rank_index peer = -1;
  std::size_t messages = 0;     //!< at least this many messages queued from peer to the waiter
  const bool* taken = nullptr;  //!< or (when set): *taken, the peer has received the waiter's send
};

//! The ranks per node of a loopback world; throws invalid_argument for ranks < 1, a
//! gpus_per_node that does not divide ranks, or a non-positive timeout.
inline int loopback_ranks_per_node(const char* name, rank_index ranks, int gpus_per_node, std::chrono::milliseconds timeout) {
  ZEPPELIN_EXPECTS(ranks >= 1, std::string(name) + ": a world needs at least one rank", {{"ranks", double(ranks)}});
  const int per_node = gpus_per_node == 0 ? ranks : gpus_per_node;
  ZEPPELIN_EXPECTS(per_node >= 1 && ranks % per_node == 0, std::string(name) + ": gpus_per_node must divide the rank count",
                   {{"ranks", double(ranks)}, {"gpus_per_node", double(gpus_per_node)}});
  ZEPPELIN_EXPECTS(timeout.count() > 0, std::string(name) + ": the timeout must be positive", {{"timeout_ms", double(timeout.count())}});
  return per_node;
}

//! The shared state of a loopback world. Message: any type with a `std::string step` (the
//! label of the group that posted it). Members marked "lock held" need `mutex`.
template <class Message>
class mailbox_world {
 public:
  mailbox_world(const char* name, rank_index ranks, std::chrono::milliseconds timeout)
      : name_(name),
        ranks_(ranks),
        timeout_(timeout),
        boxes_(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks)),
        finished_(static_cast<std::size_t>(ranks), false),
        needs_(static_cast<std::size_t>(ranks)),
        waiting_step_(static_cast<std::size_t>(ranks)) {}

  std::mutex mutex;
  std::condition_variable changed;

  [[nodiscard]] const char* name() const noexcept { return name_; }
  [[nodiscard]] rank_index ranks() const noexcept { return ranks_; }

  //! The mailbox of the ordered pair (lock held).
  std::deque<Message>& box(rank_index src, rank_index dst) {
    return boxes_[static_cast<std::size_t>(src) * static_cast<std::size_t>(ranks_) + static_cast<std::size_t>(dst)];
  }
  //! The oldest message from src to dst (lock held; the caller waited for it).
  Message take(rank_index src, rank_index dst) {
    auto& b = box(src, dst);
    Message m = std::move(b.front());
    b.pop_front();
    return m;
  }

  //! Throws comm_aborted when another rank has failed (lock held).
  void check_open(rank_index me, std::string_view step) const {
    if (aborted_) throw_aborted(me, step);
  }

  //! Blocks `me` until every need is met (lock held through `lock`); see the file comment for
  //! the failures.
  void wait(std::unique_lock<std::mutex>& lock, rank_index me, std::vector<mailbox_need> needs, std::string_view step) {
    const auto i = static_cast<std::size_t>(me);
    needs_[i] = std::move(needs);
    waiting_step_[i] = std::string(step);
    struct leave {
      std::vector<mailbox_need>& needs;
      ~leave() { needs.clear(); }
    } guard{needs_[i]};
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    changed.notify_all();  // this wait may complete a deadlock another rank can see
    for (;;) {
      if (aborted_) throw_aborted(me, step);
      if (served(me)) return;
      for (const mailbox_need& n : needs_[i])
        if (!met(me, n) && finished_[static_cast<std::size_t>(n.peer)])
          fail_locked(me, comm_timeout(std::string(name_) + ": rank " + std::to_string(me) + " waits for " + what(n) + " rank " +
                                           std::to_string(n.peer) + ", which has already returned, at step '" +
                                           std::string(step) + "'",
                                       me, n.peer, std::string(step), __FILE__, __LINE__));
      if (deadlocked()) {
        std::ostringstream msg;
        msg << name_ << ": deadlock, every live rank waits for something no rank will provide:";
        for (rank_index r = 0; r < ranks_; ++r)
          for (const mailbox_need& n : needs_[static_cast<std::size_t>(r)])
            if (!met(r, n))
              msg << " rank " << r << (n.taken ? " -> rank " : " <- rank ") << n.peer << " at step '"
                  << waiting_step_[static_cast<std::size_t>(r)] << "';";
        fail_locked(me, comm_timeout(msg.str(), me, first_missing(me), std::string(step), __FILE__, __LINE__));
      }
      if (changed.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && !served(me)) {
        const rank_index peer = first_missing(me);
        const mailbox_need* n = nullptr;
        for (const mailbox_need& x : needs_[i])
          if (!n && !met(me, x)) n = &x;
        fail_locked(me, comm_timeout(std::string(name_) + ": rank " + std::to_string(me) + " timed out after " +
                                         std::to_string(timeout_.count()) + " ms waiting for " + what(*n) + " rank " +
                                         std::to_string(peer) + " at step '" + std::string(step) + "'",
                                     me, peer, std::string(step), __FILE__, __LINE__));
      }
    }
  }

  //! Fails the run with comm_mismatch: `me`'s receive of recv_bytes from `peer` matched a send
  //! of send_bytes posted at send_step (lock held).
  [[noreturn]] void mismatch(rank_index me, rank_index peer, std::size_t recv_bytes, std::size_t send_bytes,
                             const std::string& send_step, std::string_view step) {
    fail_locked(me, comm_mismatch(std::string(name_) + ": rank " + std::to_string(me) + " posted a receive of " +
                                      std::to_string(recv_bytes) + " bytes from rank " + std::to_string(peer) +
                                      " that matched a send of " + std::to_string(send_bytes) + " bytes posted at step '" +
                                      send_step + "' at step '" + std::string(step) + "'",
                                  {{"rank", double(me)}, {"peer", double(peer)}, {"recv_bytes", double(recv_bytes)},
                                   {"send_bytes", double(send_bytes)}},
                                  std::string(step), __FILE__, __LINE__));
  }

  //! Runs body(r) on one thread per rank and returns when all have returned. An exception of
  //! a body fails the run (the first one is rethrown after every thread joined; comm_aborted
  //! of the others is swallowed); then messages never received are a comm_mismatch.
  template <class Body>
  void run_ranks(Body&& body) {
    const auto one = [this, &body](rank_index r) {
      try {
        body(r);
      } catch (const comm_aborted&) {
        // the cause was recorded by the rank that failed first
      } catch (...) {
        std::lock_guard lock(mutex);
        fail(std::current_exception(), r);
      }
      std::lock_guard lock(mutex);
      finished_[static_cast<std::size_t>(r)] = true;
      changed.notify_all();
    };
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(ranks_));
    try {
      for (rank_index r = 0; r < ranks_; ++r) threads.emplace_back(one, r);
    } catch (...) {
      {
        std::lock_guard lock(mutex);
        fail(std::current_exception(), -1);
      }
      for (auto& t : threads) t.join();
      throw;
    }
    for (auto& t : threads) t.join();
    if (failure_) std::rethrow_exception(failure_);
    for (rank_index src = 0; src < ranks_; ++src)
      for (rank_index dst = 0; dst < ranks_; ++dst)
        if (const auto& b = box(src, dst); !b.empty())
          throw comm_mismatch(std::string(name_) + ": " + std::to_string(b.size()) + " message(s) from rank " + std::to_string(src) +
                                  " to rank " + std::to_string(dst) + " were never received (first sent at step '" +
                                  b.front().step + "')",
                              {{"src", double(src)}, {"dst", double(dst)}, {"messages", double(b.size())}}, b.front().step,
                              __FILE__, __LINE__);
  }

 private:
  static std::string what(const mailbox_need& n) { return n.taken ? "its send to be received by" : "a message from"; }
  [[nodiscard]] bool met(rank_index r, const mailbox_need& n) { return n.taken ? *n.taken : box(n.peer, r).size() >= n.messages; }
  [[nodiscard]] bool served(rank_index r) {
    for (const mailbox_need& n : needs_[static_cast<std::size_t>(r)])
      if (!met(r, n)) return false;
    return true;
  }
  [[nodiscard]] rank_index first_missing(rank_index r) {
    for (const mailbox_need& n : needs_[static_cast<std::size_t>(r)])
      if (!met(r, n)) return n.peer;
    return -1;
  }
  // every live rank waits on something that is not there: nothing can change
  [[nodiscard]] bool deadlocked() {
    bool any = false;
    for (rank_index r = 0; r < ranks_; ++r) {
      const auto i = static_cast<std::size_t>(r);
      if (finished_[i]) continue;
      if (needs_[i].empty() || served(r)) return false;
      any = true;
    }
    return any;
  }
  // records the first failure and wakes every waiting rank (lock held)
  void fail(std::exception_ptr e, rank_index r) {
    if (!aborted_) {
      aborted_ = true;
      failure_ = std::move(e);
      failed_rank_ = r;
    }
    changed.notify_all();
  }
  template <class E>
  [[noreturn]] void fail_locked(rank_index me, E e) {
    fail(std::make_exception_ptr(e), me);
    throw e;
  }
  [[noreturn]] void throw_aborted(rank_index me, std::string_view step) const {
    throw comm_aborted(std::string(name_) + ": rank " + std::to_string(me) + " stopped because rank " +
                           std::to_string(failed_rank_) + " failed, at step '" + std::string(step) + "'",
                       {{"rank", double(me)}, {"failed_rank", double(failed_rank_)}}, std::string(step), __FILE__, __LINE__);
  }

  const char* name_;
  rank_index ranks_;
  std::chrono::milliseconds timeout_;
  std::vector<std::deque<Message>> boxes_;  // [src * ranks + dst]
  std::vector<bool> finished_;
  std::vector<std::vector<mailbox_need>> needs_;  // empty: running
  std::vector<std::string> waiting_step_;
  bool aborted_ = false;
  std::exception_ptr failure_;
  rank_index failed_rank_ = -1;
};

//! A rank's handle on a mailbox_world: identity and grouped posting. Derived provides
//! group_end(step), which calls close_group() and delivers what it returns.
template <class Derived, class Message>
class mailbox_comm {
 public:
  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  [[nodiscard]] rank_index size() const noexcept { return world_->ranks(); }
  //! Node of rank r: r / gpus_per_node. Throws invalid_argument for a rank outside the world.
  [[nodiscard]] int node_of(rank_index r) const {
    check_peer(r);
    return r / gpus_per_node_;
  }
  [[nodiscard]] int gpus_per_node() const noexcept { return gpus_per_node_; }

  void group_start() noexcept { ++depth_; }
  //! Posts a send; it is delivered when the outermost group ends.
  void send(std::span<const std::byte> bytes, rank_index peer) {
    check_peer(peer);
    sends_.push_back({bytes, peer});
    if (depth_ == 0) static_cast<Derived*>(this)->group_end("ungrouped");
  }
  //! Posts a receive of exactly bytes.size() bytes.
  void recv(std::span<std::byte> bytes, rank_index peer) {
    check_peer(peer);
    recvs_.push_back({bytes, peer});
    if (depth_ == 0) static_cast<Derived*>(this)->group_end("ungrouped");
  }

 protected:
  struct posted_send {
    std::span<const std::byte> bytes;
    rank_index peer;
  };
  struct posted_recv {
    std::span<std::byte> bytes;
    rank_index peer;
  };

  mailbox_comm(std::shared_ptr<mailbox_world<Message>> world, rank_index rank, int gpus_per_node)
      : world_(std::move(world)), rank_(rank), gpus_per_node_(gpus_per_node) {}

  //! Ends one group level; at the outermost, moves the group's operations out and returns true.
  bool close_group(std::vector<posted_send>& sends, std::vector<posted_recv>& recvs) {
    if (depth_ > 0) --depth_;
    if (depth_ > 0) return false;
    sends = std::move(sends_);
    recvs = std::move(recvs_);
    sends_.clear();
    recvs_.clear();
    return true;
  }
  //! Throws invalid_argument when the rank returns inside a group.
  void check_closed() const {
    ZEPPELIN_EXPECTS(depth_ == 0, std::string(world_->name()) + ": a rank returned inside a group (group_start without group_end)",
                     {{"rank", double(rank_)}, {"depth", double(depth_)}});
  }
  void check_peer(rank_index peer) const {
    ZEPPELIN_EXPECTS(peer >= 0 && peer < world_->ranks(), std::string(world_->name()) + ": peer rank outside the world",
                     {{"rank", double(rank_)}, {"peer", double(peer)}, {"ranks", double(world_->ranks())}});
  }

  std::shared_ptr<mailbox_world<Message>> world_;
  rank_index rank_;

 private:
  int gpus_per_node_;
  int depth_ = 0;
  std::vector<posted_send> sends_;
  std::vector<posted_recv> recvs_;
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
