// zeppelin/core/topology.hpp
// The cluster a plan runs on: N nodes x P GPUs, NICs per node with a GPU -> NIC map, and the
// link and GPU figures the cost models read.
// Ranks are numbered node-major: rank = node * gpus_per_node + local_gpu.
// NICs are numbered globally: nic = node * nics_per_node + local_nic.
// Units: bytes, bytes per second, seconds, FLOP per second (SI, not GiB).
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Which link a transfer between two ranks crosses.
enum class link_class : std::uint8_t {
  local = 0,       //!< same rank: no transfer
  intra_node = 1,  //!< NVLink / NVSwitch inside a node
  inter_node = 2,  //!< through NICs across nodes
};

//! A link's one-direction bandwidth (bytes/s) and per-message latency (s).
struct link_spec {
  double bandwidth = 0;
  double latency = 0;
  friend bool operator==(const link_spec&, const link_spec&) = default;
};

//! What a GPU offers: dense bf16 tensor-core peak (FLOP/s), memory (bytes), HBM bandwidth.
struct gpu_spec {
  std::string name;
  double peak_flops = 0;
  double memory_bytes = 0;
  double memory_bandwidth = 0;
  friend bool operator==(const gpu_spec&, const gpu_spec&) = default;
};

//! Everything a topology is made from. gpu_to_nic: local NIC of each local GPU (size P,
//! the same on every node); left empty, GPUs are spread over NICs in contiguous blocks
//! (GPU g -> NIC g * nics_per_node / gpus_per_node).
//! Defaults, so that `topology({.nodes = N, .gpus_per_node = P})` plans from counts alone: an
//! H100 SXM server (989 TFLOP/s dense bf16, 80 GB, 3.35 TB/s HBM; NVLink 4 through NVSwitch at
//! 380 GB/s and 3 us per direction per GPU) with one 400 Gb/s NIC per GPU (48 GB/s, 10 us), the
//! figures of core/topology_presets.hpp's h100_sxm, nvlink_h100 and nic_400g. Token-based
//! planning never reads them; the cost model and the simulator do.
struct topology_config {
  std::string name = "custom";
  int nodes = 1;
  int gpus_per_node = 1;
  int nics_per_node = 0;  //!< 0: one NIC per GPU (nics_per_node = gpus_per_node)
  std::vector<int> gpu_to_nic{};
  link_spec intra_node{380e9, 3e-6};  //!< per GPU, one direction
  link_spec nic{48e9, 10e-6};         //!< per NIC, one direction
  gpu_spec gpu{"H100-SXM", 989e12, 80e9, 3.35e12};
};

class topology {
 public:
  //! Throws invalid_argument when a count is < 1 (nics_per_node < 0), the GPU -> NIC map has the wrong size or
  //! an entry outside [0, nics_per_node), a NIC serves no GPU, or a bandwidth, latency or
  //! GPU figure is NaN, infinite or out of range (bandwidths and peak FLOP/s > 0,
  //! latencies >= 0; intra-node figures only matter when gpus_per_node > 1 but must still
  //! be valid numbers).
  explicit topology(topology_config config) : c_(std::move(config)) {
    ZEPPELIN_EXPECTS(c_.nodes >= 1, "a topology needs at least one node", {{"nodes", double(c_.nodes)}});
    ZEPPELIN_EXPECTS(c_.gpus_per_node >= 1, "a topology needs at least one GPU per node",
                     {{"gpus_per_node", double(c_.gpus_per_node)}});
    ZEPPELIN_EXPECTS(c_.nics_per_node >= 0, "a topology needs at least one NIC per node (0: one per GPU)",
                     {{"nics_per_node", double(c_.nics_per_node)}});
    if (c_.nics_per_node == 0) c_.nics_per_node = c_.gpus_per_node;
    ZEPPELIN_EXPECTS(static_cast<long long>(c_.nodes) * c_.gpus_per_node <= (1ll << 30),
                     "too many ranks", {{"nodes", double(c_.nodes)}, {"gpus_per_node", double(c_.gpus_per_node)}});
    if (c_.gpu_to_nic.empty()) {
      c_.gpu_to_nic.resize(static_cast<std::size_t>(c_.gpus_per_node));
      for (int g = 0; g < c_.gpus_per_node; ++g)
        c_.gpu_to_nic[static_cast<std::size_t>(g)] =
            static_cast<int>(static_cast<long long>(g) * c_.nics_per_node / c_.gpus_per_node);
    }
    ZEPPELIN_EXPECTS(c_.gpu_to_nic.size() == static_cast<std::size_t>(c_.gpus_per_node),
                     "the GPU -> NIC map needs one entry per GPU of a node",
                     {{"entries", double(c_.gpu_to_nic.size())}, {"gpus_per_node", double(c_.gpus_per_node)}});
    nic_load_.assign(static_cast<std::size_t>(c_.nics_per_node), 0);
    for (int g = 0; g < c_.gpus_per_node; ++g) {
      const int n = c_.gpu_to_nic[static_cast<std::size_t>(g)];
      ZEPPELIN_EXPECTS(n >= 0 && n < c_.nics_per_node, "GPU mapped to a NIC that does not exist",
                       {{"gpu", double(g)}, {"nic", double(n)}, {"nics_per_node", double(c_.nics_per_node)}});
      ++nic_load_[static_cast<std::size_t>(n)];
    }
    for (int n = 0; n < c_.nics_per_node; ++n)
      ZEPPELIN_EXPECTS(nic_load_[static_cast<std::size_t>(n)] > 0, "a NIC serves no GPU", {{"nic", double(n)}});
    check_link(c_.intra_node, "intra-node link");
    check_link(c_.nic, "NIC");
    ZEPPELIN_EXPECTS(std::isfinite(c_.gpu.peak_flops) && c_.gpu.peak_flops > 0, "GPU peak FLOP/s must be positive and finite",
                     {{"peak_flops", c_.gpu.peak_flops}});
    ZEPPELIN_EXPECTS(std::isfinite(c_.gpu.memory_bytes) && c_.gpu.memory_bytes > 0, "GPU memory must be positive and finite",
                     {{"memory_bytes", c_.gpu.memory_bytes}});
    ZEPPELIN_EXPECTS(std::isfinite(c_.gpu.memory_bandwidth) && c_.gpu.memory_bandwidth > 0,
                     "GPU memory bandwidth must be positive and finite", {{"memory_bandwidth", c_.gpu.memory_bandwidth}});
  }

