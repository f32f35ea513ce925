// bench/gpu/engine_host_bench.cpp
// The host time of the device attention engine per pass: what a rank's thread spends in
// forward() and backward() enqueueing a pass.
// In:  --ranks R (32) --nodes N (4; R / N GPUs per node) --reps 20 --heads 8 --kv-heads 2
//      --head-dim 128
// The plan: Zeppelin's hierarchical partition of a fixed mixed batch (one 32K, one 16K, two 8K,
// four 4K, eight 2K and sixteen 1K sequences, scaled with R / 32) over N x R/N ranks, at 1/8
// capacity slack; bf16. Small sequences keep the kernels short: the measure is the enqueueing.
// Out: two tables.
//   per rank  every rank's passes run alone on one thread, over an echo communicator (each
//             receive gets the bytes this rank sends to the same peer, when the sizes match, so
//             the plan check passes and exchanges cost only their enqueueing, as NCCL's grouped
//             send and receive do on the host): per pass kind the median over ranks of the
//             median over reps (after 2 warm-ups) of the host time of an eager pass and, when
//             the library has graph capture (cuda/graph.hpp), of one replay of the rank's
//             captured pass, with the worst rank and the launches per rank.
//   world     (graph capture) the whole R-rank device loopback world's pass captured into one
//             graph (cuda/device_loopback_graph.hpp): the host time of the one launch that
//             replays every rank's pass, exchanges included.
// Host times only: on one GPU the device times of R ranks mean nothing.
#include "bench_support.hpp"

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/comm/world_id.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/partition/hierarchical.hpp>
#if __has_include(<zeppelin/cuda/graph.hpp>)
#include <zeppelin/cuda/device_loopback_graph.hpp>
#include <zeppelin/cuda/graph.hpp>
#define ZEPPELIN_BENCH_HAS_GRAPH 1
#endif

#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <span>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

using namespace zeppelin;
using zeppelin_bench::fill_random_16bit;
using zeppelin_bench::median;

