// bench/gpu/ring_overlap_bench.cpp
// How much of a ring's KV communication the device attention engine hides behind compute, per
// rank and round, read off timing events of the run itself (one run, no subtraction of runs).
// In:  --ranks R (4) --tokens L (32768, one sequence split by even_split over the R ranks:
//      zigzag chunks) --heads 16 --kv-heads 4 --head-dim 128 --dtype bf16 --reps 10
// Out: for the forward and the backward, per rank and round, medians over --reps (after 2
//      warm-ups) of
//        compute   the round's attention launch (from when its stream and data were ready)
//        exchange  the exchange of that round, posted to done, on the communication stream
//        exposed   the idle gap before the launch: its start minus the previous launch's stop
//                  on the same stream (exec/overlap.hpp), i.e. the communication not hidden
//      and per pass the totals and hidden = 1 - exposed / exchange (the worst rank, and the
//      median rank), from a device_timeline (cuda/executor/device_timeline.hpp).
// On one GPU the R ranks share the SMs and the "links" are device-to-device copies that take
// memory bandwidth from the kernels: this measures the engine's stream and event structure
// (whether a round's compute ever waits for its data), not NVLink or InfiniBand.
#include "bench_support.hpp"

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/cuda/executor/device_timeline.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/overlap.hpp>
#include <zeppelin/partition/even_split.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

using namespace zeppelin;
using zeppelin_bench::fill_random_16bit;
using zeppelin_bench::median;

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
      std::fprintf(stderr, "unknown option %s (expected --ranks --tokens --heads --kv-heads --head-dim --reps --dtype)\n", k.c_str());
      std::exit(2);
    }
  }
  if (o.ranks < 2 || o.tokens < o.ranks || o.reps < 1) {
    std::fprintf(stderr, "need --ranks >= 2, --tokens >= ranks, --reps >= 1 (got %d, %ld, %d)\n", o.ranks, o.tokens, o.reps);
    std::exit(2);
  }
  return o;
}

// one rank's per-round figures of one rep (exec/overlap.hpp)
using round_figures = std::map<std::int32_t, overlap_figures>;

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
  const device_attention_engine engine(p, b, topo, dims, o.type);
  constexpr int passes = 2;  // forward, backward
  // [pass][rank][rep]: per-round figures
  std::vector<std::vector<std::vector<round_figures>>> runs(passes, std::vector<std::vector<round_figures>>(static_cast<std::size_t>(o.ranks)));
  std::barrier sync(o.ranks);
  device_loopback_world{.ranks = o.ranks}.run([&](device_loopback_comm& c) {
    const rank_index me = c.rank();
    const auto n = static_cast<std::size_t>(engine.rows(me));
    const std::size_t qn = n * static_cast<std::size_t>(dims.q_row()), kn = n * static_cast<std::size_t>(dims.kv_row());
    const cudaStream_t s = c.compute_stream();
    device::device_memory q(qn * 2, s), k(kn * 2, s), v(kn * 2, s), out(qn * 2, s), d_o(qn * 2, s), dq(qn * 2, s), dk(kn * 2, s),
        dv(kn * 2, s), lse(n * static_cast<std::size_t>(dims.heads) * sizeof(float), s);
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
    const auto seed = static_cast<std::uint32_t>(me);
    fill_random_16bit(q.get(), qn, 1 + seed);
    fill_random_16bit(k.get(), kn, 100 + seed);
    fill_random_16bit(v.get(), kn, 200 + seed);
    fill_random_16bit(d_o.get(), qn, 300 + seed);
    const device_forward_io fio{q.get(), k.get(), v.get(), out.get(), lse.as<float>()};
    const device_backward_io bio{q.get(), k.get(), v.get(), out.get(), d_o.get(), lse.as<float>(), dq.get(), dk.get(), dv.get()};
    device_timeline timeline;
    for (int rep = 0; rep < o.reps + 2; ++rep)
      for (int pass = 0; pass < passes; ++pass) {
        sync.arrive_and_wait();
        timeline.clear();
        if (pass == 0) engine.forward(c, fio, s, nullptr, &timeline);
        else engine.backward(c, bio, s, nullptr, &timeline);
        ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
        if (rep >= 2) runs[static_cast<std::size_t>(pass)][static_cast<std::size_t>(me)].push_back(overlap_per_round(timeline.read()));
      }
  });
  std::printf("pass ranks rank round | compute_ms exchange_ms exposed_ms   (medians over %d reps)\n", o.reps);
  std::vector<std::string> summary;
  for (int pass = 0; pass < passes; ++pass) {
    const char* name = pass == 0 ? "fwd" : "bwd";
    std::vector<double> hidden_of_rank;
    double compute_total = 0, exchange_total = 0, exposed_total = 0;
    for (int r = 0; r < o.ranks; ++r) {
      const auto& reps = runs[static_cast<std::size_t>(pass)][static_cast<std::size_t>(r)];
      overlap_figures rank_total;
      for (const auto& [round, unused] : reps.front()) {
        std::vector<double> c, x, e;
        for (const round_figures& f : reps) {
          const overlap_figures& at = f.at(round);
          c.push_back(at.launch_ms), x.push_back(at.exchange_ms), e.push_back(at.exposed_ms);
        }
        const double mc = median(c), mx = median(x), me = median(e);
        rank_total.launch_ms += mc, rank_total.exchange_ms += mx, rank_total.exposed_ms += me;
        std::printf("%s %d %d %d | %.4f %.4f %.4f\n", name, o.ranks, r, round, mc, mx, me);
      }
      hidden_of_rank.push_back(rank_total.hidden());
      compute_total += rank_total.launch_ms, exchange_total += rank_total.exchange_ms, exposed_total += rank_total.exposed_ms;
    }
    const double worst = *std::min_element(hidden_of_rank.begin(), hidden_of_rank.end());
    char line[256];
    std::snprintf(line, sizeof line, "%s %d %ld %d %d %d %s | %.3f %.3f %.3f | %.3f %.3f", name, o.ranks, o.tokens / o.ranks, o.heads,
                  o.kv_heads, o.head_dim, std::string(device::to_string(o.type)).c_str(), compute_total / o.ranks,
                  exchange_total / o.ranks, exposed_total / o.ranks, worst, median(hidden_of_rank));
    summary.emplace_back(line);
  }
  std::printf("\npass ranks tokens_per_rank heads kv_heads head_dim dtype | compute_ms exchange_ms exposed_ms (per rank, summed over "
              "rounds) | hidden_worst_rank hidden_median_rank\n");
  for (const std::string& l : summary) std::printf("%s\n", l.c_str());
  return 0;
}