  [[nodiscard]] const std::string& name() const noexcept { return c_.name; }
  [[nodiscard]] int nodes() const noexcept { return c_.nodes; }
  [[nodiscard]] int gpus_per_node() const noexcept { return c_.gpus_per_node; }
  [[nodiscard]] int nics_per_node() const noexcept { return c_.nics_per_node; }
  [[nodiscard]] rank_index num_ranks() const noexcept { return c_.nodes * c_.gpus_per_node; }
  [[nodiscard]] int num_nics() const noexcept { return c_.nodes * c_.nics_per_node; }

  [[nodiscard]] int node_of(rank_index rank) const { return check_rank(rank) / c_.gpus_per_node; }
  [[nodiscard]] int local_gpu_of(rank_index rank) const { return check_rank(rank) % c_.gpus_per_node; }
  [[nodiscard]] rank_index rank_of(int node, int local_gpu) const {
    ZEPPELIN_EXPECTS(node >= 0 && node < c_.nodes && local_gpu >= 0 && local_gpu < c_.gpus_per_node,
                     "no such GPU", {{"node", double(node)}, {"local_gpu", double(local_gpu)}});
    return node * c_.gpus_per_node + local_gpu;
  }
  //! Local NIC index (in [0, nics_per_node)) of a local GPU.
  [[nodiscard]] int local_nic_of_gpu(int local_gpu) const {
    if (local_gpu < 0 || local_gpu >= c_.gpus_per_node) refuse_local_gpu(local_gpu);
    return c_.gpu_to_nic[static_cast<std::size_t>(local_gpu)];
  }
  //! Global NIC index of the NIC a rank sends through.
  [[nodiscard]] int nic_of(rank_index rank) const {
    return node_of(rank) * c_.nics_per_node + local_nic_of_gpu(local_gpu_of(rank));
  }
  //! How many GPUs of a node share local NIC `local_nic`.
  [[nodiscard]] int gpus_sharing_nic(int local_nic) const {
    ZEPPELIN_EXPECTS(local_nic >= 0 && local_nic < c_.nics_per_node, "no such NIC", {{"nic", double(local_nic)}});
    return nic_load_[static_cast<std::size_t>(local_nic)];
  }
  [[nodiscard]] const std::vector<int>& gpu_to_nic() const noexcept { return c_.gpu_to_nic; }

  [[nodiscard]] link_class between(rank_index a, rank_index b) const {
    if (check_rank(a) == check_rank(b)) return link_class::local;
    return node_of(a) == node_of(b) ? link_class::intra_node : link_class::inter_node;
  }
  [[nodiscard]] const link_spec& intra_node_link() const noexcept { return c_.intra_node; }
  [[nodiscard]] const link_spec& nic_link() const noexcept { return c_.nic; }
  [[nodiscard]] const gpu_spec& gpu() const noexcept { return c_.gpu; }
  [[nodiscard]] const topology_config& config() const noexcept { return c_; }

  friend bool operator==(const topology& a, const topology& b) {
    return a.c_.name == b.c_.name && a.c_.nodes == b.c_.nodes && a.c_.gpus_per_node == b.c_.gpus_per_node &&
           a.c_.nics_per_node == b.c_.nics_per_node && a.c_.gpu_to_nic == b.c_.gpu_to_nic &&
           a.c_.intra_node == b.c_.intra_node && a.c_.nic == b.c_.nic && a.c_.gpu == b.c_.gpu;
  }

 private:
  static void check_link(const link_spec& link, const char* what) {
    ZEPPELIN_EXPECTS(std::isfinite(link.bandwidth) && link.bandwidth > 0,
                     std::string(what) + " bandwidth must be positive and finite", {{"bandwidth", link.bandwidth}});
    ZEPPELIN_EXPECTS(std::isfinite(link.latency) && link.latency >= 0,
                     std::string(what) + " latency must be finite and non-negative", {{"latency", link.latency}});
  }
  rank_index check_rank(rank_index rank) const {
    if (rank < 0 || rank >= num_ranks()) refuse_rank(rank);
    return rank;
  }
  // the refusals, out of the accessors' way: node_of, nic_of, between stay small enough to
  // inline into the cost models' per-flow loops
  [[noreturn]] void refuse_rank(rank_index rank) const {
    ZEPPELIN_THROW(invalid_argument, "rank out of range", {{"rank", double(rank)}, {"num_ranks", double(num_ranks())}});
  }
  [[noreturn]] void refuse_local_gpu(int local_gpu) const {
    ZEPPELIN_THROW(invalid_argument, "no such local GPU", {{"local_gpu", double(local_gpu)}});
  }

  topology_config c_;
  std::vector<int> nic_load_;
};

ZEPPELIN_NAMESPACE_END
