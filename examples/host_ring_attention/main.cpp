// host_ring_attention: plan a batch with a partitioner, dispatch random Q, K, V, dO from the
// loader layout to the plan's layout, run the attention engine forward and backward on
// N * P thread ranks (host loopback world), bring O, dQ, dK, dV back with the inverse
// dispatch and compare with the dense single-rank causal reference of every sequence.
//   host_ring_attention --method hierarchical --lengths lengths.txt --nodes 2 --gpus-per-node 4
//                       --heads 4 --kv-heads 2 --head-dim 16 --seed 1 [--routing proxy|direct]
//                       [--nics-per-node 2] [--capacity C] [--fp32]
// Prints the plan, timings, and as its LAST line
//   max_abs_err_out=<O and LSE> max_abs_err_grad=<dQ, dK, dV>
// Exit status 1 when an error exceeds the tolerance (1e-10 in fp64, 1e-4 in fp32), 2 on bad input.
#include <zeppelin/comm.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/partition.hpp>
#include <zeppelin/route/proxy.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace zeppelin;

namespace {

struct options {
  std::string method = "hierarchical";
  std::string lengths;
  int nodes = 1;
  int gpus_per_node = 1;
  int nics_per_node = 1;
  int heads = 4;
  int kv_heads = 4;
  int head_dim = 16;
  std::uint64_t seed = 1;
  std::string routing = "direct";
  token_count capacity = 0;
  bool fp32 = false;
};

template <class P>
plan plan_with(P method, const batch& b, const topology& t, token_count capacity, bool fixed) {
  for (;;) {
    method.capacity = capacity;
    try {
      return method.partition(b, t);
    } catch (const infeasible&) {
      if (fixed) throw;
      capacity += capacity / 8 + 1;  // the smallest capacity (from ceil(T / R)) the method accepts
    }
  }
}

plan make_plan(const options& o, const batch& b, const topology& t) {
  const bool fixed = o.capacity > 0;
  const token_count c = fixed ? o.capacity : (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
  if (o.method == "hierarchical") return plan_with(hierarchical<>{}, b, t, c, fixed);
  if (o.method == "even_split") return plan_with(even_split{}, b, t, c, fixed);
  if (o.method == "allgather") return plan_with(allgather{}, b, t, c, fixed);
  if (o.method == "hybrid_dp") return plan_with(hybrid_dp{}, b, t, c, fixed);
  if (o.method == "per_document") return plan_with(per_document{}, b, t, c, fixed);
  ZEPPELIN_THROW(invalid_argument, "unknown method '" + o.method + "'", {});
}

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

template <class T, class Transport>
int run(const options& o, const batch& b, const plan& p, Transport transport) {
  const attention_dims dims{.heads = o.heads, .kv_heads = o.kv_heads, .head_dim = o.head_dim};
  const std::int64_t qw = dims.q_row(), kw = dims.kv_row();
  const auto T_ = static_cast<std::size_t>(b.total_tokens());
  random_generator rng(o.seed, 1);
  const auto fill = [&](std::size_t n) {
    std::vector<T> x(n);
    for (auto& e : x) e = static_cast<T>(2 * rng.uniform() - 1);
    return x;
  };
  const auto q = fill(T_ * qw), k = fill(T_ * kw), v = fill(T_ * kw), d_o = fill(T_ * qw);

  // dense reference, one sequence at a time, spread over the hardware threads
  auto t0 = clock_type::now();
  std::vector<T> ro(q.size()), rl(T_ * dims.heads), rdq(q.size()), rdk(k.size()), rdv(v.size());
  {
    std::vector<std::thread> pool;
    const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned w = 0; w < workers; ++w)
      pool.emplace_back([&, w] {
        for (sequence_index s = static_cast<sequence_index>(w); s < b.size(); s += static_cast<sequence_index>(workers)) {
          const token_count off = b.offset(s), len = b.length(s);
          T* lse = rl.data() + off * dims.heads;
          reference_forward(dims, len, q.data() + off * qw, k.data() + off * kw, v.data() + off * kw, ro.data() + off * qw, lse);
          reference_backward(dims, len, q.data() + off * qw, k.data() + off * kw, v.data() + off * kw, ro.data() + off * qw,
                             d_o.data() + off * qw, lse, rdq.data() + off * qw, rdk.data() + off * kw, rdv.data() + off * kw);
        }
      });
    for (auto& th : pool) th.join();
  }
  const double reference_s = seconds_since(t0);

  t0 = clock_type::now();
  const attention_engine<T, host_attention, Transport> engine(p, b, dims, {}, transport);
  const auto loader = loader_layout(b, p.num_ranks());
  const remap_plan disp = make_dispatch_plan(loader, p.placements), back = inverse(disp);
  const double setup_s = seconds_since(t0);

  std::vector<T> o_out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  double lse_err = 0, forward_s = 0, backward_s = 0;
  std::mutex m;
  t0 = clock_type::now();
  host_loopback_world world{.ranks = p.num_ranks(), .gpus_per_node = p.gpus_per_node, .timeout = std::chrono::seconds(600)};
  world.run([&](host_loopback_comm& c) {
    const rank_index me = c.rank();
    const auto& lp = loader[static_cast<std::size_t>(me)];
    const token_count n = engine.rows(me);
    const auto slice = [&](const std::vector<T>& g, std::int64_t w) {
      std::vector<T> out;
      for (const shard& s : lp.shards)
        out.insert(out.end(), g.begin() + (b.offset(s.seq) + s.range.begin) * w, g.begin() + (b.offset(s.seq) + s.range.end) * w);
      return out;
    };
    const auto to_plan = [&](const std::vector<T>& g, std::int64_t w) {
      const auto src = slice(g, w);
      std::vector<T> dst(static_cast<std::size_t>(n * w));
      execute_remap(c, disp, std::span<const T>(src), std::span<T>(dst), w, "dispatch");
      return dst;
    };
    const auto lq = to_plan(q, qw), lk = to_plan(k, kw), lv = to_plan(v, kw), ldo = to_plan(d_o, qw);
    std::vector<T> lo(lq.size()), ll(static_cast<std::size_t>(n * dims.heads)), gq(lq.size()), gk(lk.size()), gv(lv.size());
    auto f0 = clock_type::now();
    engine.forward(c, std::span<const T>(lq), std::span<const T>(lk), std::span<const T>(lv), std::span<T>(lo), std::span<T>(ll));
    const double fs = seconds_since(f0);
    f0 = clock_type::now();
    engine.backward(c, std::span<const T>(lq), std::span<const T>(lk), std::span<const T>(lv), std::span<const T>(lo),
                    std::span<const T>(ldo), std::span<const T>(ll), std::span<T>(gq), std::span<T>(gk), std::span<T>(gv));
    const double bs = seconds_since(f0);
    double le = 0;
    token_count row = 0;
    for (const shard& s : p.placements[static_cast<std::size_t>(me)].shards)
      for (token_count pos = s.range.begin; pos < s.range.end; ++pos, ++row)
        for (int h = 0; h < dims.heads; ++h)
          le = std::max(le, std::abs(double(ll[static_cast<std::size_t>(h * n + row)]) -
                                     double(rl[static_cast<std::size_t>(b.offset(s.seq) * dims.heads + h * b.length(s.seq) + pos)])));
    const auto to_loader = [&](const std::vector<T>& local, std::int64_t w, std::vector<T>& g) {
      std::vector<T> dst(static_cast<std::size_t>(back.ranks[static_cast<std::size_t>(me)].target_tokens * w));
      execute_remap(c, back, std::span<const T>(local), std::span<T>(dst), w, "undispatch");
      std::lock_guard lock(m);
      auto it = dst.begin();
      for (const shard& s : lp.shards) {
        std::copy_n(it, s.range.size() * w, g.begin() + (b.offset(s.seq) + s.range.begin) * w);
        it += s.range.size() * w;
      }
    };
    to_loader(lo, qw, o_out);
    to_loader(gq, qw, dq);
    to_loader(gk, kw, dk);
    to_loader(gv, kw, dv);
    std::lock_guard lock(m);
    lse_err = std::max(lse_err, le);
    forward_s = std::max(forward_s, fs);
    backward_s = std::max(backward_s, bs);
  });
  const double distributed_s = seconds_since(t0);
  const auto diff = [](const std::vector<T>& a, const std::vector<T>& r) {
    double x = 0;
    for (std::size_t i = 0; i < a.size(); ++i) x = std::max(x, std::abs(double(a[i]) - double(r[i])));
    return x;
  };
  const double err_out = std::max(diff(o_out, ro), lse_err);
  const double err_grad = std::max({diff(dq, rdq), diff(dk, rdk), diff(dv, rdv)});
  const double tol = o.fp32 ? 1e-4 : 1e-10;
  std::printf("timing: reference %.3f s, plan+setup %.3f s, distributed (dispatch, fwd, bwd, undispatch) %.3f s "
              "[slowest rank: forward %.3f s, backward %.3f s]\n",
              reference_s, setup_s, distributed_s, forward_s, backward_s);
  std::printf("max_abs_err_out=%.3e max_abs_err_grad=%.3e\n", err_out, err_grad);
  return err_out <= tol && err_grad <= tol ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"Distributed causal varlen attention on host threads, checked against a dense reference"};
  app.add_option("--method", o.method, "hierarchical | even_split | allgather | hybrid_dp | per_document")
      ->check(CLI::IsMember({"hierarchical", "even_split", "allgather", "hybrid_dp", "per_document"}));
  app.add_option("--lengths", o.lengths, "file of sequence lengths, one per line")->required()->check(CLI::ExistingFile);
  app.add_option("--nodes", o.nodes, "nodes N")->check(CLI::Range(1, 64));
  app.add_option("--gpus-per-node", o.gpus_per_node, "ranks per node P")->check(CLI::Range(1, 64));
  app.add_option("--nics-per-node", o.nics_per_node, "NICs per node (proxy pieces per inter-node transfer)")->check(CLI::Range(1, 64));
  app.add_option("--heads", o.heads, "query heads")->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", o.kv_heads, "key/value heads (divides heads)")->check(CLI::PositiveNumber);
  app.add_option("--head-dim", o.head_dim, "head dimension")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of the random tensors");
  app.add_option("--routing", o.routing, "inter-node transfers: direct | proxy")->check(CLI::IsMember({"direct", "proxy"}));
  app.add_option("--capacity", o.capacity, "tokens per rank (default: the smallest the method accepts from ceil(T / R))");
  app.add_flag("--fp32", o.fp32, "run in fp32 (default fp64)");
  CLI11_PARSE(app, argc, argv);
  try {
    const batch b(read_lengths_file(o.lengths));
    topology_config tc;
    tc.name = "host";
    tc.nodes = o.nodes;
    tc.gpus_per_node = o.gpus_per_node;
    tc.nics_per_node = std::min(o.nics_per_node, o.gpus_per_node);
    tc.intra_node = {300e9, 3e-6};
    tc.nic = {48e9, 10e-6};
    tc.gpu = {"host", 1e15, 80e9, 3e12};
    const topology t(tc);
    const plan p = make_plan(o, b, t);
    std::size_t groups = p.groups.size();
    std::printf("batch: %d sequences, %lld tokens (longest %lld); plan %s on %dx%d ranks, capacity %lld, %zu ring groups, "
                "%d micro-batch(es), routing %s, %s\n",
                static_cast<int>(b.size()), static_cast<long long>(b.total_tokens()), static_cast<long long>(b.max_length()),
                p.method.c_str(), o.nodes, o.gpus_per_node, static_cast<long long>(p.capacity), groups, p.micro_batches(),
                o.routing.c_str(), o.fp32 ? "fp32" : "fp64");
    for (const auto& note : p.notes) std::printf("note: %s\n", note.c_str());
    if (o.routing == "proxy") {
      const routed_transport<proxy_router> tr{proxy_router{.fallback_to_direct = false}, t};
      return o.fp32 ? run<float>(o, b, p, tr) : run<double>(o, b, p, tr);
    }
    return o.fp32 ? run<float>(o, b, p, direct_transport{}) : run<double>(o, b, p, direct_transport{});
  } catch (const zeppelin::error& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 2;
  }
}
