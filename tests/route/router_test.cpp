// tests/route/router_test.cpp
// direct_router and proxy_router on random ring rounds over the paper's clusters: bytes are
// conserved through dispatch / transfer / combine (every edge is a flow from src to dst),
// proxies cover distinct NICs and pair one to one with even shares, only allowed ranks serve,
// the routed round never costs more than the direct one under the link model, and a single
// edge costs exactly equation (1) of Zeppelin section 3.3. Pieces carry their byte offsets:
// the pieces of a payload tile it, and each range travels a path from src to dst through
// ascending stages.
#include <catch2/catch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/route/cost.hpp>
#include <zeppelin/route/direct.hpp>
#include <zeppelin/route/proxy.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

using namespace zeppelin;

namespace {

topology pick_cluster(random_generator& rng, int nodes) {
  switch (rng.below(4)) {
    case 0: return clusters::cluster_a(nodes);
    case 1: return clusters::cluster_b(nodes);
    case 2: return clusters::cluster_c(nodes);
    default: return topology({"small", nodes, 4, 2, {0, 1, 1, 1}, links::nvlink_a800(), links::nic_200g(), gpus::a800_80g()});
  }
}

// Disjoint random ring groups; one round: each member sends to the next.
std::vector<transfer> random_round(random_generator& rng, const topology& t) {
  std::vector<rank_index> ranks(static_cast<std::size_t>(t.num_ranks()));
  std::iota(ranks.begin(), ranks.end(), 0);
  rng.shuffle(ranks.begin(), ranks.end());
  std::vector<transfer> edges;
  std::size_t at = 0;
  while (at < ranks.size()) {
    const auto size = std::min<std::size_t>(ranks.size() - at, static_cast<std::size_t>(rng.between(1, 12)));
    const std::int64_t bytes = rng.below(8) == 0 ? rng.between(0, 9) : rng.between(1, 64) << 20;
    if (size > 1)
      for (std::size_t k = 0; k < size; ++k) edges.push_back({ranks[at + k], ranks[at + (k + 1) % size], bytes});
    at += size;
  }
  return edges;
}

// The pieces of one payload with the same offset form a path src -> ... -> dst through
// ascending stages, and the ranges of the paths tile [0, bytes).
void check_offsets(const transfer& x, const std::vector<transfer>& ms) {
  std::map<std::int64_t, std::vector<transfer>> by_offset;
  for (const auto& m : ms) by_offset[m.offset].push_back(m);
  std::int64_t covered = 0;
  for (auto& [offset, hops] : by_offset) {
    REQUIRE(offset == covered);
    std::stable_sort(hops.begin(), hops.end(), [](const transfer& a, const transfer& b) { return stage_of(a.step) < stage_of(b.step); });
    rank_index at = x.src;
    for (std::size_t h = 0; h < hops.size(); ++h) {
      REQUIRE(hops[h].src == at);
      REQUIRE(hops[h].bytes == hops.front().bytes);
      if (h > 0) REQUIRE(stage_of(hops[h - 1].step) < stage_of(hops[h].step));
      at = hops[h].dst;
    }
    REQUIRE(at == x.dst);
    covered += hops.front().bytes;
  }
  REQUIRE(covered == x.bytes);
}

void check_route(const std::vector<transfer>& edges, const std::vector<transfer>& msgs, const topology& t,
                 const std::vector<char>& capable) {
  std::map<std::int32_t, std::vector<transfer>> by_edge;
  for (const auto& m : msgs) {
    REQUIRE(m.payload >= 0);
    REQUIRE(static_cast<std::size_t>(m.payload) < edges.size());
    REQUIRE(m.bytes > 0);
    if (m.step == route_step::dispatch || m.step == route_step::combine) REQUIRE(t.between(m.src, m.dst) == link_class::intra_node);
    if (m.step == route_step::transfer) REQUIRE(t.between(m.src, m.dst) == link_class::inter_node);
    by_edge[m.payload].push_back(m);
  }
  // Pieces come ordered by payload, then step.
  for (std::size_t k = 1; k < msgs.size(); ++k) {
    REQUIRE(msgs[k - 1].payload <= msgs[k].payload);
    if (msgs[k - 1].payload == msgs[k].payload) REQUIRE(msgs[k - 1].step <= msgs[k].step);
  }
  for (std::size_t e = 0; e < edges.size(); ++e) {
    const auto& x = edges[e];
    const auto& ms = by_edge[static_cast<std::int32_t>(e)];
    if (x.bytes == 0) {
      REQUIRE(ms.empty());
      continue;
    }
    check_offsets(x, ms);
    // Flow conservation: src emits n, dst absorbs n, every proxy passes on what it gets.
    std::map<rank_index, std::int64_t> net;
    for (const auto& m : ms) net[m.src] += m.bytes, net[m.dst] -= m.bytes;
    for (const auto& [r, v] : net) REQUIRE(v == (r == x.src ? x.bytes : 0) - (r == x.dst ? x.bytes : 0));
    std::int64_t dispatched = 0, transferred = 0, combined = 0, direct = 0;
    std::set<int> send_nics, recv_nics;
    std::set<rank_index> send_proxies, recv_proxies;
    std::int64_t lo = x.bytes, hi = 0;
    for (const auto& m : ms) {
      switch (m.step) {
        case route_step::dispatch:
          dispatched += m.bytes;
          REQUIRE(m.src == x.src);
          break;
        case route_step::combine:
          combined += m.bytes;
          REQUIRE(m.dst == x.dst);
          break;
        case route_step::direct:
          direct += m.bytes;
          REQUIRE((m.src == x.src && m.dst == x.dst));
          break;
        case route_step::transfer:
          transferred += m.bytes;
          REQUIRE(t.node_of(m.src) == t.node_of(x.src));
          REQUIRE(t.node_of(m.dst) == t.node_of(x.dst));
          REQUIRE(send_nics.insert(t.nic_of(m.src)).second);  // distinct NICs
          REQUIRE(recv_nics.insert(t.nic_of(m.dst)).second);
          REQUIRE(send_proxies.insert(m.src).second);  // one to one
          REQUIRE(recv_proxies.insert(m.dst).second);
          REQUIRE((capable[static_cast<std::size_t>(m.src)] || m.src == x.src));
          REQUIRE((capable[static_cast<std::size_t>(m.dst)] || m.dst == x.dst));
          lo = std::min(lo, m.bytes), hi = std::max(hi, m.bytes);
          break;
      }
    }
    if (direct > 0) {
      REQUIRE(direct == x.bytes);
      REQUIRE(ms.size() == 1);
    } else {
      REQUIRE(transferred == x.bytes);
      REQUIRE(hi - lo <= 1);  // even split
      REQUIRE(dispatched <= x.bytes);
      REQUIRE(combined <= x.bytes);
      // What the source sends through its own NIC needs no dispatch; what arrives on the
      // destination's own NIC needs no combine.
      std::int64_t own_send = 0, own_recv = 0;
      for (const auto& m : ms)
        if (m.step == route_step::transfer) {
          if (m.src == x.src) own_send = m.bytes;
          if (m.dst == x.dst) own_recv = m.bytes;
        }
      REQUIRE(dispatched == x.bytes - own_send);
      REQUIRE(combined == x.bytes - own_recv);
    }
  }
}

}  // namespace

