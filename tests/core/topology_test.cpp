// tests/core/topology_test.cpp
// zeppelin::topology (core/topology.hpp) and the cluster presets (core/topology_presets.hpp):
// the rank/node/GPU/NIC maps are consistent over random shapes and NIC maps, the presets
// state the facts of the papers, and every bad figure is rejected with its number.
#include "../support/random_int.hpp"

#include <catch2/catch.hpp>

#include "support/expect_error.hpp"
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/topology_presets.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace zp = zeppelin;
using zp::link_class;

namespace {

zp::topology_config base_config() {
  return {"test", 2, 4, 2, {}, {100e9, 1e-6}, {10e9, 5e-6}, {"gpu", 1e15, 80e9, 3e12}};
}

using zeppelin_test::pick;

// A random valid GPU -> NIC map: every NIC gets one GPU first (so none is idle), the rest
// go anywhere.
std::vector<int> random_nic_map(zp::random_generator& rng, int gpus, int nics) {
  std::vector<int> order(static_cast<std::size_t>(gpus));
  for (int g = 0; g < gpus; ++g) order[static_cast<std::size_t>(g)] = g;
  rng.shuffle(order.begin(), order.end());
  std::vector<int> map(static_cast<std::size_t>(gpus));
  for (int i = 0; i < gpus; ++i)
    map[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = i < nics ? i : pick(rng, 0, nics - 1);
  return map;
}

using zeppelin_test::expect_invalid;

zp::invalid_argument expect_invalid_config(const zp::topology_config& c) {
  return expect_invalid([&] { (void)zp::topology(c); });
}

}  // namespace

TEST_CASE("rank node GPU and NIC maps are consistent bijections", "[core][topology]") {
  zp::random_generator rng(201);
  for (int trial = 0; trial < 150; ++trial) {
    zp::topology_config c = base_config();
    c.nodes = pick(rng, 1, 16);
    c.gpus_per_node = pick(rng, 1, 8);
    c.nics_per_node = pick(rng, 1, c.gpus_per_node);
    const bool default_map = rng.below(4) == 0;
    if (!default_map) c.gpu_to_nic = random_nic_map(rng, c.gpus_per_node, c.nics_per_node);
    const zp::topology t(c);
    const int N = c.nodes, P = c.gpus_per_node, K = c.nics_per_node;
    INFO(N << " nodes x " << P << " GPUs, " << K << " NICs");

    REQUIRE(t.nodes() == N);
    REQUIRE(t.gpus_per_node() == P);
    REQUIRE(t.nics_per_node() == K);
    REQUIRE(t.num_ranks() == N * P);
    REQUIRE(t.num_nics() == N * K);
    REQUIRE(static_cast<int>(t.gpu_to_nic().size()) == P);
    if (default_map) {
      // contiguous blocks: GPU g -> NIC g * K / P, non-decreasing
      for (int g = 0; g < P; ++g) REQUIRE(t.local_nic_of_gpu(g) == g * K / P);
    } else {
      REQUIRE(t.gpu_to_nic() == c.gpu_to_nic);
    }

    // rank <-> (node, local GPU) is a bijection, node-major
    std::set<std::pair<int, int>> pairs;
    std::vector<int> nic_users(static_cast<std::size_t>(N * K), 0);
    for (zp::rank_index r = 0; r < t.num_ranks(); ++r) {
      const int node = t.node_of(r), g = t.local_gpu_of(r);
      REQUIRE(node >= 0);
      REQUIRE(node < N);
      REQUIRE(g >= 0);
      REQUIRE(g < P);
      REQUIRE(node * P + g == r);
      REQUIRE(t.rank_of(node, g) == r);
      pairs.insert({node, g});
      const int nic = t.nic_of(r);
      REQUIRE(nic >= 0);
      REQUIRE(nic < t.num_nics());
      REQUIRE(nic / K == node);  // a rank sends through a NIC of its own node
      REQUIRE(nic % K == t.local_nic_of_gpu(g));
      ++nic_users[static_cast<std::size_t>(nic)];
    }
    REQUIRE(pairs.size() == static_cast<std::size_t>(N * P));
    for (int n = 0; n < N; ++n)
      for (int g = 0; g < P; ++g) {
        const zp::rank_index r = t.rank_of(n, g);
        REQUIRE(t.node_of(r) == n);
        REQUIRE(t.local_gpu_of(r) == g);
      }

    // every NIC serves at least one GPU; gpus_sharing_nic counts them and sums to P
    int sum = 0;
    for (int k = 0; k < K; ++k) {
      const int users = t.gpus_sharing_nic(k);
      REQUIRE(users >= 1);
      int counted = 0;
      for (int g = 0; g < P; ++g) counted += t.local_nic_of_gpu(g) == k;
      REQUIRE(users == counted);
      for (int n = 0; n < N; ++n) REQUIRE(nic_users[static_cast<std::size_t>(n * K + k)] == users);
      sum += users;
    }
    REQUIRE(sum == P);

    // between(): local iff same rank, intra iff same node, symmetric
    for (int probe = 0; probe < 50; ++probe) {
      const auto a = static_cast<zp::rank_index>(rng.below(static_cast<std::uint64_t>(t.num_ranks())));
      const auto b = static_cast<zp::rank_index>(rng.below(static_cast<std::uint64_t>(t.num_ranks())));
      const link_class expect = a == b                         ? link_class::local
                                : t.node_of(a) == t.node_of(b) ? link_class::intra_node
                                                               : link_class::inter_node;
      REQUIRE(t.between(a, b) == expect);
      REQUIRE(t.between(b, a) == expect);
    }
    REQUIRE(t.between(0, t.num_ranks() - 1) == (N == 1 ? (P == 1 ? link_class::local : link_class::intra_node)
                                                        : link_class::inter_node));
    REQUIRE(t == zp::topology(c));
  }
}

TEST_CASE("queries reject ranks GPUs and NICs that do not exist", "[core][topology]") {
  const zp::topology t(base_config());  // 2 x 4, 2 NICs
  auto e = expect_invalid([&] { (void)t.node_of(8); });
  CHECK(e.value("rank") == 8.0);
  CHECK(e.value("num_ranks") == 8.0);
  CHECK(expect_invalid([&] { (void)t.node_of(-1); }).value("rank") == -1.0);
  CHECK_THROWS_AS((void)t.local_gpu_of(8), zp::invalid_argument);
  CHECK_THROWS_AS((void)t.nic_of(-1), zp::invalid_argument);
  CHECK_THROWS_AS((void)t.between(0, 8), zp::invalid_argument);
  CHECK_THROWS_AS((void)t.between(-1, 0), zp::invalid_argument);
  e = expect_invalid([&] { (void)t.rank_of(2, 0); });
  CHECK(e.value("node") == 2.0);
  e = expect_invalid([&] { (void)t.rank_of(0, 4); });
  CHECK(e.value("local_gpu") == 4.0);
  CHECK_THROWS_AS((void)t.rank_of(-1, 0), zp::invalid_argument);
  CHECK(expect_invalid([&] { (void)t.local_nic_of_gpu(4); }).value("local_gpu") == 4.0);
  CHECK(expect_invalid([&] { (void)t.gpus_sharing_nic(2); }).value("nic") == 2.0);
  CHECK_THROWS_AS((void)t.gpus_sharing_nic(-1), zp::invalid_argument);
}

TEST_CASE("topology equality covers every field", "[core][topology]") {
  const zp::topology t(base_config());
  CHECK(t == zp::topology(base_config()));
  // the default map equals the same map given explicitly
  auto explicit_map = base_config();
  explicit_map.gpu_to_nic = {0, 0, 1, 1};
  CHECK(t == zp::topology(explicit_map));
  std::vector<zp::topology_config> changed(9, base_config());
  changed[0].name = "other";
  changed[1].nodes = 3;
  changed[2].gpus_per_node = 2;
  changed[3].nics_per_node = 1;
  changed[4].gpu_to_nic = {0, 1, 0, 1};
  changed[5].intra_node.latency = 2e-6;
  changed[6].nic.bandwidth = 11e9;
  changed[7].gpu.name = "other";
  changed[8].gpu.memory_bytes = 40e9;
  for (const auto& c : changed) CHECK_FALSE(t == zp::topology(c));
}

TEST_CASE("cluster presets state the facts of the papers", "[core][topology][presets]") {
  for (int nodes : {1, 2, 4, 8, 16, 32}) {
    INFO(nodes << " nodes");
    // Zeppelin cluster A: 8x A800, 4 RoCE NICs of 200 Gb/s, GPUs 2i and 2i+1 share NIC i
    const zp::topology a = zp::clusters::cluster_a(nodes);
    CHECK(a.nodes() == nodes);
    CHECK(a.gpus_per_node() == 8);
    CHECK(a.nics_per_node() == 4);
    CHECK(a.num_ranks() == 8 * nodes);
    CHECK(a.gpu().name == "A800-80G");
    for (int i = 0; i < 4; ++i) {
      CHECK(a.local_nic_of_gpu(2 * i) == i);
      CHECK(a.local_nic_of_gpu(2 * i + 1) == i);
      CHECK(a.gpus_sharing_nic(i) == 2);
    }
    for (zp::rank_index r = 0; r + 1 < a.num_ranks(); r += 2) CHECK(a.nic_of(r) == a.nic_of(r + 1));
    // 200 Gb/s = 25 GB/s raw; effective a little below
    CHECK(a.nic_link().bandwidth <= 25e9);
    CHECK(a.nic_link().bandwidth >= 20e9);
    // NVSwitch 400 GB/s bidirectional = 200 GB/s one way
    CHECK(a.intra_node_link().bandwidth == 200e9);

    // cluster B: 8x H800, one RoCE NIC per GPU
    const zp::topology b = zp::clusters::cluster_b(nodes);
    CHECK(b.nics_per_node() == 8);
    CHECK(b.gpu().name == "H800");
    for (int g = 0; g < 8; ++g) CHECK(b.local_nic_of_gpu(g) == g);

    // cluster C: 8x H200 + 8x CX7 400 Gb/s, one NIC per GPU
    const zp::topology c = zp::clusters::cluster_c(nodes);
    CHECK(c.gpus_per_node() == 8);
    CHECK(c.nics_per_node() == 8);
    CHECK(c.gpu().name == "H200");
    CHECK(c.gpu().memory_bytes == 141e9);
    for (int g = 0; g < 8; ++g) {
      CHECK(c.local_nic_of_gpu(g) == g);
      CHECK(c.gpus_sharing_nic(g) == 1);
    }
    CHECK(c.nic_link().bandwidth <= 50e9);  // 400 Gb/s = 50 GB/s raw
    CHECK(c.nic_link().bandwidth > a.nic_link().bandwidth);
    std::set<int> nics;
    for (zp::rank_index r = 0; r < c.num_ranks(); ++r) nics.insert(c.nic_of(r));
    CHECK(nics.size() == static_cast<std::size_t>(c.num_ranks()));

    // WLB-LLM: 8x H100 SXM over RoCE
    const zp::topology w = zp::clusters::wlb_h100_roce(nodes);
    CHECK(w.gpus_per_node() == 8);
    CHECK(w.gpu().name == "H100-SXM");
    CHECK(w.gpu().peak_flops == 989e12);

    // Hydraulis: 8x A800, NVLink 400 GB/s, IB 200 GB/s per node
    const zp::topology h = zp::clusters::hydraulis_a800_ib(nodes);
    CHECK(h.gpus_per_node() == 8);
    CHECK(h.gpu().name == "A800-80G");
    CHECK(h.intra_node_link().bandwidth == 200e9);
    const double per_node = h.nic_link().bandwidth * h.nics_per_node();
    CHECK(per_node <= 200e9);
    CHECK(per_node >= 160e9);

    // names are distinct; every figure is a positive finite number
    std::set<std::string> names;
    for (const zp::topology* t : {&a, &b, &c, &w, &h}) {
      names.insert(t->name());
      for (double v : {t->intra_node_link().bandwidth, t->nic_link().bandwidth, t->gpu().peak_flops,
                       t->gpu().memory_bytes, t->gpu().memory_bandwidth}) {
        CHECK(std::isfinite(v));
        CHECK(v > 0);
      }
      // NVLink beats a NIC, and a NIC message costs more latency than an NVLink one
      CHECK(t->intra_node_link().bandwidth > t->nic_link().bandwidth);
      CHECK(t->intra_node_link().latency < t->nic_link().latency);
      // GPU figures are realistic: 80..141 GB, 300..1000 TFLOP/s bf16 dense
      CHECK(t->gpu().memory_bytes >= 80e9);
      CHECK(t->gpu().memory_bytes <= 141e9);
      CHECK(t->gpu().peak_flops >= 300e12);
      CHECK(t->gpu().peak_flops <= 1000e12);
    }
    CHECK(names.size() == 5u);
  }
  CHECK(expect_invalid([] { (void)zp::clusters::cluster_a(0); }).value("nodes") == 0.0);
  CHECK_THROWS_AS(zp::clusters::cluster_c(-2), zp::invalid_argument);
}

TEST_CASE("zero or negative counts are rejected with the count", "[core][topology]") {
  for (int bad : {0, -1, -7}) {
    auto c = base_config();
    c.nodes = bad;
    CHECK(expect_invalid_config(c).value("nodes") == static_cast<double>(bad));
    c = base_config();
    c.gpus_per_node = bad;
    CHECK(expect_invalid_config(c).value("gpus_per_node") == static_cast<double>(bad));
    if (bad < 0) {  // 0 NICs means one per GPU
      c = base_config();
      c.nics_per_node = bad;
      CHECK(expect_invalid_config(c).value("nics_per_node") == static_cast<double>(bad));
    }
  }
  auto c = base_config();
  c.nodes = 1 << 16;
  c.gpus_per_node = 1 << 15;
  c.nics_per_node = 1;
  CHECK(expect_invalid_config(c).value("nodes") == 65536.0);  // 2^31 ranks overflow rank_index
}

TEST_CASE("bad bandwidths and latencies are rejected with the number", "[core][topology]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (bool intra : {true, false}) {
    for (double bad : {0.0, -1.0, -1e9, nan, inf, -inf}) {
      auto c = base_config();
      (intra ? c.intra_node : c.nic).bandwidth = bad;
      const auto e = expect_invalid_config(c);
      REQUIRE(e.value("bandwidth").has_value());
      if (std::isnan(bad))
        CHECK(std::isnan(*e.value("bandwidth")));
      else
        CHECK(*e.value("bandwidth") == bad);
      CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(intra ? "intra-node" : "NIC"));
    }
    for (double bad : {-1e-9, -1.0, nan, inf}) {
      auto c = base_config();
      (intra ? c.intra_node : c.nic).latency = bad;
      const auto e = expect_invalid_config(c);
      REQUIRE(e.value("latency").has_value());
      if (!std::isnan(bad)) CHECK(*e.value("latency") == bad);
    }
    auto zero_latency = base_config();
    (intra ? zero_latency.intra_node : zero_latency.nic).latency = 0;
    CHECK_NOTHROW(zp::topology(zero_latency));
  }
  // intra-node figures must be valid even on one GPU per node
  auto single = base_config();
  single.gpus_per_node = 1;
  single.nics_per_node = 1;
  single.intra_node.bandwidth = nan;
  CHECK_THROWS_AS(zp::topology(single), zp::invalid_argument);
}

