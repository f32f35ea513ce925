// examples/train_gpt/step.hpp
// One training step of train_gpt, in the pieces that the step model (step_model.hpp: the host
// run through the step program) and the plain loop (train_loop.hpp: the gradient check and
// the GPU worlds) both compose:
//   split_documents  a step's documents cut into micro-batches of whole documents
//   plan_step        a micro-batch's plan, attention engine and dispatch (the same on every rank),
//                    from a method, from a CP layout policy (WLB-LLM's adaptive sharding), or
//                    from a layout a step plan holds (InfiniPipe's slices, placed in their
//                    documents by piece_origin: positions and the target across a cut);
//                    plan_steps: one per pass of a plan that runs in several (micro_batch_plan)
//   dispatch_rows    a rank's (token, target, position) rows, from the data loader's layout to
//                    the linear modules' layout (loader_rows and unpack_rows: the parts a
//                    device rank shares, device_attention.hpp)
//   host_attention   one layer's attention through the library's host engine: packed Q|K|V
//                    rows of the linear layout in, O rows out (and back for the backward),
//                    optionally into an execution record
//   embed / head_forward        the embedding, and the final norm, LM head and cross-entropy
//   the model parts of a layer, as step/block.hpp names them (model_part):
//     attention_input_forward    RMSNorm, Q/K/V projections, rotary embedding
//     (the attention)            an attention object: host_attention, or device_attention
//     attention_output_forward   output projection, residual
//     mlp_forward                RMSNorm, W1, SiLU, W2, residual
//   and their backward passes in reverse (mlp_backward, attention_output_backward, the
//   attention's backward, attention_input_backward); layer_forward / layer_backward compose
//   them with an attention object, the same arithmetic in the same order
//   head_backward / embed_backward   the head's and the embedding's backward passes
// Every piece runs on the calling rank's rows; the ones that move rows across ranks (dispatch,
// the engine's layout changes and attention) are collective over the communicator of the
// plan's ranks, which every rank calls in the same order.
#pragma once

#include "corpus.hpp"
#include "gpt.hpp"
#include "tensor_parallel.hpp"

#include "../common/priced_model.hpp"

#include <zeppelin/comm.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/planner/any_cp_layout.hpp>
#include <zeppelin/planner/methods.hpp>
#include <zeppelin/program.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace train_gpt {

using namespace zeppelin;

// One rank's forward activations of one layer, kept for its backward.
template <class T>
struct layer_cache {
  std::vector<T> x, inv1, h1, q, k, v;          // linear layout; q, k after the rotary embedding
  std::vector<T> aq, ak, av, ao, lse;           // attention layout
  std::vector<T> o, x1, inv2, h2, z, act;       // linear layout
  std::vector<std::vector<T>> ck, cv;           // per piece with a context: its K and V rows (a sliced document's)
};

template <class T>
void add(std::vector<T>& into, const std::vector<T>& x) {
  for (std::size_t i = 0; i < into.size(); ++i) into[i] += x[i];
}

// Columns [from, from + width) of rows of `w` elements.
template <class T>
std::vector<T> columns(const std::vector<T>& rows, std::size_t n, std::size_t w, std::size_t from, std::size_t width) {
  std::vector<T> out(n * width);
  for (std::size_t r = 0; r < n; ++r)
    std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(r * w + from), width, out.begin() + static_cast<std::ptrdiff_t>(r * width));
  return out;
}

template <class T>
std::vector<T> concat_columns(const std::vector<const std::vector<T>*>& parts, const std::vector<std::size_t>& widths, std::size_t n) {
  std::size_t w = 0;
  for (const std::size_t x : widths) w += x;
  std::vector<T> out(n * w);
  for (std::size_t r = 0; r < n; ++r) {
    std::size_t at = 0;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      std::copy_n(parts[i]->begin() + static_cast<std::ptrdiff_t>(r * widths[i]), widths[i],
                  out.begin() + static_cast<std::ptrdiff_t>(r * w + at));
      at += widths[i];
    }
  }
  return out;
}

