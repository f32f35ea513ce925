// tests/exec/attention_engine_test.cpp
// End-to-end correctness of the host engine running the execution program: every
// partitioner on topologies 1x1 .. 4x4, fp64 and fp32, ring and all-gather collectives, both
// launch and engine policies, direct and proxy routing, with dispatch, the program's remap and
// their inverses: the distributed O, LSE, dQ, dK, dV equal the dense single-rank reference per
// sequence, and what the engine executed is exactly what the program lists.
#include <catch2/catch.hpp>

#include "exec_test_support.hpp"
#include "plan_support.hpp"

#include <zeppelin/route/proxy.hpp>

#include <exception>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace zeppelin;
using namespace zeppelin_test;

namespace {
// runs `body` on `world`, which must fail on a rank with an exception of type E: the world
// names the rank (rank_failed) and keeps the original, typed, as the nested exception
template <class E, class World, class Body>
void check_rank_fails_with(const World& world, Body&& body) {
  try {
    world.run(std::forward<Body>(body));
    FAIL("no error");
  } catch (const rank_failed& e) {
    INFO(e.what());
    CHECK(e.rank() >= 0);
    CHECK(e.rank() < world.ranks);
    CHECK_THROWS_AS(std::rethrow_if_nested(e), E);
  }
}

program_options random_options(random_generator& rng) {
  program_options o;
  o.launch = rng.below(2) ? launch_policy::fused_round : launch_policy::per_group;
  o.engine = rng.below(2) ? engine_policy::prioritized : engine_policy::in_order;
  if (rng.below(2)) o.remap = remap_objective::max_send;
  return o;
}
}  // namespace

TEST_CASE("distributed attention equals the dense reference (fp64, every method and topology)", "[exec]") {
  const std::vector<std::pair<int, int>> topologies{{1, 1}, {1, 2}, {2, 1}, {1, 3}, {2, 2}, {3, 2}, {2, 4}, {4, 4}};
  random_generator rng(2024);
  int cases = 0;
  for (const auto& [nodes, gpus] : topologies) {
    const topology t = test_topology(nodes, gpus);
    for (int trial = 0; trial < 15; ++trial) {
      const int method = trial % 5;
      const batch b = random_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 2, .kv_heads = rng.below(2) ? 1 : 2, .head_dim = 3};
      const token_count fair = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
      const token_count capacity = rng.below(2) ? fair : b.max_length();
      const plan p = make_plan(method, b, t, capacity);
      const auto data = make_problem<double>(b, dims, rng());
      program_options o = random_options(rng);
      o.remap = remap_objective::max_send;
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " lengths " << b.lengths().size() << " capacity "
                     << p.capacity << " micro-batches " << p.micro_batches() << " launch " << to_string(o.launch) << " engine "
                     << to_string(o.engine));
      execution_record record;
      const run_errors e = run_distributed<double>(p, b, t, data, o, &record);
      CHECK(e.out < 1e-10);
      CHECK(e.lse < 1e-10);
      CHECK(e.grad < 1e-10);
      CHECK(e.remap < 1e-10);  // remapped rows are the distributed O, moved bit for bit
      CHECK(e.remap_round_trip_exact);
      // every rank moved and launched exactly what the program lists (the remap segments run
      // once each here: forward remap_out and backward remap_in)
      program_options w = o;
      w.wire = wire_format::for_shape(dims.heads, dims.kv_heads, dims.head_dim, 8);
      CHECK(record == run_distributed_record(make_program(p, b, t, w)));
      ++cases;
    }
  }
  CHECK(cases == 120);
}

TEST_CASE("distributed attention over micro-batched plans equals the dense reference (fp64)", "[exec]") {
  random_generator rng(2026);
  int multi = 0;
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 2}, {2, 2}, {2, 3}}) {
    const topology t = test_topology(nodes, gpus);
    for (int trial = 0; trial < 6; ++trial) {
      const batch b = random_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 2, .kv_heads = 1, .head_dim = 3};
      // room for about a third to all of the batch per pass: one to several micro-batches
      const token_count room = std::max(b.max_length(), b.total_tokens() / static_cast<token_count>(rng.between(1, 3)));
      const partitioner_settings s{.capacity = (room + t.num_ranks() - 1) / t.num_ranks(), .micro_batches = static_cast<std::int32_t>(rng.below(3))};
      const plan p = partition(partitioner_by_name("micro_batched", s), b, t);
      const auto data = make_problem<double>(b, dims, rng());
      program_options o = random_options(rng);
      INFO("topology " << nodes << "x" << gpus << " micro-batches " << p.micro_batches() << " remap " << o.remap.has_value());
      const run_errors e = run_distributed<double>(p, b, t, data, o);
      CHECK(e.out < 1e-10);
      CHECK(e.lse < 1e-10);
      CHECK(e.grad < 1e-10);
      multi += p.micro_batches() > 1;
    }
  }
  CHECK(multi >= 6);
}

