// examples/common/priced_model.hpp
// The model an example prices its plan for when the method is the cost-driven `zeppelin`:
// LLaMA-7B (`zeppelin simulate`'s default model) with the example's attention shape and
// element size, so that `zeppelin simulate --heads H --kv-heads K --head-dim D --dtype ...`
// makes the same choice the example executes.
#pragma once

#include <zeppelin/core/model.hpp>
#include <zeppelin/core/model_presets.hpp>

namespace example_cli {

inline zeppelin::model_config priced_model(int heads, int kv_heads, int head_dim, int bytes_per_element) {
  zeppelin::model_config m = zeppelin::models::llama_7b();
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.bytes_per_element = bytes_per_element;
  return m;
}

}  // namespace example_cli
