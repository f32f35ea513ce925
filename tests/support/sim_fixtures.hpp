// tests/support/sim_fixtures.hpp
// Small inputs the simulator tests share: a topology of chosen links (latency 0, a test
// GPU), and LLaMA-7B cut to a number of layers.
#pragma once

#include <zeppelin/core/model.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology.hpp>

namespace zeppelin_test {

//! `nodes` x `gpus_per_node` GPUs, `nics_per_node` NICs a node, NVLink and NIC bandwidths in
//! bytes per second, no latency. 1e30 makes a link free.
inline zeppelin::topology links_of(int nodes, int gpus_per_node, int nics_per_node, double nvlink, double nic) {
  zeppelin::topology_config c;
  c.name = "test";
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  c.nics_per_node = nics_per_node;
  c.intra_node = {nvlink, 0};
  c.nic = {nic, 0};
  c.gpu = {"test", 1e15, 80e9, 3e12};
  return zeppelin::topology(c);
}

//! LLaMA-7B with `layers` layers.
inline zeppelin::model_config toy_model(int layers) {
  zeppelin::model_config m = zeppelin::models::llama_7b();
  m.layers = layers;
  return m;
}

}  // namespace zeppelin_test
