// [gpu] The CUDA executors end to end on a device loopback world (N ranks on one GPU): for
// every partitioner on emulated 2..16 ranks, dispatch -> device attention engine forward and
// backward -> inverse dispatch equals the single-GPU reference (the same kernels on the whole
// packed batch), fp16, per sequence; under the direct and the proxy router, per-group and fused
// launches; and every run's execution record (what the engine moved and launched on every
// rank) equals the record of the program the host engine and the simulator run for the same
// plan and options. The all-to-all (Ulysses) collective: device_ulysses_test.cpp.
// Plan once, run many: three forward/backward pairs on one engine (every second pair on another
// stream) equal the reference, as do passes captured into CUDA graphs (cuda/graph.hpp) and
// replayed: a one-rank world's own capture, and a whole 2..8-rank world's passes, exchanges
// included, in one graph (cuda/device_loopback_graph.hpp); capturing before prepare() is
// refused.
// The device timeline (cuda/executor/device_timeline.hpp): a ring of 4 ranks, forward and
// backward with and without one; with one, every attention launch and exchange of the rank's
// pass has a span with its level and round, spans on one stream follow stream order, and the
// outputs are those of the run without one.
// The device linear layout (cuda/executor/linear_layout.hpp): Q|K|V rows into the attention
// layout and O rows out of it, with and without Zeppelin's remap, land on every rank where the
// host engine's to_attention_layout / to_linear_layout put them, bit for bit.
#include "distributed_support.hpp"

#include <zeppelin/comm/host_loopback.hpp>
#include <zeppelin/cuda/executor/device_timeline.hpp>
#include <zeppelin/cuda/executor/linear_layout.hpp>
#include <zeppelin/exec/attention_engine.hpp>
#include <zeppelin/exec/linear_layout.hpp>
#include <zeppelin/exec/overlap.hpp>
#include <zeppelin/partition/even_split.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/route/proxy.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <variant>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

TEST_CASE("device engine: distributed attention equals the single-GPU reference for every partitioner, 2..16 ranks",
          "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  const std::vector<std::pair<int, int>> topologies{{1, 2}, {2, 2}, {1, 8}, {2, 4}, {4, 4}};
  random_generator rng(808);
  int cases = 0;
  for (const auto& [nodes, gpus] : topologies) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      const batch b = gpu_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 4, .kv_heads = rng.below(2) ? 2 : 4, .head_dim = rng.below(2) ? 64 : 128};
      const token_count fair = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
      const plan p = make_plan(method, b, t, rng.below(2) ? fair : b.max_length());
      const gpu_problem ref = make_gpu_problem(b, dims, rng());
      program_options o;
      o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
      o.engine = rng.below(2) ? engine_policy::prioritized : engine_policy::in_order;
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " sequences " << b.size() << " tokens "
                     << b.total_tokens() << " head_dim " << dims.head_dim << " kv_heads " << dims.kv_heads << " launch "
                     << to_string(o.launch) << " engine " << to_string(o.engine));
      const gpu_results got = run_device_distributed(p, b, t, ref, o);
      check_against_reference(got, ref, b);
      check_record(got, p, b, t, o);
      ++cases;
    }
  }
  CHECK(cases == 25);
}

TEST_CASE("device engine: one long sequence over a 16-rank global ring (zigzag, uneven chunks)", "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  const topology t = test_topology(4, 4);
  for (const token_count len : {token_count{31}, token_count{33}, token_count{1000}}) {
    const batch b({len});
    const attention_dims dims{.heads = 2, .kv_heads = 1, .head_dim = 64};
    const plan p = make_plan(1, b, t, b.total_tokens());  // even_split: the sequence over all 16 ranks
    const gpu_problem ref = make_gpu_problem(b, dims, 99 + static_cast<std::uint64_t>(len));
    INFO("length " << len);
    const gpu_results got = run_device_distributed(p, b, t, ref);
    check_against_reference(got, ref, b);
    check_record(got, p, b, t, {});
  }
}

TEST_CASE("device engine: passes repeated on one engine, on two streams, reuse what the first pass allocated", "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  random_generator rng(4242);
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {1, 4}}) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      const batch b = gpu_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = rng.below(2) ? 64 : 128};
      const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      const gpu_problem ref = make_gpu_problem(b, dims, rng());
      program_options o;
      o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " tokens " << b.total_tokens() << " head_dim "
                     << dims.head_dim << " launch " << to_string(o.launch));
      const gpu_results got = run_device_distributed(p, b, t, ref, o, pass_mode::repeated);
      check_against_reference(got, ref, b);
      check_record(got, p, b, t, o);
    }
  }
}

