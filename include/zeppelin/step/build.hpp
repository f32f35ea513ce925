// zeppelin/step/build.hpp
// make_step_program: a step plan -> its step program (step/program.hpp), once per plan.
//   in : the step plan (validated first: step/validate.hpp), the cluster topology, the
//        model, step_program_options (element sizes, how each CP layout's attention runs)
//   out: the step program every backend runs
// What it builds:
//   layouts     per replica and micro-batch, the attention program of its CP layout
//               (make_program on the CP group's topology, step/cp_group_topology.hpp, with
//               the heads and K/V heads of one TP rank), the rows each CP rank's linear
//               modules hold (the token-balanced layout when the program remaps, else the
//               attention layout), the rows of each piece it holds and of each piece's
//               context it kept from the document's earlier slices;
//   blocks and  the ONE walk of each replica's pipeline schedule: every forward and backward
//   groups      becomes a block on each of its stage's members, every maximal run of sends and
//               receives one group per member (as the schedule posts them, NCCL groups), each
//               send of member (t, c) to member (t, c) of the neighbouring stage moving the
//               boundary tensor of its rows (rows x hidden activations; with sequence
//               parallelism each TP rank its row share, at its offset in the tensor: the chunk
//               its reduce-scatter left summed). A block waits for the group that
//               received its input, a group for the blocks whose outputs it sends;
//   sync        after each rank's last backward, on its communication stream:
//                 all_reduce         a ring all-reduce of the stage's gradients (one TP
//                                    rank's) over the ranks holding the same parameters
//                                    (the same TP index and stage in every replica and CP rank);
//                                    with TP, first an all-reduce over each stage's TP ranks of
//                                    the gradients of the parameters they all hold (the norms:
//                                    step_program::stage_replicated_parameters, the last ones);
//                 sharded_optimizer  (the same TP all-reduce first) a ring reduce-scatter of
//                                    the gradients, then a ring all-gather of the
//                                    parameters, over the same ranks;
//                 fully_sharded      (ZeRO-3: the per-layer gathers and scatters over each
//                                    stage's CP ranks are in the blocks) with several
//                                    replicas, a ring all-reduce of each rank's gradient
//                                    shard across them; replicas that differ (in tp, cp,
//                                    pp or layers: FlexSP's groups) meet by switching;
//                 switching          Hydraulis' mutual slices (strategy/switching.hpp), in
//                                    whole elements (strategy/switching_layout.hpp): the
//                                    pull of every rank's parameter slices before its first
//                                    block, the push of its gradients (reduced on one copy,
//                                    then linked to the owner) after its last backward; with
//                                    TP, each TP rank moves its share of the norms, so a TP
//                                    all-reduce makes the pulled norms whole (each rank's
//                                    share, zeros elsewhere) and one sums their gradients
//                                    before the push. The pull, the reduction and the
//                                    link are each one job-wide exchange (step_group::
//                                    exchange), which a simulator may price as a whole.
// Cost: O(schedule ops x tp x cp + attention programs + sync transfers).
// Errors: what validate throws; invalid_argument for element sizes < 1 or accumulators
// narrower than activations; what make_program throws for a layout; resource_limit when
// the switching would list more transfers than step_program_options::
// max_switching_transfers (checked before any is built; exchange_detail::listed only).
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/schedule/pipeline/validate.hpp>
#include <zeppelin/step/block.hpp>
#include <zeppelin/step/cp_group_topology.hpp>
#include <zeppelin/step/detail/ring_steps.hpp>
#include <zeppelin/step/program.hpp>
#include <zeppelin/step/validate.hpp>
#include <zeppelin/strategy/switching.hpp>
#include <zeppelin/strategy/switching_layout.hpp>
#include <zeppelin/strategy/switching_traffic.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