//! The documents of `s` in order, cut into at most `count` micro-batches of whole documents:
//! a cut falls where the running token count first reaches the next equal share, and every
//! micro-batch keeps at least one document.
inline std::vector<step_batch> split_documents(const step_batch& s, int count) {
  const batch& b = s.lengths;
  const int parts = std::max(1, std::min(count, b.size()));
  std::vector<step_batch> out;
  std::vector<token_count> lengths;
  std::vector<std::int64_t> tokens;
  token_count done = 0;
  for (sequence_index q = 0; q < b.size(); ++q) {
    lengths.push_back(b.length(q));
    tokens.insert(tokens.end(), s.tokens.begin() + b.offset(q), s.tokens.begin() + b.offset(q) + b.length(q));
    done += b.length(q);
    const int made = static_cast<int>(out.size());
    const bool share_reached = done * parts >= b.total_tokens() * (made + 1);
    const bool must_leave_rest = b.size() - 1 - q == parts - 1 - made;  // one document left per part still to make
    if (made + 1 < parts && (share_reached || must_leave_rest)) {
      out.push_back({batch(std::move(lengths)), std::move(tokens)});
      lengths.clear(), tokens.clear();
    }
  }
  out.push_back({batch(std::move(lengths)), std::move(tokens)});
  return out;
}

// One step's plan and data movement, the same on every rank.
template <class T>
struct planned_step {
  step_batch data;
  std::vector<std::int64_t> target, position;  //!< packed stream order; target -1: last token of a document
  double targets = 0;                          //!< tokens with a target: the loss is their mean
  method_spec executed;
  plan layout;
  program_options options;  //!< what the engine's program was built with (a device engine builds the same)
  std::vector<placement> loader;
  relayout_plan dispatch;
  attention_engine<T> engine;
};

//! Where a micro-batch's sequence sits in its document: a slice of a longer document
//! (InfiniPipe's chunks) starts at position `first` of it and, unless it ends the document, its
//! last token's target is the document's next token. A whole document: {0, -1}.
struct piece_origin {
  token_count first = 0;
  std::int64_t next_token = -1;
};

// A planned_step of `sb` from plan `p`, which method `executed` made, run with `options`: the
// targets and positions (of each sequence as `origins` places it; empty: whole documents),
// the engine, the loader layout and the dispatch.
template <class T>
planned_step<T> prepare_step(step_batch sb, const topology& t, const gpt_config& cfg, method_spec executed, plan p, program_options options,
                             std::span<const piece_origin> origins = {}) {
  const batch& b = sb.lengths;
  ZEPPELIN_EXPECTS(origins.empty() || origins.size() == static_cast<std::size_t>(b.size()), "one origin per sequence of the micro-batch",
                   {{"origins", double(origins.size())}, {"sequences", double(b.size())}});
  std::vector<std::int64_t> target(sb.tokens.size(), -1), position(sb.tokens.size());
  double targets = 0;
  for (sequence_index s = 0; s < b.size(); ++s) {
    const piece_origin at = origins.empty() ? piece_origin{} : origins[static_cast<std::size_t>(s)];
    for (token_count i = 0; i < b.length(s); ++i) {
      const auto g = static_cast<std::size_t>(b.offset(s) + i);
      position[g] = at.first + i;
      target[g] = i + 1 < b.length(s) ? sb.tokens[g + 1] : at.next_token;
      if (target[g] >= 0) targets += 1;
    }
  }
  const attention_dims dims{.heads = cfg.heads, .kv_heads = cfg.kv_heads, .head_dim = cfg.head_dim()};
  attention_engine<T> engine(p, b, t, dims, options);
  std::vector<placement> loader = loader_layout(b, t.num_ranks());
  relayout_plan dispatch = make_dispatch_plan(loader, linear_layout(p, engine.program()));
  return {std::move(sb),      std::move(target), std::move(position), targets,           executed,
          std::move(p),       std::move(options), std::move(loader),  std::move(dispatch), std::move(engine)};
}

//! The partitioner called `name` (partition/registry.hpp) as a method: its layout with the
//! baselines' execution (direct routing, in-order engine, a launch per group, no remapping).
//! Throws invalid_argument for a name that is not a partitioner's.
inline method_spec method_of_partitioner(std::string_view name) {
  for (const std::string_view p : partitioner_names)
    if (p == name) return {method_kind::candidate, p, "a partitioner with the baselines' execution", p, false, engine_policy::in_order, false};
  ZEPPELIN_THROW(invalid_argument, "no partitioner is called '" + std::string(name) + "'", {});
}

