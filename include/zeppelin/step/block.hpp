// zeppelin/step/block.hpp
// A step program's block expanded into the layer-level ops of its members: THE rules by
// which every backend runs a block (the simulator and the host runner call this; nothing
// else spells out what a layer does).
//   in : a step program (step/program.hpp) and a block index
//   out: block_program: the block's members (the stage's tp x cp ranks, member c x tp + t =
//        rank (t, c)), per member its ops in order, and the groups and transfers they post
// A forward (or recomputed) layer l on member (t, c), rows = the CP rank's rows of the linear
// modules (step_layout::linear_rows), TP ring = the members of CP rank c, CP ring = the
// members of TP index t:
//   [ZeRO-3: all-gather layer l's parameters over the CP ring, posted once the previous
//    layer's first part has started: one layer of prefetch]
//   [sequence parallel: all-gather the rows over the TP ring]   attention_input
//   [sliced documents: the K/V context each needs, from the CP ranks that kept it]
//   attention (the micro-batch's attention program on the CP ring)
//   [context_attention of the slices' queries against their context]
//   [forward only: context_save of the rows of documents that continue in a later slice]
//   attention_output   TP: all-reduce, or reduce-scatter (sequence parallel)
//   [sequence parallel: all-gather]   mlp   TP: all-reduce, or reduce-scatter
// With ZeRO-3 the first virtual stage gathers its first layer's parameters (the embedding's
// among them) before the embedding, and scatters their gradients after the embedding's
// backward. The first virtual stage's forward starts with the embedding, the last one's ends with the
// head (and the loss), both vocabulary-parallel over TP as in Megatron-LM: the embedding's
// rows TP all-reduced (reduce-scattered with sequence parallelism); [SP: the head's input
// all-gathered] the head, then the cross-entropy's per-row statistics all-gathered
// (loss_statistics: 2 accumulators per row and TP rank). A backward runs the head's backward
// first (last virtual stage; its input gradient TP all-reduced or reduce-scattered), then
// each layer from the last: the recomputed ones (the block's first `recomputed` layers) run
// their forward again first (pass recompute, no context_save), then
//   [ZeRO-3 gather, unless the recomputation gathered]   [SP all-gather] mlp  TP all-reduce
//   or reduce-scatter   [SP all-gather] attention_output   [context_attention, and the
//   context's dK/dV back to the ranks that kept it, added there]   attention
//   [context_gradient: add what later slices returned into the kept rows' dK/dV]
//   attention_input  TP all-reduce or reduce-scatter   [ZeRO-3: reduce-scatter layer l's
//   gradients over the CP ring]
// and the embedding's backward last (first virtual stage; SP: its gradient all-gathered first).
// Sizes: a TP collective moves rows x hidden activations (sequence parallel: the ring's
// chunks are row ranges); ZeRO-3 moves one TP rank's parameters of the layer (the first layer
// adds the embedding, the last the LM head and final norm); a context transfer moves the
// kept rows' K and V (2 x kv_heads / tp x head_dim activations per row).
// Ops on the compute stream (compute, attention) run in order; groups run on the
// communication stream in order; each op also waits for those in its `after`.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/parallel_layout.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/cost/pipeline_memory.hpp>
#include <zeppelin/step/detail/ring_steps.hpp>
#include <zeppelin/step/program.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

enum class layer_op_kind : std::uint8_t {
  compute = 0,    //!< a model part (step/program.hpp model_part) on the compute stream
  group = 1,      //!< index into block_program::groups, on the communication stream
  attention = 2,  //!< index into block_program::attentions: the micro-batch's attention program
};

//! One op of a member of a block.
struct layer_op {
  layer_op_kind kind = layer_op_kind::compute;
  step_pass pass = step_pass::forward;
  model_part part = model_part::embedding;  //!< compute
  std::int32_t layer = -1;                  //!< model layer; -1 for the embedding and the head
  std::int32_t index = 0;                   //!< group: into groups; attention: into attentions
  token_count rows = 0;                     //!< compute: rows it computes
  std::int64_t pairs = 0;                   //!< context_attention: (query, key) pairs per head
  small_list<std::int32_t, 2> after;        //!< earlier ops of the member it waits for
  [[nodiscard]] step_stream stream() const noexcept {
    return kind == layer_op_kind::group ? step_stream::communication : step_stream::compute;
  }
  friend bool operator==(const layer_op&, const layer_op&) = default;
};

