// examples/train_gpt/step_model.hpp
// train_gpt's GPT as the step runner's model (exec/step_runner.hpp's step_model) for one rank
// of the host world: what the rank computes, keeps and hands the runner when it runs its part
// of a step program; and gpt_model_config, the GPT as the library's model_config.
//   in : the step program (replicas of tp x cp ranks per stage, pp stages; TP with all-reduces
//        or sequence parallelism),
//        the rank's world rank, the communicator of its replica's CP ranks of its stage and
//        TP index (the dispatch), the model, its replica's micro-batches' plans (step.hpp
//        plan_step, in the program's micro-batch order: their plans are the program's CP
//        layouts), the rank's TP shard of the parameters (tensor_parallel.hpp shard_params)
//        and the loss scale (1 / the step's targets: the gradients are those of the step's
//        mean loss)
//   out: the runner's calls answered (buffer, compute, attention); afterwards loss() (the
//        summed cross-entropy of the rank's rows, nonzero on the last stage's TP index 0),
//        peak_kept() and gradients_into(g) (the stage's gradients of the rank's shard, as the
//        program's all-reduces left them)
// Compute ops (step/block.hpp's model parts, step.hpp's functions on the rank's shard_config),
// per micro-batch k and virtual stage v of the rank, each layer's cache kept per (k, v, layer):
//   forward    embedding (the first virtual stage), then per layer attention_input, the
//              attention (the micro-batch's engine, built from the program's attention
//              program with the shard's heads), attention_output, mlp; the head's logits and
//              cross-entropy statistics (the last virtual stage). The first `recompute`
//              layers of (v, k) keep only their input.
//   recompute  those layers' forward parts again from the kept input, before their backward:
//              the same arithmetic on the same values, so the same bits
//   backward   the loss from the TP ranks' statistics and the head's backward, then per
//              layer from the last mlp, attention_output, the attention, attention_input; the
//              embedding's last. Gradients add up over the micro-batches.
// Tensors the program names (step_buffer):
//   activation (k, v), activation_gradient (k, v)   the hidden states [rows][dim] leaving
//              virtual stage v forward (their gradient: backward) for micro-batch k, rows the
//              rank's rows of k's linear layout, which every stage shares (the sender's
//              output, the receiver's next input)
//   layer_output, layer_input, loss_statistics   the TP collectives' tensors: the partial
//              sums a part leaves (tensor_parallel.hpp), summed in place by the program's
//              ring, and the head's statistics, all-gathered
//   gradients (layer -1)   the flat gradients of exactly the parameters the rank's stage owns
//              (its TP shard): the split tensors in gpt_params::for_each order (the embedding
//              with virtual stage 0's stage, the layers of its virtual stages ascending, the
//              LM head with the last virtual stage's), then the norms alike, the last
//              step_program::stage_replicated_parameters; flattened when the sync first asks,
//              after the rank's last backward; both counts are checked against the program's
//   context, gathered_context, context_gradient, gathered_context_gradient   a sliced
//              document's K/V rows kept on a CP rank and their dK/dV (exec/slice_context.hpp),
//              [rows][kv] K block then V block, and a needer's gathered ones, in CP rank order
//   parameters, gradients (layer >= 0)   ZeRO-3: one layer's flat parameters (the embedding's
//              on the first layer, the head's on the last) and gradients, chunked over the
//              stage's CP ranks
// Sliced documents (InfiniPipe's chunks): a micro-batch with a slice stays in the attention
// layout from its attention to its attention_output (forward) and from attention_output to
// attention_input (backward), where context_attention, context_save and context_gradient
// work (docs/training-step.md, section 9); its program must not remap it.
// A micro-batch's rows are dispatched (step.hpp dispatch_rows, collective over the CP ranks of
// the rank's replica, stage and TP index) by the rank's first compute op of it, which every
// rank of those reaches in the same order.
// Errors: invalid_argument for a rank outside the program, a tensor the model does not hold,
// a gradient count or rows that differ from the program's, the gradients asked for before the
// last backward, ZeRO-3 with TP or several replicas, a context that names a document outside
// its micro-batch.
#pragma once

#include "gpt.hpp"
#include "step.hpp"
#include "switching_slices.hpp"
#include "tensor_parallel.hpp"

#include <zeppelin/comm/sub_communicator.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/exec/attention_engine.hpp>
#include <zeppelin/exec/linear_layout.hpp>
#include <zeppelin/exec/slice_context.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/step/block.hpp>
#include <zeppelin/step/program.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

namespace train_gpt {

//! The GPT's shape as the library's model_config (what make_step_program counts and the
//! simulator prices): a plain (not gated) MLP of width cfg.hidden, no experts, elements of
//! `element_bytes` bytes.
inline model_config gpt_model_config(const gpt_config& cfg, int element_bytes) {
  model_config m;
  m.name = "train_gpt";
  m.layers = cfg.layers;
  m.hidden = cfg.dim;
  m.heads = cfg.heads;
  m.kv_heads = cfg.kv_heads;
  m.head_dim = cfg.head_dim();
  m.ffn_hidden = cfg.hidden;
  m.vocab = cfg.vocab;
  m.gated_mlp = false;
  m.bytes_per_element = element_bytes;
  return m;
}

template <class T, communicator W>
class gpt_step_model {
 public:
  using value_type = T;

