// zeppelin/exec/plan_agreement.hpp
// The engines' cross-rank plan check (what TORCH_DISTRIBUTED_DEBUG=DETAIL does for
// collectives): before the first round an engine runs on a rank, the ranks exchange
// fingerprints of what they are about to run and refuse to run when they disagree, instead of
// exchanging mismatched rounds (a hang, a comm_mismatch, or - when the sizes happen to agree -
// numbers that are silently wrong).
//   fingerprint(execution_program)  64-bit FNV-1a (core/fingerprint.hpp's hasher) of everything
//                                   the program lists: wire format, rows, streams, levels,
//                                   phases, launches and their blocks, every rank's arenas and
//                                   ops, the linear layout
//   plan_fingerprint(plan, batch)   fingerprint(plan) and fingerprint(batch) hashed together
//                                   (never 0)
//   plan_identity                   what a rank's engine contributes, 16 bytes: its program's
//                                   fingerprint, and the plan fingerprint of the plan and batch
//                                   it was built from (0: it was given a program)
//   all_gather_bytes(c, mine, all, memory, step)
//                                   every rank's `mine` (the same size on every rank) into
//                                   `all` in rank order, as ONE group labelled `step`; memory
//                                   is a transport_memory policy (exec/transport.hpp): host
//                                   spans with host_memory, device spans with device_staging
//   check_plan_agreement(who, all, step)
//                                   throws plan_mismatch when the identities disagree: the
//                                   plans first (among the ranks that know theirs: a different
//                                   plan explains a different program), then the programs
//   plan_agreement                  one engine's per rank "checked in world w" (comm/world_id.hpp)
// Cost: once per engine and rank, one group of ranks - 1 sends and receives of 16 bytes (the
// device engine also waits once for its communication stream); afterwards nothing.
// Collective: every rank's engine checks on the first pass it runs in a world (forward,
// backward or remap), so ranks build their engines together, as they build their plans. An
// engine kept across worlds (a new loopback run, a new NCCL communicator) checks again in
// the new one, so a rank that re-planned meets plan_mismatch there, never a wait for rounds
// its peers do not run. An engine shared by the rank threads of a loopback world checks once
// per rank; a copy of an engine checks again. nvcc-safe.
#pragma once

#include <zeppelin/comm/comm_error.hpp>
#include <zeppelin/comm/communicator.hpp>
#include <zeppelin/comm/world_id.hpp>
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/exec/transport.hpp>
#include <zeppelin/program/program.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iomanip>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The label of the group that exchanges the fingerprints (communicator errors name it).
inline constexpr std::string_view plan_check_step = "plan fingerprint check";