// The setup a micro-batch of `b` on `t` is planned and run with: a rank's fair share of tokens.
inline method_setup setup_for(const batch& b, const topology& t) {
  method_setup setup;
  setup.tokens_per_gpu = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
  return setup;
}

template <class T>
planned_step<T> plan_step(step_batch sb, const topology& t, const method_spec& requested, const gpt_config& cfg) {
  const model_config priced = example_cli::priced_model(cfg.heads, cfg.kv_heads, cfg.head_dim(), static_cast<int>(sizeof(T)));
  const method_setup setup = setup_for(sb.lengths, t);
  auto [spec, p] = plan_method(requested, sb.lengths, t, priced, setup);
  program_options options = to_program_options(options_for(spec, setup), {});
  return prepare_step<T>(std::move(sb), t, cfg, spec, std::move(p), std::move(options));
}

//! A micro-batch laid out by `layout` (a CP layout policy, planner/any_cp_layout.hpp), run with
//! the baselines' execution of `spec`, the method of the partitioner the policy chose.
template <class T>
planned_step<T> plan_step(step_batch sb, const topology& t, const any_cp_layout& layout, const gpt_config& cfg) {
  plan p = layout.partition(sb.lengths, t);
  const method_spec spec = method_of_partitioner(p.method);
  program_options options = to_program_options(options_for(spec, setup_for(sb.lengths, t)), {});
  return prepare_step<T>(std::move(sb), t, cfg, spec, std::move(p), std::move(options));
}

//! A micro-batch whose CP layout `p` a step plan already holds (InfiniPipe's slices laid out by
//! the library), run with `options`, its sequences placed in their documents by `origins`.
template <class T>
planned_step<T> plan_step(step_batch sb, const topology& t, plan p, program_options options, std::span<const piece_origin> origins,
                          const gpt_config& cfg) {
  const method_spec spec = method_of_partitioner(p.method);
  return prepare_step<T>(std::move(sb), t, cfg, spec, std::move(p), std::move(options), origins);
}

//! Plan `p` restricted to its micro-batch `j`: its shards of j, with their sequences renumbered
//! in ascending order (`sequences` receives the original indices) and micro-batch 0, the
//! groups they name renumbered alike, the notes on the whole plan or on those sequences.
inline plan micro_batch_plan(const plan& p, std::int32_t j, std::vector<sequence_index>& sequences) {
  sequences.clear();
  std::vector<group_index> groups;
  for (const placement& x : p.placements)
    for (const shard& s : x.shards) {
      if (s.micro_batch != j) continue;
      sequences.push_back(s.seq);
      if (s.group != no_group) groups.push_back(s.group);
    }
  const auto unique_sorted = [](auto& v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  };
  unique_sorted(sequences);
  unique_sorted(groups);
  const auto index_in = [](const auto& v, auto x) { return static_cast<std::int32_t>(std::lower_bound(v.begin(), v.end(), x) - v.begin()); };
  plan out;
  out.method = p.method, out.nodes = p.nodes, out.gpus_per_node = p.gpus_per_node, out.capacity = p.capacity;
  for (const placement& x : p.placements) {
    placement& y = out.placements.emplace_back();
    for (shard s : x.shards) {
      if (s.micro_batch != j) continue;
      s.seq = index_in(sequences, s.seq);
      if (s.group != no_group) s.group = index_in(groups, s.group);
      s.micro_batch = 0;
      y.shards.push_back(s);
    }
  }
  for (const group_index g : groups) {
    ring_group r = p.groups[static_cast<std::size_t>(g)];
    r.id = index_in(groups, g);
    out.groups.push_back(std::move(r));
  }
  for (plan_note n : p.notes) {
    const bool whole = n.sequences.empty();
    std::vector<sequence_index> mine;
    for (const sequence_index q : n.sequences)
      if (std::binary_search(sequences.begin(), sequences.end(), q)) mine.push_back(index_in(sequences, q));
    if (!whole && mine.empty()) continue;
    n.sequences = std::move(mine);
    out.notes.push_back(std::move(n));
  }
  return out;
}

