// zeppelin/cost/layer_split.hpp
// How a model's layers split into consecutive model chunks (pipeline stages, or the virtual
// stages of an interleaved schedule).
//   in : a layer count and a number of chunks (or a model_config)
//   out: split_layers: the layers of each chunk, in model order, as even as possible: every
//        chunk gets layers / parts and the first (layers % parts) chunks one more;
//        split_model: the same as stage_slices, the first chunk holding the embedding and
//        the last the LM head (one chunk holds both).
// Errors: invalid_argument for parts < 1, or more chunks than layers (a chunk without a
// layer), naming both numbers; split_model also for an invalid model.
// Host-only (std::vector); nvcc-safe as a header.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>

#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Which parts of the model one model chunk holds: `layers` transformer layers, and the
//! token embedding (first chunk) and / or the LM head with the final norm (last chunk).
struct stage_slice {
  int layers = 0;
  bool embedding = false;  //!< holds the token embedding (the first chunk)
  bool lm_head = false;    //!< holds the final norm, the LM head and the loss (the last chunk)
  friend constexpr bool operator==(const stage_slice&, const stage_slice&) = default;
};

//! The layers of each of `parts` consecutive chunks of a `layers`-layer model: layers / parts
//! each, the first (layers % parts) one more. Throws invalid_argument (naming `layers` and
//! `parts`) for parts < 1 or layers < parts.
[[nodiscard]] inline std::vector<int> split_layers(int layers, int parts) {
  ZEPPELIN_EXPECTS(parts >= 1, "a model splits into at least one chunk", {{"layers", double(layers)}, {"parts", double(parts)}});
  ZEPPELIN_EXPECTS(layers >= parts, "more stages than layers", {{"layers", double(layers)}, {"parts", double(parts)}});
  std::vector<int> out(static_cast<std::size_t>(parts), layers / parts);
  for (int i = 0; i < layers % parts; ++i) ++out[static_cast<std::size_t>(i)];
  return out;
}

//! The chunks of `m` split into `parts` (split_layers(m.layers, parts)), the first holding
//! the embedding and the last the LM head. Throws invalid_argument for an invalid model,
//! parts < 1 or m.layers < parts.
[[nodiscard]] inline std::vector<stage_slice> split_model(const model_config& m, int parts) {
  validate(m);
  const std::vector<int> layers = split_layers(m.layers, parts);
  std::vector<stage_slice> out;
  out.reserve(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i)
    out.push_back({.layers = layers[i], .embedding = i == 0, .lm_head = i + 1 == layers.size()});
  return out;
}

ZEPPELIN_NAMESPACE_END
