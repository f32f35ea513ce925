// zeppelin/program/driver.hpp
// The one driver of the execution program: the host engine (exec/), the device engine
// (cuda/) and the simulator (sim/) differ only in the backend they give it.
//   in : the program, a pass, a segment index, a backend
//   out: every operation of that segment handed to the backend, rank by rank up to each
//        exchange; an exchange once every rank the backend runs has reached it.
// A backend runs some ranks (an engine: the calling rank; the simulator: all of them) and
// provides
//   ranks()                        the ranks it runs (a range of rank_index)
//   begin_segment(seg) / end_segment(seg)   the barrier before and after a segment
//   compute(rank, seg, index, op)  a compute-stream operation (copy, add, zero, attention)
//   exchange(phase, ranks, index)  the phase, on the communication stream of the given ranks,
//                                  with each rank's operation index (for dependencies)
// Every rank lists every phase in the same order (program/build.hpp), so walking all of
// them in lockstep meets each exchange on every rank at once; a program where they differ
// is rejected (invalid_argument naming the ranks and phases). Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/program.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! Runs segment `seg` of `pass` on `backend` (see the file comment).
template <class Backend>
void run_segment(const execution_program& prog, pass_kind pass, std::size_t seg, Backend& backend) {
  const auto& ranks_pass = prog.pass(pass);
  std::vector<rank_index> ranks;
  for (const rank_index r : backend.ranks()) ranks.push_back(r);
  std::vector<std::size_t> cursor(ranks.size(), 0);
  std::vector<std::int32_t> at(ranks.size(), -1);
  const auto ops_of = [&](std::size_t i) -> const std::vector<program_op>& {
    return ranks_pass.at(static_cast<std::size_t>(ranks[i])).segments.at(seg).ops;
  };
  backend.begin_segment(seg);
  for (;;) {
    bool any = false;
    std::int32_t phase = -1;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const auto& ops = ops_of(i);
      auto& c = cursor[i];
      while (c < ops.size() && !std::holds_alternative<exchange_phase>(ops[c].body)) {
        backend.compute(ranks[i], seg, static_cast<std::int32_t>(c), ops[c]);
        ++c;
      }
      if (c == ops.size()) continue;
      const std::int32_t here = std::get<exchange_phase>(ops[c].body).phase;
      ZEPPELIN_EXPECTS(!any || here == phase, "program: ranks disagree on the next phase of a segment",
                       {{"rank", double(ranks[i])}, {"phase", double(here)}, {"expected_phase", double(phase)}, {"segment", double(seg)}});
      any = true;
      phase = here;
      at[i] = static_cast<std::int32_t>(c);
    }
    if (!any) break;
    for (std::size_t i = 0; i < ranks.size(); ++i)
      ZEPPELIN_EXPECTS(cursor[i] < ops_of(i).size(), "program: a rank has no part in a phase every other rank posts",
                       {{"rank", double(ranks[i])}, {"phase", double(phase)}, {"segment", double(seg)}});
    backend.exchange(phase, std::span<const rank_index>(ranks), std::span<const std::int32_t>(at));
    for (auto& c : cursor) ++c;
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
