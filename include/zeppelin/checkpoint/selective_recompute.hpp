// zeppelin/checkpoint/selective_recompute.hpp
// A fixed number of recomputed layers per pipeline stage, the same for every micro-batch:
// the knob that trades memory for time stage by stage (early stages hold more micro-batches
// in a 1F1B window, so they are the ones that need recomputation).
//   in : layers_per_stage[s] = layers stage s recomputes (one value: every stage), >= 0;
//        a stage with several model chunks spends its count on chunk 0 first, then chunk 1...
//   out: recomputed_layers(site) = the part of the stage's count that falls on site.chunk,
//        capped at the chunk's layers
// Errors: recomputed_layers throws invalid_argument for a negative count, or a stage past the
// end of a list of more than one entry.
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct selective_recompute {
  std::vector<int> layers_per_stage;  //!< one count per stage, or one count for all stages

  [[nodiscard]] int recomputed_layers(const checkpoint_site& site) const {
    ZEPPELIN_EXPECTS(!layers_per_stage.empty(), "selective recompute needs a layer count per stage", {});
    ZEPPELIN_EXPECTS(layers_per_stage.size() == 1 || (site.stage >= 0 && static_cast<std::size_t>(site.stage) < layers_per_stage.size()),
                     "selective recompute has no count for this stage",
                     {{"stage", double(site.stage)}, {"counts", double(layers_per_stage.size())}});
    const int count = layers_per_stage.size() == 1 ? layers_per_stage.front() : layers_per_stage[static_cast<std::size_t>(site.stage)];
    ZEPPELIN_EXPECTS(count >= 0, "a recomputed layer count cannot be negative", {{"stage", double(site.stage)}, {"layers", double(count)}});
    const long long left = static_cast<long long>(count) - site.earlier_layers;
    return static_cast<int>(std::clamp<long long>(left, 0, site.layers));
  }
  friend bool operator==(const selective_recompute&, const selective_recompute&) = default;
};
static_assert(checkpoint_policy<selective_recompute>);

ZEPPELIN_NAMESPACE_END