//! plan_step, one planned_step per micro-batch of the method's plan: a method that runs the
//! batch in several passes (hybrid_dp, micro_batched) gives one per pass, each of its
//! documents in their order, with the same execution.
template <class T>
std::vector<planned_step<T>> plan_steps(step_batch sb, const topology& t, const method_spec& requested, const gpt_config& cfg) {
  std::vector<planned_step<T>> out;
  planned_step<T> whole = plan_step<T>(std::move(sb), t, requested, cfg);
  const std::int32_t passes = whole.layout.micro_batches();
  if (passes == 1) {
    out.push_back(std::move(whole));
    return out;
  }
  const batch& b = whole.data.lengths;
  std::vector<sequence_index> sequences;
  for (std::int32_t j = 0; j < passes; ++j) {
    plan p = micro_batch_plan(whole.layout, j, sequences);
    if (sequences.empty()) continue;
    std::vector<token_count> lengths;
    std::vector<std::int64_t> tokens;
    for (const sequence_index q : sequences) {
      lengths.push_back(b.length(q));
      tokens.insert(tokens.end(), whole.data.tokens.begin() + b.offset(q), whole.data.tokens.begin() + b.offset(q) + b.length(q));
    }
    out.push_back(prepare_step<T>({batch(std::move(lengths)), std::move(tokens)}, t, cfg, whole.executed, std::move(p), whole.options));
  }
  return out;
}

// A rank's rows of one step in the linear layout, and its attention-layout row count.
struct linear_rows {
  std::vector<std::int64_t> tok, tgt, pos;  //!< per row: token, next-token target (-1: none), position in its document
  std::size_t n = 0;                        //!< rows in the linear layout
  std::size_t na = 0;                       //!< rows in the attention layout
};

// The calling rank's loader rows, (token, target, position) per row in the packed stream's order.
template <class T>
std::vector<std::int64_t> loader_rows(const planned_step<T>& step, rank_index rank) {
  const batch& b = step.data.lengths;
  std::vector<std::int64_t> mine;
  for (const shard& s : step.loader[static_cast<std::size_t>(rank)].shards)
    for (token_count i = s.range.begin; i < s.range.end; ++i) {
      const auto g = static_cast<std::size_t>(b.offset(s.seq) + i);
      mine.insert(mine.end(), {step.data.tokens[g], step.target[g], step.position[g]});
    }
  return mine;
}

// Rows of (token, target, position) in the linear layout, split into columns.
inline linear_rows unpack_rows(const std::vector<std::int64_t>& rows, std::size_t attention_rows) {
  linear_rows out;
  out.n = rows.size() / 3;
  out.na = attention_rows;
  out.tok.resize(out.n), out.tgt.resize(out.n), out.pos.resize(out.n);
  for (std::size_t r = 0; r < out.n; ++r) out.tok[r] = rows[3 * r], out.tgt[r] = rows[3 * r + 1], out.pos[r] = rows[3 * r + 2];
  return out;
}

// The calling rank's loader rows moved to the linear layout (collective over the plan's ranks).
template <class T, communicator C>
linear_rows dispatch_rows(C& c, const planned_step<T>& step) {
  const std::vector<std::int64_t> mine = loader_rows(step, c.rank());
  std::vector<std::int64_t> rows(static_cast<std::size_t>(step.dispatch.ranks[static_cast<std::size_t>(c.rank())].target_tokens) * 3);
  execute_relayout(c, step.dispatch, std::span<const std::int64_t>(mine), std::span<std::int64_t>(rows), 3, "dispatch");
  return unpack_rows(rows, static_cast<std::size_t>(step.engine.rows(c.rank())));
}

// One layer's attention through the library's host engine, on the calling rank of the
// engine's communicator c: forward takes the layer's packed Q|K|V rows (linear layout, rotary
// embedding applied) and returns its O rows (linear layout), keeping the attention-layout Q, K,
// V, O and LSE in the layer's cache; backward takes dO (linear layout) and that cache and
// returns the packed dQ|dK|dV rows (linear layout). `layout` is the plan the engine's program
// was built from; `record`, when given, receives what the rank moved and launched
// (program/record.hpp). Collective: every rank calls it.
template <class T, communicator C>
struct host_attention {
  C& c;
  const gpt_config& cfg;
  const attention_engine<T>& engine;
  const plan& layout;
  const linear_rows& rows;
  execution_record* record = nullptr;

  std::vector<T> forward(const std::vector<T>& qkv_rows, layer_cache<T>& k) const {
    attend(qkv_rows, k);
    return output(k);
  }

  std::vector<T> backward(const std::vector<T>& d_o, const layer_cache<T>& k) const {
    attention_gradients g;
    attend_backward(output_gradient(d_o), k, g);
    return input_gradient(g);
  }