TEST_CASE("direct_router: one piece per payload on its own link", "[route]") {
  const auto t = clusters::cluster_a(2);
  const std::vector<transfer> edges{{0, 1, 10}, {7, 8, 20}, {3, 3, 5}, {4, 12, 0}};
  const auto m = direct_router{}.route(edges, t);
  REQUIRE(m.size() == 3);
  CHECK(m[0] == transfer{0, 1, 10, 0, 0, route_step::direct});
  CHECK(m[1] == transfer{7, 8, 20, 1, 0, route_step::direct});
  CHECK(m[2] == transfer{3, 3, 5, 2, 0, route_step::direct});
}

TEST_CASE("proxy_router conserves bytes, pairs one to one on distinct NICs, uses allowed proxies", "[route]") {
  random_generator rng(31);
  for (int trial = 0; trial < 300; ++trial) {
    const auto t = pick_cluster(rng, static_cast<int>(rng.between(1, 4)));
    const auto edges = random_round(rng, t);
    proxy_router r{};
    std::vector<char> capable(static_cast<std::size_t>(t.num_ranks()), 1);
    if (rng.below(2)) {
      std::fill(capable.begin(), capable.end(), 0);
      for (rank_index k = 0; k < t.num_ranks(); ++k)
        if (rng.below(3) == 0) r.proxies.push_back(k), capable[static_cast<std::size_t>(k)] = 1;
    }
    if (rng.below(4) == 0) r.max_proxies = static_cast<int>(rng.between(1, 3));
    r.fallback_to_direct = rng.below(2) == 0;
    const auto msgs = r.route(edges, t);
    check_route(edges, msgs, t, capable);
    if (r.max_proxies > 0) {
      std::map<std::int32_t, int> pairs;
      for (const auto& m : msgs) pairs[m.payload] += m.step == route_step::transfer;
      for (const auto& [e, k] : pairs) REQUIRE(k <= r.max_proxies);
    }
    CHECK(r.route(edges, t) == msgs);  // deterministic
  }
}

