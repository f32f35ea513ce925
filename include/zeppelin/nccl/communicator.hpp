// zeppelin/nccl/communicator.hpp
// The NCCL communicator: ONE ncclComm_t of all ranks (one process per GPU) that serves every
// ring group as a peer list, so nothing is created per step or per group size. It models
// device_communicator (cuda/device_communicator.hpp) and so comm/communicator.hpp.
//   in : the unique id (bootstrapped by the caller: nccl/bootstrap.hpp, MPI_Bcast, a file),
//        the rank count, this rank, options (device, node layout, timeout, blocking mode,
//        communication stream priority)
//   out: group_start / send / recv / group_end(step) = ncclGroupStart, ncclSend / ncclRecv
//        (bytes as ncclInt8) on stream(), ncclGroupEnd: a round's sends and receives are one
//        NCCL group, enqueued on the communication stream (stream-ordered, asynchronous).
// Errors: by default the communicator is NON-BLOCKING (ncclConfig_t::blocking = 0): init and
// ncclGroupEnd may return ncclInProgress, and the communicator polls ncclCommGetAsyncError
// until the operation is issued (NCCL requires this before the next call). synchronize(step)
// polls cudaStreamQuery and ncclCommGetAsyncError. Any asynchronous error, or a wait longer
// than options.timeout, calls ncclCommAbort (so no rank hangs in a dead ring) and throws
// nccl_error whose message names the NCCL operation and the caller's step label. After an
// abort every call throws nccl_error (ncclInvalidUsage).
// Ownership: a communicator made from a unique id owns its ncclComm_t (finalizes and destroys
// it); one made with borrow_comm from an existing ncclComm_t (a PyTorch ProcessGroupNCCL's,
// say) uses it and leaves it to its owner, so a trainer runs zeppelin over the communicator it
// already has instead of opening a second one. An error or a timeout aborts either kind.
// node_of(r): r / gpus_per_node when given, else discovered at construction by an all-gather
// of a hash of each rank's host name (nodes numbered by first appearance in rank order).
// Threading: one thread uses a communicator at a time (as NCCL requires). nvcc-safe.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/comm/world_id.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cuda/device_communicator.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/nccl/error.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Configuration of an nccl_communicator.
struct nccl_options {
  int device = -1;         //!< CUDA device of this rank; -1: the current device
  int gpus_per_node = 0;   //!< node_of(r) = r / gpus_per_node; 0: discover from host names
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  //!< longest wait before abort
  bool blocking = false;   //!< NCCL blocking mode (no polling, no timeout on init / group end)
  bool high_priority_stream = true;  //!< communication stream at the device's greatest priority
};

//! Who destroys a communicator's ncclComm_t.
enum class comm_ownership : std::uint8_t {
  owned = 0,     //!< this object: finalized and destroyed with it
  borrowed = 1,  //!< the code that created it: left alive
};

//! Tag of the constructor that borrows an existing ncclComm_t.
struct borrow_comm_t {
  explicit borrow_comm_t() = default;
};
inline constexpr borrow_comm_t borrow_comm{};

