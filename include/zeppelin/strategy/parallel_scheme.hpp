// zeppelin/strategy/parallel_scheme.hpp
// Hydraulis' parallel schemes (Wang et al., "Hydraulis: Balancing Large Transformer Model
// Training via Co-designing Parallel Strategies and Data Assignment", section 3): one
// pipeline's P = <TP, PP, CP>, and the space of schemes a model and a cluster allow.
//   in : the model (layers, heads), the GPUs of the cluster and per node, scheme_space
//   out: parallel_scheme values, sorted by (tp, pp, cp), each with gpus() = tp x pp x cp
// A scheme is valid for a model and cluster when TP divides the query heads and fits in a
// node (TP collectives stay on NVLink), PP divides the layers (every stage the same
// layers, as the authors' code requires), and tp x pp x cp <= N. scheme_space names the
// degrees tried: TP in {1, 2, 4, 8, 16} and CP in {1} by default (the authors' code does
// not use CP; add degrees to search it), PP up to max_pp (0: every divisor of the layers).
// Errors: invalid_argument for gpus < 1, gpus_per_node < 1, an invalid model, or a degree
// < 1 in scheme_space.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>

#include <algorithm>
#include <string>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! One pipeline's parallel scheme <TP, PP, CP>.
struct parallel_scheme {
  int tp = 1;
  int pp = 1;
  int cp = 1;
  [[nodiscard]] constexpr long long gpus() const noexcept { return static_cast<long long>(tp) * pp * cp; }
  friend constexpr bool operator==(const parallel_scheme&, const parallel_scheme&) = default;
  friend constexpr bool operator<(const parallel_scheme& x, const parallel_scheme& y) noexcept {
    return x.tp != y.tp ? x.tp < y.tp : x.pp != y.pp ? x.pp < y.pp : x.cp < y.cp;
  }
};

//! The degrees enumerate_schemes tries.
struct scheme_space {
  std::vector<int> tp = {1, 2, 4, 8, 16};
  std::vector<int> cp = {1};
  int max_pp = 0;  //!< the largest PP tried; 0: the model's layers
};

//! The most GPUs a strategy is planned for (131,072): the proposal's table holds a row per GPU
//! count, so a mistyped cluster size is refused at once rather than allocated.
inline constexpr long long max_strategy_gpus = 1LL << 17;

//! Throws invalid_argument unless 1 <= gpus <= max_strategy_gpus.
inline void check_strategy_gpus(long long gpus) {
  ZEPPELIN_EXPECTS(gpus >= 1 && gpus <= max_strategy_gpus, "a strategy is planned for 1 .. " + std::to_string(max_strategy_gpus) + " GPUs",
                   {{"gpus", double(gpus)}, {"max_strategy_gpus", double(max_strategy_gpus)}});
}

//! Every valid scheme of `space` for `model` on `gpus` GPUs with `gpus_per_node` per node,
//! sorted by (tp, pp, cp).
[[nodiscard]] inline std::vector<parallel_scheme> enumerate_schemes(const model_config& model, long long gpus, int gpus_per_node,
                                                                    const scheme_space& space = {}) {
  validate(model);
  check_strategy_gpus(gpus);
  ZEPPELIN_EXPECTS(gpus_per_node >= 1, "a node needs at least 1 GPU", {{"gpus_per_node", double(gpus_per_node)}});
  ZEPPELIN_EXPECTS(space.max_pp >= 0, "max_pp must be >= 0 (0: the model's layers)", {{"max_pp", double(space.max_pp)}});
  for (const int d : space.tp) ZEPPELIN_EXPECTS(d >= 1, "a TP degree must be >= 1", {{"tp", double(d)}});
  for (const int d : space.cp) ZEPPELIN_EXPECTS(d >= 1, "a CP degree must be >= 1", {{"cp", double(d)}});
  const int max_pp = space.max_pp > 0 ? std::min(space.max_pp, model.layers) : model.layers;
  std::vector<parallel_scheme> out;
  for (const int tp : space.tp) {
    if (tp > gpus_per_node || model.heads % tp != 0) continue;
    for (int pp = 1; pp <= max_pp; ++pp) {
      if (model.layers % pp != 0) continue;
      for (const int cp : space.cp) {
        const parallel_scheme s{tp, pp, cp};
        if (s.gpus() <= gpus) out.push_back(s);
      }
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ZEPPELIN_NAMESPACE_END