  gpt_step_model(const step_program& prog, rank_index rank, sub_communicator<W>& stage, const gpt_config& cfg,
                 const std::vector<planned_step<T>>& micro_batches, const gpt_params<T>& w, double loss_scale)
      : prog_(&prog), at_(prog.positions.at(static_cast<std::size_t>(rank))), stage_(&stage), cfg_(&cfg), micro_batches_(&micro_batches),
        w_(&w), loss_scale_(loss_scale) {
    const bool switching = prog.plan.sync == gradient_sync::switching;
    ZEPPELIN_EXPECTS(at_.replica >= 0 || switching, "train_gpt's step model: the rank runs nothing in the step program", {{"rank", double(rank)}});
    if (switching) switching_.emplace(prog, rank, cfg, w, switching_slices<T>::tp_blocks_of(cfg));  // w: the rank's master copy, whole-model shaped
    if (at_.replica < 0) return;  // an owner of master segments only
    shard_ = {replica().tp, at_.tp};
    shard_cfg_ = shard_config(cfg, shard_);
    kept_.emplace(shard_dims());
    g_ = zero_params<T>(shard_cfg_);
    const step_replica& r = replica();
    ZEPPELIN_EXPECTS(micro_batches.size() == r.micro_batches.size(), "train_gpt's step model needs one plan per micro-batch of the program",
                     {{"plans", double(micro_batches.size())}, {"micro_batches", double(r.micro_batches.size())}});
    const auto M = micro_batches.size(), V = static_cast<std::size_t>(r.virtual_stages());
    slots_.resize(M * V);
    rows_.resize(M);
    engines_.resize(M);
    std::int64_t owned = 0, replicated = 0;
    for_each_owned(g_, [&](std::vector<T>& t, bool whole) {
      owned += static_cast<std::int64_t>(t.size());
      if (whole) replicated += static_cast<std::int64_t>(t.size());
    });
    const auto s = static_cast<std::size_t>(at_.stage);
    const auto ri = static_cast<std::size_t>(at_.replica);
    const auto expected = static_cast<std::int64_t>(std::llround(prog.stage_parameters.at(ri).at(s)));
    const auto expected_replicated = static_cast<std::int64_t>(std::llround(prog.stage_replicated_parameters.at(ri).at(s)));
    ZEPPELIN_EXPECTS(owned == expected && replicated == expected_replicated,
                     "train_gpt's stage holds other parameters than the step program counts (model_config mismatch)",
                     {{"stage", double(at_.stage)}, {"parameters", double(owned)}, {"program_parameters", double(expected)},
                      {"replicated", double(replicated)}, {"program_replicated", double(expected_replicated)}});
    for (const step_op& op : prog.ranks.at(static_cast<std::size_t>(rank)))
      if (op.kind == step_op_kind::block && prog.blocks[static_cast<std::size_t>(op.index)].pass == step_pass::backward) ++backwards_left_;
    if (zero3()) {
      ZEPPELIN_EXPECTS(r.tp == 1 && prog.plan.replicas.size() == 1,
                       "train_gpt's step model runs ZeRO-3 (fully_sharded) with one replica and no TP",
                       {{"tp", double(r.tp)}, {"replicas", double(prog.plan.replicas.size())}});
      gathered_ = *w_;
      for (int l = 0; l < cfg.layers; ++l) {
        std::int64_t n = 0;
        for_each_in_group(g_, l, [&](std::vector<T>& t) { n += static_cast<std::int64_t>(t.size()); });
        const std::int64_t expected_layer = detail::tp_rank_parameters(prog.model, r.tp, 1, l == 0, l == cfg.layers - 1);
        ZEPPELIN_EXPECTS(n == expected_layer, "train_gpt's layer holds other parameters than the step program's ZeRO-3 gathers move",
                         {{"layer", double(l)}, {"parameters", double(n)}, {"program_parameters", double(expected_layer)}});
      }
    }
  }

  std::span<std::byte> buffer(const step_buffer& b) {
    std::vector<T>* t = nullptr;
    if (b.tensor == step_tensor::activation || b.tensor == step_tensor::activation_gradient) {
      t = &boundary_[{static_cast<int>(b.tensor), b.micro_batch, b.virtual_stage}];
      if (t->empty()) t->assign(linear_rows_of(b.micro_batch) * static_cast<std::size_t>(cfg_->dim), T(0));  // a receive's
    } else if (b.tensor == step_tensor::gradients && b.layer == -1) {
      if (!flattened_) {
        ZEPPELIN_EXPECTS(backwards_left_ == 0, "train_gpt's step model: the gradients were asked for before the rank's last backward",
                         {{"backwards_left", double(backwards_left_)}});
        for_each_owned(g_, [&](std::vector<T>& x, bool) { flat_.insert(flat_.end(), x.begin(), x.end()); });
        flattened_ = true;
      }
      t = &flat_;
    } else if (b.tensor == step_tensor::layer_input || b.tensor == step_tensor::layer_output || b.tensor == step_tensor::loss_statistics) {
      t = &tp_tensor(b);
    } else if (switching_ && switching_->holds(b)) {
      return switching_->buffer(b, [&] { return stage_gradients(); });
    } else if (switching_ && b.tensor == step_tensor::parameters && b.layer == -1) {  // the pulled norms' TP all-reduce
      if (flat_parameters_.empty()) for_each_owned(pulled(), [&](std::vector<T>& x, bool) { flat_parameters_.insert(flat_parameters_.end(), x.begin(), x.end()); });
      t = &flat_parameters_;
    } else if ((b.tensor == step_tensor::parameters || b.tensor == step_tensor::gradients) && b.layer >= 0 && zero3()) {
      t = b.tensor == step_tensor::parameters ? &zero_parameters(b.layer) : &zero_gradients(b.layer);
    } else if (b.tensor == step_tensor::context || b.tensor == step_tensor::gathered_context ||
               b.tensor == step_tensor::context_gradient || b.tensor == step_tensor::gathered_context_gradient) {
      t = &exchanged(b);
    } else {
      ZEPPELIN_THROW(invalid_argument, "train_gpt's step model holds no such tensor",
                     {{"tensor", double(static_cast<int>(b.tensor))}, {"layer", double(b.layer)}});
    }
    const std::span<std::byte> bytes = std::as_writable_bytes(std::span<T>(*t));
    ZEPPELIN_EXPECTS(b.offset >= 0 && b.bytes >= 0 && static_cast<std::size_t>(b.offset + b.bytes) <= bytes.size(),
                     "train_gpt's step model: a buffer outside its tensor",
                     {{"tensor", double(static_cast<int>(b.tensor))}, {"offset", double(b.offset)}, {"bytes", double(b.bytes)},
                      {"tensor_bytes", double(bytes.size())}});
    return bytes.subspan(static_cast<std::size_t>(b.offset), static_cast<std::size_t>(b.bytes));
  }

