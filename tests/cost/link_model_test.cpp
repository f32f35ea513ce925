// tests/cost/link_model_test.cpp
// link_model: latency + bytes / bandwidth per link class, NIC sharing on cluster A (two GPUs
// per NIC -> half bandwidth), max-min fair completion of concurrent flows, errors; the
// busiest port (cost/busiest_port.hpp) of flows and of per-rank traffic.
#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/busiest_port.hpp>
#include <zeppelin/cost/link_model.hpp>
#include <zeppelin/cost/transfer_bytes.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <span>
#include <vector>

using namespace zeppelin;

TEST_CASE("one message: latency + bytes / bandwidth per link class", "[cost][link_model]") {
  const auto a = clusters::cluster_a(2);  // NVSwitch 200 GB/s + 3 us, NIC 24 GB/s + 10 us
  const link_model l{};
  REQUIRE(l.seconds(1e9, link_class::intra_node, a) == Approx(3e-6 + 1e9 / 200e9));
  REQUIRE(l.seconds(1e9, link_class::inter_node, a) == Approx(10e-6 + 1e9 / 24e9));
  REQUIRE(l.seconds(1e9, link_class::inter_node, a, 2) == Approx(10e-6 + 2e9 / 24e9));
  REQUIRE(l.seconds(1e9, link_class::local, a) == 0);
  REQUIRE(l.seconds(0, link_class::inter_node, a) == 0);
  REQUIRE(link_model::inverse_bandwidth(link_class::intra_node, a) == 1 / 200e9);
  REQUIRE(link_model::inverse_bandwidth(link_class::inter_node, a) == 1 / 24e9);
  REQUIRE(link_model::inverse_bandwidth(link_class::local, a) == 0);
  REQUIRE(link_model::latency(link_class::inter_node, a) == 10e-6);
  // By ranks: 0 -> 1 intra-node, 0 -> 8 inter-node, 3 -> 3 local.
  REQUIRE(l.seconds(link_flow{0, 1, 5e8}, a) == l.seconds(5e8, link_class::intra_node, a));
  REQUIRE(l.seconds(link_flow{0, 8, 5e8}, a) == l.seconds(5e8, link_class::inter_node, a));
  REQUIRE(l.seconds(link_flow{3, 3, 5e8}, a) == 0);
}

TEST_CASE("Zeppelin case study: one TE CP ring round of 3B KV over a 200G NIC takes ~2.18 ms", "[cost][link_model]") {
  // 4K tokens per GPU of LLaMA-3B KV (12,800 B/token/layer) across nodes on cluster A:
  // the paper measures 2.18 ms per inter-node ring round.
  const auto a = clusters::cluster_a(2);
  const double bytes = 4096 * kv_bytes_per_token(models::llama_3b());
  REQUIRE(link_model{}.seconds(bytes, link_class::inter_node, a) == Approx(2.18e-3).epsilon(0.01));
}

TEST_CASE("NIC sharing: two GPUs of one cluster-A NIC get half its bandwidth each", "[cost][link_model]") {
  const auto a = clusters::cluster_a(2);
  const link_model l{};
  const double bytes = 64e6;
  // GPUs 0 and 1 share NIC 0; GPUs 8 and 9 share node 1's NIC 0.
  const std::vector<link_flow> same_nic{{0, 8, bytes}, {1, 9, bytes}};
  REQUIRE(flow_sharing(same_nic, a) == std::vector<int>{2, 2});
  for (double s : l.concurrent_seconds(same_nic, a))
    REQUIRE(s == Approx(l.seconds(bytes, link_class::inter_node, a, 2)));
  // GPUs 0 and 2 use NICs 0 and 1: no sharing.
  const std::vector<link_flow> distinct{{0, 8, bytes}, {2, 10, bytes}};
  REQUIRE(flow_sharing(distinct, a) == std::vector<int>{1, 1});
  for (double s : l.concurrent_seconds(distinct, a)) REQUIRE(s == Approx(l.seconds(bytes, link_class::inter_node, a)));
  // Sources on distinct NICs, destinations on one NIC: the receiving NIC is the bottleneck.
  const std::vector<link_flow> incast{{0, 8, bytes}, {2, 9, bytes}};
  REQUIRE(flow_sharing(incast, a) == std::vector<int>{2, 2});
  // Cluster C has one NIC per GPU: the same pattern does not share.
  REQUIRE(flow_sharing(same_nic, clusters::cluster_c(2)) == std::vector<int>{1, 1});
  // Intra-node flows share the source GPU's NVLink egress; local and empty flows share nothing.
  const std::vector<link_flow> mixed{{0, 1, bytes}, {0, 2, bytes}, {0, 0, bytes}, {4, 12, 0}, {4, 12, bytes}};
  REQUIRE(flow_sharing(mixed, a) == std::vector<int>{2, 2, 1, 1, 1});
  const auto t = l.concurrent_seconds(mixed, a);
  REQUIRE(t[0] == Approx(l.seconds(bytes, link_class::intra_node, a, 2)));
  REQUIRE(t[2] == 0);
  REQUIRE(t[3] == 0);
  REQUIRE(t[4] == Approx(l.seconds(bytes, link_class::inter_node, a)));
  REQUIRE(l.makespan(mixed, a) == Approx(t[4]));
  REQUIRE(l.makespan(std::vector<link_flow>{}, a) == 0);
}