TEST_CASE("device engine: a pass captured into a CUDA graph before its inputs exist replays to the reference", "[gpu][executor][graph]") {
  ZEPPELIN_REQUIRE_GPU();
  random_generator rng(5151);
  for (int trial = 0; trial < 6; ++trial) {
    const topology t = test_topology(1, 1);
    const batch b = gpu_lengths(rng, 4);
    const attention_dims dims{.heads = 4, .kv_heads = trial % 2 ? 1 : 4, .head_dim = trial < 3 ? 64 : 128};
    const plan p = make_plan(trial % 2, b, t, b.total_tokens());
    const gpu_problem ref = make_gpu_problem(b, dims, rng());
    program_options o;
    o.engine = trial % 3 == 0 ? engine_policy::prioritized : engine_policy::in_order;
    INFO("trial " << trial << " sequences " << b.size() << " tokens " << b.total_tokens() << " head_dim " << dims.head_dim);
    const gpu_results got = run_device_distributed(p, b, t, ref, o, pass_mode::captured);
    check_against_reference(got, ref, b);
    check_record(got, p, b, t, o);
  }
}

TEST_CASE("device engine: a whole loopback world's passes, exchanges included, captured into one graph replay to the reference",
          "[gpu][executor][graph]") {
  ZEPPELIN_REQUIRE_GPU();
  random_generator rng(6262);
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {1, 8}, {2, 4}}) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      const batch b = gpu_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 4, .kv_heads = rng.below(2) ? 2 : 4, .head_dim = rng.below(2) ? 64 : 128};
      const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      const gpu_problem ref = make_gpu_problem(b, dims, rng());
      program_options o;
      o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
      o.engine = rng.below(2) ? engine_policy::prioritized : engine_policy::in_order;
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " tokens " << b.total_tokens() << " launch "
                     << to_string(o.launch) << " engine " << to_string(o.engine));
      const gpu_results got = run_device_distributed(p, b, t, ref, o, pass_mode::captured);
      check_against_reference(got, ref, b);
      check_record(got, p, b, t, o);
    }
  }
}

TEST_CASE("device engine: capturing a pass before prepare() is refused and leaves the stream usable", "[gpu][executor][graph]") {
  ZEPPELIN_REQUIRE_GPU();
  const topology t = test_topology(1, 1);
  const batch b({100, 37});
  const attention_dims dims{.heads = 2, .kv_heads = 1, .head_dim = 64};
  const plan p = make_plan(0, b, t, b.total_tokens());
  const device_attention_engine engine(p, b, t, dims, device::dtype::fp16);
  device_loopback_world{.ranks = 1}.run([&](device_loopback_comm& c) {
    const cudaStream_t s = c.compute_stream();
    const auto n = static_cast<std::size_t>(engine.rows(0));
    device_buffer<std::uint16_t> q(n * 2 * 64), kv(n * 64), o(n * 2 * 64);
    device_buffer<float> lse(n * 2);
    const device_forward_io io{q.get(), kv.get(), kv.get(), o.get(), lse.get()};
    CHECK_THROWS_WITH(device::capture_graph(s, [&] { engine.forward(c, io, s); }),
                      Catch::Contains("captured into a CUDA graph before prepare()"));
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    ZEPPELIN_CUDA_CHECK(cudaStreamIsCapturing(s, &status));
    CHECK(status == cudaStreamCaptureStatusNone);
    q.fill_bytes(0x3c), kv.fill_bytes(0x3c);  // fp16 1.06 everywhere
    ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
    engine.forward(c, io, s);  // the eager pass still runs
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGetLastError() == cudaSuccess);
  });
}

TEST_CASE("device engine: proxy routing (no fallback to direct) gives the same result", "[gpu][executor]") {
  ZEPPELIN_REQUIRE_GPU();
  // links without latency, so that the router splits even these small payloads over both
  // NICs (with latencies it keeps them direct, and the proxied check below fails)
  topology_config c = test_topology(2, 4, 2).config();
  c.intra_node.latency = 0;
  c.nic.latency = 0;
  const topology t(c);
  random_generator rng(31);
  for (int method = 0; method < 2; ++method) {
    const batch b = gpu_lengths(rng, t.num_ranks());
    const attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = 64};
    const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
    const gpu_problem ref = make_gpu_problem(b, dims, rng());
    INFO("method " << p.method);
    program_options o;
    o.router.policy = proxy_router{.fallback_to_direct = false};
    const gpu_results got = run_device_distributed(p, b, t, ref, o);
    // some inter-node bytes went through a proxy: a piece whose ends are not the edge's
    bool proxied = false;
    for (const program_phase& ph : got.program.phases)
      for (const transfer& piece : ph.pieces) {
        const transfer& whole = ph.payloads.items().at(static_cast<std::size_t>(piece.payload));
        proxied = proxied || piece.src != whole.src || piece.dst != whole.dst;
      }
    CHECK(proxied);
    check_against_reference(got, ref, b);
    check_record(got, p, b, t, o);
  }
}

