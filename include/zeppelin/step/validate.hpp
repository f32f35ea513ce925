// zeppelin/step/validate.hpp
// The one check of a step plan (step/step_plan.hpp) against its cluster and model.
//   in : a step plan, the cluster topology, the model
//   out: nothing, or invalid_argument naming the replica, stage, micro-batch, piece or
//        document and the numbers of the first violation of:
//   - shape: the plan's nodes x gpus_per_node are the topology's; at least one document,
//     each of 1 .. max_sequence_length tokens; at least one replica;
//   - replicas: degrees >= 1; tp divides the model's heads and K/V heads; tp x cp x pp
//     ranks, inside the cluster, no rank in two places; per virtual stage (pp x the
//     schedule's virtual stages of them) at least one layer, the model's layers in all;
//     every stage and TP index's CP ranks shaped alike over nodes (step/cp_group_topology.hpp);
//   - micro-batches: at least one per replica, each with at least one piece; a piece is a
//     non-empty range inside its document, at most one piece of a document per
//     micro-batch; its CP layout a valid plan (core/validate.hpp) over the CP group's
//     topology for the pieces' lengths, in one micro-batch;
//   - coverage: every document's tokens in exactly one piece, its pieces in one replica,
//     contiguous, in forward order; a document in several pieces needs chunk-level 1F1B
//     with all its pieces in one chain (its backward then runs the later slices first);
//   - recompute: one count per (virtual stage, micro-batch), each in [0, the stage's layers];
//   - sync: all_reduce and sharded_optimizer with several replicas need replicas of the same
//     tp, pp and layers, whose ranks hold the same parameters (fully_sharded and switching
//     bring differently sharded replicas together: step/build.hpp).
// Cost: O(pieces + ranks + layout shards). Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/step/cp_group_topology.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <variant>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

namespace detail {

// The chain (index into chunk_one_f_one_b::chains, or the micro-batch itself without chains)
// of each micro-batch of a replica.
inline std::vector<int> chain_of_micro_batches(const step_replica& r) {
  const auto m = static_cast<std::size_t>(r.micro_batch_count());
  std::vector<int> out(m);
  const auto* chunked = std::get_if<chunk_one_f_one_b>(&r.schedule.policy);
  if (!chunked || chunked->chains.empty()) {
    for (std::size_t k = 0; k < m; ++k) out[k] = static_cast<int>(k);
    return out;
  }
  std::size_t k = 0;
  for (std::size_t c = 0; c < chunked->chains.size(); ++c) {
    const int n = chunked->chains[c];
    ZEPPELIN_EXPECTS(n >= 1 && k + static_cast<std::size_t>(n) <= m, "step plan: the schedule's chains must cover the micro-batches",
                     {{"chain", double(c)}, {"chunks", double(n)}, {"micro_batches", double(m)}});
    for (int i = 0; i < n; ++i) out[k++] = static_cast<int>(c);
  }
  ZEPPELIN_EXPECTS(k == m, "step plan: the schedule's chains must cover the micro-batches",
                   {{"chained", double(k)}, {"micro_batches", double(m)}});
  return out;
}

}  // namespace detail

