// tests/support/sim_fixtures.hpp
// Small inputs the simulator tests share: a topology of chosen links (latency 0, a test
// GPU), LLaMA-7B and GPT-7B cut to a number of layers, a two-layer toy model, an unlimited memory, and
// the method setup of a batch spread evenly.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/planner/method_spec.hpp>

#include <limits>
#include <string>

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

//! A memory or capacity without limit.
inline constexpr double unlimited = std::numeric_limits<double>::infinity();

//! Two layers of width 64 (2 heads, 2 K/V heads, head dim 32), MLP 128, vocabulary 100.
inline zeppelin::model_config small_model() { return {"small", 2, 64, 2, 2, 32, 128, 100, true, 0, 0, 2}; }

//! The setup of methods that plan b on t: its tokens spread evenly over the GPUs.
inline zeppelin::method_setup setup_for(const zeppelin::batch& b, const zeppelin::topology& t) {
  zeppelin::method_setup s;
  s.tokens_per_gpu = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
  return s;
}

//! LLaMA-7B with `layers` layers.
inline zeppelin::model_config toy_model(int layers) {
  zeppelin::model_config m = zeppelin::models::llama_7b();
  m.layers = layers;
  return m;
}

//! GPT-7B with `layers` layers.
inline zeppelin::model_config gpt_7b_layers(int layers) {
  zeppelin::model_config m = zeppelin::models::gpt_7b();
  m.name = "gpt-7b-" + std::to_string(layers) + "-layers";
  m.layers = layers;
  return m;
}

//! Bytes in a GiB.
inline constexpr double gib = double(1ull << 30);

}  // namespace zeppelin_test
