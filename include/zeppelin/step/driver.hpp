// zeppelin/step/driver.hpp
// The one driver of the step program: the simulator (sim/simulate_step.hpp) and the host
// runner (exec/step_runner.hpp) differ only in the backend they give it.
//   in : a step program (step/program.hpp) and a backend
//   out: every op of the ranks the backend runs, handed to it in an order that respects the
//        program: a rank's ops in list order; a group posted when the rank reaches it and
//        completed once the other end of each of its transfers has posted (ends the backend
//        does not run count as posted: their rank runs elsewhere); a block (step level) or an
//        attention (layer level) handed over once every one of its ranks that the backend
//        runs has reached it.
// A backend runs some ranks (the host runner: the calling rank; the simulator: all of them)
// and provides
//   ranks()                                   the ranks it runs, ascending
//   post(rank, index, group) /
//   complete(rank, index, group)              a group of the step level or of a block (its
//                                             transfers name their ends; a transfer to the
//                                             rank itself is listed twice in one group: its
//                                             send, then its receive)
//   block(index, ranks, op_index)             step level: block `index` on its ranks the
//                                             backend runs (each at op op_index[i] of its list);
//                                             a backend runs it with run_block
//   compute(rank, index, op)                  layer level: a compute op
//   attention(attention, ranks, op_index)     layer level: one run of an attention program
// and, for the layer level, a view of the block it runs (run_block takes the block program).
// A rank never waits on a group whose partner the backend runs but which that partner
// never posts: the driver then throws invalid_argument ("cannot make progress"), naming a
// stuck rank and its op (a program error; make_step_program's programs never do).
// Cost: O(ops + transfers) per level. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/step/block.hpp>
#include <zeppelin/step/program.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What the driver needs from a backend of the step level.
template <class B>
concept step_backend = requires(B& b, rank_index r, std::int32_t i, const step_group& g, std::span<const rank_index> ranks,
                                std::span<const std::int32_t> at) {
  { b.ranks() } -> std::convertible_to<std::span<const rank_index>>;
  b.post(r, i, g);
  b.complete(r, i, g);
  b.block(i, ranks, at);
};

//! What the driver needs from a backend of the layer level (a block's ops).
template <class B>
concept block_backend = requires(B& b, rank_index r, std::int32_t i, const step_group& g, const layer_op& op,
                                 const block_attention& a, std::span<const rank_index> ranks, std::span<const std::int32_t> at) {
  b.post(r, i, g);
  b.complete(r, i, g);
  b.compute(r, i, op);
  b.attention(a, ranks, at);
};

