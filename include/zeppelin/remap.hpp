// zeppelin/remap.hpp
// All of remap/: the remap problem, the solver concept, the exact and greedy solvers, and the
// token-level remap lists (alltoallv plans). Host-only.
#pragma once

#include <zeppelin/remap/exact.hpp>
#include <zeppelin/remap/greedy.hpp>
#include <zeppelin/remap/layout.hpp>
#include <zeppelin/remap/problem.hpp>
#include <zeppelin/remap/solver.hpp>