namespace detail {
inline void hash_into(fnv1a_hasher& h, const token_range& r) noexcept {
  h.add(r.begin);
  h.add(r.end);
}
inline void hash_into(fnv1a_hasher& h, const buffer_ref& b) noexcept {
  h.add(static_cast<std::int64_t>(b.where));
  h.add(b.index);
}
inline void hash_into(fnv1a_hasher& h, const transfer& t) noexcept {
  h.add(t.src);
  h.add(t.dst);
  h.add(t.bytes);
  h.add(t.payload);
  h.add(t.offset);
  h.add(static_cast<std::int64_t>(t.step));
}
inline void hash_into(fnv1a_hasher& h, const row_run& r) noexcept {
  h.add(r.from_row);
  h.add(r.to_row);
  h.add(r.rows);
}
inline void hash_into(fnv1a_hasher& h, const head_move& m) noexcept {
  h.add(m.from_head);
  h.add(m.to_head);
  h.add(m.from_shift);
  h.add(m.to_shift);
}
inline void hash_into(fnv1a_hasher& h, const shard& s) noexcept {
  h.add(s.seq);
  hash_into(h, s.range);
  h.add(s.group);
  h.add(s.micro_batch);
}
inline void hash_into(fnv1a_hasher& h, const attention_block& b) noexcept {
  h.add(b.seq);
  hash_into(h, b.q);
  hash_into(h, b.k);
  h.add(static_cast<std::int64_t>(b.mask));
  h.add(b.q_row);
  h.add(b.kv_row);
}
inline void hash_into(fnv1a_hasher& h, const program_op& op) noexcept;
inline void hash_into(fnv1a_hasher& h, const head_runs& x) noexcept;
// a length, then every element
template <class T>
void hash_all(fnv1a_hasher& h, std::span<const T> xs) noexcept {
  h.add(static_cast<std::int64_t>(xs.size()));
  for (const T& x : xs) {
    if constexpr (std::is_integral_v<T>) h.add(static_cast<std::int64_t>(x));
    else hash_into(h, x);
  }
}
template <class T>
void hash_all(fnv1a_hasher& h, const std::vector<T>& xs) noexcept {
  hash_all(h, std::span<const T>(xs));
}
template <class T>
void hash_all(fnv1a_hasher& h, const shared_list<T>& xs) noexcept {
  hash_all(h, std::span<const T>(xs.items()));
}
template <class T, std::size_t N>
void hash_all(fnv1a_hasher& h, const small_list<T, N>& xs) noexcept {
  hash_all(h, std::span<const T>(xs.begin(), xs.size()));
}
inline void hash_into(fnv1a_hasher& h, const program_op& op) noexcept {
  h.add(op.stream);
  hash_all(h, op.after);
  h.add(static_cast<std::int64_t>(op.body.index()));
  if (const auto* x = std::get_if<copy_rows>(&op.body)) {
    hash_into(h, x->from);
    hash_into(h, x->to);
    hash_all(h, x->runs);
  } else if (const auto* a = std::get_if<add_rows>(&op.body)) {
    hash_into(h, a->from);
    hash_into(h, a->to);
    hash_all(h, a->runs);
  } else if (const auto* z = std::get_if<zero_rows>(&op.body)) {
    hash_into(h, z->to);
    h.add(z->row);
    h.add(z->rows);
  } else if (const auto* l = std::get_if<run_attention>(&op.body)) {
    h.add(l->launch);
  } else if (const auto* c = std::get_if<copy_heads>(&op.body)) {
    hash_into(h, static_cast<const head_runs&>(*c));
  } else if (const auto* ah = std::get_if<add_heads>(&op.body)) {
    hash_into(h, static_cast<const head_runs&>(*ah));
  } else if (const auto* e = std::get_if<exchange_phase>(&op.body)) {
    h.add(e->phase);
  }
}
inline void hash_into(fnv1a_hasher& h, const head_runs& x) noexcept {
  hash_into(h, x.from);
  hash_into(h, x.to);
  h.add(x.heads);
  hash_all(h, x.moves);
  hash_all(h, x.runs);
}
}  // namespace detail