namespace detail {

// One level's ops as the driver sees them: per rank a list; an op is local, a group or a
// collective. Level adapters below.
enum class op_class : std::uint8_t { local, group, collective };

// Runs `level` for `ranks` (ascending) on `handle` (see the file comment).
template <class Level, class Handle>
void drive(const Level& level, std::span<const rank_index> ranks, Handle& handle) {
  const std::size_t n = ranks.size();
  const auto slot_of = [&](rank_index r) -> std::int64_t {
    const auto it = std::lower_bound(ranks.begin(), ranks.end(), r);
    return it != ranks.end() && *it == r ? it - ranks.begin() : -1;
  };
  std::vector<std::int32_t> cursor(n, 0);
  // per transfer: which of its ends (run here) have posted; per group: transfers unmatched
  std::vector<std::uint8_t> posted(level.transfer_count(), 0);
  std::vector<std::int32_t> unmatched(level.group_count(), -1);
  // per collective: ranks (run here) that have arrived
  std::vector<std::int32_t> arrived(level.collective_count(), 0);
  std::vector<std::int32_t> ready;  // slots whose rank may advance
  std::vector<std::int32_t> waiting_group(n, -1);
  for (std::size_t i = 0; i < n; ++i) ready.push_back(static_cast<std::int32_t>(i));
  std::vector<rank_index> members;
  std::vector<std::int32_t> at;
  std::size_t done = 0;

  const auto finish_group = [&](std::size_t slot) {
    const std::int32_t g = waiting_group[slot];
    handle.complete(ranks[slot], cursor[slot], level.group(g));
    waiting_group[slot] = -1;
    ++cursor[slot];
    ready.push_back(static_cast<std::int32_t>(slot));
  };
  while (!ready.empty()) {
    const auto slot = static_cast<std::size_t>(ready.back());
    ready.pop_back();
    const rank_index r = ranks[slot];
    const std::int32_t size = level.size(r);
    while (cursor[slot] < size) {
      const std::int32_t i = cursor[slot];
      const op_class kind = level.classify(r, i);
      if (kind == op_class::local) {
        level.run_local(handle, r, i);
        ++cursor[slot];
        continue;
      }
      if (kind == op_class::group) {
        const std::int32_t g = level.group_of(r, i);
        const step_group& grp = level.group(g);
        handle.post(r, i, grp);
        std::int32_t left = 0;
        for (const std::int32_t x : grp.transfers) {
          const step_transfer& t = level.transfer(x);
          ZEPPELIN_EXPECTS(t.src == r || t.dst == r, "step program: a group holds a transfer it is not an end of",
                           {{"rank", double(r)}, {"transfer", double(x)}, {"src", double(t.src)}, {"dst", double(t.dst)}});
          auto& bits = posted[static_cast<std::size_t>(x)];
          if (t.src == t.dst) {
            // to itself: its send and its receive in this one group (NCCL's rule), matched here
            left += bits == 0 ? 1 : -1;
            bits = static_cast<std::uint8_t>(bits == 0 ? 1 : 3);
            continue;
          }
          const rank_index other = t.src == r ? t.dst : t.src;
          const std::int64_t os = slot_of(other);
          bits |= static_cast<std::uint8_t>(t.src == r ? 1 : 2);
          if (os < 0) continue;  // the other end runs elsewhere
          if (bits == 3) {
            // matched now: the other end's group has one fewer to wait for
            const std::int32_t og = waiting_group[static_cast<std::size_t>(os)];
            if (og >= 0 && --unmatched[static_cast<std::size_t>(og)] == 0) finish_group(static_cast<std::size_t>(os));
          } else {
            ++left;
          }
        }
        if (left == 0) {
          handle.complete(r, i, grp);
          ++cursor[slot];
          continue;
        }
        unmatched[static_cast<std::size_t>(g)] = left;
        waiting_group[slot] = g;
        break;  // blocked until its partners post
      }
      // a collective: run once every member run here has arrived
      const std::int32_t c = level.collective_of(r, i);
      const std::span<const rank_index> all = level.members(c);
      std::int32_t here = 0;
      for (const rank_index m : all) here += slot_of(m) >= 0 ? 1 : 0;
      if (++arrived[static_cast<std::size_t>(c)] < here) break;  // others still on their way
      members.clear();
      at.clear();
      for (const rank_index m : all) {
        const std::int64_t ms = slot_of(m);
        if (ms < 0) continue;
        members.push_back(m);
        at.push_back(cursor[static_cast<std::size_t>(ms)]);
      }
      // the members in ascending rank order
      std::vector<std::size_t> order(members.size());
      for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
      std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return members[a] < members[b]; });
      std::vector<rank_index> sorted_members;
      std::vector<std::int32_t> sorted_at;
      for (const std::size_t k : order) sorted_members.push_back(members[k]), sorted_at.push_back(at[k]);
      level.run_collective(handle, c, sorted_members, sorted_at);
      for (const rank_index m : sorted_members) {
        const auto ms = static_cast<std::size_t>(slot_of(m));
        ++cursor[ms];
        if (ms != slot) ready.push_back(static_cast<std::int32_t>(ms));
      }
    }
    if (cursor[slot] == size) ++done;
  }
  if (done == n) return;
  for (std::size_t s = 0; s < n; ++s)
    if (cursor[s] < level.size(ranks[s]))
      ZEPPELIN_THROW(invalid_argument, "step program: the ranks cannot make progress (a group's partner or a collective's member never comes)",
                     {{"rank", double(ranks[s])}, {"op", double(cursor[s])}});
}

