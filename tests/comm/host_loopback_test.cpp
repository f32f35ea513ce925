// Host loopback world: NCCL-style matching and groups, collectives, and failure modes
// (mismatched schedules end with a clear error, never a hang).
#include <catch2/catch.hpp>

#include <zeppelin/comm.hpp>
#include <zeppelin/core/random.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace zeppelin;
using namespace std::chrono_literals;

namespace {

// What a rank that gets stuck on purpose blocks on. The world leaves a stuck rank's thread
// running detached, so the body must own what it touches (a shared_ptr to this, by value),
// never the test's stack. The test opens it afterwards and waits until the thread is done.
struct stuck_gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  bool done = false;
  std::atomic<bool> open_flag{false};

  void block() {  // asleep until opened (10 s at most)
    std::unique_lock lock(m);
    cv.wait_for(lock, 10s, [&] { return open; });
  }
  void spin() {  // busy until opened (10 s at most)
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (!open_flag && std::chrono::steady_clock::now() < end) std::this_thread::yield();
  }
  void finish() {
    std::lock_guard lock(m);
    done = true;
    cv.notify_all();
  }
  // opens the gate and waits for the stuck body to return
  bool release() {
    std::unique_lock lock(m);
    open = true;
    open_flag = true;
    cv.notify_all();
    return cv.wait_for(lock, 10s, [&] { return done; });
  }
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST_CASE("ring exchange in one group delivers every rank's buffer to its successor", "[comm]") {
  for (rank_index n : {1, 2, 3, 5, 8}) {
    host_loopback_world world{.ranks = n, .gpus_per_node = 1, .timeout = 5000ms};
    std::vector<std::vector<int>> got(static_cast<std::size_t>(n));
    std::vector<char> identity_ok(static_cast<std::size_t>(n), 0);  // checked after run: Catch2 is not thread-safe
    world.run([&](host_loopback_comm& c) {
      identity_ok[static_cast<std::size_t>(c.rank())] = c.size() == n && c.node_of(c.rank()) == c.rank();
      std::vector<int> mine(static_cast<std::size_t>(3 + c.rank()), c.rank());
      const rank_index prev = (c.rank() + n - 1) % n, next = (c.rank() + 1) % n;
      std::vector<int> in(static_cast<std::size_t>(3 + prev));
      c.group_start();
      recv_elements(c, std::span<int>(in), prev);  // receive posted before the send: still fine
      send_elements(c, std::span<const int>(mine), next);
      c.group_end("ring");
      got[static_cast<std::size_t>(c.rank())] = in;
    });
    for (rank_index r = 0; r < n; ++r) {
      CHECK(identity_ok[static_cast<std::size_t>(r)]);
      CHECK(got[static_cast<std::size_t>(r)] ==
            std::vector<int>(static_cast<std::size_t>(3 + (r + n - 1) % n), (r + n - 1) % n));
    }
  }
}

TEST_CASE("messages between one pair match in posting order across groups", "[comm]") {
  host_loopback_world world{.ranks = 2, .timeout = 5000ms};
  std::vector<int> received;
  world.run([&](host_loopback_comm& c) {
    if (c.rank() == 0) {
      for (int i = 0; i < 4; ++i) {
        const int x = 10 + i;
        c.group_start();
        c.send(std::as_bytes(std::span<const int>(&x, 1)), 1);
        c.group_end("send " + std::to_string(i));
      }
    } else {
      std::vector<int> xs(4);
      c.group_start();  // one group receiving all four: matched FIFO
      for (auto& x : xs) c.recv(std::as_writable_bytes(std::span<int>(&x, 1)), 0);
      c.group_end("recv all");
      received = xs;
    }
  });
  CHECK(received == std::vector<int>{10, 11, 12, 13});
}

TEST_CASE("all_to_all_v and all_gather_v move the right elements", "[comm]") {
  const rank_index n = 4;
  host_loopback_world world{.ranks = n, .gpus_per_node = 2, .timeout = 5000ms};
  // per rank: node_of, the elements all_to_all_v delivered, all_gather_v's result (odd ranks);
  // checked after run, as Catch2 is not thread-safe
  std::vector<char> node_ok(n, 0), a2a_ok(n, 0);
  std::vector<std::vector<int>> gathered(n);
  world.run([&](host_loopback_comm& c) {
    const rank_index me = c.rank();
    node_ok[static_cast<std::size_t>(me)] = c.node_of(me) == me / 2;
    // rank r sends (r + p) % 3 elements valued 100 r + p to peer p
    std::vector<token_count> sc(n), sd(n), rc(n), rd(n);
    token_count so = 0, ro = 0;
    for (rank_index p = 0; p < n; ++p) {
      sc[static_cast<std::size_t>(p)] = (me + p) % 3, sd[static_cast<std::size_t>(p)] = so, so += (me + p) % 3;
      rc[static_cast<std::size_t>(p)] = (p + me) % 3, rd[static_cast<std::size_t>(p)] = ro, ro += (p + me) % 3;
    }
    std::vector<int> out(static_cast<std::size_t>(so)), in(static_cast<std::size_t>(ro), -1);
    for (rank_index p = 0; p < n; ++p)
      for (token_count i = 0; i < sc[static_cast<std::size_t>(p)]; ++i)
        out[static_cast<std::size_t>(sd[static_cast<std::size_t>(p)] + i)] = 100 * me + p;
    all_to_all_v(c, std::span<const int>(out), std::span<const token_count>(sc), std::span<const token_count>(sd),
                 std::span<int>(in), std::span<const token_count>(rc), std::span<const token_count>(rd), "a2a");
    bool delivered = true;
    for (rank_index p = 0; p < n; ++p)
      for (token_count i = 0; i < rc[static_cast<std::size_t>(p)]; ++i)
        delivered = delivered && in[static_cast<std::size_t>(rd[static_cast<std::size_t>(p)] + i)] == 100 * p + me;
    a2a_ok[static_cast<std::size_t>(me)] = delivered;
    // all-gather over the odd ranks only, ring order {3, 1}
    if (me % 2 == 1) {
      const std::vector<rank_index> group{3, 1};
      const std::vector<token_count> counts{2, 1};
      std::vector<int> mine(me == 3 ? 2 : 1, me), all(3, -1);
      all_gather_v(c, std::span<const rank_index>(group), std::span<const int>(mine), std::span<int>(all),
                   std::span<const token_count>(counts), "gather odd");
      gathered[static_cast<std::size_t>(me)] = all;
    }
  });
  for (rank_index r = 0; r < n; ++r) {
    CHECK(node_ok[static_cast<std::size_t>(r)]);
    CHECK(a2a_ok[static_cast<std::size_t>(r)]);
    CHECK(gathered[static_cast<std::size_t>(r)] == (r % 2 == 1 ? std::vector<int>{3, 3, 1} : std::vector<int>{}));
  }
}

TEST_CASE("a cyclic wait is reported at once as a deadlock naming ranks and steps", "[comm]") {
  host_loopback_world world{.ranks = 3, .timeout = 60000ms};  // detection must not need the timeout
  const auto start = std::chrono::steady_clock::now();
  try {
    world.run([](host_loopback_comm& c) {
      int x = 0;
      // every rank receives from its predecessor and nobody sends: a mismatched schedule
      c.group_start();
      c.recv(std::as_writable_bytes(std::span<int>(&x, 1)), (c.rank() + 2) % 3);
      c.group_end("round " + std::to_string(7));
    });
    FAIL("no error");
  } catch (const comm_timeout& e) {
    const std::string what = e.what();
    CHECK(what.find("deadlock") != std::string::npos);
    CHECK(what.find("round 7") != std::string::npos);
    CHECK(what.find("rank 0 <- rank 2") != std::string::npos);
    CHECK(e.step() == "round 7");
    CHECK(e.peer() == (e.rank() + 2) % 3);
  }
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("waiting on a rank that already returned fails with the peer and step", "[comm]") {
  host_loopback_world world{.ranks = 2, .timeout = 60000ms};
  try {
    world.run([](host_loopback_comm& c) {
      if (c.rank() == 1) return;
      int x = 0;
      c.recv(std::as_writable_bytes(std::span<int>(&x, 1)), 1);
    });
    FAIL("no error");
  } catch (const comm_timeout& e) {
    CHECK(e.rank() == 0);
    CHECK(e.peer() == 1);
    CHECK(e.step() == "ungrouped");
    CHECK(std::string(e.what()).find("already returned") != std::string::npos);
  }
}

TEST_CASE("the watchdog ends a wait on a rank that is busy for too long, naming what the peer does", "[comm]") {
  // rank 1 computes for 2 s, longer than the 1.5 s timeout but within the 1.5 s the others
  // get after the failure: it returns (with comm_aborted) and is not left running
  host_loopback_world world{.ranks = 2, .timeout = 1500ms};
  const auto aborted_seen = std::make_shared<std::atomic<bool>>(false);  // owned by the body too
  try {
    world.run([aborted_seen](host_loopback_comm& c) {
      int x = 1;
      if (c.rank() == 1) {
        std::this_thread::sleep_for(2000ms);  // "computing"
        try {
          c.send(std::as_bytes(std::span<const int>(&x, 1)), 0);
        } catch (const comm_aborted&) {
          *aborted_seen = true;
          throw;
        }
        return;
      }
      c.group_start();
      c.recv(std::as_writable_bytes(std::span<int>(&x, 1)), 1);
      c.group_end("forward round 3");
    });
    FAIL("no error");
  } catch (const comm_timeout& e) {
    CHECK(e.rank() == 0);
    CHECK(e.peer() == 1);
    CHECK(e.step() == "forward round 3");
    const std::string what = e.what();
    CHECK(what.find("rank 0 timed out after 1500 ms waiting for a message from rank 1 at step 'forward round 3'") !=
          std::string::npos);
    CHECK(what.find("rank 1 runs outside the communicator: it has not called the communicator") != std::string::npos);
  }
  CHECK(*aborted_seen);
}

TEST_CASE("size mismatches, unreceived messages and exceptions propagate to run()", "[comm]") {
  host_loopback_world world{.ranks = 2, .timeout = 5000ms};
  CHECK_THROWS_AS(world.run([](host_loopback_comm& c) {
                    std::vector<int> buf(c.rank() == 0 ? 2 : 3);
                    if (c.rank() == 0) send_elements(c, std::span<const int>(buf), 1);
                    else recv_elements(c, std::span<int>(buf), 0);
                  }),
                  comm_mismatch);
  CHECK_THROWS_AS(world.run([](host_loopback_comm& c) {
                    int x = 0;
                    if (c.rank() == 0) c.send(std::as_bytes(std::span<const int>(&x, 1)), 1);
                  }),
                  comm_mismatch);
  // a user exception on one rank wakes the other, which is blocked in a receive; the root
  // cause wins (not the other rank's comm_aborted), named by rank and kept as the nested one
  try {
    world.run([](host_loopback_comm& c) {
      if (c.rank() == 1) throw std::runtime_error("boom on rank 1");
      int x = 0;
      c.recv(std::as_writable_bytes(std::span<int>(&x, 1)), 1);
    });
    FAIL("no error");
  } catch (const rank_failed& e) {
    CHECK(e.rank() == 1);
    CHECK(std::string(e.what()).find("rank 1 failed before its first step: boom on rank 1") != std::string::npos);
    CHECK_THROWS_WITH(std::rethrow_if_nested(e), "boom on rank 1");
  }
  try {
    world.run([](host_loopback_comm& c) { c.group_start(); });
    FAIL("no error");
  } catch (const rank_failed& e) {
    CHECK(std::string(e.what()).find("a rank returned inside a group") != std::string::npos);
    CHECK_THROWS_AS(std::rethrow_if_nested(e), invalid_argument);
  }
  CHECK_THROWS_AS((host_loopback_world{.ranks = 3, .gpus_per_node = 2}.run([](host_loopback_comm&) {})), invalid_argument);
  // the world is reusable after failures
  int sum = 0;
  world.run([&](host_loopback_comm& c) {
    int x = c.rank() + 1, y = 0;
    c.group_start();
    c.send(std::as_bytes(std::span<const int>(&x, 1)), 1 - c.rank());
    c.recv(std::as_writable_bytes(std::span<int>(&y, 1)), 1 - c.rank());
    c.group_end("swap");
    if (c.rank() == 0) sum = x + y;
  });
  CHECK(sum == 3);
}

TEST_CASE("a rank's exception names the rank, its last step and the original, which stays typed", "[comm]") {
  host_loopback_world world{.ranks = 3, .timeout = 60000ms};  // the others must stop at once, not after the timeout
  const auto start = std::chrono::steady_clock::now();
  try {
    world.run([](host_loopback_comm& c) {
      int x = c.rank(), y = 0;
      const rank_index next = (c.rank() + 1) % 3, prev = (c.rank() + 2) % 3;
      c.group_start();
      c.send(std::as_bytes(std::span<const int>(&x, 1)), next);
      c.recv(std::as_writable_bytes(std::span<int>(&y, 1)), prev);
      c.group_end("round 4");
      if (c.rank() == 1) ZEPPELIN_THROW(invalid_argument, "rank 1 found a bad shard", {{"shard", 7}});
      if (c.rank() == 2) std::this_thread::sleep_for(200ms);  // still computing when rank 1 fails
      c.group_start();
      c.recv(std::as_writable_bytes(std::span<int>(&y, 1)), prev);  // rank 0 and 2 wait for rank 1 or 2
      c.send(std::as_bytes(std::span<const int>(&x, 1)), next);
      c.group_end("round 5");
    });
    FAIL("no error");
  } catch (const rank_failed& e) {
    CHECK(e.rank() == 1);
    CHECK(e.step() == "round 4");
    CHECK(e.value("rank") == 1.0);
    const std::string what = e.what();
    CHECK(what.find("host loopback: rank 1 failed at step 'round 4': rank 1 found a bad shard (shard=7)") != std::string::npos);
    // the original, typed, with its values
    try {
      std::rethrow_if_nested(e);
      FAIL("nothing nested");
    } catch (const invalid_argument& original) {
      CHECK(original.value("shard") == 7.0);
    }
  }
  CHECK(seconds_since(start) < 10.0);
  // an exception not derived from std::exception
  try {
    world.run([](host_loopback_comm& c) {
      if (c.rank() == 2) throw 42;
    });
    FAIL("no error");
  } catch (const rank_failed& e) {
    CHECK(e.rank() == 2);
    CHECK(e.step().empty());
    CHECK(std::string(e.what()).find("rank 2 failed before its first step: an exception not derived from std::exception") !=
          std::string::npos);
    CHECK_THROWS_AS(std::rethrow_if_nested(e), int);
  }
}

TEST_CASE("a rank stuck outside the communicator is reported and left running detached, never a hang", "[comm]") {
  // rank 1 sleeps for up to 10 s; the others return (no rank waits): the watchdog judges it
  host_loopback_world world{.ranks = 3, .timeout = 200ms};
  for (const bool warm_up : {false, true}) {
    INFO("after a warm-up step: " << warm_up);
    const auto gate = std::make_shared<stuck_gate>();
    const auto start = std::chrono::steady_clock::now();
    try {
      world.run([gate, warm_up](host_loopback_comm& c) {
        if (warm_up) {
          int x = c.rank(), y = 0;
          c.group_start();
          c.send(std::as_bytes(std::span<const int>(&x, 1)), (c.rank() + 1) % 3);
          c.recv(std::as_writable_bytes(std::span<int>(&y, 1)), (c.rank() + 2) % 3);
          c.group_end("warm-up");
        }
        if (c.rank() == 1) {
          gate->block();
          gate->finish();
        }
      });
      FAIL("no error");
    } catch (const comm_timeout& e) {
      CHECK(e.rank() == 1);
      CHECK(e.peer() == -1);
      CHECK(e.step() == (warm_up ? "warm-up" : ""));
      const std::string what = e.what();
      CHECK(what.find("rank 1 is stuck") != std::string::npos);
      CHECK(what.find(warm_up ? "at step 'warm-up'" : "since it started") != std::string::npos);
      CHECK(what.find("(the timeout is 200 ms); its thread is left running, detached") != std::string::npos);
    }
    const double took = seconds_since(start);
    CHECK(took < 2.0);  // about 2 x 200 ms; nowhere near the 10 s the rank sleeps
    CHECK(gate->release());
  }
  // the world still works
  int sum = 0;
  world.run([&](host_loopback_comm& c) {
    int x = c.rank(), y = 0;
    c.group_start();
    c.send(std::as_bytes(std::span<const int>(&x, 1)), (c.rank() + 1) % 3);
    c.recv(std::as_writable_bytes(std::span<int>(&y, 1)), (c.rank() + 2) % 3);
    c.group_end("ring");
    if (c.rank() == 0) sum = y;
  });
  CHECK(sum == 2);
}

TEST_CASE("a rank spinning outside the communicator while others wait on it: the waiter's timeout, then a detached rank",
          "[comm]") {
  host_loopback_world world{.ranks = 3, .timeout = 200ms};
  const auto gate = std::make_shared<stuck_gate>();
  const auto start = std::chrono::steady_clock::now();
  try {
    world.run([gate](host_loopback_comm& c) {
      int x = 0;
      if (c.rank() == 1) {
        gate->spin();  // never calls the communicator
        gate->finish();
        return;
      }
      if (c.rank() == 0) {
        c.group_start();
        c.recv(std::as_writable_bytes(std::span<int>(&x, 1)), 1);
        c.group_end("round 2");
      }
    });
    FAIL("no error");
  } catch (const comm_timeout& e) {
    // the stuck rank, left running: rank 0's timeout is the nested cause
    CHECK(e.rank() == 1);
    CHECK(e.peer() == -1);
    const std::string what = e.what();
    CHECK(what.find("rank 1 did not return within 200 ms after rank 0 failed") != std::string::npos);
    CHECK(what.find("its thread is left running, detached") != std::string::npos);
    try {
      std::rethrow_if_nested(e);
      FAIL("nothing nested");
    } catch (const comm_timeout& cause) {
      CHECK(cause.rank() == 0);
      CHECK(cause.peer() == 1);
      CHECK(cause.step() == "round 2");
      const std::string why = cause.what();
      CHECK(why.find("rank 0 timed out after 200 ms waiting for a message from rank 1 at step 'round 2'") != std::string::npos);
      CHECK(why.find("rank 1 runs outside the communicator") != std::string::npos);
    }
  }
  CHECK(seconds_since(start) < 2.0);
  CHECK(gate->release());
}

TEST_CASE("slow ranks that finish within the watchdog are fine", "[comm]") {
  host_loopback_world world{.ranks = 2, .timeout = 3000ms};
  int got = 0;
  world.run([&](host_loopback_comm& c) {
    int x = 5;
    if (c.rank() == 1) {
      std::this_thread::sleep_for(300ms);  // rank 0 waits meanwhile
      c.send(std::as_bytes(std::span<const int>(&x, 1)), 0);
      std::this_thread::sleep_for(300ms);  // alone after rank 0 returned
      return;
    }
    c.recv(std::as_writable_bytes(std::span<int>(&got, 1)), 1);
  });
  CHECK(got == 5);
}