TEST_CASE("device timeline: a span per launch and exchange in stream order and outputs unchanged", "[gpu][executor][timeline]") {
  ZEPPELIN_REQUIRE_GPU();
  const topology t = test_topology(1, 4);
  const batch b({3000, 700});
  const plan p = even_split{.capacity = b.total_tokens()}.partition(b, t);
  const attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = 64};
  const device_attention_engine engine(p, b, t, dims, device::dtype::fp16);
  const execution_program& prog = engine.program();
  struct rank_result {
    std::vector<std::uint16_t> o_plain, o_timed, dq_plain, dq_timed;
    std::vector<timed_span> fwd, bwd;
  };
  std::vector<rank_result> results(4);
  std::mutex m;
  device_loopback_world{.ranks = 4}.run([&](device_loopback_comm& c) {
    const rank_index me = c.rank();
    const cudaStream_t s = c.compute_stream();
    const auto n = static_cast<std::size_t>(engine.rows(me));
    const auto qn = n * static_cast<std::size_t>(dims.q_row()), kn = n * static_cast<std::size_t>(dims.kv_row());
    random_generator rng(77, static_cast<std::uint64_t>(me));
    const auto random_bits = [&](std::size_t count) {
      std::vector<std::uint16_t> x(count);
      for (auto& e : x) e = to_bits(static_cast<float>(2 * rng.uniform() - 1), device::dtype::fp16);
      return x;
    };
    device_buffer<std::uint16_t> q(random_bits(qn)), k(random_bits(kn)), v(random_bits(kn)), d_o(random_bits(qn));
    device_buffer<std::uint16_t> o(qn), dq(qn), dk(kn), dv(kn);
    device_buffer<float> lse(n * static_cast<std::size_t>(dims.heads));
    const device_forward_io fio{q.get(), k.get(), v.get(), o.get(), lse.get()};
    const device_backward_io bio{q.get(), k.get(), v.get(), o.get(), d_o.get(), lse.get(), dq.get(), dk.get(), dv.get()};
    rank_result r;
    engine.forward(c, fio, s);
    engine.backward(c, bio, s);
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
    r.o_plain = o.download(), r.dq_plain = dq.download();
    device_timeline forward, backward;
    engine.forward(c, fio, s, nullptr, &forward);
    engine.backward(c, bio, s, nullptr, &backward);
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
    r.o_timed = o.download(), r.dq_timed = dq.download();
    r.fwd = forward.read(), r.bwd = backward.read();
    std::lock_guard lock(m);
    results[static_cast<std::size_t>(me)] = std::move(r);
  });
  for (rank_index me = 0; me < 4; ++me) {
    const rank_result& r = results[static_cast<std::size_t>(me)];
    CHECK(r.o_timed == r.o_plain);
    std::vector<float> plain, timed;
    for (std::size_t i = 0; i < r.dq_plain.size(); ++i)
      plain.push_back(from_bits(r.dq_plain[i], device::dtype::fp16)), timed.push_back(from_bits(r.dq_timed[i], device::dtype::fp16));
    CHECK(max_abs_diff(timed, plain) < 1e-2);  // dQ accumulates with atomics: not bitwise
    for (const pass_kind pass : {pass_kind::forward, pass_kind::backward}) {
      const std::vector<timed_span>& spans = pass == pass_kind::forward ? r.fwd : r.bwd;
      // what the program says this rank launches and exchanges in the pass's attention segments
      std::multiset<std::pair<std::int32_t, std::int32_t>> launches, exchanges;
      for (const program_segment& seg : prog.pass(pass).at(static_cast<std::size_t>(me)).segments) {
        if (seg.kind != segment_kind::attention) continue;
        for (const program_op& op : seg.ops) {
          if (const auto* run = std::get_if<run_attention>(&op.body)) {
            const program_launch& l = prog.launches.at(static_cast<std::size_t>(run->launch));
            launches.insert({l.level, l.round});
          } else if (const auto* x = std::get_if<exchange_phase>(&op.body)) {
            const program_phase& ph = prog.phases.at(static_cast<std::size_t>(x->phase));
            exchanges.insert({ph.level, ph.round});
          }
        }
      }
      std::multiset<std::pair<std::int32_t, std::int32_t>> timed_launches, timed_exchanges;
      std::map<std::int32_t, double> last_stop;
      for (const timed_span& s : spans) {
        INFO("rank " << me << " pass " << int(pass) << " level " << s.level << " round " << s.round);
        CHECK(s.start_ms <= s.stop_ms);
        if (s.kind == timed_kind::exchange) {
          CHECK(s.stream == -1);
          timed_exchanges.insert({s.level, s.round});
          continue;
        }
        timed_launches.insert({s.level, s.round});
        const auto [it, first] = last_stop.try_emplace(s.stream, s.stop_ms);
        if (!first) {
          CHECK(s.start_ms >= it->second - 1e-3);
          it->second = s.stop_ms;
        }
      }
      CHECK(timed_launches == launches);
      CHECK(timed_exchanges == exchanges);
      CHECK(launches.size() == engine.launches(me, pass));
      CHECK(exchanges.size() >= 3);  // a ring of 4: at least 3 rounds of exchange
      const overlap_figures f = overlap_of(spans);
      CHECK(f.launch_ms > 0);
      CHECK(f.exchange_ms > 0);
    }
  }
}