TEST_CASE("the ring and all-gather collectives agree on the same plan (fp32 within 1e-4)", "[exec]") {
  random_generator rng(7);
  for (const auto& [nodes, gpus] : std::vector<std::pair<int, int>>{{1, 4}, {2, 2}, {4, 2}}) {
    const topology t = test_topology(nodes, gpus);
    for (int method = 0; method < 5; ++method) {
      const batch b = random_lengths(rng, t.num_ranks());
      const attention_dims dims{.heads = 4, .kv_heads = 2, .head_dim = 4};
      plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      const auto data = make_problem<float>(b, dims, rng());
      INFO("method " << p.method << " topology " << nodes << "x" << gpus);
      for (const collective_kind x : {collective_kind::ring, collective_kind::all_gather}) {
        for (ring_group& g : p.groups) g.collective = x;
        const run_errors e = run_distributed<float>(p, b, t, data, random_options(rng));
        CHECK(e.out < 1e-4);
        CHECK(e.lse < 1e-4);
        CHECK(e.grad < 1e-4);
      }
    }
  }
}

TEST_CASE("one long sequence over a 4x4 global ring, lengths around 2G", "[exec]") {
  const topology t = test_topology(4, 4);
  for (const token_count len : {token_count{1}, token_count{15}, token_count{31}, token_count{32}, token_count{33}, token_count{70}}) {
    const batch b({len, 3});
    const plan p = make_plan(1, b, t, b.total_tokens());  // even_split: every sequence over all 16 ranks
    const auto data = make_problem<double>(b, attention_dims{.heads = 1, .kv_heads = 1, .head_dim = 2}, 99);
    INFO("length " << len);
    const run_errors e = run_distributed<double>(p, b, t, data);
    CHECK(e.out < 1e-10);
    CHECK(e.lse < 1e-10);
    CHECK(e.grad < 1e-10);
  }
}

TEST_CASE("the engine rejects buffers, communicators and programs that do not match", "[exec]") {
  const topology t = test_topology(1, 2);
  const batch b({5, 3});
  const plan p = even_split{.capacity = 8}.partition(b, t);
  const attention_dims dims{.heads = 1, .kv_heads = 1, .head_dim = 2};
  const attention_engine<double> engine(p, b, t, dims);
  CHECK(engine.rows(0) + engine.rows(1) == 8);
  std::vector<double> x(3);
  host_loopback_world one{.ranks = 1};
  check_rank_fails_with<invalid_argument>(one, [&](host_loopback_comm& c) {
    engine.forward(c, std::span<const double>(x), std::span<const double>(x), std::span<const double>(x), std::span<double>(x),
                   std::span<double>(x));
  });
  host_loopback_world two{.ranks = 2};
  check_rank_fails_with<invalid_argument>(two, [&](host_loopback_comm& c) {
    engine.forward(c, std::span<const double>(x), std::span<const double>(x), std::span<const double>(x), std::span<double>(x),
                   std::span<double>(x));
  });
  CHECK_THROWS_AS(make_dispatch_plan(loader_layout(b, 2), loader_layout(batch({5, 4}), 2)), invalid_argument);
  // a program built for fp32 elements cannot run on doubles, nor for other dims
  program_options fp32;
  fp32.wire = wire_format::for_shape(1, 1, 2, 4);
  CHECK_THROWS_AS(attention_engine<double>(make_program(p, b, t, fp32), dims), invalid_argument);
  CHECK_THROWS_AS(attention_engine<float>(make_program(p, b, t, fp32), attention_dims{.heads = 2, .kv_heads = 1, .head_dim = 2}),
                  invalid_argument);
}