//! 64-bit FNV-1a of everything the program lists (see the file comment), in order, fixed
//! widths: every rank and machine that built the same program gets the same number.
[[nodiscard]] inline std::uint64_t fingerprint(const execution_program& prog) noexcept {
  fnv1a_hasher h;
  const wire_format& w = prog.wire;
  for (const std::int32_t x : {w.heads, w.kv_heads, w.head_dim, w.element_bytes, w.accumulator_bytes}) h.add(x);
  h.add(prog.micro_batches);
  detail::hash_all(h, prog.rows);
  h.add(static_cast<std::int64_t>(prog.shard_row.size()));
  for (const auto& rows : prog.shard_row) detail::hash_all(h, rows);
  h.add(static_cast<std::int64_t>(prog.streams.size()));
  for (const program_stream& s : prog.streams) h.add(s.priority);
  h.add(static_cast<std::int64_t>(prog.levels.size()));
  for (const program_level& l : prog.levels) {
    h.add(l.micro_batch);
    h.add(static_cast<std::int64_t>(l.kind));
    h.add(l.rounds[0]);
    h.add(l.rounds[1]);
  }
  h.add(static_cast<std::int64_t>(prog.phases.size()));
  for (const program_phase& ph : prog.phases) {
    h.add(ph.level);
    h.add(ph.round);
    h.add(static_cast<std::int64_t>(ph.pass));
    detail::hash_all(h, ph.payloads);
    h.add(static_cast<std::int64_t>(ph.bindings.size()));
    for (const payload_binding& b : ph.bindings) {
      detail::hash_into(h, b.from);
      h.add(b.from_row);
      detail::hash_into(h, b.to);
      h.add(b.to_row);
      h.add(b.rows);
      h.add(static_cast<std::int64_t>(b.rows_of));
      h.add(b.heads);
    }
    detail::hash_all(h, ph.pieces);
  }
  h.add(static_cast<std::int64_t>(prog.launches.size()));
  for (const program_launch& l : prog.launches) {
    h.add(l.rank);
    h.add(l.level);
    h.add(l.round);
    h.add(static_cast<std::int64_t>(l.pass));
    for (const buffer_ref& b : {l.k, l.v, l.dk, l.dv, l.q, l.o, l.lse, l.d_o, l.dq}) detail::hash_into(h, b);
    h.add(l.lane.heads);
    h.add(l.lane.kv_heads);
    detail::hash_all(h, l.blocks.items());
  }
  for (const auto& pass : prog.passes) {
    h.add(static_cast<std::int64_t>(pass.size()));
    for (const rank_pass& rp : pass) {
      h.add(static_cast<std::int64_t>(rp.arenas.size()));
      for (const arena& a : rp.arenas) {
        h.add(static_cast<std::int64_t>(a.rows_of));
        h.add(a.rows);
        h.add(a.heads);
      }
      h.add(static_cast<std::int64_t>(rp.segments.size()));
      for (const program_segment& s : rp.segments) {
        h.add(static_cast<std::int64_t>(s.kind));
        h.add(s.micro_batch);
        detail::hash_all(h, s.ops);
        h.add(s.source_rows);
        h.add(s.target_rows);
        h.add(static_cast<std::int64_t>(s.rows_of));
      }
    }
  }
  h.add(static_cast<std::int64_t>(prog.linear_layout.size()));
  for (const auto& layout : prog.linear_layout) {
    h.add(static_cast<std::int64_t>(layout.size()));
    for (const placement& pl : layout) detail::hash_all(h, pl.shards);
  }
  return h.value();
}

//! fingerprint(p) and fingerprint(b) hashed together; never 0 (0 means "no plan known").
[[nodiscard]] inline std::uint64_t plan_fingerprint(const plan& p, const batch& b) noexcept {
  fnv1a_hasher h;
  h.add(static_cast<std::int64_t>(fingerprint(p)));
  h.add(static_cast<std::int64_t>(fingerprint(b)));
  return h.value() == 0 ? 1 : h.value();
}

//! What one rank's engine runs: exchanged as 16 bytes, so plain and without padding.
struct plan_identity {
  std::uint64_t program = 0;  //!< fingerprint(execution_program)
  std::uint64_t plan = 0;     //!< plan_fingerprint(plan, batch), or 0 when built from a program
  friend constexpr bool operator==(const plan_identity&, const plan_identity&) = default;
};
static_assert(sizeof(plan_identity) == 16 && std::is_trivially_copyable_v<plan_identity>);

//! Every rank's `mine` into `all` (all.size() == c.size() * mine.size(), part r at r *
//! mine.size()), as one group labelled `step`; this rank's part is copied with `memory`.
//! Every rank of c must call it with parts of the same size. Throws invalid_argument when
//! `all` has another size.
template <communicator C, class M>
  requires transport_memory<M, C>
void all_gather_bytes(C& c, std::span<const std::byte> mine, std::span<std::byte> all, const M& memory, std::string_view step) {
  const auto n = static_cast<std::size_t>(c.size()), k = mine.size(), me = static_cast<std::size_t>(c.rank());
  ZEPPELIN_EXPECTS(all.size() == n * k, "all_gather_bytes: `all` must hold one part per rank",
                   {{"all", double(all.size())}, {"part", double(k)}, {"ranks", double(n)}});
  memory.copy(c, all.subspan(me * k, k), mine);
  c.group_start();
  for (std::size_t p = 0; p < n; ++p) {
    if (p == me) continue;
    c.send(mine, static_cast<rank_index>(p));
    c.recv(all.subspan(p * k, k), static_cast<rank_index>(p));
  }
  c.group_end(step);
}

