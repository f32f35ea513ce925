// zeppelin/program/detail/segment_writer.hpp
// Turns level_work into the operations of one segment on every rank, in the order an engine
// policy gives (program/build.hpp decides the order; this file writes what each step means).
//   setup(w)     slot 0 of level w: its operations on w's compute stream
//   round(w, k)  round k of level w: the round's phase (when it has payloads), routed at
//                once, as an exchange on the communication stream of each of its ranks (the
//                ends of its pieces, proxies included), after the last operation of w's
//                stream on that rank; then per rank the round's `pre` operations, its
//                launches and its `post` operations on w's stream, each waiting for the
//                exchange of the round it names (for a rank outside that phase: its last
//                exchange of the level before it, which its in-order communication stream
//                completes after every earlier one)
// Cost: O(ranks with work) per round and O(pieces log) per phase, so a level with one large
// ring and thousands of small groups does not cost ranks x rounds.
// Launches: the requests of one rank and round that read the same K/V and accumulate into the
// same dK/dV (and, under launch_policy::per_group, come from the same group) are joined and
// split into CSR waves (program/launch_waves.hpp), one program_launch each. Requests that
// share one block list (the lanes of an all-to-all subgroup, all in the same round) get the
// same waves, split once and shared by their launches.
// Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/detail/level_work.hpp>
#include <zeppelin/program/launch_waves.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/program.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN
namespace detail {

//! Cuts a phase's payloads into the pieces that carry them (a router over the topology).
using phase_router = std::function<shared_list<transfer>(const shared_list<transfer>&)>;

class segment_writer {
 public:
  //! Writes into segments[r] (one per rank) of `pass`; phases and launches go to `prog`,
  //! each phase's pieces from `route`.
  segment_writer(execution_program& prog, pass_kind pass, launch_policy launch, std::vector<program_segment*> segments,
                 phase_router route)
      : prog_(prog), pass_(pass), launch_(launch), segments_(std::move(segments)), route_(std::move(route)),
        last_(segments_.size(), std::vector<std::int32_t>(prog.streams.size(), -1)), exchanges_(segments_.size()),
        in_phase_(segments_.size(), 0) {}

  void setup(level_work& w) {
    shared_waves_.clear();
    for (const rank_index r : w.ranks_with_work()) slot(w, r, 0);
  }

  void round(level_work& w, std::int32_t k) {
    auto& payloads = w.payloads[static_cast<std::size_t>(k)];
    if (!payloads.empty()) {
      const auto phase = static_cast<std::int32_t>(prog_.phases.size());
      program_phase& ph = prog_.phases.emplace_back();
      ph.level = w.level;
      ph.round = k;
      ph.pass = pass_;
      ph.payloads = std::move(payloads);
      ph.bindings = std::move(w.bindings[static_cast<std::size_t>(k)]);
      ph.pieces = route_(ph.payloads);
      // the distinct ends, ascending: marked once each, then only they are sorted (a phase of
      // an all-to-all has G (u - 1) pieces over G ranks)
      for (const transfer& x : ph.pieces)
        for (const rank_index end : {x.src, x.dst}) {
          char& marked = in_phase_[static_cast<std::size_t>(end)];
          if (!marked) marked = 1, ph.ranks.push_back(end);
        }
      std::sort(ph.ranks.begin(), ph.ranks.end());
      for (const rank_index rank : ph.ranks) in_phase_[static_cast<std::size_t>(rank)] = 0;
      for (const rank_index rank : ph.ranks) {
        const auto r = static_cast<std::size_t>(rank);
        const std::int32_t tail = last_[r][static_cast<std::size_t>(w.stream)];
        program_op op{comm_stream, {}, exchange_phase{phase}};
        if (tail >= 0) op.after.push_back(tail);
        exchanges_of(r, w.level).push_back({k, append(r, std::move(op))});
      }
    }
    shared_waves_.clear();
    for (const rank_index r : w.ranks_with_work()) slot(w, r, k + 1);
  }

 private:
  //! The CSR waves of `blocks`, in launch order; split once for a list other requests share.
  std::vector<block_list> waves_of(const block_list& blocks) {
    const auto split = [](const block_list& all) {
      std::vector<std::vector<attention_block>> waves = make_launch_waves(all.items());
      std::vector<block_list> out;
      if (waves.size() == 1 && waves.front() == all.items()) out.push_back(all);  // already one wave, in order
      else
        for (std::vector<attention_block>& wave : waves) out.emplace_back(std::move(wave));
      return out;
    };
    if (!blocks.is_shared()) return split(blocks);
    auto it = shared_waves_.find(blocks.identity());
    if (it == shared_waves_.end()) it = shared_waves_.emplace(blocks.identity(), std::pair{blocks, split(blocks)}).first;
    return it->second.second;
  }

  //! The exchanges rank r posted for `level` so far: (round, op), rounds ascending.
  std::vector<std::pair<std::int32_t, std::int32_t>>& exchanges_of(std::size_t r, std::int32_t level) {
    auto& levels = exchanges_[r];
    if (static_cast<std::size_t>(level) >= levels.size()) levels.resize(static_cast<std::size_t>(level) + 1);
    return levels[static_cast<std::size_t>(level)];
  }