TEST_CASE("concurrent flows: a flow that finishes early hands its bandwidth on", "[cost][link_model]") {
  const auto a = clusters::cluster_a(2);
  const link_model l{};
  const double bw = 24e9, lat = 10e-6;
  const std::vector<link_flow> f{{0, 8, 1e9}, {1, 10, 3e9}};  // share NIC 0 on the sending side
  const auto t = l.concurrent_seconds(f, a);
  REQUIRE(t[0] == Approx(lat + 2e9 / bw));  // half rate until done
  REQUIRE(t[1] == Approx(lat + 4e9 / bw));  // then full rate: work conserving
  // Max-min fairness: a flow capped elsewhere leaves the rest to the others. Flows 0 -> 8
  // and 2 -> 9 share node 1's NIC 0; flow 1 -> 12 shares NIC 0 with 0 -> 8 on the send side.
  const std::vector<link_flow> g{{0, 8, 1e9}, {2, 9, 1e9}, {1, 12, 1e9}};
  const auto u = l.concurrent_seconds(g, a);
  REQUIRE(u[0] == Approx(lat + 2e9 / bw));
  REQUIRE(u[1] == Approx(lat + 2e9 / bw));
  REQUIRE(u[2] == Approx(lat + 2e9 / bw));
}

TEST_CASE("concurrent flows: bounds on random flow sets", "[cost][link_model]") {
  random_generator rng(31337, 0);
  const link_model l{};
  for (int trial = 0; trial < 300; ++trial) {
    const auto topo = trial % 2 ? clusters::cluster_a(3) : clusters::hydraulis_a800_ib(2);
    const auto n = rng.between(0, 12);
    std::vector<link_flow> flows;
    for (int i = 0; i < n; ++i)
      flows.push_back({static_cast<rank_index>(rng.below(static_cast<std::uint64_t>(topo.num_ranks()))),
                       static_cast<rank_index>(rng.below(static_cast<std::uint64_t>(topo.num_ranks()))),
                       rng.below(4) == 0 ? 0.0 : 1e6 * static_cast<double>(rng.between(1, 1000))});
    const auto t = l.concurrent_seconds(flows, topo);
    const auto k = flow_sharing(flows, topo);
    REQUIRE(t.size() == flows.size());
    // Alone <= together <= an even split with every flow that shares its busier port.
    for (std::size_t i = 0; i < flows.size(); ++i) {
      const double alone = l.seconds(flows[i], topo);
      REQUIRE(t[i] >= alone * (1 - 1e-9));
      REQUIRE(t[i] <= l.seconds(flows[i], topo, k[i]) * (1 + 1e-9));
    }
    // No port moves bytes faster than its bandwidth: the last flow through a port ends no
    // earlier than latency + (bytes through it) / bandwidth.
    std::map<std::pair<int, int>, std::pair<double, double>> port;  // (kind, id) -> (bytes, last end)
    for (std::size_t i = 0; i < flows.size(); ++i) {
      const auto c = topo.between(flows[i].source, flows[i].destination);
      if (c == link_class::local || flows[i].bytes == 0) continue;
      const bool inter = c == link_class::inter_node;
      const std::pair<int, int> keys[2] = {
          {inter ? 2 : 0, inter ? topo.nic_of(flows[i].source) : flows[i].source},
          {inter ? 3 : 1, inter ? topo.nic_of(flows[i].destination) : flows[i].destination}};
      for (const auto& key : keys) {
        auto& [bytes, last] = port[key];
        bytes += flows[i].bytes;
        last = std::max(last, t[i]);
      }
    }
    double busiest = 0;
    for (const auto& [key, v] : port) {
      const bool inter = key.first >= 2;
      const double bw = inter ? topo.nic_link().bandwidth : topo.intra_node_link().bandwidth;
      const double lat = inter ? topo.nic_link().latency : topo.intra_node_link().latency;
      REQUIRE(v.second >= (lat + v.first / bw) * (1 - 1e-9));
      busiest = std::max(busiest, lat + v.first / bw);
    }
    // The whole set's least time: its busiest port at full rate (and its latency), no later
    // than the last flow under fair sharing.
    const double whole = busiest_port_seconds(flows, topo);
    REQUIRE(whole == Approx(busiest).epsilon(1e-12));
    // the same from each rank's bytes per link class
    std::vector<rank_traffic> traffic(static_cast<std::size_t>(topo.num_ranks()));
    for (const link_flow& f : flows) {
      const auto c = topo.between(f.source, f.destination);
      if (c == link_class::local) continue;
      (c == link_class::intra_node ? traffic[static_cast<std::size_t>(f.source)].sent_intra : traffic[static_cast<std::size_t>(f.source)].sent_inter) += f.bytes;
      (c == link_class::intra_node ? traffic[static_cast<std::size_t>(f.destination)].received_intra
                                   : traffic[static_cast<std::size_t>(f.destination)].received_inter) += f.bytes;
    }
    REQUIRE(busiest_port_seconds(std::span<const rank_traffic>(traffic), topo) == Approx(whole).epsilon(1e-12));
    REQUIRE(whole <= (t.empty() ? 0.0 : *std::max_element(t.begin(), t.end())) * (1 + 1e-9));
    // Deterministic.
    REQUIRE(l.concurrent_seconds(flows, topo) == t);
  }
}