// The step level of a program.
template <class Backend>
struct step_level {
  const step_program& prog;
  [[nodiscard]] std::size_t transfer_count() const noexcept { return prog.transfers.size(); }
  [[nodiscard]] std::size_t group_count() const noexcept { return prog.groups.size(); }
  [[nodiscard]] std::size_t collective_count() const noexcept { return prog.blocks.size(); }
  [[nodiscard]] std::int32_t size(rank_index r) const { return static_cast<std::int32_t>(prog.ranks[static_cast<std::size_t>(r)].size()); }
  [[nodiscard]] const step_op& op(rank_index r, std::int32_t i) const {
    return prog.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
  }
  [[nodiscard]] op_class classify(rank_index r, std::int32_t i) const {
    return op(r, i).kind == step_op_kind::group ? op_class::group : op_class::collective;
  }
  [[nodiscard]] std::int32_t group_of(rank_index r, std::int32_t i) const { return op(r, i).index; }
  [[nodiscard]] std::int32_t collective_of(rank_index r, std::int32_t i) const { return op(r, i).index; }
  [[nodiscard]] const step_group& group(std::int32_t g) const { return prog.groups[static_cast<std::size_t>(g)]; }
  [[nodiscard]] const step_transfer& transfer(std::int32_t x) const { return prog.transfers[static_cast<std::size_t>(x)]; }
  [[nodiscard]] std::span<const rank_index> members(std::int32_t block) const {
    const step_block& b = prog.blocks[static_cast<std::size_t>(block)];
    const step_replica& r = prog.replica(b.replica);
    const std::size_t per_stage = static_cast<std::size_t>(r.tp) * static_cast<std::size_t>(r.cp);
    return std::span<const rank_index>(r.ranks).subspan(static_cast<std::size_t>(b.stage) * per_stage, per_stage);
  }
  void run_local(Backend&, rank_index, std::int32_t) const {}
  void run_collective(Backend& b, std::int32_t block, std::span<const rank_index> ranks, std::span<const std::int32_t> at) const {
    b.block(block, ranks, at);
  }
};

// The layer level of one block.
template <class Backend>
struct block_level {
  const block_program& bp;
  [[nodiscard]] std::size_t transfer_count() const noexcept { return bp.transfers.size(); }
  [[nodiscard]] std::size_t group_count() const noexcept { return bp.groups.size(); }
  [[nodiscard]] std::size_t collective_count() const noexcept { return bp.attentions.size(); }
  [[nodiscard]] const std::vector<layer_op>& ops(rank_index r) const {
    const std::int32_t m = bp.member_of(r);
    ZEPPELIN_EXPECTS(m >= 0, "step program: a rank runs a block it is not a member of", {{"rank", double(r)}, {"block", double(bp.block)}});
    return bp.ops[static_cast<std::size_t>(m)];
  }
  [[nodiscard]] std::int32_t size(rank_index r) const { return static_cast<std::int32_t>(ops(r).size()); }
  [[nodiscard]] op_class classify(rank_index r, std::int32_t i) const {
    switch (ops(r)[static_cast<std::size_t>(i)].kind) {
      case layer_op_kind::compute: return op_class::local;
      case layer_op_kind::group: return op_class::group;
      case layer_op_kind::attention: break;
    }
    return op_class::collective;
  }
  [[nodiscard]] std::int32_t group_of(rank_index r, std::int32_t i) const { return ops(r)[static_cast<std::size_t>(i)].index; }
  [[nodiscard]] std::int32_t collective_of(rank_index r, std::int32_t i) const { return ops(r)[static_cast<std::size_t>(i)].index; }
  [[nodiscard]] const step_group& group(std::int32_t g) const { return bp.groups[static_cast<std::size_t>(g)]; }
  [[nodiscard]] const step_transfer& transfer(std::int32_t x) const { return bp.transfers[static_cast<std::size_t>(x)]; }
  [[nodiscard]] std::span<const rank_index> members(std::int32_t a) const { return bp.attentions[static_cast<std::size_t>(a)].ranks; }
  void run_local(Backend& b, rank_index r, std::int32_t i) const { b.compute(r, i, ops(r)[static_cast<std::size_t>(i)]); }
  void run_collective(Backend& b, std::int32_t a, std::span<const rank_index> ranks, std::span<const std::int32_t> at) const {
    b.attention(bp.attentions[static_cast<std::size_t>(a)], ranks, at);
  }
};

}  // namespace detail

//! Runs the step level of `prog` on `backend` (see the file comment).
template <step_backend Backend>
void run_step(const step_program& prog, Backend& backend) {
  const std::span<const rank_index> ranks = backend.ranks();
  for (const rank_index r : ranks)
    ZEPPELIN_EXPECTS(r >= 0 && r < prog.num_ranks(), "step program: a backend runs a rank outside the program",
                     {{"rank", double(r)}, {"ranks", double(prog.num_ranks())}});
  const detail::step_level<Backend> level{prog};
  detail::drive(level, ranks, backend);
}

//! Runs block program `bp` on `backend` for `ranks` (ascending, members of the block that the
//! backend runs): what a backend's block() does when it runs the block's ops.
template <block_backend Backend>
void run_block(const block_program& bp, std::span<const rank_index> ranks, Backend& backend) {
  const detail::block_level<Backend> level{bp};
  detail::drive(level, ranks, backend);
}

ZEPPELIN_NAMESPACE_END