  // The two halves of each pass, for a trainer that works in the attention layout between
  // them (a sliced document's context, exec/slice_context.hpp):
  //   attend           Q|K|V rows to the attention layout and the attention: k.aq .. k.lse
  //   output           k.ao back to the linear layout
  //   output_gradient  dO rows to the attention layout
  //   attend_backward  the attention's backward into g (attention layout), from the global
  //                    k.ao and k.lse and dO in the attention layout
  //   input_gradient   g back to the linear layout as packed dQ|dK|dV rows
  struct attention_gradients {
    std::vector<T> dq, dk, dv;
  };

  void attend(const std::vector<T>& qkv_rows, layer_cache<T>& k) const {
    const auto D = static_cast<std::size_t>(cfg.q_width()), H = static_cast<std::size_t>(cfg.heads), kvw = static_cast<std::size_t>(cfg.kv_width());
    const std::size_t qkv = D + 2 * kvw, na = rows.na;
    std::vector<T> att(na * qkv);
    to_attention_layout(engine, c, layout, pass_kind::forward, std::span<const T>(qkv_rows), std::span<T>(att),
                        static_cast<std::int64_t>(qkv), record);
    k.aq = columns(att, na, qkv, 0, D), k.ak = columns(att, na, qkv, D, kvw), k.av = columns(att, na, qkv, D + kvw, kvw);
    k.ao.assign(na * D, T(0)), k.lse.assign(na * H, T(0));
    engine.forward(c, std::span<const T>(k.aq), std::span<const T>(k.ak), std::span<const T>(k.av), std::span<T>(k.ao),
                   std::span<T>(k.lse), record);
  }

  std::vector<T> output(const layer_cache<T>& k) const {
    const auto D = static_cast<std::size_t>(cfg.q_width());
    std::vector<T> o(rows.n * D);
    to_linear_layout(engine, c, layout, pass_kind::forward, std::span<const T>(k.ao), std::span<T>(o), static_cast<std::int64_t>(D),
                     record);
    return o;
  }

  std::vector<T> output_gradient(const std::vector<T>& d_o) const {
    const auto D = static_cast<std::size_t>(cfg.q_width());
    std::vector<T> a_do(rows.na * D);
    to_attention_layout(engine, c, layout, pass_kind::backward, std::span<const T>(d_o), std::span<T>(a_do),
                        static_cast<std::int64_t>(D), record);
    return a_do;
  }

  void attend_backward(const std::vector<T>& a_do, const layer_cache<T>& k, attention_gradients& g) const {
    const auto D = static_cast<std::size_t>(cfg.q_width()), kvw = static_cast<std::size_t>(cfg.kv_width());
    const std::size_t na = rows.na;
    g.dq.assign(na * D, T(0)), g.dk.assign(na * kvw, T(0)), g.dv.assign(na * kvw, T(0));
    engine.backward(c, std::span<const T>(k.aq), std::span<const T>(k.ak), std::span<const T>(k.av), std::span<const T>(k.ao),
                    std::span<const T>(a_do), std::span<const T>(k.lse), std::span<T>(g.dq), std::span<T>(g.dk), std::span<T>(g.dv),
                    record);
  }

  std::vector<T> input_gradient(const attention_gradients& g) const {
    const auto D = static_cast<std::size_t>(cfg.q_width()), kvw = static_cast<std::size_t>(cfg.kv_width());
    const std::size_t qkv = D + 2 * kvw;
    const std::vector<T> agrad = concat_columns<T>({&g.dq, &g.dk, &g.dv}, {D, kvw, kvw}, rows.na);
    std::vector<T> grad(rows.n * qkv);
    to_linear_layout(engine, c, layout, pass_kind::backward, std::span<const T>(agrad), std::span<T>(grad),
                     static_cast<std::int64_t>(qkv), record);
    return grad;
  }
};

// The embedding of the rows' tokens: [n][D]. A TP shard holds the vocabulary's block
// shard.index (cfg.vocab tokens, tensor_parallel.hpp) and gives zeros for the other tokens.
template <class T>
std::vector<T> embed(const gpt_config& cfg, const gpt_params<T>& w, const linear_rows& rows, const tp_shard& shard = {}) {
  const auto D = static_cast<std::size_t>(cfg.dim);
  const std::int64_t first = std::int64_t{shard.index} * cfg.vocab;
  std::vector<T> x(rows.n * D, T(0));
  for (std::size_t r = 0; r < rows.n; ++r)
    if (rows.tok[r] >= first && rows.tok[r] < first + cfg.vocab)
      std::copy_n(w.embed.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rows.tok[r] - first) * D), D,
                  x.begin() + static_cast<std::ptrdiff_t>(r * D));
  return x;
}