  void compute(const step_block& blk, const layer_op& op) {
    const gpt_config& cfg = shard_cfg_;
    slot& s = slot_of(blk);
    const int k = blk.micro_batch, v = blk.virtual_stage;
    const linear_rows& r = rows(k);
    const bool forward = op.pass != step_pass::backward;
    const int last_layer = blk.first_layer + blk.layers - 1;
    outgoing_.clear();  // the groups before this op have completed
    if (switching_ && !pull_finished_) {  // the pull (and its TP all-reduce of the norms) has completed
      if (!flat_parameters_.empty()) owned_from_flat(flat_parameters_, pulled());
      pull_finished_ = true;
    }
    if (op.part == model_part::embedding) {
      if (forward) {
        s.layers.assign(static_cast<std::size_t>(blk.layers), {});
        s.hidden = embed(cfg, weights(0), r, shard_);
      } else {
        embed_backward(cfg, g_, r, s.grad, shard_);
        if (zero3()) scatter_gradients(0);
        finish_backward(s);
      }
      return;
    }
    if (op.part == model_part::head) {
      if (forward) {
        head_logits(cfg, weights(cfg.layers - 1), r, std::move(s.hidden), s.head, shard_);  // the TP ranks' statistics gather next
        return;
      }
      const double loss = head_loss(cfg, r, s.head, loss_scale_, shard_);
      if (shard_.holds_residual()) loss_ += loss;  // every TP rank computes the same loss: count it once
      s.grad = head_backward(cfg, weights(cfg.layers - 1), g_, r, s.head);
      return;
    }
    ZEPPELIN_EXPECTS(op.layer >= blk.first_layer && op.layer <= last_layer,
                     "train_gpt's step model: an op outside the block's layers",
                     {{"part", double(static_cast<int>(op.part))}, {"layer", double(op.layer)}});
    if (op.part == model_part::context_attention || op.part == model_part::context_save || op.part == model_part::context_gradient) {
      context_op(blk, op);
      return;
    }
    if (op.pass == step_pass::forward && op.part == model_part::attention_input && op.layer == blk.first_layer && !blk.first) {
      s.layers.assign(static_cast<std::size_t>(blk.layers), {});  // the block's input came from the previous stage
      s.hidden = take(step_tensor::activation, k, v - 1);
    }
    const auto li = static_cast<std::size_t>(op.layer);
    const layer_params<T>& lw = weights(op.layer).layers[li];
    layer_params<T>& gl = g_.layers[li];
    layer_cache<T>& c = s.layers.at(static_cast<std::size_t>(op.layer - blk.first_layer));
    switch (op.part) {
      case model_part::attention_input:
        if (forward) {
          if (op.pass == step_pass::forward) c.x = std::move(s.hidden);  // a recomputation reads the kept input
          s.qkv = attention_input_forward(cfg, r, lw, c);
        } else {
          if (sliced(k)) s.dqkv = attention_run(k, *stage_, nullptr).input_gradient(s.gradients), s.gradients = {};
          s.grad = attention_input_backward(cfg, r, lw, gl, c, s.dqkv, s.dx1, shard_);
          c = {};
          if (zero3() && !(blk.first && op.layer == blk.first_layer)) scatter_gradients(op.layer);
          if (op.layer == blk.first_layer) {
            --backwards_left_;
            if (!blk.first) {
              boundary_[{static_cast<int>(step_tensor::activation_gradient), k, v}] = std::move(s.grad);
              finish_backward(s);
            }
          }
        }
        return;
      case model_part::attention_output:
        if (forward) {
          if (sliced(k)) c.o = attention_run(k, *stage_, nullptr).output(c);  // the context merged into c.ao
          attention_output_forward(cfg, r, lw, c, shard_);
        } else {
          s.d_o = attention_output_backward(cfg, r, lw, gl, c, s.dx1);
          if (sliced(k)) s.a_do = attention_run(k, *stage_, nullptr).output_gradient(s.d_o);
        }
        return;
      default:  // mlp
        if (forward) {
          s.hidden = mlp_forward(cfg, r, lw, c, shard_);
          if (op.pass != step_pass::forward) return;  // a recomputation's output is not used
          if (op.layer - blk.first_layer < replica().recomputed(v, k)) {  // keep the input only
            layer_cache<T> input_only;
            input_only.x = std::move(c.x);
            c = std::move(input_only);
          }
          if (op.layer != last_layer) return;
          double held = 0;
          for (const slot& x : slots_)
            for (const layer_cache<T>& l : x.layers) held += cached_values(l);
          peak_kept_ = std::max(peak_kept_, held);
          if (!blk.last) boundary_[{static_cast<int>(step_tensor::activation), k, v}] = std::move(s.hidden);
        } else {
          if (op.layer == last_layer && !blk.last) s.grad = take(step_tensor::activation_gradient, k, v + 1);
          s.dx1 = mlp_backward(cfg, r, lw, gl, c, s.grad, shard_);
        }
        return;
    }
  }