TEST_CASE("proxy routing (route/proxy.hpp) gives the same results as direct sends", "[exec][route]") {
  // Links without latency: splitting a payload over several NICs then always pays, so the
  // router really sends these small test payloads through proxies (with the default
  // latencies it keeps them direct and the test would prove nothing).
  random_generator rng(31);
  for (const auto& [nodes, gpus, nics] : std::vector<std::tuple<int, int, int>>{{2, 2, 2}, {2, 4, 2}, {4, 4, 4}, {3, 2, 1}}) {
    topology_config c = test_topology(nodes, gpus, nics).config();
    c.intra_node.latency = 0;
    c.nic.latency = 0;
    const topology t(c);
    int proxied_programs = 0;
    for (int method = 0; method < 5; ++method) {
      const batch b = random_lengths(rng, t.num_ranks());
      const plan p = make_plan(method, b, t, (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks());
      const auto data = make_problem<double>(b, attention_dims{.heads = 2, .kv_heads = 1, .head_dim = 2}, rng());
      program_options o = random_options(rng);
      o.router.policy = proxy_router{.fallback_to_direct = false};
      INFO("method " << p.method << " topology " << nodes << "x" << gpus << " nics " << nics);
      const run_errors e = run_distributed<double>(p, b, t, data, o);
      CHECK(e.out < 1e-10);
      CHECK(e.lse < 1e-10);
      CHECK(e.grad < 1e-10);
      CHECK(e.remap < 1e-10);
      // some inter-node bytes went through a proxy: a piece whose ends are not its payload's
      const execution_program prog = make_program(p, b, t, o);
      bool proxied = false;
      for (const program_phase& ph : prog.phases)
        for (const transfer& piece : ph.pieces) {
          const transfer& whole = ph.payloads.items().at(static_cast<std::size_t>(piece.payload));
          proxied = proxied || piece.src != whole.src || piece.dst != whole.dst;
        }
      proxied_programs += proxied ? 1 : 0;
    }
    if (nics > 1) CHECK(proxied_programs > 0);
  }
}

TEST_CASE("routed pieces carry their byte offsets and really pass through proxies", "[exec][route]") {
  const topology t = test_topology(2, 4, 2);
  const std::vector<transfer> all{{1, 6, 1 << 20, 0, 0, route_step::direct}, {0, 2, 5, 1, 0, route_step::direct}};
  const std::vector<transfer> pieces = proxy_router{.fallback_to_direct = false}.route(std::span<const transfer>(all), t);
  std::int64_t transferred = 0;
  bool via_proxy = false;
  for (const transfer& m : pieces) {
    if (m.payload == 0 && m.step == route_step::transfer) {
      transferred += m.bytes;
      via_proxy = via_proxy || m.src != 1 || m.dst != 6;
    }
    CHECK(m.offset + m.bytes <= all[static_cast<std::size_t>(m.payload)].bytes);
  }
  CHECK(transferred == (1 << 20));
  CHECK(via_proxy);
  // execute it: bytes arrive intact
  host_loopback_world w{.ranks = 8, .gpus_per_node = 4, .timeout = std::chrono::milliseconds(5000)};
  bool ok = true;
  std::mutex m;
  w.run([&](host_loopback_comm& c) {
    std::vector<std::vector<std::byte>> out(2), in(2);
    std::vector<std::span<const std::byte>> s(2);
    std::vector<std::span<std::byte>> d(2);
    for (std::size_t i = 0; i < 2; ++i) {
      if (all[i].src == c.rank()) {
        out[i].resize(static_cast<std::size_t>(all[i].bytes));
        for (std::size_t j = 0; j < out[i].size(); ++j) out[i][j] = static_cast<std::byte>((j * 7 + i) & 255);
        s[i] = out[i];
      }
      if (all[i].dst == c.rank()) in[i].resize(static_cast<std::size_t>(all[i].bytes)), d[i] = in[i];
    }
    exchange_pieces(c, std::span<const transfer>(all), std::span<const transfer>(pieces), std::span<const std::span<const std::byte>>(s),
                    std::span<const std::span<std::byte>>(d), "probe", host_memory{});
    for (std::size_t i = 0; i < 2; ++i)
      if (all[i].dst == c.rank())
        for (std::size_t j = 0; j < in[i].size(); ++j)
          if (in[i][j] != static_cast<std::byte>((j * 7 + i) & 255)) {
            std::lock_guard lock(m);
            ok = false;
          }
  });
  CHECK(ok);
  // a malformed route is rejected instead of hanging
  host_loopback_world w2{.ranks = 2, .timeout = std::chrono::milliseconds(2000)};
  const std::vector<transfer> one{{0, 1, 4, 0, 0, route_step::direct}};
  const std::vector<transfer> bad{{1, 0, 4, 0, 0, route_step::direct}};  // rank 1 forwards a piece it never had
  check_rank_fails_with<invalid_argument>(w2, [&](host_loopback_comm& c) {
    std::vector<std::byte> buf(4);
    std::vector<std::span<const std::byte>> s(1);
    std::vector<std::span<std::byte>> d(1);
    if (c.rank() == 0) s[0] = buf;
    else d[0] = buf;
    exchange_pieces(c, std::span<const transfer>(one), std::span<const transfer>(bad), std::span<const std::span<const std::byte>>(s),
                    std::span<const std::span<std::byte>>(d), "bad", host_memory{});
  });
}