  std::int32_t append(std::size_t r, program_op op) {
    auto& ops = segments_[r]->ops;
    ops.push_back(std::move(op));
    return static_cast<std::int32_t>(ops.size() - 1);
  }
  void compute(level_work& w, std::size_t r, op_body body, std::int32_t waits) {
    program_op op{w.stream, {}, std::move(body)};
    if (waits >= 0) {
      // the rank's last exchange of the level up to round `waits`: its communication stream
      // runs in order, so that one follows every exchange before it (a rank outside the
      // round's phase still waits for what it received earlier)
      const auto& posted = exchanges_of(r, w.level);  // ascending rounds
      const auto it = std::upper_bound(posted.begin(), posted.end(), waits,
                                       [](std::int32_t round, const std::pair<std::int32_t, std::int32_t>& x) { return round < x.first; });
      if (it != posted.begin()) op.after.push_back(std::prev(it)->second);
    }
    last_[r][static_cast<std::size_t>(w.stream)] = append(r, std::move(op));
  }

  void slot(level_work& w, rank_index rank, std::int32_t s) {
    const auto r = static_cast<std::size_t>(rank);
    round_work* found = w.find(rank, s);
    if (!found) return;
    round_work& work = *found;
    for (level_op& op : work.pre) compute(w, r, std::move(op.body), op.waits);
    for (const launch_request& req : joined_requests(work.launches)) {
      for (block_list& wave : waves_of(req.blocks)) {
        const auto launch = static_cast<std::int32_t>(prog_.launches.size());
        program_launch& l = prog_.launches.emplace_back();
        l.rank = rank;
        l.level = w.level;
        l.round = s - 1;
        l.pass = pass_;
        l.k = req.k, l.v = req.v, l.dk = req.dk, l.dv = req.dv;
        l.q = req.q, l.o = req.o, l.lse = req.lse, l.d_o = req.d_o, l.dq = req.dq;
        l.lane = req.lane;
        l.blocks = std::move(wave);
        compute(w, r, run_attention{launch}, req.waits);
      }
    }
    for (level_op& op : work.post) compute(w, r, std::move(op.body), op.waits);
  }

  //! The requests of one slot joined where they share their buffers (and, per_group, their
  //! group): one request per set, waiting for the latest round any of them waits for, with
  //! their blocks in request order. Empties `requests` (a single request is moved, not copied).
  std::vector<launch_request> joined_requests(std::vector<launch_request>& requests) {
    if (requests.size() < 2) {
      std::vector<launch_request> one = std::move(requests);
      requests.clear();
      return one;
    }
    const auto id = [](const buffer_ref& b) { return std::pair{static_cast<int>(b.where), b.index}; };
    using buffer_id = std::pair<int, std::int32_t>;
    using key = std::tuple<std::int32_t, std::array<buffer_id, 9>>;
    std::map<key, std::size_t> index;
    std::vector<launch_request> joined;
    std::vector<std::vector<std::size_t>> parts;  //!< [joined]: the requests it joins
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const launch_request& req = requests[i];
      const std::int32_t group = launch_ == launch_policy::per_group ? req.group : 0;
      const std::array<buffer_id, 9> buffers{id(req.k), id(req.v), id(req.dk), id(req.dv), id(req.q),
                                             id(req.o), id(req.lse), id(req.d_o), id(req.dq)};
      const auto [it, fresh] = index.try_emplace(key{group, buffers}, joined.size());
      if (fresh) joined.push_back(req), parts.emplace_back();
      joined[it->second].waits = std::max(joined[it->second].waits, req.waits);
      parts[it->second].push_back(i);
    }
    for (std::size_t j = 0; j < joined.size(); ++j) {
      if (parts[j].size() < 2) continue;  // one request keeps its list, shared or not
      std::vector<attention_block> all;
      for (const std::size_t i : parts[j]) all.insert(all.end(), requests[i].blocks.begin(), requests[i].blocks.end());
      joined[j].blocks = block_list(std::move(all));
    }
    requests.clear();
    return joined;
  }

  execution_program& prog_;
  pass_kind pass_;
  launch_policy launch_;
  std::vector<program_segment*> segments_;
  phase_router route_;
  std::vector<std::vector<std::int32_t>> last_;  //!< [rank][stream]: last op on the stream in this segment
  //! [rank][level]: the exchanges posted, (round, op) with rounds ascending
  std::vector<std::vector<std::vector<std::pair<std::int32_t, std::int32_t>>>> exchanges_;
  //! the current slot's shared block lists (kept alive by the first of the pair) -> their waves
  std::map<const void*, std::pair<block_list, std::vector<block_list>>> shared_waves_;
  std::vector<char> in_phase_;  //!< [rank]: scratch of round(), all zero between calls
};

}  // namespace detail
ZEPPELIN_NAMESPACE_END
