// [gpu] The NCCL communicator with one rank (the only NCCL world one GPU can host: a device
// may not hold two ranks of one communicator): grouped send to self, stream ordering,
// node discovery, the remap executor through it, and the unique-id helpers (host-only checks
// run without a device).
#include "gpu_support.hpp"

#include <zeppelin/cuda/executor/remap.hpp>
#include <zeppelin/exec/relayout.hpp>
#include <zeppelin/nccl.hpp>

#include <cstdint>
#include <filesystem>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

TEST_CASE("nccl: unique id round trips through bytes, hex and a file", "[gpu][nccl]") {
  ncclUniqueId id;
  for (std::size_t i = 0; i < sizeof(id.internal); ++i) id.internal[i] = static_cast<char>(i * 37 + 5);
  const ncclUniqueId a = nccl::from_bytes(nccl::to_bytes(id));
  CHECK(std::memcmp(&a, &id, sizeof(id)) == 0);
  const ncclUniqueId b = nccl::from_hex(nccl::to_hex(id));
  CHECK(std::memcmp(&b, &id, sizeof(id)) == 0);
  CHECK_THROWS_AS(nccl::from_hex("abc"), invalid_argument);
  CHECK_THROWS_AS(nccl::from_hex(std::string(2 * sizeof(id), 'g')), invalid_argument);
  const auto path = std::filesystem::temp_directory_path() / "zeppelin_nccl_test_id";
  nccl::write_unique_id(path, id);
  const ncclUniqueId c = nccl::read_unique_id(path, std::chrono::milliseconds(1000));
  CHECK(std::memcmp(&c, &id, sizeof(id)) == 0);
  std::filesystem::remove(path);
  CHECK_THROWS_AS(nccl::read_unique_id(path, std::chrono::milliseconds(50)), nccl_error);
}

TEST_CASE("nccl: one rank sends to itself in one group and remap runs through it", "[gpu][nccl]") {
  ZEPPELIN_REQUIRE_GPU();
  nccl_communicator comm(nccl::make_unique_id(), 1, 0, {.timeout = std::chrono::seconds(60)});
  CHECK(comm.rank() == 0);
  CHECK(comm.size() == 1);
  CHECK(comm.node_of(0) == 0);
  CHECK_THROWS_AS(comm.node_of(1), invalid_argument);
  std::vector<std::int32_t> init(1 << 16);
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = static_cast<std::int32_t>(i * 7 + 1);
  device_buffer<std::int32_t> a(init), b(init.size()), c(init.size());
  b.fill_bytes(0xff), c.fill_bytes(0xff);
  comm.group_start();
  comm.send(std::as_bytes(std::span<const std::int32_t>(a.get(), a.size())), 0);
  comm.recv(std::as_writable_bytes(std::span<std::int32_t>(b.get(), b.size())), 0);
  comm.send(std::as_bytes(std::span<const std::int32_t>(a.get(), a.size() / 2)), 0);
  comm.recv(std::as_writable_bytes(std::span<std::int32_t>(c.get(), c.size() / 2)), 0);
  comm.group_end("self round");
  comm.synchronize("self round");
  CHECK(b.download() == init);
  const auto half = c.download();
  CHECK(std::equal(init.begin(), init.begin() + static_cast<std::ptrdiff_t>(init.size() / 2), half.begin()));

  // a one-rank dispatch: loader layout -> a reversed shard order, every row kept locally
  const batch bt({5, 7, 3});
  const auto loader = loader_layout(bt, 1);
  std::vector<placement> target(1);
  for (sequence_index s = bt.size() - 1; s >= 0; --s) target[0].shards.push_back(shard{s, {0, bt.length(s)}, no_group, 0});
  const relayout_plan x = make_dispatch_plan(loader, target);
  device_buffer<std::int32_t> src(std::vector<std::int32_t>(init.begin(), init.begin() + 15 * 4)), dst(15 * 4);
  dst.fill_bytes(0xff);
  cudaStream_t s = nullptr;
  ZEPPELIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  execute_remap_device(comm, x, src.get(), dst.get(), 4 * sizeof(std::int32_t), s, "one-rank remap");
  ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
  ZEPPELIN_CUDA_CHECK(cudaStreamDestroy(s));
  const auto got = dst.download();
  std::size_t row = 0;
  for (sequence_index q = bt.size() - 1; q >= 0; --q)
    for (token_count i = 0; i < bt.length(q); ++i, ++row)
      for (std::size_t x4 = 0; x4 < 4; ++x4) CHECK(got[row * 4 + x4] == init[static_cast<std::size_t>(bt.offset(q) + i) * 4 + x4]);
}

TEST_CASE("nccl: bad configuration is rejected before NCCL is called", "[gpu][nccl]") {
  ncclUniqueId id{};
  CHECK_THROWS_AS(nccl_communicator(id, 2, 2), invalid_argument);
  CHECK_THROWS_AS(nccl_communicator(id, 4, 0, {.gpus_per_node = 3}), invalid_argument);
}

TEST_CASE("nccl: a borrowed communicator is used, not destroyed", "[gpu][nccl]") {
  CHECK_THROWS_AS(nccl_communicator(borrow_comm, nullptr), invalid_argument);
  ZEPPELIN_REQUIRE_GPU();
  // what a torch trainer hands over: a communicator its process group created (blocking)
  ncclComm_t raw = nullptr;
  ZEPPELIN_NCCL_CHECK(ncclCommInitRank(&raw, 1, nccl::make_unique_id(), 0));
  {
    nccl_communicator comm(borrow_comm, raw, {.timeout = std::chrono::seconds(60), .blocking = true});
    CHECK(comm.ownership() == comm_ownership::borrowed);
    CHECK(comm.rank() == 0);
    CHECK(comm.size() == 1);
    CHECK(comm.node_of(0) == 0);
    std::vector<std::int32_t> init(4096);
    for (std::size_t i = 0; i < init.size(); ++i) init[i] = static_cast<std::int32_t>(i * 3 + 2);
    device_buffer<std::int32_t> a(init), b(init.size());
    b.fill_bytes(0);
    comm.group_start();
    comm.send(std::as_bytes(std::span<const std::int32_t>(a.get(), a.size())), 0);
    comm.recv(std::as_writable_bytes(std::span<std::int32_t>(b.get(), b.size())), 0);
    comm.group_end("borrowed round");
    comm.synchronize("borrowed round");
    CHECK(b.download() == init);
  }
  int count = 0;  // the owner's communicator is still alive after the borrower is gone
  CHECK(ncclCommCount(raw, &count) == ncclSuccess);
  CHECK(count == 1);
  ZEPPELIN_NCCL_CHECK(ncclCommDestroy(raw));
}