TEST_CASE("bad GPU figures are rejected", "[core][topology]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (double bad : {0.0, -1.0, nan, std::numeric_limits<double>::infinity()}) {
    auto c = base_config();
    c.gpu.peak_flops = bad;
    CHECK(expect_invalid_config(c).value("peak_flops").has_value());
    c = base_config();
    c.gpu.memory_bytes = bad;
    CHECK(expect_invalid_config(c).value("memory_bytes").has_value());
    c = base_config();
    c.gpu.memory_bandwidth = bad;
    CHECK(expect_invalid_config(c).value("memory_bandwidth").has_value());
  }
}

TEST_CASE("bad GPU -> NIC maps are rejected", "[core][topology]") {
  auto c = base_config();  // 4 GPUs, 2 NICs
  c.gpu_to_nic = {0, 1, 0};
  auto e = expect_invalid_config(c);
  CHECK(e.value("entries") == 3.0);
  CHECK(e.value("gpus_per_node") == 4.0);
  c.gpu_to_nic = {0, 1, 0, 1, 0};
  CHECK(expect_invalid_config(c).value("entries") == 5.0);

  c.gpu_to_nic = {0, 1, 2, 1};  // NIC 2 does not exist
  e = expect_invalid_config(c);
  CHECK(e.value("gpu") == 2.0);
  CHECK(e.value("nic") == 2.0);
  c.gpu_to_nic = {0, -1, 1, 1};
  e = expect_invalid_config(c);
  CHECK(e.value("gpu") == 1.0);
  CHECK(e.value("nic") == -1.0);

  c.gpu_to_nic = {1, 1, 1, 1};  // NIC 0 serves no GPU
  e = expect_invalid_config(c);
  CHECK(e.value("nic") == 0.0);
  CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("serves no GPU"));

  // the default map cannot cover more NICs than GPUs
  auto more_nics = base_config();
  more_nics.nics_per_node = 5;
  CHECK(expect_invalid_config(more_nics).value("nic").has_value());

  // random maps that leave one NIC idle are all rejected with that NIC
  zp::random_generator rng(202);
  for (int trial = 0; trial < 200; ++trial) {
    auto r = base_config();
    r.gpus_per_node = pick(rng, 2, 8);
    r.nics_per_node = pick(rng, 2, r.gpus_per_node);
    const int idle = pick(rng, 0, r.nics_per_node - 1);
    r.gpu_to_nic.resize(static_cast<std::size_t>(r.gpus_per_node));
    for (auto& n : r.gpu_to_nic) {
      n = pick(rng, 0, r.nics_per_node - 2);
      if (n >= idle) ++n;
    }
    const auto err = expect_invalid_config(r);
    // the first idle NIC is reported (there may be others)
    int first_idle = -1;
    for (int k = 0; k < r.nics_per_node && first_idle < 0; ++k)
      if (std::find(r.gpu_to_nic.begin(), r.gpu_to_nic.end(), k) == r.gpu_to_nic.end()) first_idle = k;
    REQUIRE(err.value("nic") == static_cast<double>(first_idle));
  }
}

TEST_CASE("a topology plans from its counts alone, with an H100 SXM node's documented figures", "[core][topology]") {
  for (const int gpus : {1, 2, 8}) {
    const zp::topology t({.nodes = 3, .gpus_per_node = gpus});
    CHECK(t.num_ranks() == 3 * gpus);
    CHECK(t.nics_per_node() == gpus);  // 0 NICs per node: one per GPU
    for (int g = 0; g < gpus; ++g) CHECK(t.local_nic_of_gpu(g) == g);
    CHECK(t.gpu() == zp::gpus::h100_sxm());
    CHECK(t.config().intra_node == zp::links::nvlink_h100());
    CHECK(t.config().nic == zp::links::nic_400g());
  }
}
