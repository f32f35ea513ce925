// zeppelin/core/topology_presets.hpp
// The clusters named in the specs, as topology factories taking the node count.
// Figures are effective one-direction rates (what NCCL achieves), not marketing totals;
// each carries its public source. nvcc-safe.
#pragma once

#include <zeppelin/core/topology.hpp>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <utility>

ZEPPELIN_NAMESPACE_BEGIN

namespace gpus {
// Dense bf16 tensor-core peaks and memory from the NVIDIA datasheets (A100/A800 SXM 312
// TFLOP/s, 80 GB, 2.04 TB/s; H100/H800 SXM 989 TFLOP/s, 80 GB, 3.35 TB/s; H200 SXM 989
// TFLOP/s, 141 GB, 4.8 TB/s).
inline gpu_spec a800_80g() { return {"A800-80G", 312e12, 80e9, 2.039e12}; }
inline gpu_spec h800() { return {"H800", 989e12, 80e9, 3.35e12}; }
inline gpu_spec h100_sxm() { return {"H100-SXM", 989e12, 80e9, 3.35e12}; }
inline gpu_spec h200() { return {"H200", 989e12, 141e9, 4.8e12}; }
}  // namespace gpus

namespace links {
// A800 NVSwitch: 400 GB/s bidirectional per GPU (Zeppelin paper, cluster A) -> 200 GB/s one way.
inline link_spec nvlink_a800() { return {200e9, 3e-6}; }
// H100/H200/H800 NVLink 4: ~380 GB/s one way, as the CUDA samples' p2pBandwidthLatencyTest
// reports on DGX H100 (of 450 GB/s nominal). H800's NVLink is cut to 400 GB/s bidirectional.
inline link_spec nvlink_h100() { return {380e9, 3e-6}; }
inline link_spec nvlink_h800() { return {200e9, 3e-6}; }
// NICs: a 400G NIC moves ~48 GB/s, a 200G NIC ~24 GB/s, in nccl-tests bus bandwidth.
// Latency: ~10 us for a small RDMA message through NCCL over RoCE/IB (nccl-tests sendrecv
// small-message latency on such fabrics is in the 8-15 us range); intra-node NVLink ~3 us.
inline link_spec nic_200g() { return {24e9, 10e-6}; }
inline link_spec nic_400g() { return {48e9, 10e-6}; }
}  // namespace links

namespace clusters {
//! Zeppelin cluster A: 8x A800-80G per node, NVSwitch 400 GB/s, 4 RoCE NICs of 200 Gb/s per
//! node, each shared by two GPUs (GPU 2i and 2i+1 -> NIC i) (paper, section 5).
inline topology cluster_a(int nodes) {
  return topology({"zeppelin-cluster-a", nodes, 8, 4, {0, 0, 1, 1, 2, 2, 3, 3}, links::nvlink_a800(),
                   links::nic_200g(), gpus::a800_80g()});
}
//! Zeppelin cluster B: 8x H800 + 8 RoCE NICs per node (one per GPU). The paper gives no NIC
//! speed; we assume 400 Gb/s, the usual H800 build-out.
inline topology cluster_b(int nodes) {
  return topology({"zeppelin-cluster-b", nodes, 8, 8, {}, links::nvlink_h800(), links::nic_400g(), gpus::h800()});
}
//! Zeppelin cluster C: 8x H200 + 8x ConnectX-7 400 Gb/s per node, one NIC per GPU.
inline topology cluster_c(int nodes) {
  return topology({"zeppelin-cluster-c", nodes, 8, 8, {}, links::nvlink_h100(), links::nic_400g(), gpus::h200()});
}
//! WLB-LLM: 8x H100 SXM per node, NVLink + RoCE (up to 32 nodes). One 400 Gb/s NIC per GPU
//! assumed (the standard H100 SXM server layout; the paper gives no NIC figure).
inline topology wlb_h100_roce(int nodes) {
  return topology({"wlb-llm-h100-roce", nodes, 8, 8, {}, links::nvlink_h100(), links::nic_400g(), gpus::h100_sxm()});
}
//! Hydraulis: 8x A800 per node, NVLink 400 GB/s, InfiniBand 200 GB/s per node, read as
//! 4x 400 Gb/s HDR/NDR ports (4 x 48 GB/s effective), two GPUs per port.
inline topology hydraulis_a800_ib(int nodes) {
  return topology({"hydraulis-a800-ib", nodes, 8, 4, {0, 0, 1, 1, 2, 2, 3, 3}, links::nvlink_a800(),
                   links::nic_400g(), gpus::a800_80g()});
}
//! InfiniPipe: 8x A800 per node, NVLink 400 GB/s, InfiniBand 400 Gb/s per node, read as one
//! 400 Gb/s port shared by the node's eight GPUs (the paper gives one figure per node).
inline topology infinipipe_a800_ib(int nodes) {
  return topology({"infinipipe-a800-ib", nodes, 8, 1, {}, links::nvlink_a800(), links::nic_400g(), gpus::a800_80g()});
}
}  // namespace clusters

//! The preset names cluster_by_name() accepts.
inline constexpr std::array<std::string_view, 6> cluster_names{"a", "b", "c", "wlb", "hydraulis", "infinipipe"};

//! A preset by short name ("a", "b", "c", "wlb", "hydraulis", "infinipipe"; case-sensitive) with `nodes`
//! nodes. Throws invalid_argument naming the valid names for an unknown one.
inline topology cluster_by_name(std::string_view name, int nodes) {
  if (name == "a") return clusters::cluster_a(nodes);
  if (name == "b") return clusters::cluster_b(nodes);
  if (name == "c") return clusters::cluster_c(nodes);
  if (name == "wlb") return clusters::wlb_h100_roce(nodes);
  if (name == "hydraulis") return clusters::hydraulis_a800_ib(nodes);
  if (name == "infinipipe") return clusters::infinipipe_a800_ib(nodes);
  ZEPPELIN_THROW(invalid_argument, "unknown cluster '" + std::string(name) + "' (valid: a, b, c, wlb, hydraulis, infinipipe)", {});
}

//! cluster_by_name(name, nodes) with `gpus_per_node` GPUs per node instead of the preset's:
//! the same GPUs and links, and the preset's GPUs-per-NIC ratio (at least one NIC per node).
//! gpus_per_node == 0 keeps the preset's. Throws invalid_argument for an unknown name or a
//! negative count.
inline topology cluster_by_name(std::string_view name, int nodes, int gpus_per_node) {
  const topology preset = cluster_by_name(name, nodes);
  ZEPPELIN_EXPECTS(gpus_per_node >= 0, "GPUs per node must be positive (0: the preset's)", {{"gpus_per_node", double(gpus_per_node)}});
  if (gpus_per_node == 0 || gpus_per_node == preset.gpus_per_node()) return preset;
  topology_config c = preset.config();
  const int ratio = std::max(1, preset.gpus_per_node() / preset.nics_per_node());
  c.gpus_per_node = gpus_per_node;
  c.nics_per_node = std::max(1, gpus_per_node / ratio);
  c.gpu_to_nic.clear();
  return topology(std::move(c));
}

ZEPPELIN_NAMESPACE_END