//! Throws invalid_argument for the first violation listed in the file comment.
inline void validate(const step_plan& p, const topology& cluster, const model_config& model) {
  validate(model);
  ZEPPELIN_EXPECTS(p.nodes == cluster.nodes() && p.gpus_per_node == cluster.gpus_per_node(),
                   "step plan: its cluster is not the topology's",
                   {{"nodes", double(p.nodes)}, {"gpus_per_node", double(p.gpus_per_node)}, {"topology_nodes", double(cluster.nodes())},
                    {"topology_gpus_per_node", double(cluster.gpus_per_node())}});
  ZEPPELIN_EXPECTS(!p.documents.empty(), "step plan: no documents", {});
  for (std::size_t d = 0; d < p.documents.size(); ++d)
    ZEPPELIN_EXPECTS(p.documents[d] >= 1 && p.documents[d] <= max_sequence_length, "step plan: a document length must lie in [1, max_sequence_length]",
                     {{"document", double(d)}, {"length", double(p.documents[d])}});
  ZEPPELIN_EXPECTS(!p.replicas.empty(), "step plan: no replicas", {});

  const auto N = static_cast<std::size_t>(cluster.num_ranks());
  std::vector<std::int32_t> owner(N, -1);  // replica of each rank
  // per document: its pieces as (replica, micro-batch, begin, end)
  struct piece_at {
    std::int32_t replica, micro_batch;
    token_count begin, end;
  };
  std::vector<std::vector<piece_at>> pieces(p.documents.size());

  for (std::size_t ri = 0; ri < p.replicas.size(); ++ri) {
    const step_replica& r = p.replicas[ri];
    const double rd = static_cast<double>(ri);
    ZEPPELIN_EXPECTS(r.tp >= 1 && r.cp >= 1 && r.pp >= 1, "step plan: a replica's degrees must be at least 1",
                     {{"replica", rd}, {"tp", double(r.tp)}, {"cp", double(r.cp)}, {"pp", double(r.pp)}});
    ZEPPELIN_EXPECTS(model.heads % r.tp == 0 && model.kv_heads % r.tp == 0, "step plan: tp must divide the model's heads and K/V heads",
                     {{"replica", rd}, {"tp", double(r.tp)}, {"heads", double(model.heads)}, {"kv_heads", double(model.kv_heads)}});
    const long long size = static_cast<long long>(r.tp) * r.cp * r.pp;
    ZEPPELIN_EXPECTS(static_cast<long long>(r.ranks.size()) == size, "step plan: a replica needs tp x cp x pp ranks",
                     {{"replica", rd}, {"ranks", double(r.ranks.size())}, {"tp_cp_pp", double(size)}});
    for (const rank_index g : r.ranks) {
      ZEPPELIN_EXPECTS(g >= 0 && static_cast<std::size_t>(g) < N, "step plan: a replica's rank is outside the cluster",
                       {{"replica", rd}, {"rank", double(g)}, {"ranks", double(N)}});
      ZEPPELIN_EXPECTS(owner[static_cast<std::size_t>(g)] < 0, "step plan: a rank appears twice",
                       {{"replica", rd}, {"rank", double(g)}});
      owner[static_cast<std::size_t>(g)] = static_cast<std::int32_t>(ri);
    }
    const int V = r.schedule.virtual_stages();
    ZEPPELIN_EXPECTS(r.layers.size() == static_cast<std::size_t>(r.pp) * static_cast<std::size_t>(V),
                     "step plan: a replica needs the layers of each virtual stage (pp x virtual stages)",
                     {{"replica", rd}, {"entries", double(r.layers.size())}, {"pp", double(r.pp)}, {"virtual_stages", double(V)}});
    long long layers = 0;
    for (std::size_t v = 0; v < r.layers.size(); ++v) {
      ZEPPELIN_EXPECTS(r.layers[v] >= 1, "step plan: every virtual stage needs a layer",
                       {{"replica", rd}, {"virtual_stage", double(v)}, {"layers", double(r.layers[v])}});
      layers += r.layers[v];
    }
    ZEPPELIN_EXPECTS(layers == model.layers, "step plan: a replica's virtual stages must hold the model's layers",
                     {{"replica", rd}, {"layers", double(layers)}, {"model_layers", double(model.layers)}});
    // the CP groups' shape over nodes: the layout's topology, alike for every stage and TP index
    const topology shape = cp_group_topology(cluster, r, 0, 0);
    for (int s = 0; s < r.pp; ++s)
      for (int t = 0; t < r.tp; ++t) {
        if (s == 0 && t == 0) continue;
        const topology other = cp_group_topology(cluster, r, s, t);
        ZEPPELIN_EXPECTS(other.nodes() == shape.nodes() && other.gpu_to_nic() == shape.gpu_to_nic(),
                         "step plan: every stage and TP index of a replica needs its CP ranks placed alike over nodes",
                         {{"replica", rd}, {"stage", double(s)}, {"tp_index", double(t)}, {"nodes", double(other.nodes())},
                          {"expected_nodes", double(shape.nodes())}});
      }

    const std::size_t M = r.micro_batches.size();
    ZEPPELIN_EXPECTS(M >= 1, "step plan: a replica needs at least one micro-batch", {{"replica", rd}});
    for (std::size_t k = 0; k < M; ++k) {
      const step_micro_batch& mb = r.micro_batches[k];
      ZEPPELIN_EXPECTS(!mb.pieces.empty(), "step plan: a micro-batch needs at least one piece", {{"replica", rd}, {"micro_batch", double(k)}});
      std::vector<token_count> lengths;
      lengths.reserve(mb.pieces.size());
      for (std::size_t i = 0; i < mb.pieces.size(); ++i) {
        const step_piece& x = mb.pieces[i];
        ZEPPELIN_EXPECTS(x.document >= 0 && static_cast<std::size_t>(x.document) < p.documents.size(), "step plan: a piece names an unknown document",
                         {{"replica", rd}, {"micro_batch", double(k)}, {"piece", double(i)}, {"document", double(x.document)}});
        const token_count length = p.documents[static_cast<std::size_t>(x.document)];
        ZEPPELIN_EXPECTS(x.begin >= 0 && x.begin < x.end && x.end <= length, "step plan: a piece must be a non-empty range inside its document",
                         {{"replica", rd}, {"micro_batch", double(k)}, {"piece", double(i)}, {"document", double(x.document)},
                          {"begin", double(x.begin)}, {"end", double(x.end)}, {"length", double(length)}});
        for (std::size_t j = 0; j < i; ++j)
          ZEPPELIN_EXPECTS(mb.pieces[j].document != x.document, "step plan: a micro-batch holds at most one piece of a document",
                           {{"replica", rd}, {"micro_batch", double(k)}, {"document", double(x.document)}});
        pieces[static_cast<std::size_t>(x.document)].push_back({static_cast<std::int32_t>(ri), static_cast<std::int32_t>(k), x.begin, x.end});
        lengths.push_back(x.tokens());
      }
      ZEPPELIN_EXPECTS(mb.layout.nodes == shape.nodes() && mb.layout.gpus_per_node == shape.gpus_per_node(),
                       "step plan: a micro-batch's CP layout must be planned over its CP group",
                       {{"replica", rd}, {"micro_batch", double(k)}, {"nodes", double(mb.layout.nodes)},
                        {"gpus_per_node", double(mb.layout.gpus_per_node)}, {"cp_nodes", double(shape.nodes())},
                        {"cp_gpus_per_node", double(shape.gpus_per_node())}});
      validate(mb.layout, batch(std::move(lengths)), shape);
      ZEPPELIN_EXPECTS(mb.layout.micro_batches() == 1, "step plan: a micro-batch's CP layout must run in one pass",
                       {{"replica", rd}, {"micro_batch", double(k)}, {"layout_micro_batches", double(mb.layout.micro_batches())}});
    }
    ZEPPELIN_EXPECTS(r.recompute.size() == r.layers.size() * M, "step plan: one recompute count per virtual stage and micro-batch",
                     {{"replica", rd}, {"entries", double(r.recompute.size())}, {"expected", double(r.layers.size() * M)}});
    for (std::size_t v = 0; v < r.layers.size(); ++v)
      for (std::size_t k = 0; k < M; ++k) {
        const std::int32_t n = r.recompute[v * M + k];
        ZEPPELIN_EXPECTS(n >= 0 && n <= r.layers[v], "step plan: recomputed layers must lie in [0, the virtual stage's layers]",
                         {{"replica", rd}, {"virtual_stage", double(v)}, {"micro_batch", double(k)}, {"recomputed", double(n)},
                          {"layers", double(r.layers[v])}});
      }
  }

  for (std::size_t d = 0; d < pieces.size(); ++d) {
    auto& at = pieces[d];
    ZEPPELIN_EXPECTS(!at.empty(), "step plan: a document is in no micro-batch", {{"document", double(d)}});
    std::sort(at.begin(), at.end(), [](const piece_at& a, const piece_at& b) { return a.begin < b.begin; });
    token_count covered = 0;
    for (std::size_t i = 0; i < at.size(); ++i) {
      ZEPPELIN_EXPECTS(at[i].begin == covered, "step plan: a document's pieces must cover it exactly once, contiguously",
                       {{"document", double(d)}, {"expected_begin", double(covered)}, {"begin", double(at[i].begin)}});
      covered = at[i].end;
      if (i == 0) continue;
      ZEPPELIN_EXPECTS(at[i].replica == at[0].replica, "step plan: a document's pieces must run in one replica",
                       {{"document", double(d)}, {"replica", double(at[i].replica)}, {"first_replica", double(at[0].replica)}});
      ZEPPELIN_EXPECTS(at[i].micro_batch > at[i - 1].micro_batch, "step plan: a document's slices must enter the pipeline in order",
                       {{"document", double(d)}, {"micro_batch", double(at[i].micro_batch)}, {"previous", double(at[i - 1].micro_batch)}});
    }
    ZEPPELIN_EXPECTS(covered == p.documents[d], "step plan: a document's pieces must cover all its tokens",
                     {{"document", double(d)}, {"covered", double(covered)}, {"length", double(p.documents[d])}});
    if (at.size() == 1) continue;
    const step_replica& r = p.replicas[static_cast<std::size_t>(at[0].replica)];
    ZEPPELIN_EXPECTS(r.schedule.kind() == pipeline_schedule_kind::chunk_one_f_one_b,
                     "step plan: a document sliced over micro-batches needs chunk-level 1F1B",
                     {{"document", double(d)}, {"replica", double(at[0].replica)}});
    const std::vector<int> chain = detail::chain_of_micro_batches(r);
    for (const piece_at& x : at)
      ZEPPELIN_EXPECTS(chain[static_cast<std::size_t>(x.micro_batch)] == chain[static_cast<std::size_t>(at[0].micro_batch)],
                       "step plan: a sliced document's micro-batches must form one chain of the schedule",
                       {{"document", double(d)}, {"micro_batch", double(x.micro_batch)}, {"first_micro_batch", double(at[0].micro_batch)}});
  }

  if (p.sync == gradient_sync::switching || p.sync == gradient_sync::fully_sharded || p.replicas.size() == 1) return;
  const step_replica& a = p.replicas.front();
  for (std::size_t ri = 1; ri < p.replicas.size(); ++ri) {
    const step_replica& b = p.replicas[ri];
    ZEPPELIN_EXPECTS(b.tp == a.tp && b.pp == a.pp && b.layers == a.layers,
                     "step plan: replicas that all-reduce or reduce-scatter their gradients must hold the same parameters (tp, pp, "
                     "layers); use switching (or fully_sharded) for replicas that differ",
                     {{"replica", double(ri)}, {"tp", double(b.tp)}, {"pp", double(b.pp)}, {"first_tp", double(a.tp)}, {"first_pp", double(a.pp)}});
  }
}

ZEPPELIN_NAMESPACE_END