//! One run of the micro-batch's attention program by the CP ranks of one TP index.
struct block_attention {
  step_pass pass = step_pass::forward;
  std::int32_t layer = 0;
  std::int32_t tp_index = 0;
  std::vector<rank_index> ranks;  //!< global ranks of CP ranks 0 .. cp - 1
  friend bool operator==(const block_attention&, const block_attention&) = default;
};

struct block_program {
  std::int32_t block = 0;
  std::int32_t tp = 1, cp = 1;
  std::vector<rank_index> members;          //!< member c x tp + t = rank (t, c) of the stage
  std::vector<std::vector<layer_op>> ops;   //!< [member]
  std::vector<step_transfer> transfers;
  std::vector<step_group> groups;
  std::vector<block_attention> attentions;
  //! The member index of global rank `r` (-1: not a member).
  [[nodiscard]] std::int32_t member_of(rank_index r) const noexcept {
    for (std::size_t m = 0; m < members.size(); ++m)
      if (members[m] == r) return static_cast<std::int32_t>(m);
    return -1;
  }
  friend bool operator==(const block_program&, const block_program&) = default;
};

namespace detail {

// Adds the groups and transfers of a ring collective over `ranks` (ring order): `elements`
// elements of `element_bytes` bytes of `buffer` from its offset on (offset and bytes set per
// move). Returns, per
// step, per ring position, the index of the position's group (its send, then its receive).
inline std::vector<std::vector<std::int32_t>> add_ring(std::vector<step_transfer>& transfers, std::vector<step_group>& groups,
                                                       std::span<const rank_index> ranks, ring_collective kind, std::int64_t elements,
                                                       std::int64_t element_bytes, step_buffer buffer, traffic_class traffic) {
  const int n = static_cast<int>(ranks.size());
  const auto steps = ring_steps(kind, n, elements);
  std::vector<std::vector<std::int32_t>> out(steps.size(), std::vector<std::int32_t>(ranks.size()));
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const auto first_transfer = static_cast<std::int32_t>(transfers.size());
    for (int p = 0; p < n; ++p) {
      const ring_move& mv = steps[j][static_cast<std::size_t>(p)];
      step_buffer at = buffer;
      at.offset = buffer.offset + mv.first * element_bytes;
      at.bytes = mv.count * element_bytes;
      transfers.push_back({ranks[static_cast<std::size_t>(p)], ranks[static_cast<std::size_t>((p + 1) % n)], at.bytes, traffic,
                           mv.add ? combine_kind::add : combine_kind::copy, at, at});
    }
    for (int p = 0; p < n; ++p) {
      out[j][static_cast<std::size_t>(p)] = static_cast<std::int32_t>(groups.size());
      groups.push_back({ranks[static_cast<std::size_t>(p)], {first_transfer + p, first_transfer + (p + n - 1) % n}});
    }
  }
  return out;
}

//! Parameters one TP rank holds of `layers` layers (and the embedding / the LM head), rounded
//! to whole elements.
[[nodiscard]] inline std::int64_t tp_rank_parameters(const model_config& m, int tp, int layers, bool embedding, bool head) {
  const pipeline_memory_model memory{m, parallel_layout{tp, 1, 1, 1}, memory_settings{}};
  return std::llround(memory.parameters(stage_slice{layers, embedding, head}));
}

}  // namespace detail

