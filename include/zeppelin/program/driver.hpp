// zeppelin/program/driver.hpp
// The one driver of the execution program: the host engine (exec/), the device engine
// (cuda/) and the simulator (sim/) differ only in the backend they give it.
//   in : the program, a pass, a segment index, a backend
//   out: every operation of that segment handed to the backend, rank by rank up to each
//        exchange; an exchange once every rank of the phase that the backend runs has
//        reached it (phases in index order).
// A backend runs some ranks (an engine: the calling rank; the simulator: all of them) and
// provides
//   ranks()                        the ranks it runs (a range of rank_index)
//   begin_segment(seg) / end_segment(seg)   the barrier before and after a segment
//   compute(rank, seg, index, op)  a compute-stream operation (copy, add, zero, attention)
//   exchange(phase, ranks, index)  the phase, on the communication stream of the given ranks
//                                  (its ranks that the backend runs, ascending), with each
//                                  rank's operation index (for dependencies)
// Every rank lists the phases it takes part in (program_phase::ranks) in index order
// (program/build.hpp), so running the smallest waiting phase first meets each exchange on
// all of its ranks at once; a program where a rank posts a phase it has no part in, or
// skips one it has, is rejected (invalid_argument naming the rank and phase).
// Cost: O(ops + phases x log ranks) per segment. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/program.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <span>
#include <utility>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Runs segment `seg` of `pass` on `backend` (see the file comment).
template <class Backend>
void run_segment(const execution_program& prog, pass_kind pass, std::size_t seg, Backend& backend) {
  const auto& ranks_pass = prog.pass(pass);
  std::vector<rank_index> ranks;
  for (const rank_index r : backend.ranks()) ranks.push_back(r);
  std::vector<std::int32_t> index_of(ranks_pass.size(), -1);  // rank -> its index in `ranks`
  for (std::size_t i = 0; i < ranks.size(); ++i) index_of.at(static_cast<std::size_t>(ranks[i])) = static_cast<std::int32_t>(i);
  std::vector<std::size_t> cursor(ranks.size(), 0);
  const auto ops_of = [&](std::size_t i) -> const std::vector<program_op>& {
    return ranks_pass.at(static_cast<std::size_t>(ranks[i])).segments.at(seg).ops;
  };
  // the ranks waiting at an exchange, by phase (phases run in index order)
  using waiting = std::pair<std::int32_t, std::size_t>;  // phase, index into ranks
  std::priority_queue<waiting, std::vector<waiting>, std::greater<>> at_exchange;
  // hands rank i's compute operations to the backend up to its next exchange
  const auto run_to_exchange = [&](std::size_t i) {
    const auto& ops = ops_of(i);
    auto& c = cursor[i];
    while (c < ops.size() && !std::holds_alternative<exchange_phase>(ops[c].body)) {
      backend.compute(ranks[i], seg, static_cast<std::int32_t>(c), ops[c]);
      ++c;
    }
    if (c < ops.size()) at_exchange.push({std::get<exchange_phase>(ops[c].body).phase, i});
  };
  backend.begin_segment(seg);
  for (std::size_t i = 0; i < ranks.size(); ++i) run_to_exchange(i);
  std::vector<rank_index> posting;
  std::vector<std::int32_t> at;
  std::vector<std::size_t> which;
  while (!at_exchange.empty()) {
    const std::int32_t phase = at_exchange.top().first;
    posting.clear(), at.clear(), which.clear();
    while (!at_exchange.empty() && at_exchange.top().first == phase) {
      const std::size_t i = at_exchange.top().second;
      at_exchange.pop();
      which.push_back(i);
    }
    std::sort(which.begin(), which.end());
    const program_phase& ph = prog.phases.at(static_cast<std::size_t>(phase));
    for (const std::size_t i : which) {
      ZEPPELIN_EXPECTS(std::binary_search(ph.ranks.begin(), ph.ranks.end(), ranks[i]),
                       "program: a rank posts a phase it has no part in",
                       {{"rank", double(ranks[i])}, {"phase", double(phase)}, {"segment", double(seg)}});
      posting.push_back(ranks[i]);
      at.push_back(static_cast<std::int32_t>(cursor[i]));
    }
    for (const rank_index r : ph.ranks) {
      const std::int32_t i = static_cast<std::size_t>(r) < index_of.size() ? index_of[static_cast<std::size_t>(r)] : -1;
      ZEPPELIN_EXPECTS(i < 0 || std::binary_search(posting.begin(), posting.end(), r),
                       "program: a rank of a phase is not at it (its phases are out of order or missing)",
                       {{"rank", double(r)}, {"phase", double(phase)}, {"segment", double(seg)}});
    }
    backend.exchange(phase, std::span<const rank_index>(posting), std::span<const std::int32_t>(at));
    for (const std::size_t i : which) {
      ++cursor[i];
      run_to_exchange(i);
    }
  }
  backend.end_segment(seg);
}

//! Runs every segment of `pass` whose kind `wanted(kind)` accepts, in order.
template <class Backend, class Wanted>
void run_pass(const execution_program& prog, pass_kind pass, Backend& backend, Wanted&& wanted) {
  const auto& ranks_pass = prog.pass(pass);
  if (ranks_pass.empty()) return;
  const auto& segments = ranks_pass.front().segments;
  for (std::size_t s = 0; s < segments.size(); ++s)
    if (wanted(segments[s])) run_segment(prog, pass, s, backend);
}

ZEPPELIN_NAMESPACE_END