TEST_CASE("proxy routing is never costlier than direct, and pays on real rounds", "[route]") {
  random_generator rng(32);
  int cheaper = 0, rounds = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const auto t = pick_cluster(rng, static_cast<int>(rng.between(2, 4)));
    const auto edges = random_round(rng, t);
    proxy_router r{};
    if (rng.below(2))
      for (rank_index k = 0; k < t.num_ranks(); ++k)
        if (rng.below(2)) r.proxies.push_back(k);
    const double routed = round_seconds(r.route(edges, t), t);
    const double direct = round_seconds(direct_router{}.route(edges, t), t);
    REQUIRE(routed <= direct);
    cheaper += routed < direct * 0.9;
    ++rounds;
  }
  CHECK(cheaper > rounds / 2);
}

TEST_CASE("a single routed edge costs equation (1)", "[route]") {
  const auto no_latency = [](topology t) {
    auto c = t.config();
    c.intra_node.latency = 0;
    c.nic.latency = 0;
    return topology(c);
  };
  const double n = 64.0 * (1 << 20);
  SECTION("cluster C: 8 NICs per node, 8 proxy pairs") {
    const auto t = no_latency(clusters::cluster_c(2));
    const std::vector<transfer> edges{{3, 12, static_cast<std::int64_t>(n)}};
    const auto msgs = proxy_router{}.route(edges, t);
    CHECK(std::count_if(msgs.begin(), msgs.end(), [](const auto& m) { return m.step == route_step::transfer; }) == 8);
    const double b_intra = link_model::inverse_bandwidth(link_class::intra_node, t);
    const double b_inter = link_model::inverse_bandwidth(link_class::inter_node, t);
    CHECK(round_seconds(msgs, t) == Approx(three_step_seconds(n, 8, 8, b_intra, b_inter)).epsilon(1e-12));
    CHECK(round_seconds(direct_router{}.route(edges, t), t) == Approx(three_step_seconds(n, 1, 1, b_intra, b_inter)));
  }
  SECTION("cluster A: two GPUs per NIC, so 4 proxy pairs") {
    const auto t = no_latency(clusters::cluster_a(2));
    const std::vector<transfer> edges{{1, 9, static_cast<std::int64_t>(n)}};
    const auto msgs = proxy_router{}.route(edges, t);
    CHECK(std::count_if(msgs.begin(), msgs.end(), [](const auto& m) { return m.step == route_step::transfer; }) == 4);
    const double b_intra = link_model::inverse_bandwidth(link_class::intra_node, t);
    const double b_inter = link_model::inverse_bandwidth(link_class::inter_node, t);
    CHECK(round_seconds(msgs, t) == Approx(three_step_seconds(n, 4, 4, b_intra, b_inter)).epsilon(1e-12));
  }
  SECTION("only two proxies allowed on the receiving node") {
    const auto t = no_latency(clusters::cluster_c(2));
    const std::vector<transfer> edges{{0, 8, static_cast<std::int64_t>(n)}};
    const auto msgs = proxy_router{.proxies = {1, 2, 3, 4, 9}}.route(edges, t);
    // Node 1 offers the destination 8 and proxy 9: two pairs.
    CHECK(std::count_if(msgs.begin(), msgs.end(), [](const auto& m) { return m.step == route_step::transfer; }) == 2);
  }
}

TEST_CASE("proxy routing falls back to direct when NVLink is slower than the NICs", "[route]") {
  const topology slow_nvlink({"odd", 2, 4, 4, {}, {1e9, 0}, {48e9, 0}, gpus::h100_sxm()});
  const std::vector<transfer> edges{{0, 4, 1 << 20}};
  const auto msgs = proxy_router{}.route(edges, slow_nvlink);
  REQUIRE(msgs.size() == 1);
  CHECK(msgs[0].step == route_step::direct);
}

TEST_CASE("routers reject bad input", "[route]") {
  const auto t = clusters::cluster_c(2);
  const std::vector<transfer> bad_rank{{0, 16, 1}}, negative{{0, 9, -1}};
  CHECK_THROWS_AS(proxy_router{}.route(bad_rank, t), invalid_argument);
  CHECK_THROWS_AS(direct_router{}.route(negative, t), invalid_argument);
  const std::vector<transfer> ok{{0, 9, 1}};
  CHECK_THROWS_AS(proxy_router{.proxies = {99}}.route(ok, t), invalid_argument);
  CHECK_THROWS_AS(proxy_router{.max_proxies = -1}.route(ok, t), invalid_argument);
  CHECK_THROWS_AS(three_step_seconds(1, 0, 1, 1, 1), invalid_argument);
}
