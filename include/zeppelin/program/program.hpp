// zeppelin/program/program.hpp
// The execution program: THE one description of what runs when a plan's attention layer
// executes. Built once per plan (program/build.hpp); the host engine (exec/), the device
// engine (cuda/) and the simulator (sim/) all run it through one driver (program/driver.hpp),
// so the simulator prices exactly what the engines execute.
//
// The machine it runs on, per rank: compute streams (one, or one per engine queue with a
// priority, see streams), one communication stream, and buffers: the rank's tensors (its
// rows of Q, K, V, O, dO, dQ, dK, dV in the plan's layout: its shards concatenated in
// placement order; remap sources and targets) and scratch arenas the program declares.
// Operations on one stream run in their order; an operation also waits for the operations
// it names in `after` (on other streams). This is CUDA's stream / event model; the host
// runs the operations one after another, which satisfies it; the simulator turns each into
// tasks of its event engine.
//
// Structure:
//   levels     per micro-batch: [remap_in], inter-node rings, intra-node rings, local
//              sequences, [remap_out]; each with its rounds per pass
//   phases     one communication step: payloads (whole transfers, bound to the buffers they
//              leave and enter) and the routed pieces that carry them (core/transfer.hpp).
//              Its ranks (the ends of its pieces, proxies outside a group included) post
//              it, in phase order; no other rank does, so a rank's program is as long as
//              its own groups' rounds, not the largest group's.
//   launches   one attention kernel launch on one rank: a CSR list of blocks over the held
//              K/V (an arena or the rank's own K, V), what it accumulates dK/dV into; the
//              all-to-all (Ulysses) collective's launches also name their Q, O, LSE, dO and
//              dQ arenas and compute a share of the heads (a "lane"); the lanes of one
//              subgroup share one block list (program/block_list.hpp)
//   passes     forward and backward: per rank its arenas and segments; a segment is the
//              ops of one micro-batch's remap_in, attention or remap_out, and starts after
//              everything before it (a barrier on every stream)
// Rows: a buffer is an array of rows of one row_kind (program/wire_format.hpp); a K/V
// "slot" is two arenas, one for K and one for V, so a launch's keys and values share row
// indices and one transfer moves one contiguous row range. An arena may hold a share of the
// heads (arena::heads): its rows are then that many heads wide. Layouts: every buffer is
// row-major ([rows][heads][head elements]) except the rank's LSE tensor, which is head-major
// ([heads][rows], as the kernels write it).
// Plain data, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/transfer.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/program/block_list.hpp>
#include <zeppelin/program/shared_list.hpp>
#include <zeppelin/program/small_list.hpp>
#include <zeppelin/program/wire_format.hpp>
#include <zeppelin/schedule/ring_schedule.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

enum class pass_kind : std::uint8_t { forward = 0, backward = 1 };

[[nodiscard]] constexpr std::string_view to_string(pass_kind p) noexcept {
  return p == pass_kind::forward ? "fwd" : "bwd";
}

//! What a level runs.
enum class level_kind : std::uint8_t {
  remap_in = 0,    //!< token-balanced layout -> attention layout (Zeppelin 3.4)
  inter_node = 1,  //!< the ring groups spanning nodes
  intra_node = 2,  //!< the ring groups inside a node
  local = 3,       //!< sequences held whole by one rank
  remap_out = 4,   //!< attention layout -> token-balanced layout
};

[[nodiscard]] constexpr std::string_view to_string(level_kind k) noexcept {
  switch (k) {
    case level_kind::remap_in: return "remap_in";
    case level_kind::inter_node: return "inter";
    case level_kind::intra_node: return "intra";
    case level_kind::local: return "local";
    case level_kind::remap_out: return "remap_out";
  }
  return "?";
}

struct program_level {
  std::int32_t micro_batch = 0;
  level_kind kind = level_kind::local;
  std::int32_t rounds[2] = {0, 0};  //!< per pass_kind
  friend constexpr bool operator==(const program_level&, const program_level&) = default;
};

//! The rank tensors an operation may name (rows in the plan's layout unless noted).
enum class tensor_kind : std::uint8_t {
  k = 0,              //!< the rank's keys (kv rows)
  v = 1,              //!< the rank's values (kv rows)
  dk = 2,             //!< the rank's dK accumulator (dkv rows)
  dv = 3,             //!< the rank's dV accumulator (dkv rows)
  remap_source = 4,   //!< what a remap segment reads (its rows: see program_segment)
  remap_target = 5,   //!< what a remap segment writes
  q = 6,              //!< the rank's queries (q rows)
  o = 7,              //!< forward: the rank's output, written; backward: the global O, read (q rows)
  lse = 8,            //!< forward: the rank's LSE, written; backward: the global LSE, read
                      //!< (lse rows, head-major [heads][rows])
  d_o = 9,            //!< backward: the gradient of O (q rows)
  dq = 10,            //!< backward: the rank's dQ accumulator (q rows)
};