// The switching users of a step plan: every rank, once per virtual stage it holds, with the
// layers of that virtual stage; copies numbered replica by replica, CP rank by CP rank.
inline std::vector<switching_user> switching_users(const step_plan& p, const model_config& model) {
  std::vector<switching_user> out;
  const pipeline_memory_model full{model, parallel_layout{1, 1, 1, 1}, memory_settings{}};
  int copy = 0;
  for (const step_replica& r : p.replicas) {
    const int V = r.virtual_stages(), last = r.pp * V - 1;
    for (int s = 0; s < r.pp; ++s)
      for (int c = 0; c < r.cp; ++c)
        for (int t = 0; t < r.tp; ++t)
          for (int ch = 0; ch < V; ++ch) {
            const int v = ch * r.pp + s;
            const stage_slice slice{r.layers[static_cast<std::size_t>(v)], v == 0, v == last};
            out.push_back({r.rank_of(t, c, s), r.tp, t, copy + c, r.first_layer(v), slice.layers, full.parameters(slice)});
          }
    copy += r.cp;
  }
  return out;
}

// Builds one replica's layouts (see the file comment).
inline std::vector<step_layout> make_layouts(const step_plan& p, const step_replica& r, const topology& cluster, const model_config& model,
                                             const step_program_options& o) {
  const topology shape = cp_group_topology(cluster, r, 0, 0);
  program_options ao = o.attention;
  ao.wire = wire_format{model.heads / r.tp, model.kv_heads / r.tp, model.head_dim, o.activation_bytes, o.accumulator_bytes};
  ao.wire.check();
  const auto C = static_cast<std::size_t>(r.cp);
  std::vector<std::vector<token_count>> kept(p.documents.size());  // [document][cp rank]: rows kept so far
  std::vector<step_layout> out;
  out.reserve(r.micro_batches.size());
  for (const step_micro_batch& mb : r.micro_batches) {
    std::vector<token_count> lengths;
    for (const step_piece& x : mb.pieces) lengths.push_back(x.tokens());
    step_layout lay;
    lay.attention = make_program(mb.layout, batch(std::move(lengths)), shape, ao);
    lay.linear_rows.assign(C, 0);
    const bool remapped = !lay.attention.linear_layout.empty() && !lay.attention.linear_layout.front().empty();
    for (std::size_t c = 0; c < C; ++c)
      lay.linear_rows[c] = remapped ? lay.attention.linear_layout.front()[c].tokens() : lay.attention.rows[c];
    lay.piece_rows.assign(C, std::vector<token_count>(mb.pieces.size(), 0));
    for (std::size_t c = 0; c < C; ++c)
      for (const shard& s : mb.layout.placements[c].shards) lay.piece_rows[c][static_cast<std::size_t>(s.seq)] += s.range.size();
    lay.context_rows.assign(C, std::vector<token_count>(mb.pieces.size(), 0));
    for (std::size_t i = 0; i < mb.pieces.size(); ++i) {
      const step_piece& x = mb.pieces[i];
      const bool sliced = x.begin > 0 || x.end < p.documents[static_cast<std::size_t>(x.document)];
      if (!sliced) continue;
      auto& k = kept[static_cast<std::size_t>(x.document)];
      k.resize(C, 0);
      for (std::size_t c = 0; c < C; ++c) {
        lay.context_rows[c][i] = k[c];
        k[c] += lay.piece_rows[c][i];
      }
    }
    out.push_back(std::move(lay));
  }
  return out;
}

// Adds a ring collective's groups over `ranks` to the step level: each rank's first step
// waits for `after[i]` (an op index of its list, -1 none). Returns nothing: the ops follow
// one another on the communication stream.
inline void add_step_ring(step_program& prog, std::span<const rank_index> ranks, std::span<const std::int32_t> after, ring_collective kind,
                          std::int64_t elements, std::int64_t element_bytes, step_buffer buffer) {
  const auto steps = add_ring(prog.transfers, prog.groups, ranks, kind, elements, element_bytes, buffer, traffic_class::dp);
  for (std::size_t j = 0; j < steps.size(); ++j)
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      step_op op{step_op_kind::group, steps[j][i], {}};
      if (j == 0 && after[i] >= 0) op.after.push_back(after[i]);
      prog.ranks[static_cast<std::size_t>(ranks[i])].push_back(std::move(op));
    }
}

