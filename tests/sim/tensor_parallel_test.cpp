// tensor_parallel_view: TP groups as CP ranks, with their NICs (cluster A: a pair shares one
// NIC; cluster C: a pair owns two) and the TP collective price.
#include <catch2/catch.hpp>

#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

using namespace zeppelin;

TEST_CASE("TP = 2 on cluster A: the pair shares its NIC", "[sim][tp]") {
  const topology a = clusters::cluster_a(2);
  const topology v = tensor_parallel_view(a, 2);
  CHECK(v.gpus_per_node() == 4);
  CHECK(v.nics_per_node() == 4);
  CHECK(v.nic_link().bandwidth == a.nic_link().bandwidth);
  CHECK(v.intra_node_link().bandwidth == 2 * a.intra_node_link().bandwidth);
  CHECK(v.gpu().peak_flops == 2 * a.gpu().peak_flops);
  for (int g = 0; g < 4; ++g) CHECK(v.local_nic_of_gpu(g) == g);
}

TEST_CASE("TP = 2 on cluster C: the pair's two NICs become one of twice the bandwidth", "[sim][tp]") {
  const topology c = clusters::cluster_c(2);
  const topology v = tensor_parallel_view(c, 2);
  CHECK(v.gpus_per_node() == 4);
  CHECK(v.nics_per_node() == 4);
  CHECK(v.nic_link().bandwidth == 2 * c.nic_link().bandwidth);
  CHECK(tensor_parallel_view(c, 1) == c);
  // TP = 4 on cluster A: each group covers two NICs
  const topology v4 = tensor_parallel_view(clusters::cluster_a(1), 4);
  CHECK(v4.nics_per_node() == 2);
  CHECK(v4.nic_link().bandwidth == 2 * clusters::cluster_a(1).nic_link().bandwidth);
}

TEST_CASE("TP views reject what they cannot express", "[sim][tp]") {
  CHECK_THROWS_AS(tensor_parallel_view(clusters::cluster_a(1), 3), invalid_argument);
  CHECK_THROWS_AS(tensor_parallel_view(clusters::cluster_a(1), 0), invalid_argument);
  // GPUs 0,1 -> NIC 0 and GPU 2 -> NIC 0, GPU 3 -> NIC 1: group {2,3} uses two NICs, group {0,1} one
  const topology odd({"odd", 1, 4, 2, {0, 0, 0, 1}, {1e11, 0}, {1e10, 0}, {"G", 1e12, 1e9, 1e12}});
  CHECK_THROWS_AS(tensor_parallel_view(odd, 2), invalid_argument);
}

TEST_CASE("a TP collective moves (tp-1)/tp of the hidden states over one GPU's NVLink", "[sim][tp]") {
  const topology v = tensor_parallel_view(clusters::cluster_a(1), 2);
  const model_config m = models::llama_13b();
  const double bytes = 4096.0 * m.hidden * 2 / 2;
  CHECK(tensor_parallel_collective_seconds(4096, m, v, 2) == Approx(v.intra_node_link().latency + bytes / 200e9));
  CHECK(tensor_parallel_collective_seconds(4096, m, v, 1) == 0.0);
  CHECK(tensor_parallel_collective_seconds(0, m, v, 2) == 0.0);
}
