// zeppelin/core/parallel_layout.hpp
// How a job's GPUs split into the four parallel dimensions: tensor (TP, with sequence
// parallelism), context (CP), pipeline (PP) and data (DP) parallelism.
//   in : the four degrees (each >= 1)
//   out: gpus() = tp * cp * pp * dp, and the rank of a GPU from its four coordinates in
//        Megatron-LM's default order "tp-cp-dp-pp": TP varies fastest (its GPUs share a
//        node's NVLink), then CP, then DP, and PP slowest (stages usually span nodes):
//          rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i))
// Errors: validate() throws invalid_argument for a degree < 1 or a product over 2^30.
// nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>

ZEPPELIN_NAMESPACE_BEGIN

//! The coordinates of one GPU in a parallel_layout.
struct layout_coordinates {
  int tp = 0;
  int cp = 0;
  int pp = 0;  //!< pipeline stage
  int dp = 0;  //!< data-parallel replica
  friend bool operator==(const layout_coordinates&, const layout_coordinates&) = default;
};

struct parallel_layout {
  int tp = 1;  //!< tensor-parallel degree (Megatron-LM TP with sequence parallelism)
  int cp = 1;  //!< context-parallel degree
  int pp = 1;  //!< pipeline stages
  int dp = 1;  //!< data-parallel replicas

  [[nodiscard]] long long gpus() const noexcept {
    return static_cast<long long>(tp) * cp * pp * dp;
  }
  //! GPUs of one pipeline stage of one replica: tp * cp.
  [[nodiscard]] int gpus_per_stage() const noexcept { return tp * cp; }

  //! Rank of the GPU at `c` (see the file comment for the order).
  [[nodiscard]] rank_index rank_of(layout_coordinates c) const noexcept {
    return static_cast<rank_index>(c.tp + static_cast<long long>(tp) * (c.cp + static_cast<long long>(cp) * (c.dp + static_cast<long long>(dp) * c.pp)));
  }
  //! The coordinates of `rank` (inverse of rank_of).
  [[nodiscard]] layout_coordinates coordinates_of(rank_index rank) const noexcept {
    layout_coordinates c;
    c.tp = rank % tp;
    rank /= tp;
    c.cp = rank % cp;
    rank /= cp;
    c.dp = rank % dp;
    c.pp = rank / dp;
    return c;
  }

  friend bool operator==(const parallel_layout&, const parallel_layout&) = default;
};

//! Throws invalid_argument for a degree < 1 or more than 2^30 GPUs in all.
inline void validate(const parallel_layout& l) {
  ZEPPELIN_EXPECTS(l.tp >= 1 && l.cp >= 1 && l.pp >= 1 && l.dp >= 1, "every parallel degree must be at least 1",
                   {{"tp", double(l.tp)}, {"cp", double(l.cp)}, {"pp", double(l.pp)}, {"dp", double(l.dp)}});
  ZEPPELIN_EXPECTS(l.gpus() <= (1ll << 30), "the layout needs more GPUs than a topology can hold",
                   {{"gpus", double(l.gpus())}, {"limit", double(1ll << 30)}});
}

ZEPPELIN_NAMESPACE_END