namespace detail {
inline std::string hex(std::uint64_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(16) << std::setfill('0') << v;
  return out.str();
}
// throws plan_mismatch: `differing` ranks hold another `what` fingerprint than rank `ref`
[[noreturn]] inline void throw_plan_mismatch(std::string_view who, const char* what, rank_index ref,
                                             const std::vector<rank_index>& differing, std::uint64_t ref_value,
                                             std::uint64_t peer_value, std::string_view step) {
  std::ostringstream msg;
  msg << who << ": the ranks' engines were built from different " << what << ": rank " << ref << " has fingerprint "
      << hex(ref_value) << ", rank " << differing.front() << " has " << hex(peer_value) << "; rank"
      << (differing.size() > 1 ? "s" : "");
  for (std::size_t i = 0; i < differing.size(); ++i) msg << (i ? ", " : " ") << differing[i];
  msg << (differing.size() > 1 ? " differ" : " differs") << " from rank " << ref << "; refusing to run";
  throw plan_mismatch(msg.str(), ref, differing.front(), ref_value, peer_value, std::string(step), __FILE__, __LINE__);
}
}  // namespace detail

//! Throws plan_mismatch (rank() the reference rank, peer() the first that differs) when the
//! ranks' identities disagree: first the plan fingerprints of the ranks that have one (the
//! first such rank is the reference), then the program fingerprints (rank 0 the reference).
//! `who` prefixes the message ("attention engine").
inline void check_plan_agreement(std::string_view who, std::span<const plan_identity> all, std::string_view step) {
  std::vector<rank_index> differing;
  rank_index ref = -1;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].plan == 0) continue;
    if (ref < 0) ref = static_cast<rank_index>(r);
    else if (all[r].plan != all[static_cast<std::size_t>(ref)].plan) differing.push_back(static_cast<rank_index>(r));
  }
  if (!differing.empty())
    detail::throw_plan_mismatch(who, "plans (or batches)", ref, differing, all[static_cast<std::size_t>(ref)].plan,
                                all[static_cast<std::size_t>(differing.front())].plan, step);
  for (std::size_t r = 1; r < all.size(); ++r)
    if (all[r].program != all[0].program) differing.push_back(static_cast<rank_index>(r));
  if (!differing.empty())
    detail::throw_plan_mismatch(who, "execution programs", 0, differing, all[0].program,
                                all[static_cast<std::size_t>(differing.front())].program, step);
}

//! Which ranks of one engine have passed the plan check. Each flag is touched by its rank's
//! thread only (atomic, so an engine shared by the threads of a loopback world is race-free).
//! A copy starts unchecked: it is another engine, and checks again.
class plan_agreement {
 public:
  explicit plan_agreement(rank_index ranks)
      : ranks_(ranks), checked_in_(std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(ranks))) {}
  plan_agreement(const plan_agreement& other) : plan_agreement(other.ranks_) {}
  plan_agreement& operator=(const plan_agreement& other) {
    if (this != &other) *this = plan_agreement(other.ranks_);
    return *this;
  }
  plan_agreement(plan_agreement&&) noexcept = default;
  plan_agreement& operator=(plan_agreement&&) noexcept = default;
  ~plan_agreement() = default;

  //! Whether rank r (inside [0, ranks)) has passed the check in world `world`
  //! (comm/world_id.hpp: world_of(c)); in another world it checks again.
  [[nodiscard]] bool checked(rank_index r, std::uint64_t world) const noexcept {
    return checked_in_[static_cast<std::size_t>(r)].load(std::memory_order_acquire) == world;
  }
  void set_checked(rank_index r, std::uint64_t world) noexcept {
    checked_in_[static_cast<std::size_t>(r)].store(world, std::memory_order_release);
  }

 private:
  rank_index ranks_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> checked_in_;  // per rank: the world it passed in, 0 none
};

ZEPPELIN_NAMESPACE_END
