// bench/gpu/ring_overlap_bench.cpp
// One ring step on the device loopback world (N ranks on one GPU): how much of the KV
// communication of a ring round the device attention engine hides behind the round's compute.
// In:  --ranks R (4) --tokens L (32768, one sequence split by even_split over the R ranks:
//      zigzag chunks) --heads 16 --kv-heads 4 --head-dim 128 --dtype bf16 --reps 10
// Out: per configuration, medians over --reps (after 2 warm-ups) of the slowest rank's time:
//      full      the engine's forward (R rounds: compute overlapped with the KV ring)
//      compute   the same forward with every phase's pieces removed (compute alone)
//      comm      the same ring exchanges alone (each round's KV send/receive group)
//      per step  (full, compute, comm) / R, and hidden = (compute + comm - full) / comm,
//      the share of the communication hidden behind compute (1 = fully hidden).
// On one GPU the "links" are device-to-device copies that compete with the kernels for
// memory bandwidth, so this measures the engine's stream/event structure, not NVLink or IB.
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/partition/even_split.hpp>
#include <zeppelin/program/build.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {

struct options {
  int ranks = 4;
  long tokens = 32768;
  int heads = 16, kv_heads = 4, head_dim = 128, reps = 10;
  device::dtype type = device::dtype::bf16;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--ranks") o.ranks = std::atoi(v);
    else if (k == "--tokens") o.tokens = std::atol(v);
    else if (k == "--heads") o.heads = std::atoi(v);
    else if (k == "--kv-heads") o.kv_heads = std::atoi(v);
    else if (k == "--head-dim") o.head_dim = std::atoi(v);
    else if (k == "--reps") o.reps = std::atoi(v);
    else if (k == "--dtype") o.type = std::strcmp(v, "fp16") == 0 ? device::dtype::fp16 : device::dtype::bf16;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x.empty() ? 0 : x[x.size() / 2];
}

// random 16-bit values in [-1, 1) (never zeros)
void fill_random(void* dst, std::size_t elems, std::uint32_t seed) {
  std::vector<std::uint16_t> h(elems);
  std::uint32_t s = seed * 2654435761u + 1;
  for (auto& e : h) {
    s = s * 1664525u + 1013904223u;
    e = static_cast<std::uint16_t>(0x3800u | (s >> 22));  // 0.5 .. 1 with random mantissa, sign below
    if (s & 0x100u) e |= 0x8000u;
  }
  ZEPPELIN_CUDA_CHECK(cudaMemcpy(dst, h.data(), elems * 2, cudaMemcpyHostToDevice));
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  topology_config tc;
  tc.nodes = 1;
  tc.gpus_per_node = o.ranks;
  tc.intra_node = {300e9, 3e-6};
  tc.nic = {48e9, 10e-6};
  tc.gpu = {"bench", 1e15, 80e9, 3e12};
  const topology topo(tc);
  const batch b({static_cast<token_count>(o.tokens)});
  const plan p = even_split{.capacity = b.total_tokens()}.partition(b, topo);
  const attention_dims dims{.heads = o.heads, .kv_heads = o.kv_heads, .head_dim = o.head_dim};
  const device_attention_engine full(p, b, topo, dims, o.type);
  // the same program with nothing to move: the engine's compute alone
  execution_program silent = full.program();
  for (program_phase& ph : silent.phases) ph.pieces = {};
  const device_attention_engine compute_only(std::move(silent), dims, o.type);
  std::int32_t rounds = 1;
  for (const program_level& lv : full.program().levels) rounds = std::max(rounds, lv.rounds[0]);
  std::vector<double> t_full, t_compute, t_comm;
  std::mutex m;
  std::barrier sync(o.ranks);
  device_loopback_world{.ranks = o.ranks}.run([&](device_loopback_comm& c) {
    const rank_index me = c.rank();
    const auto n = static_cast<std::size_t>(full.rows(me));
    const std::size_t qn = n * static_cast<std::size_t>(dims.q_row()), kn = n * static_cast<std::size_t>(dims.kv_row());
    void *q, *k, *v, *out;
    float* lse;
    ZEPPELIN_CUDA_CHECK(cudaMalloc(&q, qn * 2));
    ZEPPELIN_CUDA_CHECK(cudaMalloc(&k, kn * 2));
    ZEPPELIN_CUDA_CHECK(cudaMalloc(&v, kn * 2));
    ZEPPELIN_CUDA_CHECK(cudaMalloc(&out, qn * 2));
    ZEPPELIN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&lse), n * static_cast<std::size_t>(dims.heads) * sizeof(float)));
    fill_random(q, qn, 1 + static_cast<std::uint32_t>(me));
    fill_random(k, kn, 100 + static_cast<std::uint32_t>(me));
    fill_random(v, kn, 200 + static_cast<std::uint32_t>(me));
    // the ring exchange alone: KV of this rank's size, R - 1 rounds of one group each
    const std::size_t kv_bytes = 2 * kn * 2;
    device::device_memory a(kv_bytes, c.compute_stream()), bb(kv_bytes, c.compute_stream());
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(c.compute_stream()));
    const cudaStream_t s = c.compute_stream();
    const device_forward_io io{q, k, v, out, lse};
    const auto timed = [&](auto&& body) {
      sync.arrive_and_wait();
      const device::cuda_event start(true), stop(true);
      start.record(s);
      body();
      device::stream_wait(s, c.stream());
      stop.record(s);
      stop.synchronize();
      return static_cast<double>(device::cuda_event::elapsed_ms(start, stop));
    };
    const auto ring_only = [&] {
      const rank_index R = c.size();
      for (std::int32_t r = 0; r + 1 < rounds; ++r) {
        device::stream_wait(c.stream(), s);
        c.group_start();
        c.send(std::span<const std::byte>(static_cast<const std::byte*>(a.get()), kv_bytes), (me + 1) % R);
        c.recv(std::span<std::byte>(static_cast<std::byte*>(bb.get()), kv_bytes), (me - 1 + R) % R);
        c.group_end("ring only");
        device::stream_wait(s, c.stream());
      }
    };
    for (int rep = 0; rep < o.reps + 2; ++rep) {
      const double f = timed([&] { full.forward(c, io, s); });
      const double x = timed([&] { compute_only.forward(c, io, s); });
      const double y = timed(ring_only);
      if (rep < 2) continue;
      std::lock_guard lock(m);
      const auto at = static_cast<std::size_t>(rep - 2);
      for (const auto& [vec, val] : {std::pair{&t_full, f}, std::pair{&t_compute, x}, std::pair{&t_comm, y}}) {
        if (vec->size() <= at) vec->push_back(val);
        else (*vec)[at] = std::max((*vec)[at], val);  // the slowest rank
      }
    }
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
    for (void* ptr : {q, k, v, out, static_cast<void*>(lse)}) ZEPPELIN_CUDA_CHECK(cudaFree(ptr));
  });
  const double f = median(t_full), x = median(t_compute), y = median(t_comm);
  const double hidden = y > 0 ? std::clamp((x + y - f) / y, 0.0, 1.0) : 1.0;
  std::printf("ranks tokens heads kv_heads head_dim dtype rounds | full_ms compute_ms comm_ms | step_full step_compute step_comm | hidden\n");
  std::printf("%d %ld %d %d %d %s %d | %.3f %.3f %.3f | %.3f %.3f %.3f | %.2f\n", o.ranks, o.tokens, o.heads, o.kv_heads,
              o.head_dim, std::string(device::to_string(o.type)).c_str(), rounds, f, x, y, f / rounds, x / rounds,
              y / std::max(1, rounds - 1), hidden);
  return 0;
}