//! The row kind of a rank tensor.
[[nodiscard]] constexpr row_kind row_kind_of(tensor_kind t) noexcept {
  switch (t) {
    case tensor_kind::k:
    case tensor_kind::v: return row_kind::kv;
    case tensor_kind::dk:
    case tensor_kind::dv: return row_kind::dkv;
    case tensor_kind::lse: return row_kind::lse;
    case tensor_kind::q:
    case tensor_kind::o:
    case tensor_kind::d_o:
    case tensor_kind::dq:
    case tensor_kind::remap_source:  // the segment's row kind (program_segment::rows_of)
    case tensor_kind::remap_target: break;
  }
  return row_kind::q;
}

//! A rank buffer: one of its tensors or one of the pass's arenas.
struct buffer_ref {
  enum class space : std::uint8_t { tensor = 0, arena = 1 };
  space where = space::arena;
  std::int32_t index = 0;  //!< a tensor_kind, or an index into rank_pass::arenas
  [[nodiscard]] static constexpr buffer_ref tensor(tensor_kind t) noexcept { return {space::tensor, static_cast<std::int32_t>(t)}; }
  [[nodiscard]] static constexpr buffer_ref arena(std::int32_t a) noexcept { return {space::arena, a}; }
  [[nodiscard]] constexpr bool is(tensor_kind t) const noexcept { return where == space::tensor && index == static_cast<std::int32_t>(t); }
  friend constexpr bool operator==(const buffer_ref&, const buffer_ref&) = default;
};

//! Scratch rows a pass needs on a rank, allocated for the whole pass.
struct arena {
  row_kind rows_of = row_kind::kv;
  token_count rows = 0;
  std::int32_t heads = 0;  //!< heads per row: 0 = every head of rows_of, else a share of them
  friend constexpr bool operator==(const arena&, const arena&) = default;
};

//! Rows [from_row, from_row + rows) of one buffer go to rows [to_row, ...) of another.
struct row_run {
  token_count from_row = 0;
  token_count to_row = 0;
  token_count rows = 0;
  friend constexpr bool operator==(const row_run&, const row_run&) = default;
};

//! The row runs of a copy, add or head operation: shared by the operations that move the same
//! rows (the members of an all-to-all subgroup permute their rows with one list).
using run_list = shared_list<row_run>;

//! Where a payload's rows leave (on its source rank) and land (on its destination rank).
struct payload_binding {
  buffer_ref from{};
  token_count from_row = 0;
  buffer_ref to{};
  token_count to_row = 0;
  token_count rows = 0;
  row_kind rows_of = row_kind::kv;
  std::int32_t heads = 0;  //!< heads per row (0 = every head of rows_of): bytes = rows x wire.row_bytes(rows_of, heads)
  friend constexpr bool operator==(const payload_binding&, const payload_binding&) = default;
};

//! One communication step, the same on every rank.
struct program_phase {
  std::int32_t level = 0;
  std::int32_t round = 0;
  pass_kind pass = pass_kind::forward;
  shared_list<transfer> payloads;          //!< whole transfers: payloads[i].payload == i
  std::vector<payload_binding> bindings;   //!< parallel to payloads
  //! the router's pieces of the payloads (the payloads' own list when each goes whole and direct)
  shared_list<transfer> pieces;
  std::vector<rank_index> ranks;           //!< the ends of its pieces, ascending: the ranks that post it
  friend bool operator==(const program_phase&, const program_phase&) = default;
};

//! The heads a launch computes: the kernel runs with `heads` query heads and `kv_heads` K/V
//! heads, query head h reading K/V head h / (heads / kv_heads), over buffers whose rows hold
//! exactly those heads. 0 and 0: every head of the wire format (the rank's own tensors).
struct head_lane {
  std::int32_t heads = 0;
  std::int32_t kv_heads = 0;
  [[nodiscard]] constexpr bool whole() const noexcept { return heads == 0; }
  friend constexpr bool operator==(const head_lane&, const head_lane&) = default;
};

