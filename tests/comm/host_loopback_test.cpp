// Host loopback world: NCCL-style matching and groups, collectives, and failure modes
// (mismatched schedules end with a clear error, never a hang).
#include <catch2/catch.hpp>

#include <zeppelin/comm.hpp>
#include <zeppelin/core/random.hpp>

#include <atomic>
#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace zeppelin;
using namespace std::chrono_literals;

TEST_CASE("ring exchange in one group delivers every rank's buffer to its successor", "[comm]") {
  for (rank_index n : {1, 2, 3, 5, 8}) {
    host_loopback_world world{.ranks = n, .gpus_per_node = 1, .timeout = 5000ms};
    std::vector<std::vector<int>> got(static_cast<std::size_t>(n));
    world.run([&](host_loopback_comm& c) {
      CHECK(c.size() == n);
      CHECK(c.node_of(c.rank()) == c.rank());
      std::vector<int> mine(static_cast<std::size_t>(3 + c.rank()), c.rank());
      const rank_index prev = (c.rank() + n - 1) % n, next = (c.rank() + 1) % n;
      std::vector<int> in(static_cast<std::size_t>(3 + prev));
      c.group_start();
      recv_elements(c, std::span<int>(in), prev);  // receive posted before the send: still fine
      send_elements(c, std::span<const int>(mine), next);
      c.group_end("ring");
      got[static_cast<std::size_t>(c.rank())] = in;
    });
    for (rank_index r = 0; r < n; ++r)
      CHECK(got[static_cast<std::size_t>(r)] ==
            std::vector<int>(static_cast<std::size_t>(3 + (r + n - 1) % n), (r + n - 1) % n));
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
  world.run([&](host_loopback_comm& c) {
    const rank_index me = c.rank();
    CHECK(c.node_of(me) == me / 2);
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
    for (rank_index p = 0; p < n; ++p)
      for (token_count i = 0; i < rc[static_cast<std::size_t>(p)]; ++i)
        CHECK(in[static_cast<std::size_t>(rd[static_cast<std::size_t>(p)] + i)] == 100 * p + me);
    // all-gather over the odd ranks only, ring order {3, 1}
    if (me % 2 == 1) {
      const std::vector<rank_index> group{3, 1};
      const std::vector<token_count> counts{2, 1};
      std::vector<int> mine(me == 3 ? 2 : 1, me), all(3, -1);
      all_gather_v(c, std::span<const rank_index>(group), std::span<const int>(mine), std::span<int>(all),
                   std::span<const token_count>(counts), "gather odd");
      CHECK(all == std::vector<int>{3, 3, 1});
    }
  });
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

TEST_CASE("the watchdog ends a wait on a rank that is busy for too long", "[comm]") {
  host_loopback_world world{.ranks = 2, .timeout = 50ms};
  std::atomic<bool> aborted_seen{false};
  try {
    world.run([&](host_loopback_comm& c) {
      int x = 1;
      if (c.rank() == 1) {
        std::this_thread::sleep_for(400ms);  // "computing"
        try {
          c.send(std::as_bytes(std::span<const int>(&x, 1)), 0);
        } catch (const comm_aborted&) {
          aborted_seen = true;
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
    CHECK(std::string(e.what()).find("timed out") != std::string::npos);
  }
  CHECK(aborted_seen);
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
  // a user exception on one rank wakes the other, which is blocked in a receive
  try {
    world.run([](host_loopback_comm& c) {
      if (c.rank() == 1) throw std::runtime_error("boom on rank 1");
      int x = 0;
      c.recv(std::as_writable_bytes(std::span<int>(&x, 1)), 1);
    });
    FAIL("no error");
  } catch (const comm_error&) {
    FAIL("the root cause must win");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "boom on rank 1");
  }
  CHECK_THROWS_AS(world.run([](host_loopback_comm& c) { c.group_start(); }), invalid_argument);
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
