// zeppelin/comm/detail/mailbox.hpp
// The matching, failure and watchdog rules shared by the loopback worlds
// (comm/host_loopback.hpp: ranks as host threads; cuda/device_loopback.hpp: ranks on one GPU).
// What a message holds (bytes, a device pointer and events) and how a group completes stay
// with each world.
//   mailbox_world<Message>   one FIFO mailbox per ordered (src, dst) pair under one mutex, the
//                            ranks' waits and last steps, the first failure, and run_ranks():
//                            `ranks` threads, watched until they return
//   mailbox_comm<D, Message> a rank's handle (CRTP): rank, size, node_of, grouped posting of
//                            sends and receives (an operation outside a group is a group of
//                            one labelled "ungrouped"); D::group_end does the delivery
// Steps: a rank's step is the label of the last (outermost) group it passed to the
// communicator (enter()); "before its first step" when there is none.
// Waits: a rank blocks until every mailbox_need is met: `messages` messages queued from
// `peer`, or *taken set (the peer has received our send). It fails at once with comm_timeout
// when it can never be served - every live rank waits on something no rank will provide (a
// deadlock; the message lists each waiting rank, its peer and step) or the peer has returned -
// else after the timeout (the message says what the peer is doing: waiting at a step, or
// running outside the communicator since its last step, and for how long). A matched send of
// another size is a comm_mismatch; so are messages left when every rank returned.
// Failures: the first one ends the run. An exception of a rank's body becomes rank_failed
// ("rank R failed at step 'S': <what()>", the original nested); the world's own errors
// (comm_timeout, comm_mismatch) already name the rank and step and stay as they are. Every
// other rank stops with comm_aborted when it next enters the communicator or waits.
// Watchdog (run_ranks, on the calling thread): while no rank waits in the communicator (a
// waiting rank times out by itself), a rank that has neither returned nor called the
// communicator for `timeout` is stuck, and the run fails with comm_timeout naming it. After
// any failure the other ranks get `timeout` to return. A thread still running then cannot be
// stopped: it is DETACHED, and run_ranks throws comm_timeout naming its rank, its last step and
// how long it has been away from the communicator (the first failure nested, unless it was
// that rank's own watchdog verdict). Memory: every thread co-owns the world and the body
// (shared_ptr), so a detached thread never touches run_ranks' frame, and gets comm_aborted
// when it next calls the communicator; what the body REFERS to (captures by reference) is
// the caller's to keep alive for as long as such a thread may run.
// nvcc-safe (host code).
#pragma once

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/comm/world_id.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
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
  using clock = std::chrono::steady_clock;

  mailbox_world(const char* name, rank_index ranks, std::chrono::milliseconds timeout)
      : name_(name),
        ranks_(ranks),
        timeout_(timeout),
        boxes_(index(ranks) * index(ranks)),
        finished_(index(ranks), false),
        needs_(index(ranks)),
        waiting_step_(index(ranks)),
        last_step_(index(ranks)),
        progress_(index(ranks), clock::now()) {}

  std::mutex mutex;
  std::condition_variable changed;  //!< a message, a receipt, a wait, a return or a failure

  [[nodiscard]] const char* name() const noexcept { return name_; }
  [[nodiscard]] rank_index ranks() const noexcept { return ranks_; }
  //! This world's process-unique id (comm/world_id.hpp).
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

  //! The mailbox of the ordered pair (lock held).
  std::deque<Message>& box(rank_index src, rank_index dst) { return boxes_[index(src) * index(ranks_) + index(dst)]; }
  //! The oldest message from src to dst (lock held; the caller waited for it).
  Message take(rank_index src, rank_index dst) {
    auto& b = box(src, dst);
    Message m = std::move(b.front());
    b.pop_front();
    return m;
  }

  //! `me` enters the communicator at `step` (an outermost group_end), which becomes its last
  //! step; throws comm_aborted when another rank has failed (lock held).
  void enter(rank_index me, std::string_view step) {
    last_step_[index(me)] = std::string(step);
    progress_[index(me)] = clock::now();
    if (aborted_) throw_aborted(me, step);
  }

  //! Blocks `me` until every need is met (lock held through `lock`); see the file comment for
  //! the failures. A wait that is served returns even after another rank failed, so every rank
  //! whose group could complete completes it (the next enter() throws comm_aborted).
  void wait(std::unique_lock<std::mutex>& lock, rank_index me, std::vector<mailbox_need> needs, std::string_view step) {
    const auto i = index(me);
    needs_[i] = std::move(needs);
    waiting_step_[i] = std::string(step);
    struct leave {
      std::vector<mailbox_need>& needs;
      ~leave() { needs.clear(); }
    } guard{needs_[i]};
    const auto deadline = clock::now() + timeout_;
    changed.notify_all();  // this wait may complete a deadlock another rank can see
    for (;;) {
      if (served(me)) {
        progress_[i] = clock::now();
        return;
      }
      if (aborted_) throw_aborted(me, step);
      for (const mailbox_need& n : needs_[i])
        if (!met(me, n) && finished_[index(n.peer)])
          fail_locked(me, comm_timeout(std::string(name_) + ": rank " + std::to_string(me) + " waits for " + what(n) + " rank " +
                                           std::to_string(n.peer) + ", which has already returned, at step '" +
                                           std::string(step) + "'",
                                       me, n.peer, std::string(step), __FILE__, __LINE__));
      if (deadlocked()) {
        std::ostringstream msg;
        msg << name_ << ": deadlock, every live rank waits for something no rank will provide:";
        for (rank_index r = 0; r < ranks_; ++r)
          for (const mailbox_need& n : needs_[index(r)])
            if (!met(r, n)) msg << " rank " << r << (n.taken ? " -> rank " : " <- rank ") << n.peer << " at step '" << waiting_step_[index(r)] << "';";
        fail_locked(me, comm_timeout(msg.str(), me, first_missing(me), std::string(step), __FILE__, __LINE__));
      }
      if (changed.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && !served(me)) {
        const mailbox_need* n = nullptr;
        for (const mailbox_need& x : needs_[i])
          if (!n && !met(me, x)) n = &x;
        fail_locked(me, comm_timeout(std::string(name_) + ": rank " + std::to_string(me) + " timed out after " +
                                         std::to_string(timeout_.count()) + " ms waiting for " + what(*n) + " rank " +
                                         std::to_string(n->peer) + " at step '" + std::string(step) + "'; rank " +
                                         std::to_string(n->peer) + " " + where(n->peer),
                                     me, n->peer, std::string(step), __FILE__, __LINE__));
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

  //! Runs body(r) on one thread per rank of `self` and watches them (see the file comment).
  //!   in : the world (fresh: empty mailboxes, no failure), body(rank_index) - moved into a
  //!        shared_ptr that every thread co-owns, as it co-owns the world
  //!   out: returns when every rank returned and every message was received; else throws the
  //!        first failure (rank_failed, comm_timeout, comm_mismatch), or comm_timeout naming a
  //!        rank left running, detached (the first failure nested, unless it was that rank's
  //!        own watchdog timeout), or comm_mismatch for messages never received
  template <class Body>
  static void run_ranks(const std::shared_ptr<mailbox_world>& self, Body body) {
    mailbox_world& w = *self;
    const auto shared = std::make_shared<Body>(std::move(body));
    std::vector<std::thread> threads(index(w.ranks_));
    {
      std::lock_guard lock(w.mutex);
      std::fill(w.progress_.begin(), w.progress_.end(), clock::now());
    }
    rank_index started = 0;
    try {
      for (; started < w.ranks_; ++started)
        threads[index(started)] = std::thread([self, shared, r = started] { self->run_one(*shared, r); });
    } catch (...) {  // no thread for rank `started`: the ranks that run are aborted
      std::lock_guard lock(w.mutex);
      w.fail(std::current_exception(), -1);
      for (rank_index r = started; r < w.ranks_; ++r) w.finished_[index(r)] = true;
    }
    std::unique_lock lock(w.mutex);
    const std::vector<rank_index> stuck = w.watch(lock);
    lock.unlock();
    for (rank_index r = 0; r < w.ranks_; ++r) {
      std::thread& t = threads[index(r)];
      if (!t.joinable()) continue;
      if (std::find(stuck.begin(), stuck.end(), r) != stuck.end()) {
        t.detach();  // it cannot be stopped; it co-owns the world and the body
      } else {
        t.join();  // it has returned (finished_ is set just before its thread ends)
      }
    }
    if (!stuck.empty()) {
      lock.lock();
      w.throw_stuck(stuck);
    }
    // every thread has been joined: nothing else touches the world
    if (w.failure_) std::rethrow_exception(w.failure_);
    for (rank_index src = 0; src < w.ranks_; ++src)
      for (rank_index dst = 0; dst < w.ranks_; ++dst)
        if (const auto& b = w.box(src, dst); !b.empty())
          throw comm_mismatch(std::string(w.name_) + ": " + std::to_string(b.size()) + " message(s) from rank " + std::to_string(src) +
                                  " to rank " + std::to_string(dst) + " were never received (first sent at step '" +
                                  b.front().step + "')",
                              {{"src", double(src)}, {"dst", double(dst)}, {"messages", double(b.size())}}, b.front().step,
                              __FILE__, __LINE__);
  }

 private:
  static std::size_t index(rank_index r) noexcept { return static_cast<std::size_t>(r); }
  static long long millis(clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }
  static std::string what(const mailbox_need& n) { return n.taken ? "its send to be received by" : "a message from"; }
  [[nodiscard]] bool met(rank_index r, const mailbox_need& n) { return n.taken ? *n.taken : box(n.peer, r).size() >= n.messages; }
  [[nodiscard]] bool served(rank_index r) {
    for (const mailbox_need& n : needs_[index(r)])
      if (!met(r, n)) return false;
    return true;
  }
  [[nodiscard]] rank_index first_missing(rank_index r) {
    for (const mailbox_need& n : needs_[index(r)])
      if (!met(r, n)) return n.peer;
    return -1;
  }
  // every live rank waits on something that is not there: nothing can change
  [[nodiscard]] bool deadlocked() {
    bool any = false;
    for (rank_index r = 0; r < ranks_; ++r) {
      const auto i = index(r);
      if (finished_[i]) continue;
      if (needs_[i].empty() || served(r)) return false;
      any = true;
    }
    return any;
  }
  // the last step of rank r, "" before its first
  [[nodiscard]] std::string step_of(rank_index r) const { return last_step_[index(r)].value_or(std::string()); }
  // how long rank r has been away from the communicator, and since which step (lock held)
  [[nodiscard]] std::string silence(rank_index r) const {
    const long long ms = millis(clock::now() - progress_[index(r)]);
    const auto& s = last_step_[index(r)];
    return s ? "its last communicator call was " + std::to_string(ms) + " ms ago, at step '" + *s + "'"
             : "it has not called the communicator in the " + std::to_string(ms) + " ms since it started";
  }
  // what rank r is doing, for the message of a rank that timed out waiting for it (lock held)
  [[nodiscard]] std::string where(rank_index r) const {
    if (finished_[index(r)]) return "has returned";
    if (!needs_[index(r)].empty()) return "waits at step '" + waiting_step_[index(r)] + "'";
    return "runs outside the communicator: " + silence(r);
  }
  // body(r) on this thread; its exception, unless the world already recorded a failure, is
  // the run's failure as rank_failed
  template <class Body>
  void run_one(Body& body, rank_index r) {
    try {
      body(r);
    } catch (...) {
      const std::exception_ptr original = std::current_exception();
      std::lock_guard lock(mutex);
      // otherwise: comm_aborted after another rank's failure, or this rank's own comm_timeout /
      // comm_mismatch, recorded when it was thrown
      if (!aborted_) {
        std::exception_ptr e = original;
        try {
          e = rank_failure(r);
        } catch (...) {  // no memory for the message: report the original
        }
        fail(std::move(e), r);
      }
    }
    std::lock_guard lock(mutex);
    finished_[index(r)] = true;
    progress_[index(r)] = clock::now();
    changed.notify_all();
    returned_.notify_all();
  }
  // rank_failed for the exception being handled, nesting it (lock held; call in a handler)
  [[nodiscard]] std::exception_ptr rank_failure(rank_index r) const {
    std::string what;
    try {
      throw;
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "an exception not derived from std::exception";
    }
    const auto& step = last_step_[index(r)];
    return std::make_exception_ptr(rank_failed(std::string(name_) + ": rank " + std::to_string(r) + " failed " +
                                                   (step ? "at step '" + *step + "'" : std::string("before its first step")) +
                                                   ": " + what,
                                               r, step_of(r), __FILE__, __LINE__));
  }
  // waits (lock held through `lock`) until every rank returned, applying the watchdog; returns
  // the ranks still running when the `timeout` granted after the first failure ran out
  std::vector<rank_index> watch(std::unique_lock<std::mutex>& lock) {
    for (;;) {
      const auto now = clock::now();
      std::vector<rank_index> running;
      bool waiting = false;
      for (rank_index r = 0; r < ranks_; ++r)
        if (!finished_[index(r)]) {
          running.push_back(r);
          waiting = waiting || !needs_[index(r)].empty();
        }
      if (running.empty()) return running;
      if (aborted_) {
        if (now >= failed_at_ + timeout_) return running;
        returned_.wait_until(lock, failed_at_ + timeout_);
        continue;
      }
      // waits do not notify this thread when they end: look again at least every `timeout`
      auto next = now + timeout_;
      if (!waiting) {  // a waiting rank times out by itself; else the quietest rank is judged
        rank_index quiet = running.front();
        for (const rank_index r : running)
          if (progress_[index(r)] < progress_[index(quiet)]) quiet = r;
        const auto due = progress_[index(quiet)] + timeout_;
        if (now >= due) {
          stuck_rank_ = quiet;
          fail(std::make_exception_ptr(comm_timeout(std::string(name_) + ": rank " + std::to_string(quiet) +
                                                        " is stuck: no rank waits in the communicator and it has not returned; " +
                                                        silence(quiet) + " (the timeout is " + std::to_string(timeout_.count()) +
                                                        " ms)",
                                                    quiet, -1, step_of(quiet), __FILE__, __LINE__)),
               quiet);
          continue;
        }
        next = std::min(next, due);
      }
      returned_.wait_until(lock, next);
    }
  }
  // throws comm_timeout for the ranks left running (lock held); nests the first failure
  // unless it was the watchdog's verdict on the rank reported
  [[noreturn]] void throw_stuck(const std::vector<rank_index>& stuck) {
    const bool own = std::find(stuck.begin(), stuck.end(), stuck_rank_) != stuck.end();
    const rank_index r = own ? stuck_rank_ : stuck.front();
    std::ostringstream msg;
    msg << name_ << ": rank " << r;
    if (own) {
      msg << " is stuck: no rank waits in the communicator and it has not returned";
    } else {
      msg << " did not return within " << timeout_.count() << " ms after ";
      if (failed_rank_ >= 0) msg << "rank " << failed_rank_ << " failed";
      else msg << "the run failed";
    }
    msg << "; " << silence(r) << " (the timeout is " << timeout_.count() << " ms); its thread is left running, detached";
    if (stuck.size() > 1) {
      msg << " (so are ranks";
      for (const rank_index x : stuck)
        if (x != r) msg << ' ' << x;
      msg << ')';
    }
    const comm_timeout e(msg.str(), r, -1, step_of(r), __FILE__, __LINE__);
    if (own || !failure_) throw e;
    try {
      std::rethrow_exception(failure_);
    } catch (...) {
      std::throw_with_nested(e);
    }
  }
  // records the first failure and wakes every waiting rank and the watcher (lock held)
  void fail(std::exception_ptr e, rank_index r) {
    if (!aborted_) {
      aborted_ = true;
      failure_ = std::move(e);
      failed_rank_ = r;
      failed_at_ = clock::now();
    }
    changed.notify_all();
    returned_.notify_all();
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

  const char* name_;  // a string literal
  std::uint64_t id_ = next_world_id();
  rank_index ranks_;
  std::chrono::milliseconds timeout_;
  std::condition_variable returned_;  // a rank returned, or the run failed (the watcher waits on it)
  std::vector<std::deque<Message>> boxes_;  // [src * ranks + dst]
  std::vector<bool> finished_;
  std::vector<std::vector<mailbox_need>> needs_;  // empty: running
  std::vector<std::string> waiting_step_;
  std::vector<std::optional<std::string>> last_step_;  // the label of the last group entered
  std::vector<clock::time_point> progress_;            // the last entry to or exit from the communicator
  bool aborted_ = false;
  std::exception_ptr failure_;
  rank_index failed_rank_ = -1;
  clock::time_point failed_at_{};
  rank_index stuck_rank_ = -1;  // the rank the watchdog found stuck
};

//! A rank's handle on a mailbox_world: identity and grouped posting. Derived provides
//! group_end(step), which calls close_group() and delivers what it returns.
template <class Derived, class Message>
class mailbox_comm {
 public:
  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  [[nodiscard]] rank_index size() const noexcept { return world_->ranks(); }
  //! The world's id (comm/world_id.hpp): a new one for every run of a loopback world.
  [[nodiscard]] std::uint64_t world_id() const noexcept { return world_->id(); }
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