namespace {

struct options {
  int ranks = 32, nodes = 4, reps = 20;
  int heads = 8, kv_heads = 2, head_dim = 128;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--ranks") o.ranks = v;
    else if (k == "--nodes") o.nodes = v;
    else if (k == "--reps") o.reps = v;
    else if (k == "--heads") o.heads = v;
    else if (k == "--kv-heads") o.kv_heads = v;
    else if (k == "--head-dim") o.head_dim = v;
    else {
      std::fprintf(stderr, "unknown option %s (expected --ranks --nodes --reps --heads --kv-heads --head-dim)\n", k.c_str());
      std::exit(2);
    }
  }
  if (o.nodes < 1 || o.ranks < o.nodes || o.ranks % o.nodes != 0 || o.reps < 1) {
    std::fprintf(stderr, "need --nodes >= 1 dividing --ranks, --reps >= 1 (got %d, %d, %d)\n", o.ranks, o.nodes, o.reps);
    std::exit(2);
  }
  return o;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One rank of an R-rank world on its own: a device communicator whose receive from a peer
// gets the bytes this rank sends to that peer in the same group when the sizes match (else
// nothing), copied on its stream. The plan check's all-gather then sees this rank's identity
// from everyone; exchanges cost only their enqueueing, as NCCL's do on the host.
class echo_comm {
 public:
  echo_comm(rank_index rank, rank_index size, int gpus_per_node, cudaStream_t stream)
      : rank_(rank), size_(size), per_node_(gpus_per_node), stream_(stream), world_(next_world_id()) {}
  [[nodiscard]] rank_index rank() const { return rank_; }
  [[nodiscard]] rank_index size() const { return size_; }
  [[nodiscard]] int node_of(rank_index r) const { return r / per_node_; }
  [[nodiscard]] cudaStream_t stream() const { return stream_; }
  [[nodiscard]] std::uint64_t world_id() const { return world_; }
  void group_start() {}
  void send(std::span<const std::byte> b, rank_index peer) { sends_.push_back({b, peer}); }
  void recv(std::span<std::byte> b, rank_index peer) { recvs_.push_back({b, peer}); }
  void group_end(std::string_view) {
    for (const auto& [into, peer] : recvs_)
      for (const auto& [from, to] : sends_)
        if (to == peer && from.size() == into.size() && !into.empty()) {
          ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(into.data(), from.data(), into.size(), cudaMemcpyDeviceToDevice, stream_));
          break;
        }
    sends_.clear(), recvs_.clear();
  }
  void synchronize(std::string_view) const { ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  rank_index rank_, size_;
  int per_node_;
  cudaStream_t stream_;
  std::uint64_t world_;
  std::vector<std::pair<std::span<const std::byte>, rank_index>> sends_;
  std::vector<std::pair<std::span<std::byte>, rank_index>> recvs_;
};
static_assert(device_communicator<echo_comm>);

std::vector<token_count> mixed_lengths(int ranks) {
  std::vector<token_count> lengths;
  const double scale = ranks / 32.0;
  for (const auto& [length, count] : {std::pair{32768, 1}, {16384, 1}, {8192, 2}, {4096, 4}, {2048, 8}, {1024, 16}})
    for (int i = 0; i < std::max(1, static_cast<int>(count * scale)); ++i) lengths.push_back(length);
  return lengths;
}

// one rank's tensors of both passes
struct rank_tensors {
  device::device_memory q, k, v, o, d_o, dq, dk, dv, lse;
  device_forward_io forward;
  device_backward_io backward;
  rank_tensors(std::size_t rows, const attention_dims& dims, cudaStream_t s, std::uint32_t seed)
      : q(rows * dims.q_row() * 2, s), k(rows * dims.kv_row() * 2, s), v(rows * dims.kv_row() * 2, s), o(rows * dims.q_row() * 2, s),
        d_o(rows * dims.q_row() * 2, s), dq(rows * dims.q_row() * 2, s), dk(rows * dims.kv_row() * 2, s), dv(rows * dims.kv_row() * 2, s),
        lse(rows * dims.heads * sizeof(float), s) {
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
    fill_random_16bit(q.get(), rows * dims.q_row(), 1 + seed);
    fill_random_16bit(k.get(), rows * dims.kv_row(), 100 + seed);
    fill_random_16bit(v.get(), rows * dims.kv_row(), 200 + seed);
    fill_random_16bit(d_o.get(), rows * dims.q_row(), 300 + seed);
    forward = {q.get(), k.get(), v.get(), o.get(), lse.as<float>()};
    backward = {q.get(), k.get(), v.get(), o.get(), d_o.get(), lse.as<float>(), dq.get(), dk.get(), dv.get()};
  }
};

topology bench_topology(int ranks, int nodes) {
  topology_config tc;
  tc.nodes = nodes;
  tc.gpus_per_node = ranks / nodes;
  tc.intra_node = {300e9, 3e-6};
  tc.nic = {48e9, 10e-6};
  tc.gpu = {"bench", 1e15, 80e9, 3e12};
  return topology(tc);
}

plan bench_plan(const batch& b, const topology& t) {
  const token_count capacity = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks() * 9 / 8;
  return hierarchical<>{.capacity = capacity}.partition(b, t);
}

#ifdef ZEPPELIN_BENCH_HAS_GRAPH
// times `reps` replays of each pass's graph (after 2 warm-ups) on s: host microseconds
void time_replays(const device::cuda_graph (&graphs)[2], cudaStream_t s, int reps, std::vector<double> (&us)[2]) {
  for (int rep = 0; rep < reps + 2; ++rep)
    for (int pass = 0; pass < 2; ++pass) {
      const double t0 = now_us();
      graphs[pass].launch(s);
      const double e = now_us() - t0;
      ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
      if (rep >= 2) us[pass].push_back(e);
    }
}
#endif

// every rank alone on this thread: eager passes, then (graph capture) replays of its captures
void per_rank(const options& o, const attention_dims& dims) {
  const topology topo = bench_topology(o.ranks, o.nodes);
  const batch b(mixed_lengths(o.ranks));
  const device_attention_engine engine(bench_plan(b, topo), b, topo, dims, device::dtype::bf16);
  const device::cuda_stream stream(0);
  const cudaStream_t s = stream.get();
  std::vector<double> eager_of_rank[2], replay_of_rank[2], launches[2];
  for (rank_index r = 0; r < o.ranks; ++r) {
    echo_comm c(r, o.ranks, topo.gpus_per_node(), s);
    rank_tensors t(static_cast<std::size_t>(engine.rows(r)), dims, s, static_cast<std::uint32_t>(r));
    std::vector<double> eager_us[2], replay_us[2];
    for (int rep = 0; rep < o.reps + 2; ++rep)
      for (int pass = 0; pass < 2; ++pass) {
        const double t0 = now_us();
        if (pass == 0) engine.forward(c, t.forward, s);
        else engine.backward(c, t.backward, s);
        const double e = now_us() - t0;
        ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
        if (rep >= 2) eager_us[pass].push_back(e);
      }
#ifdef ZEPPELIN_BENCH_HAS_GRAPH
    engine.prepare(c, s);
    const device::cuda_graph graphs[2] = {device::capture_graph(s, [&] { engine.forward(c, t.forward, s); }),
                                          device::capture_graph(s, [&] { engine.backward(c, t.backward, s); })};
    time_replays(graphs, s, o.reps, replay_us);
#endif
    for (int pass = 0; pass < 2; ++pass) {
      eager_of_rank[pass].push_back(median(eager_us[pass]));
      if (!replay_us[pass].empty()) replay_of_rank[pass].push_back(median(replay_us[pass]));
      launches[pass].push_back(static_cast<double>(engine.launches(r, pass == 0 ? pass_kind::forward : pass_kind::backward)));
    }
  }
  std::printf("per rank: %d ranks (%d x %d), %zu sequences, %lld tokens, heads %d/%d, head dim %d, bf16; host us per pass, "
              "medians of %d reps, then over ranks\n",
              o.ranks, o.nodes, topo.gpus_per_node(), b.size(), static_cast<long long>(b.total_tokens()), dims.heads, dims.kv_heads,
              dims.head_dim, o.reps);
  std::printf("pass | launches_median launches_max | eager_median eager_worst | replay_median replay_worst\n");
  for (int pass = 0; pass < 2; ++pass) {
    const auto worst = [](const std::vector<double>& x) { return x.empty() ? 0.0 : *std::max_element(x.begin(), x.end()); };
    std::printf("%s | %.0f %.0f | %.1f %.1f | %.1f %.1f\n", pass == 0 ? "fwd" : "bwd", median(launches[pass]), worst(launches[pass]),
                median(eager_of_rank[pass]), worst(eager_of_rank[pass]), median(replay_of_rank[pass]), worst(replay_of_rank[pass]));
  }
}

#ifdef ZEPPELIN_BENCH_HAS_GRAPH
// the whole loopback world's pass in one graph: the host time of the launch that replays it
void world(const options& o, const attention_dims& dims) {
  const topology topo = bench_topology(o.ranks, o.nodes);
  const batch b(mixed_lengths(o.ranks));
  const device_attention_engine engine(bench_plan(b, topo), b, topo, dims, device::dtype::bf16);
  world_capture captured[2] = {world_capture(o.ranks), world_capture(o.ranks)};
  std::barrier replayed(o.ranks);  // every rank's buffers live until rank 0's replays are done
  std::vector<double> replay_us[2];
  device_loopback_world{.ranks = o.ranks, .gpus_per_node = topo.gpus_per_node()}.run([&](device_loopback_comm& c) {
    const cudaStream_t s = c.compute_stream();
    rank_tensors t(static_cast<std::size_t>(engine.rows(c.rank())), dims, s, static_cast<std::uint32_t>(c.rank()));
    engine.prepare(c, s);
    captured[0].capture(c, s, [&] { engine.forward(c, t.forward, s); });
    captured[1].capture(c, s, [&] { engine.backward(c, t.backward, s); });
    if (c.rank() == 0) {
      const device::cuda_graph graphs[2] = {captured[0].take(), captured[1].take()};
      time_replays(graphs, s, o.reps, replay_us);
    }
    replayed.arrive_and_wait();
  });
  std::printf("\nworld: the %d ranks' pass captured into one graph; host us of the launch that replays it, median of %d\n", o.ranks,
              o.reps);
  std::printf("pass | replay_host_us replay_host_us_per_rank\n");
  for (int pass = 0; pass < 2; ++pass)
    std::printf("%s | %.1f %.2f\n", pass == 0 ? "fwd" : "bwd", median(replay_us[pass]), median(replay_us[pass]) / o.ranks);
}
#endif

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  const attention_dims dims{.heads = o.heads, .kv_heads = o.kv_heads, .head_dim = o.head_dim};
  per_rank(o, dims);
#ifdef ZEPPELIN_BENCH_HAS_GRAPH
  world(o, dims);
#endif
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpu_engine_host: %s\n", e.what());
  return 1;
}