// The last backward block op of each rank (-1 for a rank that runs none).
inline std::vector<std::int32_t> last_backwards(const step_program& prog) {
  std::vector<std::int32_t> out(prog.ranks.size(), -1);
  for (std::size_t g = 0; g < prog.ranks.size(); ++g)
    for (std::size_t i = 0; i < prog.ranks[g].size(); ++i) {
      const step_op& op = prog.ranks[g][i];
      if (op.kind == step_op_kind::block && prog.blocks[static_cast<std::size_t>(op.index)].pass == step_pass::backward)
        out[g] = static_cast<std::int32_t>(i);
    }
  return out;
}

// The gradient synchronisation of all_reduce, sharded_optimizer and fully_sharded plans.
inline void add_ring_sync(step_program& prog) {
  const step_plan& p = prog.plan;
  const step_replica& a = p.replicas.front();
  const std::vector<std::int32_t> last = last_backwards(prog);
  const auto after_of = [&](std::span<const rank_index> ranks) {
    std::vector<std::int32_t> out;
    for (const rank_index g : ranks) out.push_back(last[static_cast<std::size_t>(g)]);
    return out;
  };
  const step_buffer gradients{step_tensor::gradients, step_pass::backward, model_part::embedding, -1, -1, -1, -1, 0, 0, 0};
  step_buffer parameters = gradients;
  parameters.tensor = step_tensor::parameters;
  parameters.pass = step_pass::forward;
  const step_program_options& o = prog.options;
  // with TP, first the replicated parameters' partial gradients (the stage's last ones) summed
  // over each stage's TP ranks (Megatron-LM sums its norms' gradients over TP with sequence
  // parallelism); ZeRO-3 shards them over the CP ranks, where this is not modelled
  if (a.tp > 1 && p.sync != gradient_sync::fully_sharded)
    for (std::size_t ri = 0; ri < p.replicas.size(); ++ri) {
      const step_replica& r = p.replicas[ri];
      for (int s = 0; s < r.pp; ++s) {
        const auto elements = static_cast<std::int64_t>(std::llround(prog.stage_parameters[ri][static_cast<std::size_t>(s)]));
        const auto shared = static_cast<std::int64_t>(std::llround(prog.stage_replicated_parameters[ri][static_cast<std::size_t>(s)]));
        step_buffer tail = gradients;
        tail.offset = (elements - shared) * o.gradient_bytes;
        for (int c = 0; c < r.cp; ++c) {
          std::vector<rank_index> ring;
          for (int t = 0; t < r.tp; ++t) ring.push_back(r.rank_of(t, c, s));
          add_step_ring(prog, ring, after_of(ring), detail::ring_collective::all_reduce, shared, o.gradient_bytes, tail);
        }
      }
    }
  for (int s = 0; s < a.pp; ++s)
    for (int t = 0; t < a.tp; ++t) {
      const auto elements = static_cast<std::int64_t>(std::llround(prog.stage_parameters.front()[static_cast<std::size_t>(s)]));
      if (p.sync == gradient_sync::fully_sharded) {
        if (p.replicas.size() == 1) continue;
        // each CP rank's shard of the stage's gradients, across the replicas
        for (int c = 0; c < a.cp; ++c) {
          std::vector<rank_index> ring;
          for (const step_replica& r : p.replicas) ring.push_back(r.rank_of(t, c, s));
          const std::int64_t shard = ring_chunk_begin(elements, a.cp, c + 1) - ring_chunk_begin(elements, a.cp, c);
          add_step_ring(prog, ring, after_of(ring), detail::ring_collective::all_reduce, shard, o.gradient_bytes, gradients);
        }
        continue;
      }
      std::vector<rank_index> ring;
      for (const step_replica& r : p.replicas)
        for (int c = 0; c < r.cp; ++c) ring.push_back(r.rank_of(t, c, s));
      if (p.sync == gradient_sync::all_reduce) {
        add_step_ring(prog, ring, after_of(ring), detail::ring_collective::all_reduce, elements, o.gradient_bytes, gradients);
      } else {
        add_step_ring(prog, ring, after_of(ring), detail::ring_collective::reduce_scatter, elements, o.gradient_bytes, gradients);
        const std::vector<std::int32_t> none(ring.size(), -1);
        add_step_ring(prog, ring, none, detail::ring_collective::all_gather, elements, o.parameter_bytes, parameters);
      }
    }
}

