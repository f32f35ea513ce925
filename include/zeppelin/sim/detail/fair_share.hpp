// zeppelin/sim/detail/fair_share.hpp
// Max-min fair rates of concurrent flows over capacitated ports (progressive filling).
//   in : per port its capacity (bytes/s); per active flow the two ports it occupies
//   out: per flow a rate (bytes/s) such that no port is over capacity and no flow can get
//        more without taking from a flow with a smaller or equal rate
// Every round the ports with the smallest fair share left (capacity left / unfrozen users)
// saturate together (ties within a relative 1e-12) and fix the rates of their flows.
// O(rounds * (F + touched ports)); the scratch lives in the caller (no allocation per call
// once warm). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

struct fair_share_state {
  std::vector<double> capacity;  //!< per port
  std::vector<double> left;      //!< scratch: capacity left per port
  std::vector<std::int32_t> users;
  std::vector<std::int32_t> touched;  //!< ports used by the current flows
  std::vector<char> frozen;

  //! rates[i] for the flows whose ports are (a[i], b[i]); `rates` is resized.
  void solve(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b, std::vector<double>& rates) {
    const std::size_t n = a.size();
    rates.assign(n, 0.0);
    frozen.assign(n, 0);
    if (left.size() != capacity.size()) left.assign(capacity.size(), 0.0), users.assign(capacity.size(), 0);
    touched.clear();
    for (std::size_t i = 0; i < n; ++i)
      for (const std::int32_t p : {a[i], b[i]}) {
        auto& u = users[static_cast<std::size_t>(p)];
        if (u == 0) touched.push_back(p), left[static_cast<std::size_t>(p)] = capacity[static_cast<std::size_t>(p)];
        ++u;
      }
    std::sort(touched.begin(), touched.end());  // deterministic scan order
    std::size_t unfrozen = n;
    while (unfrozen > 0) {
      double share = std::numeric_limits<double>::infinity();
      for (const std::int32_t p : touched) {
        const auto u = users[static_cast<std::size_t>(p)];
        if (u > 0) share = std::min(share, left[static_cast<std::size_t>(p)] / u);
      }
      const double cut = share * (1 + 1e-12);
      for (std::size_t i = 0; i < n; ++i) {
        if (frozen[i]) continue;
        const auto pa = static_cast<std::size_t>(a[i]), pb = static_cast<std::size_t>(b[i]);
        const bool sat_a = left[pa] / users[pa] <= cut, sat_b = left[pb] / users[pb] <= cut;
        if (!sat_a && !sat_b) continue;
        rates[i] = share;
        frozen[i] = 1;
        --unfrozen;
      }
      // release the frozen flows' capacity and users in one pass (the tests above used the
      // round's starting values, so every tied port saturates in this round)
      for (std::size_t i = 0; i < n; ++i) {
        if (frozen[i] != 1) continue;
        frozen[i] = 2;
        for (const std::int32_t p : {a[i], b[i]}) {
          const auto q = static_cast<std::size_t>(p);
          left[q] = std::max(0.0, left[q] - share);
          --users[q];
        }
      }
    }
    for (const std::int32_t p : touched) users[static_cast<std::size_t>(p)] = 0;
  }
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