TEST_CASE("device linear layout: rows move where the host engine's layout moves put them", "[gpu][executor][layout]") {
  ZEPPELIN_REQUIRE_GPU();
  const std::vector<std::pair<int, int>> topologies{{1, 2}, {2, 2}, {2, 4}};
  const std::vector<std::optional<remap_objective>> remaps{std::nullopt, remap_objective::max_send};
  random_generator rng(909);
  const auto type = device::dtype::bf16;
  for (const auto& [nodes, gpus] : topologies)
    for (const auto& remap : remaps) {
      const topology t = test_topology(nodes, gpus);
      const batch b = gpu_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = 64};
      const plan p = make_plan(0, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      program_options o;
      o.remap = remap;
      const attention_engine<float> host(p, b, t, dims, o);
      const device_attention_engine dev(p, b, t, dims, type, o);
      const std::vector<placement> linear = linear_layout(p, host.program());
      REQUIRE(linear == linear_layout(p, dev.program()));
      const auto R = static_cast<std::size_t>(t.num_ranks());
      const auto qkv = static_cast<std::size_t>(dims.q_row() + 2 * dims.kv_row()), ow = static_cast<std::size_t>(dims.q_row());
      // per rank: linear Q|K|V rows and attention-layout O rows of values exact in bf16
      std::vector<std::vector<float>> lin_in(R), att_in(R), want_att(R), want_lin(R);
      for (std::size_t r = 0; r < R; ++r) {
        const auto n = static_cast<std::size_t>(linear[r].tokens()), na = static_cast<std::size_t>(host.rows(static_cast<rank_index>(r)));
        for (std::size_t i = 0; i < n * qkv; ++i) lin_in[r].push_back(from_bits(to_bits(float(rng.uniform() - 0.5), type), type));
        for (std::size_t i = 0; i < na * ow; ++i) att_in[r].push_back(from_bits(to_bits(float(rng.uniform() - 0.5), type), type));
        want_att[r].assign(na * qkv, NAN), want_lin[r].assign(n * ow, NAN);
      }
      host_loopback_world{.ranks = t.num_ranks(), .gpus_per_node = gpus}.run([&](host_loopback_comm& c) {
        const auto r = static_cast<std::size_t>(c.rank());
        to_attention_layout(host, c, p, pass_kind::forward, std::span<const float>(lin_in[r]), std::span<float>(want_att[r]),
                            static_cast<std::int64_t>(qkv));
        to_linear_layout(host, c, p, pass_kind::forward, std::span<const float>(att_in[r]), std::span<float>(want_lin[r]),
                         static_cast<std::int64_t>(ow));
      });
      std::vector<std::vector<std::uint16_t>> got_att(R), got_lin(R);
      device_loopback_world{.ranks = t.num_ranks(), .gpus_per_node = gpus}.run([&](device_loopback_comm& c) {
        const auto r = static_cast<std::size_t>(c.rank());
        const cudaStream_t s = c.compute_stream();
        const auto bits = [&](const std::vector<float>& x) {
          std::vector<std::uint16_t> out;
          for (const float v : x) out.push_back(to_bits(v, type));
          return out;
        };
        device_buffer<std::uint16_t> lin(bits(lin_in[r])), att_o(bits(att_in[r]));
        device_buffer<std::uint16_t> att(want_att[r].size()), out(want_lin[r].size());
        to_attention_layout(dev, c, p, pass_kind::forward, lin.get(), att.get(), qkv * 2, s);
        to_linear_layout(dev, c, p, pass_kind::forward, att_o.get(), out.get(), ow * 2, s);
        ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
        got_att[r] = att.download(), got_lin[r] = out.download();
      });
      for (std::size_t r = 0; r < R; ++r) {
        INFO("topology " << nodes << "x" << gpus << " remap " << remap.has_value() << " rank " << r);
        std::vector<float> att(got_att[r].size()), lin(got_lin[r].size());
        for (std::size_t i = 0; i < att.size(); ++i) att[i] = from_bits(got_att[r][i], type);
        for (std::size_t i = 0; i < lin.size(); ++i) lin[i] = from_bits(got_lin[r][i], type);
        CHECK(att == want_att[r]);
        CHECK(lin == want_lin[r]);
      }
    }
}