// The TP all-reduce, over each stage's TP ranks of every replica with TP, of the tail of the
// stage's flat `tensor` that every TP rank holds whole (stage_replicated_parameters: the
// norms). Returns, per rank, the groups of its ring steps in order.
inline std::vector<std::vector<std::int32_t>> add_replicated_tp_rings(step_program& prog, step_tensor tensor, step_pass pass,
                                                                      std::int64_t element_bytes) {
  std::vector<std::vector<std::int32_t>> out(prog.ranks.size());
  const step_plan& p = prog.plan;
  for (std::size_t ri = 0; ri < p.replicas.size(); ++ri) {
    const step_replica& r = p.replicas[ri];
    if (r.tp == 1) continue;
    for (int s = 0; s < r.pp; ++s) {
      const auto elements = static_cast<std::int64_t>(std::llround(prog.stage_parameters[ri][static_cast<std::size_t>(s)]));
      const auto shared = static_cast<std::int64_t>(std::llround(prog.stage_replicated_parameters[ri][static_cast<std::size_t>(s)]));
      const step_buffer tail{tensor, pass, model_part::embedding, -1, -1, -1, -1, (elements - shared) * element_bytes, 0, 0};
      for (int c = 0; c < r.cp; ++c) {
        std::vector<rank_index> ring;
        for (int t = 0; t < r.tp; ++t) ring.push_back(r.rank_of(t, c, s));
        const auto steps = add_ring(prog.transfers, prog.groups, ring, ring_collective::all_reduce, shared, element_bytes, tail, traffic_class::tp);
        for (const auto& step : steps)
          for (std::size_t i = 0; i < ring.size(); ++i) out[static_cast<std::size_t>(ring[i])].push_back(step[i]);
      }
    }
  }
  return out;
}

// The switching's transfers, each in the lists of its two ends: pull, reduce and link [rank].
inline void list_switching_transfers(step_program& prog, std::span<const switching_user> users, std::vector<std::vector<std::int32_t>>& pull,
                                     std::vector<std::vector<std::int32_t>>& reduce, std::vector<std::vector<std::int32_t>>& link) {
  const std::int64_t at_least = switching_transfers_at_least(users, prog.num_ranks());
  if (at_least > prog.options.max_switching_transfers)
    ZEPPELIN_THROW(resource_limit,
                   "the parameter switching moves more slices than step_program_options::max_switching_transfers allows (every GPU "
                   "pulls its parameters from, and pushes its gradients to, the master ranges of all N GPUs, in segments of a grid "
                   "of LCM(N, copies x TP_max): about N x push_segments / TP transfers)",
                   {{"switching_transfers", double(at_least)}, {"max_switching_transfers", double(prog.options.max_switching_transfers)},
                    {"gpus", double(prog.num_ranks())}, {"push_segments", double(detail::switching_grid_of(users, prog.num_ranks()).push_segments)}});
  const switching_plan sp = make_switching_plan(users, prog.num_ranks(), 1.0);
  const auto R = prog.ranks.size();
  std::vector<int> tp_of(R, 1), tp_rank_of(R, 0);
  for (const switching_user& u : users) tp_of[static_cast<std::size_t>(u.gpu)] = u.tp, tp_rank_of[static_cast<std::size_t>(u.gpu)] = u.tp_rank;
  const auto N = static_cast<std::int64_t>(R);
  const auto user_first = [&](int gpu, std::int64_t segments) {
    return tp_rank_of[static_cast<std::size_t>(gpu)] * segments / tp_of[static_cast<std::size_t>(gpu)];
  };
  const auto owner_first = [&](int gpu, std::int64_t segments) { return gpu * (segments / N); };
  std::map<std::pair<int, int>, std::vector<std::int64_t>> tensors_of;  // (first layer, layers) -> parameter_tensors
  enum class ends { owner_to_user, user_to_user, user_to_owner };
  const auto add = [&](const slice_transfer& x, std::int64_t segments, ends e, int element_bytes, std::vector<std::vector<std::int32_t>>& into) {
    auto [at, fresh] = tensors_of.try_emplace({x.first_layer, x.layers});
    if (fresh) at->second = parameter_tensors(prog.model, x.first_layer, x.layers);
    const std::vector<std::int64_t>& tensors = at->second;
    const std::int64_t bytes = slice_elements(tensors, x.first_segment, x.first_segment + x.segments, segments) * element_bytes;
    const bool gradient = e != ends::owner_to_user;
    step_buffer from{gradient ? step_tensor::gradients : step_tensor::parameters,
                     gradient ? step_pass::backward : step_pass::forward,
                     model_part::embedding,
                     -1,
                     -1,
                     x.first_layer,
                     -1,
                     0,
                     bytes,
                     x.layers};
    step_buffer to = from;
    const std::int64_t src_first = e == ends::owner_to_user ? owner_first(x.src, segments) : user_first(x.src, segments);
    const std::int64_t dst_first = e == ends::user_to_owner ? owner_first(x.dst, segments) : user_first(x.dst, segments);
    from.offset = slice_elements(tensors, src_first, x.first_segment, segments) * element_bytes;
    to.offset = slice_elements(tensors, dst_first, x.first_segment, segments) * element_bytes;
    if (e == ends::owner_to_user) from.tensor = step_tensor::master_parameters;  // an owner's ends name its master range
    if (e == ends::user_to_owner) to.tensor = step_tensor::master_gradients;
    const auto id = static_cast<std::int32_t>(prog.transfers.size());
    prog.transfers.push_back({x.src, x.dst, bytes, traffic_class::dp, e == ends::user_to_user ? combine_kind::add : combine_kind::copy, from, to});
    into[static_cast<std::size_t>(x.src)].push_back(id);
    into[static_cast<std::size_t>(x.dst)].push_back(id);
  };
  const step_program_options& o = prog.options;
  for (const slice_transfer& x : sp.pull) add(x, sp.pull_segments, ends::owner_to_user, o.parameter_bytes, pull);
  for (const slice_transfer& x : sp.push_reduce) add(x, sp.push_segments, ends::user_to_user, o.gradient_bytes, reduce);
  for (const slice_transfer& x : sp.push_link) add(x, sp.push_segments, ends::user_to_owner, o.gradient_bytes, link);
}

