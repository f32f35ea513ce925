// zeppelin/cuda/device_communicator.hpp
// The stream-ordered variant of comm/communicator.hpp that the CUDA executors are written
// against. Same vocabulary (rank, size, node_of, group_start, send, recv, group_end) and the
// same matching rule (the n-th send a -> b matches the n-th receive b posts from a; a group
// never deadlocks on its own order), plus:
//   stream()          the communication stream: group_end(step) ENQUEUES the group's
//                     transfers on it, ordered after everything enqueued on it before, and
//                     returns without waiting for them
//   synchronize(step) blocks until the work enqueued on stream() has completed; throws
//                     (nccl_error, comm_timeout, ...) on an asynchronous failure or timeout
// Buffers are DEVICE memory. A send buffer must not change, and a receive buffer must not be
// read, until the group's work has completed in stream order: record an event on stream()
// after group_end and make the consumer stream wait for it (stream_wait in stream_set.hpp).
// Producers order themselves the same way: make stream() wait for the stream that wrote a
// send buffer before posting the group.
// Models: nccl_communicator (nccl/communicator.hpp), device_loopback_comm
// (cuda/device_loopback.hpp). nvcc-safe.
#pragma once

#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/core/config.hpp>

#include <cuda_runtime_api.h>

#include <concepts>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

template <class C>
concept device_communicator = communicator<C> && requires(C& c, const C& cc, std::string_view step) {
  { cc.stream() } -> std::convertible_to<cudaStream_t>;
  c.synchronize(step);
};

ZEPPELIN_NAMESPACE_END