TEST_CASE("busiest port: equal flows out of one NIC take what fair sharing gives them", "[cost][link_model]") {
  const auto topo = clusters::hydraulis_a800_ib(3);  // a NIC per GPU
  const std::vector<link_flow> flows = {{0, 8, 4e8}, {0, 16, 4e8}, {1, 2, 1e8}};
  const double last = std::max({link_model{}.concurrent_seconds(flows, topo)[0], link_model{}.concurrent_seconds(flows, topo)[1]});
  CHECK(busiest_port_seconds(flows, topo) == Approx(last).epsilon(1e-12));
  CHECK(busiest_port_seconds(flows, topo) == Approx(8e8 / topo.nic_link().bandwidth + topo.nic_link().latency).epsilon(1e-12));
  CHECK(busiest_port_seconds(std::span<const link_flow>{}, topo) == 0);
  const std::vector<link_flow> bad = {{0, 40, 1.0}};
  CHECK_THROWS_AS(busiest_port_seconds(bad, topo), invalid_argument);
  const std::vector<rank_traffic> short_list(3);
  CHECK_THROWS_AS(busiest_port_seconds(std::span<const rank_traffic>(short_list), topo), invalid_argument);
  std::vector<rank_traffic> negative(static_cast<std::size_t>(topo.num_ranks()));
  negative[5].received_inter = -1;
  CHECK_THROWS_AS(busiest_port_seconds(std::span<const rank_traffic>(negative), topo), invalid_argument);
}

TEST_CASE("link model errors", "[cost][link_model]") {
  const auto a = clusters::cluster_a(1);
  const link_model l{};
  REQUIRE_THROWS_AS(l.seconds(-1, link_class::intra_node, a), invalid_argument);
  REQUIRE_THROWS_AS(l.seconds(-1, link_class::local, a), invalid_argument);
  REQUIRE_THROWS_AS(l.seconds(std::numeric_limits<double>::quiet_NaN(), link_class::intra_node, a), invalid_argument);
  REQUIRE_THROWS_AS(l.seconds(std::numeric_limits<double>::infinity(), link_class::intra_node, a), invalid_argument);
  REQUIRE_THROWS_AS(l.seconds(1, link_class::intra_node, a, 0), invalid_argument);
  try {
    (void)l.seconds(-5, link_class::inter_node, a);
    FAIL("negative bytes accepted");
  } catch (const invalid_argument& e) {
    REQUIRE(e.value("bytes") == -5.0);
  }
  const std::vector<link_flow> negative{{0, 1, -1}};
  REQUIRE_THROWS_AS(flow_sharing(negative, a), invalid_argument);
  REQUIRE_THROWS_AS(l.concurrent_seconds(negative, a), invalid_argument);
  const std::vector<link_flow> off_topology{{0, 8, 1}};  // one node: rank 8 does not exist
  REQUIRE_THROWS_AS(flow_sharing(off_topology, a), invalid_argument);
  REQUIRE_THROWS_AS(l.makespan(off_topology, a), invalid_argument);
}
