// zeppelin/checkpoint/basic_policies.hpp
// The two uniform checkpoint policies.
//   no_recompute:   keeps every activation (fastest, most memory);
//   full_recompute: recomputes every layer of every chunk (Megatron-LM
//                   --recompute-granularity full --recompute-method uniform; least memory,
//                   one extra forward per backward).
//   in : checkpoint_site       out: 0, or site.layers
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/checkpoint/checkpoint_policy.hpp>
#include <zeppelin/core/config.hpp>

ZEPPELIN_NAMESPACE_BEGIN

struct no_recompute {
  [[nodiscard]] int recomputed_layers(const checkpoint_site&) const noexcept { return 0; }
  friend bool operator==(const no_recompute&, const no_recompute&) = default;
};
static_assert(checkpoint_policy<no_recompute>);

struct full_recompute {
  [[nodiscard]] int recomputed_layers(const checkpoint_site& site) const noexcept { return site.layers; }
  friend bool operator==(const full_recompute&, const full_recompute&) = default;
};
static_assert(checkpoint_policy<full_recompute>);

ZEPPELIN_NAMESPACE_END