  // A micro-batch with sliced documents stays in the attention layout from its attention to
  // its attention_output (forward) and from its attention_output to its attention_input
  // (backward): the context ops (context_op) work there.
  template <class CP>
  void attention(const step_block& blk, const block_attention& a, CP& cp, execution_record* record) {
    slot& s = slot_of(blk);
    const int k = blk.micro_batch;
    layer_cache<T>& c = s.layers.at(static_cast<std::size_t>(a.layer - blk.first_layer));
    const host_attention<T, CP> run = attention_run(k, cp, record);
    if (!sliced(k)) {
      if (a.pass == step_pass::backward) s.dqkv = run.backward(s.d_o, c);
      else c.o = run.forward(s.qkv, c);
      return;
    }
    ZEPPELIN_EXPECTS(!detail::remaps_micro_batch(engine(k).program(), 0),
                     "train_gpt's step model: a micro-batch with sliced documents must not be remapped (its context ops work in "
                     "the attention layout, which must be its linear layout)",
                     {{"micro_batch", double(k)}});
    if (a.pass != step_pass::backward) {
      run.attend(s.qkv, c);
      return;
    }
    const std::vector<T> context_dq = std::move(s.gradients.dq);  // the context's share (context_attention), if any
    run.attend_backward(s.a_do, c, s.gradients);
    if (!context_dq.empty()) add(s.gradients.dq, context_dq);
  }

  //! The summed cross-entropy of the rank's rows over the micro-batches (nonzero on the last
  //! stage only); the gradients carry the loss scale, this does not.
  [[nodiscard]] double loss() const noexcept { return loss_; }
  //! The most activation values the rank held in layer caches at the end of a forward.
  [[nodiscard]] double peak_kept() const noexcept { return peak_kept_; }
  //! The stage's gradients (after the step: summed over its CP ranks) into the tensors of `g`
  //! that the stage owns; the others are left as they are.
  void gradients_into(gpt_params<T>& g) {
    if (switching_) {  // the reduced gradients of the master segments the rank owns (whole-model shaped)
      switching_->gradients_into(g, [&] { return stage_gradients(); });
      return;
    }
    if (zero3()) {  // the CP rank's chunk of each layer's gradients, as the reduce-scatters left it
      const step_replica& r = replica();
      for (int v = at_.stage; v < static_cast<int>(r.layers.size()); v += r.pp)
        for (int l = r.first_layer(v); l < r.first_layer(v) + r.layers[static_cast<std::size_t>(v)]; ++l) {
          const auto it = zero_gradients_.find(l);
          if (it == zero_gradients_.end()) continue;  // no backward reached the layer
          std::vector<T> flat = it->second;
          const auto [first, end] = owned_chunk(static_cast<std::int64_t>(flat.size()));
          for (std::int64_t i = 0; i < static_cast<std::int64_t>(flat.size()); ++i)
            if (i < first || i >= end) flat[static_cast<std::size_t>(i)] = T(0);
          group_from_flat(flat, g, l);
        }
      return;
    }
    const std::vector<T>* from = nullptr;
    std::vector<T> local;
    if (flattened_) {
      from = &flat_;
    } else {  // a stage of one rank: no all-reduce asked for them
      gpt_params<T> mine = g_;
      for_each_owned(mine, [&](std::vector<T>& x, bool) { local.insert(local.end(), x.begin(), x.end()); });
      from = &local;
    }
    owned_from_flat(*from, g);
  }

 private:
  // What one (micro-batch, virtual stage) of the rank holds between its ops.
  struct slot {
    std::vector<layer_cache<T>> layers;  // [layer - the virtual stage's first]
    std::vector<T> hidden;               // forward: the hidden states flowing through the layers
    std::vector<T> qkv;                  // forward: attention_input -> attention
    std::vector<T> grad;                 // backward: the gradient flowing back
    std::vector<T> dx1, d_o, dqkv;       // backward: mlp -> attention_output -> attention -> attention_input
    head_cache<T> head;
    // a micro-batch with sliced documents, backward: dO and dQ, dK, dV in the attention layout
    // (the context's dQ first, then the attention's added)
    std::vector<T> a_do;
    typename host_attention<T, sub_communicator<W>>::attention_gradients gradients;
  };

  [[nodiscard]] const step_replica& replica() const { return prog_->replica(at_.replica); }
  [[nodiscard]] bool zero3() const noexcept { return prog_->plan.sync == gradient_sync::fully_sharded && replica().cp > 1; }