// Hydraulis' switching: in every rank's list first the pull group, then (TP) the all-reduce
// that makes the replicated parameters whole (each TP rank pulled its share of them, zeros
// elsewhere), its blocks waiting for both; after its last backward (TP) the all-reduce of the
// replicated parameters' gradients, then the push groups. A holder's slices are laid out
// segment-major from its first segment (a user: its TP shard's first segment; an owner: its
// master range's, named master_parameters and master_gradients), in whole elements
// (strategy/switching_layout.hpp), so a transfer's offsets differ on its ends. With
// exchange_detail::traffic_only the groups list no transfers and the program holds each
// rank's traffic in the three exchanges instead (strategy/switching_traffic.hpp: fractional
// elements, as make_switching_plan counts them); a rank has a group in each exchange it
// sends or receives in.
inline void add_switching(step_program& prog, const topology& cluster) {
  const std::vector<switching_user> users = switching_users(prog.plan, prog.model);
  const auto R = prog.ranks.size();
  const step_program_options& o = prog.options;
  std::vector<std::vector<std::int32_t>> pull(R), reduce(R), link(R);  // per rank: its transfers
  std::array<std::vector<char>, 3> takes_part;                          // per exchange, per rank
  if (o.exchanges == exchange_detail::listed) {
    list_switching_transfers(prog, users, pull, reduce, link);
    const std::array<const std::vector<std::vector<std::int32_t>>*, 3> lists{&pull, &reduce, &link};
    for (std::size_t x = 0; x < 3; ++x)
      for (const std::vector<std::int32_t>& list : *lists[x]) takes_part[x].push_back(!list.empty());
  } else {
    switching_traffic t = switching_traffic_of(users, cluster, o.parameter_bytes, o.gradient_bytes);
    prog.exchange_traffic.resize(static_cast<std::size_t>(prog.exchanges));
    for (std::vector<rank_traffic>* each : {&t.pull, &t.push_reduce, &t.push_link}) prog.exchange_traffic.push_back(std::move(*each));
    for (std::size_t x = 0; x < 3; ++x)
      for (const rank_traffic& r : prog.exchange_traffic[static_cast<std::size_t>(prog.exchanges) + x])
        takes_part[x].push_back(r != rank_traffic{});
  }
  const std::vector<std::int32_t> last = last_backwards(prog);
  const std::vector<std::vector<std::int32_t>> whole_parameters = add_replicated_tp_rings(prog, step_tensor::parameters, step_pass::forward, o.parameter_bytes);
  const std::vector<std::vector<std::int32_t>> whole_gradients = add_replicated_tp_rings(prog, step_tensor::gradients, step_pass::backward, o.gradient_bytes);
  // the job-wide exchanges: the pull, the push's reduction, its link to the owners
  const std::int32_t pull_exchange = prog.exchanges, reduce_exchange = pull_exchange + 1, link_exchange = pull_exchange + 2;
  prog.exchanges += 3;
  for (std::size_t g = 0; g < R; ++g) {
    auto& ops = prog.ranks[g];
    bool first = true;
    const auto group_op = [&](std::int32_t gi) {
      step_op op{step_op_kind::group, gi, {}};
      if (first && last[g] >= 0) op.after.push_back(last[g]);
      first = false;
      ops.push_back(std::move(op));
    };
    for (const std::int32_t gi : whole_gradients[g]) group_op(gi);
    for (const auto& [list, exchange] : {std::pair{&reduce[g], reduce_exchange}, std::pair{&link[g], link_exchange}}) {
      if (!takes_part[static_cast<std::size_t>(exchange - pull_exchange)][g]) continue;
      const auto gi = static_cast<std::int32_t>(prog.groups.size());
      prog.groups.push_back({static_cast<rank_index>(g), std::move(*list), exchange});
      group_op(gi);
    }
    std::vector<std::int32_t> front;  // the groups before every block
    if (takes_part[0][g]) {
      front.push_back(static_cast<std::int32_t>(prog.groups.size()));
      prog.groups.push_back({static_cast<rank_index>(g), std::move(pull[g]), pull_exchange});
    }
    front.insert(front.end(), whole_parameters[g].begin(), whole_parameters[g].end());
    if (front.empty()) continue;
    const auto shift = static_cast<std::int32_t>(front.size());
    for (step_op& op : ops) {
      small_list<std::int32_t, 2> shifted;
      for (const std::int32_t i : op.after) shifted.push_back(i + shift);
      if (op.kind == step_op_kind::block) shifted.push_back(shift - 1);
      op.after = std::move(shifted);
    }
    std::vector<step_op> before;
    for (const std::int32_t gi : front) before.push_back(step_op{step_op_kind::group, gi, {}});
    ops.insert(ops.begin(), before.begin(), before.end());
  }
}

}  // namespace detail

