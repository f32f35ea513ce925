// fuzz/fuzz_topology.hpp
// The topology the fuzz targets plan on: `nodes` x `gpus` H100s, NVLink-class links inside a
// node and one 48 GB/s NIC per node. Throws zeppelin::error for a shape topology refuses
// (no node, no GPU), which the targets treat as a refused input.
#pragma once

#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/topology_presets.hpp>

namespace zeppelin_fuzz {

inline zeppelin::topology small_topology(int nodes, int gpus) {
  zeppelin::topology_config c;
  c.nodes = nodes;
  c.gpus_per_node = gpus;
  c.nics_per_node = 1;
  c.intra_node = {300e9, 3e-6};
  c.nic = {48e9, 10e-6};
  c.gpu = zeppelin::gpus::h100_sxm();
  return zeppelin::topology(c);
}

}  // namespace zeppelin_fuzz