  // Switching (Hydraulis): the rank's TP shard of its stages' parameters as the pull left them,
  // and its TP shard of the stages' gradients (with TP, the norms' summed over the TP ranks by
  // the program's all-reduce of the flat gradients' tail) for the push.
  gpt_params<T>& pulled() {
    if (!pulled_) pulled_ = switching_->pulled();
    return *pulled_;
  }
  [[nodiscard]] gpt_params<T> stage_gradients() {
    gpt_params<T> out = g_;
    if (flattened_) owned_from_flat(flat_, out);
    return out;
  }
  // The tensors of `p` the stage owns (for_each_owned order), or layer group l's
  // (for_each_in_group order), from their flat copy.
  void owned_from_flat(std::span<const T> flat, gpt_params<T>& p) const {
    std::size_t at = 0;
    for_each_owned(p, [&](std::vector<T>& x, bool) { std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), x.size(), x.begin()), at += x.size(); });
  }
  static void group_from_flat(std::span<const T> flat, gpt_params<T>& p, int l) {
    std::size_t at = 0;
    for_each_in_group(p, l, [&](std::vector<T>& x) { std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), x.size(), x.begin()), at += x.size(); });
  }

  // ZeRO-3 (step/block.hpp): each layer's parameters, with the embedding's on the first layer
  // and the LM head's and final norm's on the last, flat in this order and chunked over the
  // stage's CP ranks (CP rank c keeps chunk c, step/detail/ring_steps.hpp). The program
  // gathers a layer's parameters before each use and reduce-scatters its gradients after
  // each backward.
  template <class F>
  static void for_each_in_group(gpt_params<T>& p, int layer, F&& f) {
    if (layer == 0) f(p.embed);
    layer_params<T>& x = p.layers[static_cast<std::size_t>(layer)];
    for (std::vector<T>* t : {&x.wq, &x.wk, &x.wv, &x.wo, &x.w1, &x.w2, &x.norm1, &x.norm2}) f(*t);
    if (layer + 1 == static_cast<int>(p.layers.size())) f(p.lm_head), f(p.norm_final);
  }
  [[nodiscard]] std::pair<std::int64_t, std::int64_t> owned_chunk(std::int64_t elements) const {
    return {detail::ring_chunk_begin(elements, replica().cp, at_.cp), detail::ring_chunk_begin(elements, replica().cp, at_.cp + 1)};
  }
  // Layer `l`'s gathered parameters: the rank's own chunk, the rest NaN until the gather
  // fills it (a use before the gather shows in the loss).
  std::vector<T>& zero_parameters(int l) {
    std::vector<T>& flat = zero_parameters_[l];
    if (!flat.empty()) return flat;
    gpt_params<T> own = *w_;
    for_each_in_group(own, l, [&](std::vector<T>& x) { flat.insert(flat.end(), x.begin(), x.end()); });
    const auto [first, end] = owned_chunk(static_cast<std::int64_t>(flat.size()));
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(flat.size()); ++i)
      if (i < first || i >= end) flat[static_cast<std::size_t>(i)] = std::numeric_limits<T>::quiet_NaN();
    return flat;
  }
  // Layer `l`'s gradients: the rank's chunk summed over the micro-batches and CP ranks by the
  // reduce-scatters; the other chunks hold the last backward's own share, which they send.
  std::vector<T>& zero_gradients(int l) {
    std::vector<T>& flat = zero_gradients_[l];
    if (flat.empty()) for_each_in_group(g_, l, [&](std::vector<T>& x) { flat.resize(flat.size() + x.size(), T(0)); });
    return flat;
  }
  // Moves the backward's gradients of layer `l` (in g_) into its reduce-scatter's buffer: added
  // into the rank's chunk, written over the others; g_'s are cleared for the next backward.
  void scatter_gradients(int l) {
    std::vector<T>& flat = zero_gradients(l);
    const auto [first, end] = owned_chunk(static_cast<std::int64_t>(flat.size()));
    std::int64_t i = 0;
    for_each_in_group(g_, l, [&](std::vector<T>& x) {
      for (T& v : x) {
        T& to = flat[static_cast<std::size_t>(i)];
        to = i >= first && i < end ? to + v : v;
        v = T(0), ++i;
      }
    });
  }
  // The parameters of the layer group `l` as the rank computes with them: its TP shard, or with
  // ZeRO-3 the gathered ones.
  const gpt_params<T>& weights(int l) {
    if (switching_) return pulled();
    if (!zero3()) return *w_;
    group_from_flat(zero_parameters(l), gathered_, l);
    return gathered_;
  }

  // Sliced documents (InfiniPipe: exec/slice_context.hpp). A micro-batch is sliced when one of
  // its pieces reads a context or continues in a later slice; its linear layout must be its
  // attention layout (no remap), so the context ops need no collective.
  [[nodiscard]] bool sliced(int k) const {
    const step_micro_batch& mb = replica().micro_batches[static_cast<std::size_t>(k)];
    for (const step_piece& x : mb.pieces)
      if (x.context() > 0 || x.end < prog_->plan.documents[static_cast<std::size_t>(x.document)]) return true;
    return false;
  }
  template <class CP>
  host_attention<T, CP> attention_run(int k, CP& cp, execution_record* record) {
    return {cp, shard_cfg_, engine(k), replica().micro_batches[static_cast<std::size_t>(k)].layout, rows(k), record};
  }
  // The attention-layout rows of piece i of micro-batch k on the rank: (first row, rows) of
  // each of its shards, in placement order.
  [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> piece_rows(int k, std::size_t i) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    std::size_t row = 0;
    for (const shard& x : replica().micro_batches[static_cast<std::size_t>(k)].layout.placements[static_cast<std::size_t>(at_.cp)].shards) {
      if (static_cast<std::size_t>(x.seq) == i) out.emplace_back(row, static_cast<std::size_t>(x.range.size()));
      row += static_cast<std::size_t>(x.range.size());
    }
    return out;
  }
  [[nodiscard]] attention_dims shard_dims() const {
    return {.heads = shard_cfg_.heads, .kv_heads = shard_cfg_.kv_heads, .head_dim = shard_cfg_.head_dim()};
  }
  // A context tensor of the program (step/block.hpp): the kept rows' K|V (context) or their
  // dK|dV (context_gradient) of one CP rank, each [rows][kv] K block then V block; and the
  // needer's gathered ones (gathered_context, gathered_context_gradient), the CP ranks' blocks
  // in CP rank order. A sent `context` is built when first asked for; a received one is
  // zeros to receive into (context_gradient: to add into).
  std::vector<T>& exchanged(const step_buffer& b) {
    const auto key = std::make_tuple(static_cast<int>(b.tensor), b.micro_batch, b.layer, b.document);
    const bool sent = b.tensor == step_tensor::context || b.tensor == step_tensor::gathered_context_gradient;
    auto& held = sent ? outgoing_ : exchange_;
    auto it = held.find(key);
    if (it != held.end()) return it->second;
    std::vector<T>& t = held[key];
    const auto kv = static_cast<std::size_t>(shard_cfg_.kv_width());
    if (b.tensor == step_tensor::context) {  // the first rows kept of (document, layer)
      const std::size_t rows = static_cast<std::size_t>(b.bytes) / sizeof(T) / (2 * kv);
      const std::span<const T> keys = kept_->keys(b.document, b.layer), values = kept_->values(b.document, b.layer);
      t.assign(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(rows * kv));
      t.insert(t.end(), values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rows * kv));
    } else if (b.tensor == step_tensor::context_gradient) {
      t.assign(static_cast<std::size_t>(b.offset + b.bytes) / sizeof(T), T(0));
    } else {
      t.assign(context_rows_total(b.micro_batch, piece_of(b.micro_batch, b.document)) * 2 * kv, T(0));
    }
    return t;
  }
  // The piece of micro-batch k that belongs to `document`.
  [[nodiscard]] std::size_t piece_of(int k, std::int64_t document) const {
    const std::vector<step_piece>& pieces = replica().micro_batches[static_cast<std::size_t>(k)].pieces;
    for (std::size_t i = 0; i < pieces.size(); ++i)
      if (pieces[i].document == document) return i;
    ZEPPELIN_THROW(invalid_argument, "train_gpt's step model: a context names a document outside its micro-batch",
                   {{"micro_batch", double(k)}, {"document", double(document)}});
  }
  // Rows of piece i's context, over every CP rank.
  [[nodiscard]] std::size_t context_rows_total(int k, std::size_t i) const {
    std::size_t n = 0;
    for (const auto& rows : prog_->layout(at_.replica, k).context_rows) n += static_cast<std::size_t>(rows[i]);
    return n;
  }
  // Adds what later slices returned for (document, layer) into the kept rows' gradient.
  void fold_context_gradients(std::int64_t document, std::int32_t layer) {
    for (auto it = exchange_.begin(); it != exchange_.end();) {
      const auto& [tensor, k, l, d] = it->first;
      if (tensor != static_cast<int>(step_tensor::context_gradient) || l != layer || d != document) {
        ++it;
        continue;
      }
      const std::vector<T>& g = it->second;
      const std::size_t half = g.size() / 2;
      kept_->add_gradient(document, layer, std::span<const T>(g).first(half), std::span<const T>(g).subspan(half));
      it = exchange_.erase(it);
    }
  }

  // context_attention (forward, recompute, backward), context_save and context_gradient of a
  // sliced micro-batch's layer (step/block.hpp), in the attention layout.
  void context_op(const step_block& blk, const layer_op& op) {
    const int k = blk.micro_batch;
    slot& s = slot_of(blk);
    layer_cache<T>& c = s.layers.at(static_cast<std::size_t>(op.layer - blk.first_layer));
    const step_micro_batch& mb = replica().micro_batches[static_cast<std::size_t>(k)];
    const step_layout& lay = prog_->layout(at_.replica, k);
    const attention_dims dims = shard_dims();
    const auto qw = static_cast<std::size_t>(dims.q_row()), kv = static_cast<std::size_t>(dims.kv_row());
    const auto na = static_cast<std::int64_t>(rows(k).na);
    const auto C = static_cast<std::size_t>(replica().cp), me = static_cast<std::size_t>(at_.cp);
    const auto rows_of = [&](const std::vector<T>& t, std::size_t i, std::size_t width) {  // piece i's rows of t
      std::vector<T> out;
      for (const auto& [first, n] : piece_rows(k, i))
        out.insert(out.end(), t.begin() + static_cast<std::ptrdiff_t>(first * width), t.begin() + static_cast<std::ptrdiff_t>((first + n) * width));
      return out;
    };
    if (op.part == model_part::context_save) {
      for (std::size_t i = 0; i < mb.pieces.size(); ++i)
        if (mb.pieces[i].end < prog_->plan.documents[static_cast<std::size_t>(mb.pieces[i].document)])
          kept_->keep(mb.pieces[i].document, op.layer, std::span<const T>(rows_of(c.ak, i, kv)), std::span<const T>(rows_of(c.av, i, kv)));
      return;
    }
    if (op.part == model_part::context_gradient) {
      for (std::size_t i = 0; i < mb.pieces.size(); ++i) {
        const step_piece& x = mb.pieces[i];
        if (x.end >= prog_->plan.documents[static_cast<std::size_t>(x.document)]) continue;
        fold_context_gradients(x.document, op.layer);
        const auto [dk, dv] = kept_->gradient(x.document, op.layer);
        std::size_t kept = static_cast<std::size_t>(lay.context_rows[me][i]);  // the rows kept before this slice's
        for (const auto& [first, n] : piece_rows(k, i))
          for (std::size_t r = 0; r < n; ++r, ++kept)
            for (std::size_t e = 0; e < kv; ++e) {
              s.gradients.dk[(first + r) * kv + e] += dk[kept * kv + e];
              s.gradients.dv[(first + r) * kv + e] += dv[kept * kv + e];
            }
        if (x.begin == 0) kept_->release(x.document, op.layer);  // its first slice: nothing reads it any more
      }
      return;
    }
    // context_attention: per piece with a context, its K/V rows of every CP rank (a rank's
    // own from what it kept, the others' as gathered), in CP rank order
    const bool backward = op.pass == step_pass::backward;
    if (!backward) c.ck.clear(), c.cv.clear();
    if (backward) s.gradients.dq.assign(static_cast<std::size_t>(na) * qw, T(0));
    std::size_t j = 0;  // the piece's place among those with a context
    for (std::size_t i = 0; i < mb.pieces.size(); ++i) {
      const step_piece& x = mb.pieces[i];
      if (x.context() == 0) continue;
      if (lay.piece_rows[me][i] == 0) {  // no rows of it here: nothing gathered, nothing to return
        if (!backward) c.ck.emplace_back(), c.cv.emplace_back();
        ++j;
        continue;
      }
      if (!backward) {
        std::vector<T> gathered;
        const auto key = std::make_tuple(static_cast<int>(step_tensor::gathered_context), k, op.layer, x.document);
        if (const auto it = exchange_.find(key); it != exchange_.end()) gathered = std::move(it->second), exchange_.erase(it);
        std::vector<T> ck, cv;
        std::size_t at = 0;
        for (std::size_t o = 0; o < C; ++o) {
          const auto n = static_cast<std::size_t>(lay.context_rows[o][i]);
          if (o == me && n > 0) {
            const std::span<const T> keys = kept_->keys(x.document, op.layer), values = kept_->values(x.document, op.layer);
            ck.insert(ck.end(), keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(n * kv));
            cv.insert(cv.end(), values.begin(), values.begin() + static_cast<std::ptrdiff_t>(n * kv));
          } else if (n > 0) {
            const auto from = gathered.begin() + static_cast<std::ptrdiff_t>(at);
            ck.insert(ck.end(), from, from + static_cast<std::ptrdiff_t>(n * kv));
            cv.insert(cv.end(), from + static_cast<std::ptrdiff_t>(n * kv), from + static_cast<std::ptrdiff_t>(2 * n * kv));
          }
          at += 2 * n * kv;
        }
        for (const auto& [first, n] : piece_rows(k, i))
          context_attention_forward<T>(dims, std::span<const T>(c.aq).subspan(first * qw, n * qw), ck, cv,
                                       std::span<T>(c.ao).subspan(first * qw, n * qw), std::span<T>(c.lse).subspan(first), na);
        c.ck.push_back(std::move(ck)), c.cv.push_back(std::move(cv));
      } else {
        const std::vector<T>& ck = c.ck.at(j);
        const std::vector<T>& cv = c.cv.at(j);
        std::vector<T> dk(ck.size(), T(0)), dv(cv.size(), T(0));
        for (const auto& [first, n] : piece_rows(k, i))
          context_attention_backward<T>(dims, std::span<const T>(c.aq).subspan(first * qw, n * qw), ck, cv,
                                        std::span<const T>(c.ao).subspan(first * qw, n * qw),
                                        std::span<const T>(s.a_do).subspan(first * qw, n * qw), std::span<const T>(c.lse).subspan(first),
                                        na, std::span<T>(s.gradients.dq).subspan(first * qw, n * qw), dk, dv);
        // the own rows' share into what the rank kept, the others' to their CP ranks
        step_buffer to{step_tensor::gathered_context_gradient, op.pass, model_part::embedding, k, blk.virtual_stage, op.layer, x.document, 0, 0, 0};
        std::vector<T>& out = exchanged(to);
        std::size_t row = 0, at = 0;
        for (std::size_t o = 0; o < C; ++o) {
          const auto n = static_cast<std::size_t>(lay.context_rows[o][i]);
          const auto dk_rows = std::span<const T>(dk).subspan(row * kv, n * kv), dv_rows = std::span<const T>(dv).subspan(row * kv, n * kv);
          if (o == me && n > 0) {
            kept_->add_gradient(x.document, op.layer, dk_rows, dv_rows);
          } else {
            std::copy(dk_rows.begin(), dk_rows.end(), out.begin() + static_cast<std::ptrdiff_t>(at));
            std::copy(dv_rows.begin(), dv_rows.end(), out.begin() + static_cast<std::ptrdiff_t>(at + n * kv));
          }
          row += n, at += 2 * n * kv;
        }
      }
      ++j;
    }
  }
  slot& slot_at(int micro_batch, int virtual_stage) {
    const auto V = static_cast<std::size_t>(replica().virtual_stages());
    return slots_[static_cast<std::size_t>(micro_batch) * V + static_cast<std::size_t>(virtual_stage / replica().pp)];
  }
  slot& slot_of(const step_block& b) { return slot_at(b.micro_batch, b.virtual_stage); }
  void finish_backward(slot& s) { s = {}; }

  // Visits the tensors of `p` the rank's stage owns as f(tensor, whole): first those TP
  // splits, then the norms, which every TP rank holds whole (the program's gradient sync sums
  // the stage's last stage_replicated_parameters over the TP ranks), each in gpt_params::for_each order.
  template <class F>
  void for_each_owned(gpt_params<T>& p, F&& f) const {
    const step_replica& r = replica();
    const int PV = static_cast<int>(r.layers.size());
    const bool last = (PV - 1) % r.pp == at_.stage;  // the stage holds the last virtual stage
    for (const bool whole : {false, true}) {
      if (at_.stage == 0 && !whole) f(p.embed, whole);  // virtual stage 0
      for (int v = at_.stage; v < PV; v += r.pp)
        for (int l = r.first_layer(v); l < r.first_layer(v) + r.layers[static_cast<std::size_t>(v)]; ++l) {
          layer_params<T>& x = p.layers[static_cast<std::size_t>(l)];
          if (whole) {
            f(x.norm1, whole), f(x.norm2, whole);
          } else {
            for (std::vector<T>* t : {&x.wq, &x.wk, &x.wv, &x.wo, &x.w1, &x.w2}) f(*t, whole);
          }
        }
      if (last) f(whole ? p.norm_final : p.lm_head, whole);
    }
  }

  // The tensor a TP collective of the program names (step/block.hpp): the partial sums the
  // parts leave, summed in place by an all-reduce, or by a reduce-scatter whose chunks the
  // next all-gather (sequence parallelism) completes in the same tensor; and the head's
  // statistics. A virtual stage's last forward output and first input gradient are its
  // boundary tensors, sent (with SP: each TP rank its summed chunk) and received in place.
  std::vector<T>& tp_tensor(const step_buffer& b) {
    const step_replica& r = replica();
    const int k = b.micro_batch, v = b.virtual_stage, PV = static_cast<int>(r.layers.size());
    slot& s = slot_at(k, v);
    const int first = r.first_layer(v), last = first + r.layers[static_cast<std::size_t>(v)] - 1;
    const auto cache = [&]() -> layer_cache<T>& { return s.layers.at(static_cast<std::size_t>(b.layer - first)); };
    const auto kept = [&](step_tensor t, int of) -> std::vector<T>& { return boundary_[{static_cast<int>(t), k, of}]; };
    const bool output = b.tensor == step_tensor::layer_output;
    switch (b.pass) {
      case step_pass::forward:
      case step_pass::recompute: {
        const bool recompute = b.pass == step_pass::recompute;
        if (b.tensor == step_tensor::loss_statistics) return s.head.stats;
        if (b.part == model_part::embedding || b.part == model_part::head) return s.hidden;
        if (b.part == model_part::attention_input && !output) {  // SP: the layer's input gathered
          if (recompute) return cache().x;                          // (kept whole)
          return b.layer == first && v > 0 ? kept(step_tensor::activation, v - 1) : s.hidden;
        }
        if (b.part == model_part::attention_output || (b.part == model_part::mlp && !output)) return cache().x1;
        if (b.part == model_part::mlp) return !recompute && b.layer == last && v < PV - 1 ? kept(step_tensor::activation, v) : s.hidden;
        break;
      }
      case step_pass::backward:
        if (b.part == model_part::embedding || b.part == model_part::head) return s.grad;
        if (b.part == model_part::mlp && output) return b.layer == last && v < PV - 1 ? kept(step_tensor::activation_gradient, v + 1) : s.grad;
        if ((b.part == model_part::mlp && !output) || (b.part == model_part::attention_output && output)) return s.dx1;
        if (b.part == model_part::attention_input && !output) return b.layer == first && v > 0 ? kept(step_tensor::activation_gradient, v) : s.grad;
        break;
    }
    ZEPPELIN_THROW(invalid_argument, "train_gpt's step model holds no such TP tensor",
                   {{"tensor", double(static_cast<int>(b.tensor))}, {"part", double(static_cast<int>(b.part))}, {"layer", double(b.layer)}});
  }

  [[nodiscard]] std::size_t linear_rows_of(int k) const {
    return static_cast<std::size_t>(prog_->layout(at_.replica, k).linear_rows.at(static_cast<std::size_t>(at_.cp)));
  }

  // A received boundary tensor, moved out of the runner's buffer.
  std::vector<T> take(step_tensor tensor, int k, int v) {
    const auto it = boundary_.find({static_cast<int>(tensor), k, v});
    ZEPPELIN_EXPECTS(it != boundary_.end(), "train_gpt's step model: a block's input never arrived",
                     {{"tensor", double(static_cast<int>(tensor))}, {"micro_batch", double(k)}, {"virtual_stage", double(v)}});
    std::vector<T> out = std::move(it->second);
    boundary_.erase(it);
    return out;
  }

  // Micro-batch k's rows, dispatched by the rank's first op of k (collective over the stage).
  const linear_rows& rows(int k) {
    std::optional<linear_rows>& r = rows_[static_cast<std::size_t>(k)];
    if (r) return *r;
    r = dispatch_rows(*stage_, (*micro_batches_)[static_cast<std::size_t>(k)]);
    const step_layout& lay = prog_->layout(at_.replica, k);
    const auto c = static_cast<std::size_t>(at_.cp);
    ZEPPELIN_EXPECTS(r->n == static_cast<std::size_t>(lay.linear_rows.at(c)) && r->na == static_cast<std::size_t>(lay.attention.rows.at(c)),
                     "train_gpt's step model: the dispatched rows are not the step program's layout",
                     {{"micro_batch", double(k)}, {"rows", double(r->n)}, {"program_rows", double(lay.linear_rows.at(c))},
                      {"attention_rows", double(r->na)}, {"program_attention_rows", double(lay.attention.rows.at(c))}});
    return *r;
  }

  // Micro-batch k's attention engine: the program's own attention program.
  const attention_engine<T>& engine(int k) {
    std::optional<attention_engine<T>>& e = engines_[static_cast<std::size_t>(k)];
    if (!e)
      e.emplace(prog_->layout(at_.replica, k).attention,
                attention_dims{.heads = shard_cfg_.heads, .kv_heads = shard_cfg_.kv_heads, .head_dim = shard_cfg_.head_dim()});
    return *e;
  }

  const step_program* prog_;
  step_position at_;
  sub_communicator<W>* stage_;
  const gpt_config* cfg_;
  tp_shard shard_;
  gpt_config shard_cfg_;  // the model as the rank's TP shard sees it
  const std::vector<planned_step<T>>* micro_batches_;
  const gpt_params<T>* w_;  // the rank's TP shard of the parameters (shard_params)
  gpt_params<T> g_;  // the rank's gradients, added up over its micro-batches (its stage's tensors)
  double loss_scale_;
  std::vector<slot> slots_;  // [micro-batch x virtual stages + chunk]
  std::vector<std::optional<linear_rows>> rows_;
  std::vector<std::optional<attention_engine<T>>> engines_;
  std::map<std::tuple<int, int, int>, std::vector<T>> boundary_;  // (tensor, micro-batch, virtual stage)
  // sliced documents: the K/V rows the rank kept, and the context tensors in flight by
  // (tensor, micro-batch, layer, document): received or to send (exchange_), or built to
  // send until the next compute op (outgoing_)
  std::optional<slice_context<T>> kept_;
  std::map<std::tuple<int, int, int, std::int64_t>, std::vector<T>> exchange_, outgoing_;
  // ZeRO-3: per layer its flat gathered parameters and gradients; the gathered parameters as
  // tensors (the layers' own, copied in before each use)
  std::map<int, std::vector<T>> zero_parameters_, zero_gradients_;
  gpt_params<T> gathered_;
  // switching (Hydraulis): the rank's slices, its pulled TP shard, and the flat parameters
  // whose tail (the norms) the program all-reduces over TP after the pull
  std::optional<switching_slices<T>> switching_;
  std::optional<gpt_params<T>> pulled_;
  std::vector<T> flat_parameters_;
  bool pull_finished_ = false;
  std::vector<T> flat_;
  bool flattened_ = false;
  int backwards_left_ = 0;
  double loss_ = 0, peak_kept_ = 0;
};

}  // namespace train_gpt
