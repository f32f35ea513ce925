// zeppelin/remap/solver.hpp
// The remap-solver concept: a small regular value type whose solve() turns a remap_problem
// into a feasible integral transfer matrix (remap/problem.hpp). Models: exact_remap
// (remap/exact.hpp), greedy_remap (remap/greedy.hpp). Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/remap/problem.hpp>

#include <concepts>

ZEPPELIN_NAMESPACE_BEGIN

//! solve(p) validates p (invalid_argument on bad input) and returns a matrix m with
//! check_remap_matrix(p, m) passing; the same p gives the same m on every machine.
template <class Solver>
concept remap_solver = std::regular<Solver> && requires(const Solver& s, const remap_problem& p) {
  { s.solve(p) } -> std::same_as<remap_matrix>;
};

ZEPPELIN_NAMESPACE_END
