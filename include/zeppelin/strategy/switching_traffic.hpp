// zeppelin/strategy/switching_traffic.hpp
// What each GPU sends and receives in Hydraulis' switching (strategy/switching.hpp), by link
// class, counted without listing the transfers: what a simulator that prices each exchange
// at its busiest port needs (cost/busiest_port.hpp), at a size where the list would not fit
// (N x LCM(N, D x TP_max) / TP transfers: about 1e9 at 8,192 GPUs).
//   in : the switching users (a GPU per stage it holds, with its TP degree and rank, copy and
//        layers: detail::switching_users), the topology (N = its ranks; a GPU's node), and
//        the bytes of a parameter (pull) and of a gradient (push) element
//   out: switching_traffic: per exchange (the pull, the push's reduction, its link to the
//        owners) and per GPU its rank_traffic; the bytes of make_switching_plan's transfers
//        (fractional elements), summed per end and link class
// The counts follow make_switching_plan's rules. Pull: a user's TP shard [t S / T, (t + 1) S / T)
// of the pull grid S comes from the owners of its segments, one owner range at a time
// (O(N / T) per user). Push: of a user's shard on the push grid, the segments k with
// k mod D = c (c its copy) are linked to their owners, one owner range at a time; every other
// segment goes to the holders of copy k mod D whose shard holds k and whose stage shares
// layers with the user's, counted per holder as the k = c' (mod D) in the intersection of the
// two shards (O(users) per user). So O(users x (N / T + users)) in all, where the list would
// take O(users x S / T).
// Errors: what switching_grid_of throws (a user's GPU outside the topology); invalid_argument
// for no users or non-positive element bytes.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/busiest_port.hpp>
#include <zeppelin/strategy/switching.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Per GPU, what it sends and receives in each of the switching's three exchanges.
struct switching_traffic {
  std::vector<rank_traffic> pull;         //!< owner -> user (parameters)
  std::vector<rank_traffic> push_reduce;  //!< copy -> reducing copy (gradients)
  std::vector<rank_traffic> push_link;    //!< reducing copy -> owner (gradients)
};

namespace detail {

// How many k in [a, b) have k mod d == c (0 <= c < d).
[[nodiscard]] constexpr std::int64_t count_congruent(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) noexcept {
  if (b <= a) return 0;
  const auto below = [&](std::int64_t x) { return x <= c ? std::int64_t{0} : (x - c - 1) / d + 1; };  // k < x, k = c mod d, k >= 0
  return below(b) - below(a);
}

}  // namespace detail

//! The switching's traffic of `users` on `t` (see the file comment).
[[nodiscard]] inline switching_traffic switching_traffic_of(std::span<const detail::switching_user> users, const topology& t,
                                                            double parameter_bytes, double gradient_bytes) {
  ZEPPELIN_EXPECTS(!users.empty(), "switching traffic needs GPUs that hold parameters", {});
  ZEPPELIN_EXPECTS(parameter_bytes > 0 && gradient_bytes > 0, "switching traffic: element bytes must be positive",
                   {{"parameter_bytes", parameter_bytes}, {"gradient_bytes", gradient_bytes}});
  const std::int64_t N = t.num_ranks();
  const detail::switching_grid grid = detail::switching_grid_of(users, N);
  const std::int64_t D = grid.copies;
  switching_traffic out;
  out.pull.assign(static_cast<std::size_t>(N), {});
  out.push_reduce = out.push_link = out.pull;
  const auto shard = [](const detail::switching_user& u, std::int64_t segments) {
    return std::pair{u.tp_rank * segments / u.tp, (u.tp_rank + 1) * segments / u.tp};
  };
  // pull: each owner range the user's shard crosses
  {
    const std::int64_t S = grid.pull_segments, per_owner = S / N;
    for (const detail::switching_user& u : users) {
      const auto [lo, hi] = shard(u, S);
      for (std::int64_t o = lo / per_owner; o * per_owner < hi; ++o) {
        const std::int64_t a = std::max(lo, o * per_owner), b = std::min(hi, (o + 1) * per_owner);
        add_traffic(out.pull, static_cast<int>(o), u.gpu, u.elements * static_cast<double>(b - a) / static_cast<double>(S) * parameter_bytes, t);
      }
    }
  }
  // push
  const std::int64_t S = grid.push_segments, per_owner = S / N;
  std::vector<std::vector<std::size_t>> by_copy(static_cast<std::size_t>(D));
  for (std::size_t i = 0; i < users.size(); ++i) by_copy[static_cast<std::size_t>(users[i].copy)].push_back(i);
  for (const detail::switching_user& u : users) {
    const double per_layer = u.elements / std::max(1, u.layers) / static_cast<double>(S) * gradient_bytes;
    const auto [lo, hi] = shard(u, S);
    // the segments its own copy reduces, to their owners
    for (std::int64_t o = lo / per_owner; o * per_owner < hi; ++o) {
      const std::int64_t a = std::max(lo, o * per_owner), b = std::min(hi, (o + 1) * per_owner);
      add_traffic(out.push_link, u.gpu, static_cast<int>(o), static_cast<double>(detail::count_congruent(a, b, u.copy, D)) * per_layer * u.layers, t);
    }
    // the others, to the holders of their reducing copies
    for (std::int64_t c = 0; c < D; ++c) {
      if (c == u.copy) continue;
      for (const std::size_t ri : by_copy[static_cast<std::size_t>(c)]) {
        const detail::switching_user& r = users[ri];
        const int first = std::max(u.first_layer, r.first_layer), end = std::min(u.first_layer + u.layers, r.first_layer + r.layers);
        if (first >= end) continue;
        const auto [r_lo, r_hi] = shard(r, S);
        const std::int64_t k = detail::count_congruent(std::max(lo, r_lo), std::min(hi, r_hi), c, D);
        add_traffic(out.push_reduce, u.gpu, r.gpu, static_cast<double>(k) * per_layer * (end - first), t);
      }
    }
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