//! `b` expanded into its members' ops as block `index` of `prog` (see the file comment): the
//! program's block, or one like it with fewer layers (the simulator prices a block of many
//! identical layers from its first few, sim/step_backend.hpp).
[[nodiscard]] inline block_program make_block_program(const step_program& prog, const step_block& b, std::int32_t index) {
  const step_replica& r = prog.replica(b.replica);
  const step_layout& lay = prog.layout(b.replica, b.micro_batch);
  const step_micro_batch& mb = r.micro_batches[static_cast<std::size_t>(b.micro_batch)];
  const model_config& model = prog.model;
  const step_program_options& o = prog.options;
  const int T = r.tp, C = r.cp;
  const bool sequence_parallel = r.tp_mode == tp_collectives::sequence_parallel && T > 1;
  const bool zero3 = prog.plan.sync == gradient_sync::fully_sharded && C > 1;

  block_program out;
  out.block = index;
  out.tp = T;
  out.cp = C;
  for (int c = 0; c < C; ++c)
    for (int t = 0; t < T; ++t) out.members.push_back(r.rank_of(t, c, b.stage));
  out.ops.resize(out.members.size());
  const auto member = [&](int t, int c) { return static_cast<std::size_t>(c * T + t); };

  // the pieces that read a context, and those whose document continues in a later slice
  std::vector<std::size_t> with_context, continuing;
  for (std::size_t i = 0; i < mb.pieces.size(); ++i) {
    if (mb.pieces[i].context() > 0) with_context.push_back(i);
    if (mb.pieces[i].end < prog.plan.documents[static_cast<std::size_t>(mb.pieces[i].document)]) continuing.push_back(i);
  }
  const std::int64_t kv_row_bytes = 2ll * (model.kv_heads / T) * model.head_dim * o.activation_bytes;
  const std::int64_t hidden_row_bytes = static_cast<std::int64_t>(model.hidden) * o.activation_bytes;

  // appenders; each returns the op's index in its member's list
  const auto emit = [&](std::size_t m, layer_op op) {
    out.ops[m].push_back(std::move(op));
    return static_cast<std::int32_t>(out.ops[m].size() - 1);
  };
  // the op a member's next compute must wait for (its last group), -1 for none
  std::vector<std::int32_t> pending(out.members.size(), -1);
  // the member's last compute-stream op (what the next group's data comes from)
  std::vector<std::int32_t> produced(out.members.size(), -1);
  const auto compute = [&](std::size_t m, step_pass pass, model_part part, std::int32_t layer, token_count rows, std::int64_t pairs = 0) {
    layer_op op{layer_op_kind::compute, pass, part, layer, 0, rows, pairs, {}};
    if (pending[m] >= 0) op.after.push_back(pending[m]);
    pending[m] = -1;
    return produced[m] = emit(m, std::move(op));
  };
  // the attention of (pass, layer) of TP index t: one collective, its op on each of its members
  const auto attention_of = [&](step_pass pass, std::int32_t layer, int t) {
    for (std::size_t a = out.attentions.size(); a-- > 0;)
      if (out.attentions[a].pass == pass && out.attentions[a].layer == layer && out.attentions[a].tp_index == t) return static_cast<std::int32_t>(a);
    block_attention x{pass, layer, t, {}};
    for (int c = 0; c < C; ++c) x.ranks.push_back(out.members[member(t, c)]);
    out.attentions.push_back(std::move(x));
    return static_cast<std::int32_t>(out.attentions.size() - 1);
  };
  const auto attention = [&](std::size_t m, step_pass pass, std::int32_t layer, int t) {
    layer_op op{layer_op_kind::attention, pass, model_part::attention_input, layer, attention_of(pass, layer, t), 0, 0, {}};
    if (pending[m] >= 0) op.after.push_back(pending[m]);
    pending[m] = -1;
    return produced[m] = emit(m, std::move(op));
  };
  // a group on member m; `after_data` waits for the member's last compute op
  const auto group = [&](std::size_t m, std::int32_t g, step_pass pass, std::int32_t layer, bool after_data) {
    layer_op op{layer_op_kind::group, pass, model_part::embedding, layer, g, 0, 0, {}};
    if (after_data && produced[m] >= 0) op.after.push_back(produced[m]);
    return pending[m] = emit(m, std::move(op));
  };
  // a ring collective over the TP ranks of each CP rank: `copies` x rows elements of
  // `row_bytes` of `tensor`
  const auto tp_ring_of = [&](detail::ring_collective kind, step_pass pass, step_tensor tensor, model_part part, std::int32_t layer,
                              std::int64_t row_bytes, int copies) {
    if (T == 1) return;
    for (int c = 0; c < C; ++c) {
      std::vector<rank_index> ring;
      for (int t = 0; t < T; ++t) ring.push_back(out.members[member(t, c)]);
      step_buffer buf{tensor, pass, part, b.micro_batch, b.virtual_stage, layer, -1, 0, 0, 0};
      const std::int64_t rows = copies * lay.linear_rows[static_cast<std::size_t>(c)];
      const auto steps = detail::add_ring(out.transfers, out.groups, ring, kind, rows, row_bytes, buf, traffic_class::tp);
      for (const auto& step : steps)
        for (int t = 0; t < T; ++t) group(member(t, c), step[static_cast<std::size_t>(t)], pass, layer, true);
    }
  };
  // the rows x hidden of `part`'s input or output
  const auto tp_ring = [&](detail::ring_collective kind, step_pass pass, step_tensor tensor, model_part part, std::int32_t layer) {
    tp_ring_of(kind, pass, tensor, part, layer, hidden_row_bytes, 1);
  };
  // ZeRO-3: a ring over the CP ranks of each TP index, of one TP rank's parameters of `layer`
  std::vector<std::int32_t> gather_after(out.members.size(), -1);  // prefetch: the op a gather waits for
  const auto zero3_ring = [&](detail::ring_collective kind, step_pass pass, std::int32_t layer) {
    const bool gather = kind == detail::ring_collective::all_gather;
    const std::int64_t elements = detail::tp_rank_parameters(model, T, 1, layer == 0, layer == model.layers - 1);
    const std::int64_t element_bytes = gather ? o.parameter_bytes : o.gradient_bytes;
    for (int t = 0; t < T; ++t) {
      std::vector<rank_index> ring;
      for (int c = 0; c < C; ++c) ring.push_back(out.members[member(t, c)]);
      step_buffer buf{gather ? step_tensor::parameters : step_tensor::gradients, pass, model_part::embedding, -1, -1, layer, -1, 0, 0, 0};
      const auto steps = detail::add_ring(out.transfers, out.groups, ring, kind, elements, element_bytes, buf, traffic_class::tp);
      for (std::size_t j = 0; j < steps.size(); ++j)
        for (int c = 0; c < C; ++c) {
          const std::size_t m = member(t, c);
          layer_op op{layer_op_kind::group, pass, model_part::embedding, layer, steps[j][static_cast<std::size_t>(c)], 0, 0, {}};
          // a gather's first step waits for the prefetch point; a scatter's for the gradients
          if (j == 0 && gather && gather_after[m] >= 0) op.after.push_back(gather_after[m]);
          if (j == 0 && !gather && produced[m] >= 0) op.after.push_back(produced[m]);
          const std::int32_t id = emit(m, std::move(op));
          if (gather) pending[m] = id;
        }
    }
  };
  // the K/V context of the sliced pieces: owners -> needers (forward), needers -> owners (backward, added)
  const auto context_exchange = [&](step_pass pass, std::int32_t layer) {
    const bool back = pass == step_pass::backward;
    for (int t = 0; t < T; ++t) {
      std::vector<std::vector<std::int32_t>> of(static_cast<std::size_t>(C));  // transfers per CP rank
      for (const std::size_t i : with_context) {
        const std::int64_t document = mb.pieces[i].document;
        for (int n = 0; n < C; ++n) {
          if (lay.piece_rows[static_cast<std::size_t>(n)][i] == 0) continue;
          std::int64_t offset = 0;  // where owner o's rows sit in the needer's gathered context
          for (int o2 = 0; o2 < C; ++o2) {
            const std::int64_t bytes = lay.context_rows[static_cast<std::size_t>(o2)][i] * kv_row_bytes;
            if (bytes > 0 && o2 != n) {
              // the owner's kept rows (their accumulated dK/dV in backward) and their place in
              // the needer's gathered context: two tensors, so no rank's send and receive alias
              const step_buffer kept{back ? step_tensor::context_gradient : step_tensor::context, pass, model_part::embedding,
                                     b.micro_batch, b.virtual_stage, layer, document, 0, bytes, 0};
              step_buffer gathered = kept;
              gathered.tensor = back ? step_tensor::gathered_context_gradient : step_tensor::gathered_context;
              gathered.offset = offset;
              const rank_index owner = out.members[member(t, o2)], needer = out.members[member(t, n)];
              const auto id = static_cast<std::int32_t>(out.transfers.size());
              if (back)
                out.transfers.push_back({needer, owner, bytes, traffic_class::cp, combine_kind::add, gathered, kept});
              else
                out.transfers.push_back({owner, needer, bytes, traffic_class::cp, combine_kind::copy, kept, gathered});
              of[static_cast<std::size_t>(o2)].push_back(id);
              of[static_cast<std::size_t>(n)].push_back(id);
            }
            offset += bytes;
          }
        }
      }
      for (int c = 0; c < C; ++c) {
        if (of[static_cast<std::size_t>(c)].empty()) continue;
        const auto g = static_cast<std::int32_t>(out.groups.size());
        out.groups.push_back({out.members[member(t, c)], std::move(of[static_cast<std::size_t>(c)])});
        group(member(t, c), g, pass, layer, back);
      }
    }
  };
  const auto rows_of = [&](std::span<const std::size_t> pieces, int c) {
    token_count n = 0;
    for (const std::size_t i : pieces) n += lay.piece_rows[static_cast<std::size_t>(c)][i];
    return n;
  };
  const auto context_pairs = [&](int c) {
    std::int64_t n = 0;
    for (const std::size_t i : with_context) n += lay.piece_rows[static_cast<std::size_t>(c)][i] * mb.pieces[i].context();
    return n;
  };

  // how a TP ring sums rows: all of them, or (sequence parallel) each TP rank its share
  const auto reduce_rows = sequence_parallel ? detail::ring_collective::reduce_scatter : detail::ring_collective::all_reduce;
  const auto forward_layer = [&](step_pass pass, std::int32_t layer, bool gather) {
    if (gather && zero3) zero3_ring(detail::ring_collective::all_gather, pass, layer);
    if (sequence_parallel) tp_ring(detail::ring_collective::all_gather, pass, step_tensor::layer_input, model_part::attention_input, layer);
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) {
        const std::int32_t first = compute(member(t, c), pass, model_part::attention_input, layer, lay.linear_rows[static_cast<std::size_t>(c)]);
        gather_after[member(t, c)] = first;
      }
    if (!with_context.empty()) context_exchange(pass, layer);
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) {
        const std::size_t m = member(t, c);
        attention(m, pass, layer, t);
        if (!with_context.empty()) compute(m, pass, model_part::context_attention, layer, rows_of(with_context, c), context_pairs(c));
        if (pass == step_pass::forward && !continuing.empty()) compute(m, pass, model_part::context_save, layer, rows_of(continuing, c));
        compute(m, pass, model_part::attention_output, layer, lay.linear_rows[static_cast<std::size_t>(c)]);
      }
    tp_ring(reduce_rows, pass, step_tensor::layer_output, model_part::attention_output, layer);
    if (sequence_parallel) tp_ring(detail::ring_collective::all_gather, pass, step_tensor::layer_input, model_part::mlp, layer);
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) compute(member(t, c), pass, model_part::mlp, layer, lay.linear_rows[static_cast<std::size_t>(c)]);
    tp_ring(reduce_rows, pass, step_tensor::layer_output, model_part::mlp, layer);
  };
  const auto for_members = [&](step_pass pass, model_part part) {
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) compute(member(t, c), pass, part, -1, lay.linear_rows[static_cast<std::size_t>(c)]);
  };

  // ZeRO-3: the first layer's parameters hold the embedding's, so the first virtual stage
  // gathers them before the embedding and scatters their gradients after its backward
  const bool embedding_gathers = zero3 && b.first;
  if (b.pass == step_pass::forward) {
    if (b.first) {
      if (embedding_gathers) zero3_ring(detail::ring_collective::all_gather, step_pass::forward, b.first_layer);
      for_members(step_pass::forward, model_part::embedding);
      tp_ring(reduce_rows, step_pass::forward, step_tensor::layer_output, model_part::embedding, -1);
    }
    for (std::int32_t l = b.first_layer; l < b.first_layer + b.layers; ++l)
      forward_layer(step_pass::forward, l, !(embedding_gathers && l == b.first_layer));
    if (b.last) {
      if (sequence_parallel) tp_ring(detail::ring_collective::all_gather, step_pass::forward, step_tensor::layer_input, model_part::head, -1);
      for_members(step_pass::forward, model_part::head);
      tp_ring_of(detail::ring_collective::all_gather, step_pass::forward, step_tensor::loss_statistics, model_part::head, -1,
                 2 * o.accumulator_bytes, T);
    }
    return out;
  }
  const step_pass bw = step_pass::backward;
  if (b.last) {
    for_members(bw, model_part::head);
    tp_ring(reduce_rows, bw, step_tensor::layer_input, model_part::head, -1);
  }
  for (std::int32_t l = b.first_layer + b.layers - 1; l >= b.first_layer; --l) {
    const bool recomputed = l < b.first_layer + b.recomputed;
    if (recomputed) forward_layer(step_pass::recompute, l, true);
    if (zero3 && !recomputed) zero3_ring(detail::ring_collective::all_gather, bw, l);
    if (sequence_parallel) tp_ring(detail::ring_collective::all_gather, bw, step_tensor::layer_output, model_part::mlp, l);
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) gather_after[member(t, c)] =
          compute(member(t, c), bw, model_part::mlp, l, lay.linear_rows[static_cast<std::size_t>(c)]);
    tp_ring(reduce_rows, bw, step_tensor::layer_input, model_part::mlp, l);
    if (sequence_parallel) tp_ring(detail::ring_collective::all_gather, bw, step_tensor::layer_output, model_part::attention_output, l);
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) {
        const std::size_t m = member(t, c);
        compute(m, bw, model_part::attention_output, l, lay.linear_rows[static_cast<std::size_t>(c)]);
        if (!with_context.empty()) compute(m, bw, model_part::context_attention, l, rows_of(with_context, c), context_pairs(c));
      }
    if (!with_context.empty()) context_exchange(bw, l);
    for (int c = 0; c < C; ++c)
      for (int t = 0; t < T; ++t) {
        const std::size_t m = member(t, c);
        attention(m, bw, l, t);
        if (!continuing.empty()) compute(m, bw, model_part::context_gradient, l, rows_of(continuing, c));
        compute(m, bw, model_part::attention_input, l, lay.linear_rows[static_cast<std::size_t>(c)]);
      }
    tp_ring(reduce_rows, bw, step_tensor::layer_input, model_part::attention_input, l);
    if (zero3 && !(embedding_gathers && l == b.first_layer)) zero3_ring(detail::ring_collective::reduce_scatter, bw, l);
  }
  if (b.first) {
    if (sequence_parallel) tp_ring(detail::ring_collective::all_gather, bw, step_tensor::layer_output, model_part::embedding, -1);
    for_members(bw, model_part::embedding);
    if (embedding_gathers) zero3_ring(detail::ring_collective::reduce_scatter, bw, b.first_layer);
  }
  // the block ends when its members' last ops have: nothing may be left pending
  return out;
}

//! Block `index` of `prog` expanded into its members' ops (see the file comment).
[[nodiscard]] inline block_program make_block_program(const step_program& prog, std::int32_t index) {
  ZEPPELIN_EXPECTS(index >= 0 && static_cast<std::size_t>(index) < prog.blocks.size(), "step program: no such block",
                   {{"block", double(index)}, {"blocks", double(prog.blocks.size())}});
  return make_block_program(prog, prog.blocks[static_cast<std::size_t>(index)], index);
}

ZEPPELIN_NAMESPACE_END