//! One attention kernel launch: blocks with query rows in `q` and key rows in the held K/V;
//! query rows ascending and disjoint, key rows ascending and disjoint (what a CSR launch of
//! cuda/attention_params.hpp can express, program/launch_waves.hpp). Forward: each block's
//! O and LSE merge into `o` and `lse`; backward: the kernel reads `q`, `o` (the global O),
//! `d_o`, `lse` (the global LSE) and adds into `dq`, `dk`, `dv`.
struct program_launch {
  rank_index rank = 0;
  std::int32_t level = 0;
  std::int32_t round = 0;
  pass_kind pass = pass_kind::forward;
  buffer_ref k{}, v{};    //!< the held keys and values
  buffer_ref dk{}, dv{};  //!< backward: where block dK / dV accumulate
  buffer_ref q = buffer_ref::tensor(tensor_kind::q);
  buffer_ref o = buffer_ref::tensor(tensor_kind::o);
  buffer_ref lse = buffer_ref::tensor(tensor_kind::lse);
  buffer_ref d_o = buffer_ref::tensor(tensor_kind::d_o);
  buffer_ref dq = buffer_ref::tensor(tensor_kind::dq);
  head_lane lane{};
  block_list blocks;  //!< shared by the launches that compute the same blocks (the lanes of a subgroup)
  [[nodiscard]] token_count rows() const noexcept {
    token_count n = 0;
    for (const attention_block& b : blocks) n += b.q.size();
    return n;
  }
  friend bool operator==(const program_launch&, const program_launch&) = default;
};

//! Operations. copy_rows overwrites, add_rows accumulates (to += from), zero_rows clears
//! rows of an accumulator to the identity of what accumulates there (0; -inf for lse rows,
//! the identity of the LSE merge); copy_heads / add_heads do the same as copy_rows / add_rows
//! on shares of the heads of each row (head_runs: one or more blocks of heads, each with its
//! row offsets: the packing and unpacking of the all-to-all collective, all lanes in one op);
//! attention runs a launch (forward: kernel + LSE merge into the launch's O and LSE;
//! backward: kernel adding into the launch's dQ, dK, dV); exchange posts the rank's part of
//! a phase on the communication stream.
struct copy_rows {
  buffer_ref from{}, to{};
  run_list runs;
  friend bool operator==(const copy_rows&, const copy_rows&) = default;
};
struct add_rows {
  buffer_ref from{}, to{};
  run_list runs;
  friend bool operator==(const add_rows&, const add_rows&) = default;
};
struct zero_rows {
  buffer_ref to{};
  token_count row = 0;
  token_count rows = 0;
  friend constexpr bool operator==(const zero_rows&, const zero_rows&) = default;
};
//! One block of heads a head operation moves, for every row of its runs: heads
//! [from_head, from_head + heads) of row run.from_row + i + from_shift of `from` -> heads
//! [to_head, to_head + heads) of row run.to_row + i + to_shift of `to`. The shifts let one
//! operation pack (or unpack) several lanes whose rows are the same runs placed at different
//! offsets (the all-to-all collective's send and receive regions).
struct head_move {
  std::int32_t from_head = 0, to_head = 0;
  token_count from_shift = 0, to_shift = 0;
  friend constexpr bool operator==(const head_move&, const head_move&) = default;
};
//! `heads` heads per row, moved from `from` to `to` block after block (moves in order: an add
//! of several moves into the same heads sums in that order), each over the rows of `runs`.
struct head_runs {
  buffer_ref from{}, to{};
  std::int32_t heads = 0;
  std::vector<head_move> moves;
  run_list runs;
  friend bool operator==(const head_runs&, const head_runs&) = default;
};
struct copy_heads : head_runs {
  friend bool operator==(const copy_heads&, const copy_heads&) = default;
};
struct add_heads : head_runs {
  friend bool operator==(const add_heads&, const add_heads&) = default;
};
struct run_attention {
  std::int32_t launch = 0;
  friend constexpr bool operator==(const run_attention&, const run_attention&) = default;
};
struct exchange_phase {
  std::int32_t phase = 0;
  friend constexpr bool operator==(const exchange_phase&, const exchange_phase&) = default;
};
using op_body = std::variant<copy_rows, add_rows, zero_rows, run_attention, exchange_phase, copy_heads, add_heads>;

//! The communication stream's index in program_op::stream.
inline constexpr std::int32_t comm_stream = -1;

struct program_op {
  std::int32_t stream = 0;            //!< a compute stream, or comm_stream for exchanges
  small_list<std::int32_t, 2> after;  //!< ops of the same segment (earlier) this one waits for
  op_body body;
  friend bool operator==(const program_op&, const program_op&) = default;
};

enum class segment_kind : std::uint8_t { remap_in = 0, attention = 1, remap_out = 2 };

[[nodiscard]] constexpr std::string_view to_string(segment_kind k) noexcept {
  return k == segment_kind::remap_in ? "remap_in" : k == segment_kind::attention ? "attention" : "remap_out";
}