// Adds the embedding's gradient: dx [n][D] into the rows' token vectors (those of the shard's
// vocabulary).
template <class T>
void embed_backward(const gpt_config& cfg, gpt_params<T>& g, const linear_rows& rows, const std::vector<T>& dx, const tp_shard& shard = {}) {
  const auto D = static_cast<std::size_t>(cfg.dim);
  const std::int64_t first = std::int64_t{shard.index} * cfg.vocab;
  for (std::size_t r = 0; r < rows.n; ++r)
    if (rows.tok[r] >= first && rows.tok[r] < first + cfg.vocab)
      for (std::size_t i = 0; i < D; ++i) g.embed[static_cast<std::size_t>(rows.tok[r] - first) * D + i] += dx[r * D + i];
}

// The model parts of one layer (step/block.hpp's model_part), forward: each reads what the
// one before left in the layer's cache. attention_input_forward: RMSNorm, Q/K/V projections and
// the rotary embedding of k.x; returns the packed Q|K|V rows for the attention.
template <class T>
std::vector<T> attention_input_forward(const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw, layer_cache<T>& k) {
  const auto D = static_cast<std::size_t>(cfg.dim), Q = static_cast<std::size_t>(cfg.q_width());
  const auto H = static_cast<std::size_t>(cfg.heads), KV = static_cast<std::size_t>(cfg.kv_heads), hd = static_cast<std::size_t>(cfg.head_dim());
  const std::size_t kvw = KV * hd, n = rows.n;
  rmsnorm(k.x, lw.norm1, k.h1, k.inv1, n, D, cfg.eps);
  matmul(k.h1, lw.wq, k.q, n, D, Q);
  matmul(k.h1, lw.wk, k.k, n, D, kvw);
  matmul(k.h1, lw.wv, k.v, n, D, kvw);
  rope(k.q, rows.pos, H, hd, cfg.rope_base, 1);
  rope(k.k, rows.pos, KV, hd, cfg.rope_base, 1);
  return concat_columns<T>({&k.q, &k.k, &k.v}, {Q, kvw, kvw}, n);
}

// attention_output: the output projection of the attention's k.o and the residual: k.x1 (a
// TP shard's partial sum: the residual from shard 0 only).
template <class T>
void attention_output_forward(const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw, layer_cache<T>& k,
                              const tp_shard& shard = {}) {
  const auto D = static_cast<std::size_t>(cfg.dim), Q = static_cast<std::size_t>(cfg.q_width());
  matmul(k.o, lw.wo, k.x1, rows.n, Q, D);
  if (shard.holds_residual()) add(k.x1, k.x);
}

// mlp: RMSNorm, W1, SiLU, W2 and the residual of k.x1; returns the layer's output (a TP
// shard's partial sum: the residual from shard 0 only).
template <class T>
std::vector<T> mlp_forward(const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw, layer_cache<T>& k,
                           const tp_shard& shard = {}) {
  const auto D = static_cast<std::size_t>(cfg.dim), F = static_cast<std::size_t>(cfg.hidden);
  const std::size_t n = rows.n;
  rmsnorm(k.x1, lw.norm2, k.h2, k.inv2, n, D, cfg.eps);
  matmul(k.h2, lw.w1, k.z, n, D, F);
  k.act.resize(k.z.size());
  for (std::size_t i = 0; i < k.z.size(); ++i) k.act[i] = k.z[i] * sigmoid(k.z[i]);
  std::vector<T> out;
  matmul(k.act, lw.w2, out, n, F, D);
  if (shard.holds_residual()) add(out, k.x1);
  return out;
}

// One layer's forward from its input k.x, filling the rest of its cache; returns its output:
// the parts above, the attention between them. `attention` runs the layer's attention
// (host_attention, or device_attention on a GPU).
template <class T, class Attention>
std::vector<T> layer_forward(const Attention& attention, const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw,
                             layer_cache<T>& k) {
  const std::vector<T> qkv = attention_input_forward(cfg, rows, lw, k);
  k.o = attention.forward(qkv, k);
  attention_output_forward(cfg, rows, lw, k);
  return mlp_forward(cfg, rows, lw, k);
}

