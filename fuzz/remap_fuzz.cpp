// fuzz/remap_fuzz.cpp
// Fuzz target: the remap problem (remap/problem.hpp) and its solvers, exact_remap for the
// three objectives (remap/exact.hpp) and greedy_remap (remap/greedy.hpp), on per-rank token
// counts and per-token costs decoded from bytes, extreme values included.
// Input layout (fuzz_input.hpp; little-endian; missing bytes read as 0):
//   byte  flags      bits 0-1: width code of the token counts (0: 1 + u8, 1: 1 + u16,
//                    2: 1 + u32, 3: raw int64, any sign); bits 2-3: how the intra cost is
//                    coded, bits 4-5: the inter cost (see cost() below); bit 6: an explicit
//                    target (else the balanced one); bit 7: one rank more than nodes x P
//                    (refused: not a multiple of P)
//   byte  gpus       per node (P), mod 9 (0 is refused)
//   byte  nodes      mod 9 (0 ranks is refused)
//   intra cost, inter cost
//   counts           one per rank, by the width code (a raw 0 is coded as width 3, value 0)
//   target           with bit 6: one per rank, the last one then shifted so the sums agree
// Cost codes: 0: 1 + byte mod 16; 1: an entry of `special` (byte mod its size); 2: a raw
// double (NaN, infinities, negatives: refused); 3: the other cost (intra: 1) moved by
// (byte mod 9) - 4 ulps, the nearly-equal costs that made the water fill degenerate.
// Properties:
//   - make_remap_problem / validate_remap_problem either accept the problem or throw
//     zeppelin::error; nothing else escapes, nothing crashes, no sanitizer report;
//   - every solver solves every accepted problem (its contract, remap/solver.hpp): no throw,
//     check_remap_matrix passes, applying the matrix turns the current counts into the target
//     (tokens conserved), the same problem gives the same matrix;
//   - exact_remap is optimal: never worse than greedy_remap (a feasible integral matrix) on
//     the objective it minimises (inter-node tokens exactly, costs up to 1e-9 relative).
#include "fuzz_input.hpp"

#include <zeppelin/core/error.hpp>
#include <zeppelin/remap/exact.hpp>
#include <zeppelin/remap/greedy.hpp>
#include <zeppelin/remap/problem.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

namespace {

using namespace zeppelin;

constexpr double special[] = {
    1.0, 1.0000000000000002, 0.9999999999999999, 2.0, 0.5, 3.0, 1e-10, 1e10,
    1e-300, 4.9406564584124654e-324, 1e300, 1e306, 1e307, 1.7976931348623157e308, 0.0, -1.0,
};

double cost(zeppelin_fuzz::fuzz_input& in, unsigned code, double other) {
  switch (code & 3u) {
    case 0: return 1.0 + in.byte() % 16;
    case 1: return special[in.byte() % (sizeof special / sizeof special[0])];
    case 2: return in.f64();
    default: {
      int steps = in.byte() % 9 - 4;
      double v = other;
      for (; steps > 0; --steps) v = std::nextafter(v, std::numeric_limits<double>::infinity());
      for (; steps < 0; ++steps) v = std::nextafter(v, 0.0);
      return v;
    }
  }
}

remap_matrix solve_checked(const char* solver, const remap_problem& p, auto&& solve) {
  remap_matrix m;
  try {
    m = solve();
  } catch (const zeppelin::error& e) {
    std::fprintf(stderr, "%s: %s\n", solver, e.what());
    ZEPPELIN_FUZZ_FAIL("a solver refused a problem validate_remap_problem accepted");
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  try {
    check_remap_matrix(p, m);
  } catch (const zeppelin::error& e) {
    std::fprintf(stderr, "%s: %s\n", solver, e.what());
    ZEPPELIN_FUZZ_FAIL("a solver returned an infeasible matrix");
  }
  std::vector<token_count> after = p.current;
  for (const remap_entry& t : m.entries) {
    after[static_cast<std::size_t>(t.from)] -= t.tokens;
    after[static_cast<std::size_t>(t.to)] += t.tokens;
  }
  ZEPPELIN_FUZZ_CHECK(after == p.target);
  ZEPPELIN_FUZZ_CHECK(solve() == m);
  return m;
}

//! a <= b up to `rel` relative rounding (true when either is not finite: nothing to compare).
bool not_worse(double a, double b, double rel) {
  if (!std::isfinite(a) || !std::isfinite(b)) return true;
  return a <= b + rel * std::max(std::abs(a), std::abs(b));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zeppelin_fuzz::fuzz_input in(data, size);
  const std::uint8_t flags = in.byte();
  const unsigned width = flags & 3u;
  const int gpus = in.byte() % 9;
  const int nodes = in.byte() % 9;
  const double intra = cost(in, flags >> 2, 1.0);
  const double inter = cost(in, flags >> 4, intra);
  const std::size_t ranks = static_cast<std::size_t>(nodes) * static_cast<std::size_t>(gpus > 0 ? gpus : 1) +
                            ((flags & 128u) ? 1 : 0);
  std::vector<token_count> current(ranks);
  for (auto& a : current) a = in.sized(width);

  std::optional<remap_problem> p;
  try {
    if (flags & 64u) {
      remap_problem q{};
      q.current = current;
      q.target.resize(ranks);
      for (auto& b : q.target) b = in.sized(width);
      if (ranks > 0) {
        // shift the last target so both sums agree, when the exact sums and the shift fit int64
        __extension__ __int128 sum_a = 0, sum_b = 0;
        for (std::size_t r = 0; r < ranks; ++r) sum_a += current[r], sum_b += q.target[r];
        __extension__ const __int128 last = q.target.back() + (sum_a - sum_b);
        if (last >= std::numeric_limits<token_count>::min() && last <= std::numeric_limits<token_count>::max())
          q.target.back() = static_cast<token_count>(last);
      }
      q.gpus_per_node = gpus;
      q.intra_cost = intra;
      q.inter_cost = inter;
      validate_remap_problem(q);
      p = std::move(q);
    } else {
      p = make_remap_problem(current, gpus, intra, inter);
    }
  } catch (const zeppelin::error&) {
    return 0;  // refused: a negative count, an overflowing sum, a bad cost or shape
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }

  const greedy_remap greedy{};
  const remap_costs g = evaluate(*p, solve_checked("greedy", *p, [&] { return greedy.solve(*p); }));
  for (const remap_objective o :
       {remap_objective::max_send, remap_objective::max_send_receive, remap_objective::min_inter_volume}) {
    const exact_remap exact{.objective = o};
    const remap_costs e = evaluate(*p, solve_checked(to_string(o).data(), *p, [&] { return exact.solve(*p); }));
    if (o == remap_objective::min_inter_volume) {
      ZEPPELIN_FUZZ_CHECK(e.inter_node_tokens <= g.inter_node_tokens);
    } else if (!not_worse(e.value(o), g.value(o), 1e-9)) {
      std::fprintf(stderr, "%s: exact %.17g, greedy %.17g\n", to_string(o).data(), e.value(o), g.value(o));
      ZEPPELIN_FUZZ_FAIL("exact_remap is worse than the greedy baseline");
    }
  }
  return 0;
}