class nccl_communicator {
 public:
  //! Joins the communicator of `nranks` ranks as `rank` (every rank calls it with the same id).
  //! Throws invalid_argument for a bad rank or layout, nccl_error when NCCL fails or times out.
  nccl_communicator(const ncclUniqueId& id, int nranks, int rank, nccl_options options = {})
      : options_(options), rank_(rank), size_(nranks) {
    ZEPPELIN_EXPECTS(nranks >= 1 && rank >= 0 && rank < nranks, "nccl: rank outside the communicator",
                     {{"rank", double(rank)}, {"ranks", double(nranks)}});
    check_options(options, nranks);
    if (options.device >= 0) ZEPPELIN_CUDA_CHECK(cudaSetDevice(options.device));
    ZEPPELIN_CUDA_CHECK(cudaGetDevice(&device_));
    make_stream();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = options.blocking ? 1 : 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, nranks, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm_ != nullptr) (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      throw nccl_error(static_cast<int>(r), nccl::describe(r, "ncclCommInitRankConfig"), __FILE__, __LINE__);
    }
    wait_issued("ncclCommInitRankConfig", "init");
    assign_nodes();
  }

  //! Uses `comm`, an initialised communicator created elsewhere, without owning it: rank, size
  //! and device come from NCCL (ncclCommUserRank, ncclCommCount, ncclCommCuDevice), this
  //! object's stream is created on that device, and the destructor only drains the stream.
  //! options.device is ignored; options.blocking must say how `comm` was created (NCCL's
  //! default, and PyTorch's unless configured otherwise, is blocking: pass .blocking = true).
  //! Throws invalid_argument for a null comm or a bad layout, nccl_error when a query fails.
  nccl_communicator(borrow_comm_t, ncclComm_t comm, nccl_options options = {})
      : options_(options), rank_(0), size_(0), ownership_(comm_ownership::borrowed) {
    ZEPPELIN_EXPECTS(comm != nullptr, "nccl: the borrowed communicator must not be null", {});
    int rank = 0, count = 0;
    ZEPPELIN_NCCL_CHECK(ncclCommUserRank(comm, &rank));
    ZEPPELIN_NCCL_CHECK(ncclCommCount(comm, &count));
    ZEPPELIN_NCCL_CHECK(ncclCommCuDevice(comm, &device_));
    check_options(options, count);
    rank_ = rank, size_ = count;
    ZEPPELIN_CUDA_CHECK(cudaSetDevice(device_));
    make_stream();
    comm_ = comm;
    // the world is the borrowed NCCL communicator: every wrapper of it is in the same world
    world_id_ = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(comm)) | (std::uint64_t{1} << 63);
    assign_nodes();
  }
  nccl_communicator(const nccl_communicator&) = delete;
  nccl_communicator& operator=(const nccl_communicator&) = delete;
  nccl_communicator(nccl_communicator&& o) noexcept
      : options_(o.options_), rank_(o.rank_), size_(o.size_), world_id_(o.world_id_), device_(o.device_), stream_(std::move(o.stream_)),
        comm_(std::exchange(o.comm_, nullptr)), node_(std::move(o.node_)), depth_(o.depth_), ownership_(o.ownership_) {}
  nccl_communicator& operator=(nccl_communicator&&) = delete;

  //! Drains the stream; an owned communicator is then finalized and destroyed (aborted when
  //! that fails), a borrowed one left to its owner.
  ~nccl_communicator() {
    if (comm_ == nullptr) return;
    (void)cudaStreamSynchronize(stream_.get());
    if (ownership_ == comm_ownership::borrowed) return;
    ncclResult_t r = ncclCommFinalize(comm_);
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (r == ncclSuccess || r == ncclInProgress) {
      ncclResult_t state = ncclSuccess;
      r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) break;
      if (state != ncclInProgress) {
        r = state;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        r = ncclInternalError;
        break;
      }
      std::this_thread::yield();
    }
    if (r == ncclSuccess) (void)ncclCommDestroy(comm_);
    else (void)ncclCommAbort(comm_);
  }

  [[nodiscard]] rank_index rank() const noexcept { return rank_; }
  //! The world's id (comm/world_id.hpp): one per communicator created, the NCCL
  //! communicator's own for a borrowed one.
  [[nodiscard]] std::uint64_t world_id() const noexcept { return world_id_; }
  [[nodiscard]] rank_index size() const noexcept { return size_; }
  //! Node of rank r (see the file comment). Throws invalid_argument for a rank outside.
  [[nodiscard]] int node_of(rank_index r) const {
    check_peer(r);
    return node_[static_cast<std::size_t>(r)];
  }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_.get(); }
  [[nodiscard]] comm_ownership ownership() const noexcept { return ownership_; }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] ncclComm_t get() const noexcept { return comm_; }
  [[nodiscard]] bool aborted() const noexcept { return comm_ == nullptr; }

  //! Opens a group (ncclGroupStart); groups nest.
  void group_start() {
    check_alive("ncclGroupStart", "group");
    call(ncclGroupStart(), "ncclGroupStart", "group");
    ++depth_;
  }
  //! Posts ncclSend of the device bytes to `peer` on stream().
  void send(std::span<const std::byte> bytes, rank_index peer) {
    check_peer(peer);
    const bool own = depth_ == 0;
    if (own) group_start();
    call(ncclSend(bytes.data(), bytes.size(), ncclInt8, peer, comm_, stream_.get()), "ncclSend", "ungrouped");
    if (own) group_end("ungrouped");
  }
  //! Posts ncclRecv of exactly bytes.size() device bytes from `peer` on stream().
  void recv(std::span<std::byte> bytes, rank_index peer) {
    check_peer(peer);
    const bool own = depth_ == 0;
    if (own) group_start();
    call(ncclRecv(bytes.data(), bytes.size(), ncclInt8, peer, comm_, stream_.get()), "ncclRecv", "ungrouped");
    if (own) group_end("ungrouped");
  }
  //! Closes a group (ncclGroupEnd); the outermost one waits until NCCL has issued the group
  //! (non-blocking mode) but never for its completion on the device.
  void group_end(std::string_view step) {
    check_alive("ncclGroupEnd", step);
    ZEPPELIN_EXPECTS(depth_ > 0, "nccl: group_end without group_start", {{"rank", double(rank_)}});
    --depth_;
    call(ncclGroupEnd(), "ncclGroupEnd", step);
    if (depth_ == 0) wait_issued("ncclGroupEnd", step);
  }

  //! Blocks until the work enqueued on stream() has completed, polling for NCCL errors; aborts
  //! and throws nccl_error on an error or after options.timeout.
  void synchronize(std::string_view step) {
    check_alive("synchronize", step);
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_.get());
      poll_async("communication", step);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) device::throw_on_cuda_error(e, "cudaStreamQuery(nccl stream)", __FILE__, __LINE__);
      if (std::chrono::steady_clock::now() >= deadline) fail_timeout("communication", step);
      std::this_thread::yield();
    }
  }

  //! Aborts the communicator (ncclCommAbort): pending operations are cancelled and every
  //! later call throws. Peers blocked on this rank see an error (or their own timeout).
  void abort() noexcept {
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  // what both constructors check of the options, for a communicator of `ranks` ranks
  static void check_options(const nccl_options& o, int ranks) {
    ZEPPELIN_EXPECTS(o.gpus_per_node >= 0 && (o.gpus_per_node == 0 || ranks % o.gpus_per_node == 0),
                     "nccl: gpus_per_node must divide the rank count", {{"ranks", double(ranks)}, {"gpus_per_node", double(o.gpus_per_node)}});
    ZEPPELIN_EXPECTS(o.timeout.count() > 0, "nccl: the timeout must be positive", {{"timeout_ms", double(o.timeout.count())}});
  }
  // the communication stream, on the current device
  void make_stream() {
    const device::priority_range pr = device::stream_priorities();
    stream_ = device::cuda_stream(options_.high_priority_stream ? pr.greatest : pr.least);
  }
  // node_of: from options.gpus_per_node, or discovered from host names
  void assign_nodes() {
    if (options_.gpus_per_node == 0) return discover_nodes();
    node_.resize(static_cast<std::size_t>(size_));
    for (int x = 0; x < size_; ++x) node_[static_cast<std::size_t>(x)] = x / options_.gpus_per_node;
  }
  void check_peer(rank_index peer) const {
    ZEPPELIN_EXPECTS(peer >= 0 && peer < size_, "nccl: peer rank outside the communicator",
                     {{"rank", double(rank_)}, {"peer", double(peer)}, {"ranks", double(size_)}});
  }
  void check_alive(std::string_view op, std::string_view step) const {
    if (comm_ == nullptr)
      throw nccl_error(ncclInvalidUsage,
                       "nccl: " + std::string(op) + " at step '" + std::string(step) + "' on an aborted communicator",
                       __FILE__, __LINE__);
  }
  // a call's immediate result: success or in-progress pass, anything else aborts and throws
  void call(ncclResult_t r, std::string_view op, std::string_view step) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fail(r, op, step);
  }
  [[noreturn]] void fail(ncclResult_t r, std::string_view op, std::string_view step) {
    std::string message = nccl::describe(r, "nccl: " + std::string(op) + " at step '" + std::string(step) + "' on rank " +
                                                std::to_string(rank_),
                                         comm_);
    abort();
    throw nccl_error(static_cast<int>(r), message, __FILE__, __LINE__);
  }
  [[noreturn]] void fail_timeout(std::string_view op, std::string_view step) {
    abort();
    throw nccl_error(ncclInternalError,
                     "nccl: " + std::string(op) + " at step '" + std::string(step) + "' on rank " + std::to_string(rank_) +
                         " timed out after " + std::to_string(options_.timeout.count()) + " ms; the communicator was aborted",
                     __FILE__, __LINE__);
  }
  // returns the asynchronous state after throwing on an error
  ncclResult_t poll_async(std::string_view op, std::string_view step) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail(r, "ncclCommGetAsyncError after " + std::string(op), step);
    if (state != ncclSuccess && state != ncclInProgress) fail(state, op, step);
    return state;
  }
  // non-blocking mode: waits until the last operation has been issued (state != InProgress)
  void wait_issued(std::string_view op, std::string_view step) {
    if (options_.blocking) {
      poll_async(op, step);
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (poll_async(op, step) == ncclInProgress) {
      if (std::chrono::steady_clock::now() >= deadline) fail_timeout(op, step);
      std::this_thread::yield();
    }
  }
  // all-gathers a hash of the host name; nodes are numbered by first appearance
  void discover_nodes() {
    char host[256] = {};
    (void)gethostname(host, sizeof(host) - 1);
    std::uint64_t hash = 14695981039346656037ull;  // FNV-1a
    for (const char* c = host; *c != '\0'; ++c) hash = (hash ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
    const auto n = static_cast<std::size_t>(size_);
    device::device_memory buf((n + 1) * sizeof(std::uint64_t), stream_.get());
    auto* all = buf.as<std::uint64_t>();
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(all + n, &hash, sizeof(hash), cudaMemcpyHostToDevice, stream_.get()));
    call(ncclAllGather(all + n, all, sizeof(hash), ncclInt8, comm_, stream_.get()), "ncclAllGather", "node discovery");
    wait_issued("ncclAllGather", "node discovery");
    std::vector<std::uint64_t> hashes(n);
    ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(hashes.data(), all, n * sizeof(std::uint64_t), cudaMemcpyDeviceToHost, stream_.get()));
    synchronize("node discovery");
    node_.assign(n, 0);
    std::vector<std::uint64_t> seen;
    for (std::size_t r = 0; r < n; ++r) {
      const auto it = std::find(seen.begin(), seen.end(), hashes[r]);
      node_[r] = static_cast<int>(it - seen.begin());
      if (it == seen.end()) seen.push_back(hashes[r]);
    }
  }

  nccl_options options_;
  rank_index rank_;
  rank_index size_;
  std::uint64_t world_id_ = next_world_id();
  int device_ = 0;
  device::cuda_stream stream_;
  ncclComm_t comm_ = nullptr;
  std::vector<int> node_;
  int depth_ = 0;
  comm_ownership ownership_ = comm_ownership::owned;
};
static_assert(communicator<nccl_communicator>);
static_assert(device_communicator<nccl_communicator>);

ZEPPELIN_NAMESPACE_END