// The parts' backward passes, in the order they run; each adds into the layer's parameter
// gradients `gl`. mlp_backward: from the gradient dx of the layer's output, returns the
// gradient of x1 (the residual's included; a TP shard's partial sum, the residual's from
// shard 0 only).
template <class T>
std::vector<T> mlp_backward(const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw, layer_params<T>& gl,
                            const layer_cache<T>& k, const std::vector<T>& dx, const tp_shard& shard = {}) {
  const auto D = static_cast<std::size_t>(cfg.dim), F = static_cast<std::size_t>(cfg.hidden);
  const std::size_t n = rows.n;
  // x_out = x1 + silu(norm2(x1) W1) W2
  std::vector<T> dact, dz, dh2, dx1;
  matmul_backward(k.act, lw.w2, dx, dact, gl.w2, n, F, D);
  dz.resize(dact.size());
  for (std::size_t i = 0; i < dz.size(); ++i) {
    const T sg = sigmoid(k.z[i]);
    dz[i] = dact[i] * sg * (T(1) + k.z[i] * (T(1) - sg));
  }
  matmul_backward(k.h2, lw.w1, dz, dh2, gl.w1, n, D, F);
  rmsnorm_backward(k.x1, lw.norm2, k.inv2, dh2, dx1, gl.norm2, n, D);
  if (shard.holds_residual()) add(dx1, dx);
  return dx1;
}

// attention_output_backward: from the gradient dx1 of x1, returns dO (the attention's output
// gradient, linear layout).
template <class T>
std::vector<T> attention_output_backward(const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw, layer_params<T>& gl,
                                         const layer_cache<T>& k, const std::vector<T>& dx1) {
  const auto D = static_cast<std::size_t>(cfg.dim), Q = static_cast<std::size_t>(cfg.q_width());
  std::vector<T> d_o;
  matmul_backward(k.o, lw.wo, dx1, d_o, gl.wo, rows.n, Q, D);
  return d_o;
}

// attention_input_backward: from the attention's packed dQ|dK|dV rows and dx1 (the residual
// path), returns the gradient of the layer's input (a TP shard's partial sum, the residual's
// from shard 0 only).
template <class T>
std::vector<T> attention_input_backward(const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw, layer_params<T>& gl,
                                        const layer_cache<T>& k, const std::vector<T>& grad, const std::vector<T>& dx1,
                                        const tp_shard& shard = {}) {
  const auto D = static_cast<std::size_t>(cfg.dim), Q = static_cast<std::size_t>(cfg.q_width());
  const auto H = static_cast<std::size_t>(cfg.heads), KV = static_cast<std::size_t>(cfg.kv_heads), hd = static_cast<std::size_t>(cfg.head_dim());
  const std::size_t kvw = KV * hd, qkv = Q + 2 * kvw, n = rows.n;
  // x1 = x + attention(rope(norm1(x) Wq), rope(norm1(x) Wk), norm1(x) Wv) Wo
  std::vector<T> dxq, dxk, dxv, dxn;
  std::vector<T> dq = columns(grad, n, qkv, 0, Q), dk = columns(grad, n, qkv, Q, kvw), dv = columns(grad, n, qkv, Q + kvw, kvw);
  rope(dq, rows.pos, H, hd, cfg.rope_base, -1);
  rope(dk, rows.pos, KV, hd, cfg.rope_base, -1);
  matmul_backward(k.h1, lw.wq, dq, dxq, gl.wq, n, D, Q);
  matmul_backward(k.h1, lw.wk, dk, dxk, gl.wk, n, D, kvw);
  matmul_backward(k.h1, lw.wv, dv, dxv, gl.wv, n, D, kvw);
  add(dxq, dxk);
  add(dxq, dxv);
  rmsnorm_backward(k.x, lw.norm1, k.inv1, dxq, dxn, gl.norm1, n, D);
  if (shard.holds_residual()) add(dxn, dx1);
  return dxn;
}