//! One rank's work in one segment.
struct program_segment {
  segment_kind kind = segment_kind::attention;
  std::int32_t micro_batch = 0;
  std::vector<program_op> ops;
  //! remap segments: rows of the source and target tensors (remap_in: the token-balanced
  //! rows of the micro-batch -> the rank's attention rows; remap_out the reverse)
  token_count source_rows = 0, target_rows = 0;
  row_kind rows_of = row_kind::q;  //!< remap segments: what a row holds
  friend bool operator==(const program_segment&, const program_segment&) = default;
};

//! One rank's work in one pass.
struct rank_pass {
  std::vector<arena> arenas;
  std::vector<program_segment> segments;  //!< the same kinds and micro-batches on every rank
  friend bool operator==(const rank_pass&, const rank_pass&) = default;
};

//! A compute stream and its priority (0 = highest; CUDA's lower-is-higher convention).
struct program_stream {
  std::int32_t priority = 0;
  friend constexpr bool operator==(const program_stream&, const program_stream&) = default;
};

struct execution_program {
  wire_format wire{};
  std::int32_t micro_batches = 1;
  std::vector<token_count> rows;                    //!< [rank]: attention-layout rows
  std::vector<std::vector<token_count>> shard_row;  //!< [rank][shard]: first row of each shard
  std::vector<program_stream> streams;              //!< compute streams
  std::vector<program_level> levels;
  std::vector<program_phase> phases;
  std::vector<program_launch> launches;
  std::vector<rank_pass> passes[2];                 //!< [pass_kind][rank]
  //! [micro-batch][rank]: the token-balanced layout the remap segments move to and from, in
  //! buffer order: what the linear modules' tensors hold. Empty (for all micro-batches, or for
  //! one that is not remapped): the linear modules use the attention layout.
  std::vector<std::vector<placement>> linear_layout;

  [[nodiscard]] rank_index num_ranks() const noexcept { return static_cast<rank_index>(rows.size()); }
  [[nodiscard]] const std::vector<rank_pass>& pass(pass_kind p) const noexcept { return passes[static_cast<int>(p)]; }
  friend bool operator==(const execution_program&, const execution_program&) = default;
};

//! The index, in rank's segments of `pass`, of the remap segment `kind` (remap_in or
//! remap_out) of micro-batch `micro_batch`. Throws invalid_argument when there is none (the
//! micro-batch is not remapped, or `kind` is attention).
[[nodiscard]] inline std::size_t remap_segment_index(const execution_program& prog, pass_kind pass, rank_index rank,
                                                     std::int32_t micro_batch, segment_kind kind) {
  ZEPPELIN_EXPECTS(rank >= 0 && rank < prog.num_ranks(), "execution program: rank outside the program",
                   {{"rank", double(rank)}, {"ranks", double(prog.num_ranks())}});
  const auto& segs = prog.pass(pass)[static_cast<std::size_t>(rank)].segments;
  for (std::size_t i = 0; i < segs.size(); ++i)
    if (kind != segment_kind::attention && segs[i].kind == kind && segs[i].micro_batch == micro_batch) return i;
  ZEPPELIN_THROW(invalid_argument, "execution program: no such remap segment",
                 {{"micro_batch", double(micro_batch)}, {"kind", double(static_cast<int>(kind))}});
}

//! Whether one rank's pass of `prog` computes on head lanes (the all-to-all collective): a
//! launch with a head lane, or an operation on a share of the heads. O(its operations).
[[nodiscard]] inline bool uses_head_lanes(const execution_program& prog, const rank_pass& rp) noexcept {
  for (const program_segment& seg : rp.segments)
    for (const program_op& op : seg.ops) {
      const auto* run = std::get_if<run_attention>(&op.body);
      if ((run && !prog.launches[static_cast<std::size_t>(run->launch)].lane.whole()) || std::holds_alternative<copy_heads>(op.body) ||
          std::holds_alternative<add_heads>(op.body))
        return true;
    }
  return false;
}
//! Whether any rank's pass of `prog` does.
[[nodiscard]] inline bool uses_head_lanes(const execution_program& prog) noexcept {
  for (const auto& pass : prog.passes)
    for (const rank_pass& rp : pass)
      if (uses_head_lanes(prog, rp)) return true;
  return false;
}

//! The label of a phase in communicator errors: "<pass> micro-batch <mb> <level> round <k>".
[[nodiscard]] inline std::string phase_label(const execution_program& prog, const program_phase& ph) {
  const program_level& lv = prog.levels.at(static_cast<std::size_t>(ph.level));
  return std::string(ph.pass == pass_kind::forward ? "forward" : "backward") + " micro-batch " + std::to_string(lv.micro_batch) + " " +
         std::string(to_string(lv.kind)) + " round " + std::to_string(ph.round);
}

ZEPPELIN_NAMESPACE_END
