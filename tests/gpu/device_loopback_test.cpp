// [gpu] The device loopback world: NCCL's matching and ordering semantics on one GPU (ring
// rounds in one group, FIFO per pair, self sends, stream ordering against a compute stream),
// and its failures (size mismatch, deadlock, unreceived messages) as exceptions, never hangs.
#include "gpu_support.hpp"

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/cuda/stream_set.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {
std::span<const std::byte> bytes_of(const device_buffer<std::int32_t>& b) {
  return {reinterpret_cast<const std::byte*>(b.get()), b.size() * sizeof(std::int32_t)};
}
std::span<std::byte> writable_bytes_of(device_buffer<std::int32_t>& b) {
  return {reinterpret_cast<std::byte*>(b.get()), b.size() * sizeof(std::int32_t)};
}
}  // namespace

TEST_CASE("device loopback: ring rounds deliver every buffer in order, 1..16 ranks", "[gpu][loopback]") {
  ZEPPELIN_REQUIRE_GPU();
  for (const rank_index R : {1, 2, 3, 8, 16}) {
    constexpr int rounds = 5;
    constexpr std::size_t n = 4096;
    std::vector<int> ok(static_cast<std::size_t>(R), 0);
    device_loopback_world{.ranks = R}.run([&](device_loopback_comm& c) {
      const rank_index me = c.rank();
      std::vector<std::int32_t> init(n);
      for (std::size_t i = 0; i < n; ++i) init[i] = static_cast<std::int32_t>(me * 100000 + i);
      device_buffer<std::int32_t> a(init), b(n), second(n);
      device_buffer<std::int32_t>* bufs[2] = {&a, &b};
      for (int k = 0; k < rounds; ++k) {
        device_buffer<std::int32_t>& cur = *bufs[k % 2];
        device_buffer<std::int32_t>& next = *bufs[(k + 1) % 2];
        // comm waits for the compute stream (which "used" cur), sends cur, receives next; two
        // messages to the same peer in one group must match FIFO
        device::stream_wait(c.stream(), c.compute_stream());
        c.group_start();
        c.send(bytes_of(cur), (me + 1) % R);
        c.send(bytes_of(cur), (me + 1) % R);
        c.recv(writable_bytes_of(next), (me - 1 + R) % R);
        c.recv(writable_bytes_of(second), (me - 1 + R) % R);
        c.group_end("round " + std::to_string(k));
        device::stream_wait(c.compute_stream(), c.stream());
      }
      ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(c.compute_stream()));
      const auto got = bufs[rounds % 2]->download();
      const auto dup = second.download();
      const rank_index origin = ((me - rounds) % R + R) % R;
      bool good = true;
      for (std::size_t i = 0; i < n; ++i) good = good && got[i] == static_cast<std::int32_t>(origin * 100000 + i);
      const rank_index last = ((me - rounds) % R + R) % R;  // the duplicate of the last round
      for (std::size_t i = 0; i < n; ++i) good = good && dup[i] == static_cast<std::int32_t>(last * 100000 + i);
      ok[static_cast<std::size_t>(me)] = good ? 1 : 0;
    });
    for (rank_index r = 0; r < R; ++r) CHECK(ok[static_cast<std::size_t>(r)] == 1);
  }
}

TEST_CASE("device loopback: failures are exceptions, not hangs", "[gpu][loopback]") {
  ZEPPELIN_REQUIRE_GPU();
  const device_loopback_world world{.ranks = 2, .timeout = std::chrono::milliseconds(5000)};
  // size mismatch
  CHECK_THROWS_AS(world.run([](device_loopback_comm& c) {
    device_buffer<std::int32_t> a(8), b(4);
    c.group_start();
    if (c.rank() == 0) c.send(bytes_of(a), 1);
    else c.recv(writable_bytes_of(b), 0);
    c.group_end("mismatch");
  }),
                  comm_mismatch);
  // every rank waits for a message nobody sends: a deadlock, detected at once
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(world.run([](device_loopback_comm& c) {
    device_buffer<std::int32_t> a(8);
    c.recv(writable_bytes_of(a), 1 - c.rank());
  }),
                  comm_timeout);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(4000));
  // a message that is never received
  CHECK_THROWS_AS(world.run([](device_loopback_comm& c) {
    device_buffer<std::int32_t> a(8);
    if (c.rank() == 0) {
      c.group_start();
      c.send(bytes_of(a), 0);  // self send, never received
      c.group_end("orphan");
    }
  }),
                  comm_error);
  // invalid configuration
  const device_loopback_world odd{.ranks = 3, .gpus_per_node = 2};
  CHECK_THROWS_AS(odd.run([](device_loopback_comm&) {}), invalid_argument);
}