// One layer's backward from the gradient of its output, adding into its parameter gradients
// `gl`; returns the gradient of its input: the parts' backward passes, the attention's between
// them. The cache must be complete (recompute first).
template <class T, class Attention>
std::vector<T> layer_backward(const Attention& attention, const gpt_config& cfg, const linear_rows& rows, const layer_params<T>& lw,
                              layer_params<T>& gl, const layer_cache<T>& k, const std::vector<T>& dx) {
  const std::vector<T> dx1 = mlp_backward(cfg, rows, lw, gl, k, dx);
  const std::vector<T> d_o = attention_output_backward(cfg, rows, lw, gl, k, dx1);
  const std::vector<T> grad = attention.backward(d_o, k);
  return attention_input_backward(cfg, rows, lw, gl, k, grad, dx1);
}

// What the head keeps between its forward and backward.
template <class T>
struct head_cache {
  std::vector<T> x, hf, inv_f, logits, dlogits;
  std::vector<T> stats;  //!< [tp shards][rows][2]: cross_entropy_statistics of every shard
};

// Final RMSNorm and LM head of the rows (a TP shard: its vocabulary block's logits), and the
// shard's cross-entropy statistics at its place in h.stats; the other shards' places are left
// for the program's all-gather (step/block.hpp loss_statistics).
template <class T>
void head_logits(const gpt_config& cfg, const gpt_params<T>& w, const linear_rows& rows, std::vector<T> x, head_cache<T>& h,
                 const tp_shard& shard = {}) {
  const auto D = static_cast<std::size_t>(cfg.dim), V = static_cast<std::size_t>(cfg.vocab);
  h.x = std::move(x);
  rmsnorm(h.x, w.norm_final, h.hf, h.inv_f, rows.n, D, cfg.eps);
  matmul(h.hf, w.lm_head, h.logits, rows.n, D, V);
  h.stats.assign(static_cast<std::size_t>(shard.tp) * rows.n * 2, T(0));
  cross_entropy_statistics(h.logits, rows.tgt, V, std::int64_t{shard.index} * cfg.vocab,
                           std::span<T>(h.stats).subspan(static_cast<std::size_t>(shard.index) * rows.n * 2, rows.n * 2));
}

// The rows' summed cross-entropy from every shard's statistics (each row's loss times `scale`
// goes into h.dlogits).
template <class T>
double head_loss(const gpt_config& cfg, const linear_rows& rows, head_cache<T>& h, double scale, const tp_shard& shard = {}) {
  return cross_entropy_from_statistics(h.logits, rows.tgt, static_cast<std::size_t>(cfg.vocab), std::int64_t{shard.index} * cfg.vocab,
                                       std::span<const T>(h.stats), shard.tp, h.dlogits, scale);
}

// Final RMSNorm, LM head and cross-entropy of the rows on one rank holding the whole head;
// returns the rows' summed cross-entropy.
template <class T>
double head_forward(const gpt_config& cfg, const gpt_params<T>& w, const linear_rows& rows, std::vector<T> x, head_cache<T>& h,
                    double scale) {
  head_logits(cfg, w, rows, std::move(x), h);
  return head_loss(cfg, rows, h, scale);
}

// The head's backward: adds into the LM head and final norm gradients; returns dx (a TP
// shard's partial sum).
template <class T>
std::vector<T> head_backward(const gpt_config& cfg, const gpt_params<T>& w, gpt_params<T>& g, const linear_rows& rows,
                             const head_cache<T>& h) {
  const auto D = static_cast<std::size_t>(cfg.dim), V = static_cast<std::size_t>(cfg.vocab);
  std::vector<T> dh, dx;
  matmul_backward(h.hf, w.lm_head, h.dlogits, dh, g.lm_head, rows.n, D, V);
  rmsnorm_backward(h.x, w.norm_final, h.inv_f, dh, dx, g.norm_final, rows.n, D);
  return dx;
}

// Activation values a cache holds.
template <class T>
double cached_values(const layer_cache<T>& k) {
  double values = 0;
  for (const std::vector<T>* t : {&k.x, &k.inv1, &k.h1, &k.q, &k.k, &k.v, &k.aq, &k.ak, &k.av, &k.ao, &k.lse, &k.o, &k.x1, &k.inv2,
                                  &k.h2, &k.z, &k.act})
    values += static_cast<double>(t->size());
  for (const auto* held : {&k.ck, &k.cv})
    for (const std::vector<T>& t : *held) values += static_cast<double>(t.size());
  return values;
}

}  // namespace train_gpt