//! The step program of `p` (see the file comment).
[[nodiscard]] inline step_program make_step_program(const step_plan& p, const topology& cluster, const model_config& model,
                                                    const step_program_options& o = {}) {
  validate(p, cluster, model);
  ZEPPELIN_EXPECTS(o.activation_bytes >= 1 && o.parameter_bytes >= 1 && o.gradient_bytes >= 1 && o.accumulator_bytes >= o.activation_bytes,
                   "step program: element sizes must be at least 1 byte, accumulators at least as wide as activations",
                   {{"activation_bytes", double(o.activation_bytes)}, {"parameter_bytes", double(o.parameter_bytes)},
                    {"gradient_bytes", double(o.gradient_bytes)}, {"accumulator_bytes", double(o.accumulator_bytes)}});
  step_program prog;
  prog.plan = p;
  prog.model = model;
  prog.options = o;
  const auto R = static_cast<std::size_t>(cluster.num_ranks());
  prog.positions.assign(R, {});
  prog.ranks.assign(R, {});
  const std::int64_t hidden_row_bytes = static_cast<std::int64_t>(model.hidden) * o.activation_bytes;

  for (std::size_t ri = 0; ri < p.replicas.size(); ++ri) {
    const step_replica& r = p.replicas[ri];
    const auto replica = static_cast<std::int32_t>(ri);
    for (int s = 0; s < r.pp; ++s)
      for (int c = 0; c < r.cp; ++c)
        for (int t = 0; t < r.tp; ++t) prog.positions[static_cast<std::size_t>(r.rank_of(t, c, s))] = {replica, t, c, s};
    prog.layouts.push_back(detail::make_layouts(p, r, cluster, model, o));
    const std::vector<step_layout>& layouts = prog.layouts.back();
    const int V = r.virtual_stages(), PV = r.pp * V, last_v = PV - 1;
    auto& params = prog.stage_parameters.emplace_back(static_cast<std::size_t>(r.pp), 0.0);
    auto& replicated = prog.stage_replicated_parameters.emplace_back(static_cast<std::size_t>(r.pp), 0.0);
    {
      const pipeline_memory_model per_tp_rank{model, parallel_layout{r.tp, 1, 1, 1}, memory_settings{}};
      for (int v = 0; v < PV; ++v) {
        const stage_slice slice{r.layers[static_cast<std::size_t>(v)], v == 0, v == last_v};
        params[static_cast<std::size_t>(v % r.pp)] += per_tp_rank.parameters(slice);
        replicated[static_cast<std::size_t>(v % r.pp)] += per_tp_rank.replicated_parameters(slice);
      }
    }

    // the one walk of the schedule
    std::vector<token_count> tokens;
    for (const step_micro_batch& mb : r.micro_batches) tokens.push_back(mb.tokens());
    const pipeline_schedule sched = r.schedule.build(r.pp, tokens);
    const auto M = static_cast<std::size_t>(r.micro_batch_count());
    const auto TC = static_cast<std::size_t>(r.tp) * static_cast<std::size_t>(r.cp);
    const auto at = [&](std::size_t k, int v) { return (k * static_cast<std::size_t>(PV) + static_cast<std::size_t>(v)) * TC; };
    // [micro-batch, virtual stage, member]: the member's op index of its forward and backward
    // block, the group that received their inputs, and the boundary transfers (by producer)
    std::vector<std::int32_t> forward_op(M * static_cast<std::size_t>(PV) * TC, -1), backward_op = forward_op;
    std::vector<std::int32_t> activation_in = forward_op, gradient_in = forward_op;
    std::vector<std::int32_t> activation_transfer = forward_op, gradient_transfer = forward_op;
    // the transfer of (micro-batch k, boundary tensor produced by virtual stage v) of member m
    const auto boundary = [&](pipeline_op_kind kind, std::size_t k, int v, int stage, int peer, std::size_t m) {
      const bool activation = kind == pipeline_op_kind::send_activation || kind == pipeline_op_kind::receive_activation;
      std::int32_t& id = (activation ? activation_transfer : gradient_transfer)[at(k, v) + m];
      if (id >= 0) return id;
      const int t = static_cast<int>(m % static_cast<std::size_t>(r.tp)), c = static_cast<int>(m / static_cast<std::size_t>(r.tp));
      const bool sending = is_send(kind);
      const int from_stage = sending ? stage : peer, to_stage = sending ? peer : stage;
      // the rows x hidden tensor, or with sequence parallelism the TP rank's row share of it (the
      // chunk its reduce-scatter left summed, step/detail/ring_steps.hpp)
      const token_count all_rows = layouts[k].linear_rows[static_cast<std::size_t>(c)];
      token_count first = 0, rows = all_rows;
      if (r.tp_mode == tp_collectives::sequence_parallel && r.tp > 1) {
        first = detail::ring_chunk_begin(all_rows, r.tp, t);
        rows = detail::ring_chunk_begin(all_rows, r.tp, t + 1) - first;
      }
      const step_buffer buf{activation ? step_tensor::activation : step_tensor::activation_gradient,
                            activation ? step_pass::forward : step_pass::backward,
                            model_part::embedding,
                            static_cast<std::int32_t>(k),
                            v,
                            -1,
                            -1,
                            first * hidden_row_bytes,
                            rows * hidden_row_bytes,
                            0};
      id = static_cast<std::int32_t>(prog.transfers.size());
      prog.transfers.push_back({r.rank_of(t, c, from_stage), r.rank_of(t, c, to_stage), buf.bytes, traffic_class::pp, combine_kind::copy, buf, buf});
      return id;
    };
    for (int s = 0; s < r.pp; ++s) {
      const std::vector<pipeline_op>& ops = sched.ops[static_cast<std::size_t>(s)];
      for (std::size_t i = 0; i < ops.size();) {
        const pipeline_op& op = ops[i];
        if (is_compute(op.kind)) {
          const int v = sched.virtual_stage(s, op.chunk);
          const auto k = static_cast<std::size_t>(op.micro_batch);
          const bool forward = op.kind == pipeline_op_kind::forward;
          const auto block = static_cast<std::int32_t>(prog.blocks.size());
          prog.blocks.push_back({replica, s, v, op.micro_batch, forward ? step_pass::forward : step_pass::backward, r.first_layer(v),
                                 r.layers[static_cast<std::size_t>(v)], forward ? 0 : r.recomputed(v, op.micro_batch), v == 0, v == last_v});
          for (std::size_t m = 0; m < TC; ++m) {
            const int t = static_cast<int>(m % static_cast<std::size_t>(r.tp)), c = static_cast<int>(m / static_cast<std::size_t>(r.tp));
            auto& list = prog.ranks[static_cast<std::size_t>(r.rank_of(t, c, s))];
            step_op x{step_op_kind::block, block, {}};
            const std::int32_t input = (forward ? activation_in : gradient_in)[at(k, v) + m];
            if (input >= 0) x.after.push_back(input);
            (forward ? forward_op : backward_op)[at(k, v) + m] = static_cast<std::int32_t>(list.size());
            list.push_back(std::move(x));
          }
          ++i;
          continue;
        }
        std::size_t end = i;
        while (end < ops.size() && !is_compute(ops[end].kind)) ++end;
        for (std::size_t m = 0; m < TC; ++m) {
          const int t = static_cast<int>(m % static_cast<std::size_t>(r.tp)), c = static_cast<int>(m / static_cast<std::size_t>(r.tp));
          auto& list = prog.ranks[static_cast<std::size_t>(r.rank_of(t, c, s))];
          const auto gi = static_cast<std::int32_t>(prog.groups.size());
          step_group g{r.rank_of(t, c, s), {}};
          step_op x{step_op_kind::group, gi, {}};
          const auto index = static_cast<std::int32_t>(list.size());
          for (std::size_t j = i; j < end; ++j) {
            const pipeline_op& q = ops[j];
            const auto k = static_cast<std::size_t>(q.micro_batch);
            const int v = sched.virtual_stage(s, q.chunk);
            switch (q.kind) {
              case pipeline_op_kind::send_activation:
                g.transfers.push_back(boundary(q.kind, k, v, s, q.peer, m));
                x.after.push_back(forward_op[at(k, v) + m]);
                break;
              case pipeline_op_kind::send_gradient:
                g.transfers.push_back(boundary(q.kind, k, v, s, q.peer, m));
                x.after.push_back(backward_op[at(k, v) + m]);
                break;
              case pipeline_op_kind::receive_activation:
                g.transfers.push_back(boundary(q.kind, k, v - 1, s, q.peer, m));
                activation_in[at(k, v) + m] = index;
                break;
              case pipeline_op_kind::receive_gradient:
                g.transfers.push_back(boundary(q.kind, k, v + 1, s, q.peer, m));
                gradient_in[at(k, v) + m] = index;
                break;
              default: break;
            }
          }
          prog.groups.push_back(std::move(g));
          list.push_back(std::move(x));
        }
        i = end;
      }
    }
  }

  const auto alike = [&](const step_replica& r) {
    const step_replica& a = p.replicas.front();
    return r.tp == a.tp && r.cp == a.cp && r.pp == a.pp && r.layers == a.layers;
  };
  if (p.sync == gradient_sync::switching ||
      (p.sync == gradient_sync::fully_sharded && !std::all_of(p.replicas.begin(), p.replicas.end(), alike)))
    detail::add_switching(prog, cluster);
  else
    detail::add_ring_sync(prog);
  return prog;
}

ZEPPELIN_NAMESPACE_END
