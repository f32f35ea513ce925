// tests/support/random_step_plan.hpp
// random_step_case(seed): a small seeded step plan of every shape the step program runs, for
// property tests: 1 - 2 nodes of 2 or 4 GPUs (a NIC per GPU or one per node); a model of
// 2 - 6 layers with GQA; either homogeneous replicas (TP, CP, PP, DP degrees, any gradient
// sync) or two heterogeneous replicas of different <TP, CP, PP> (switching); GPipe, 1F1B,
// interleaved or chunk-level 1F1B with documents sliced over the micro-batches of a chain;
// each micro-batch laid out by hierarchical, even_split, allgather, per_document or ulysses
// with random launch, engine, router and remap options; recomputation per (virtual stage,
// micro-batch) at random. Elements of 8 bytes, as the host runner's doubles.
#pragma once

#include <zeppelin/core/model.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/route/proxy.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/step/program.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "random_int.hpp"

namespace zeppelin_test {

struct random_step_case {
  zeppelin::topology cluster;
  zeppelin::model_config model;
  zeppelin::step_plan plan;
  zeppelin::step_program_options options;
  std::string description;
};

namespace detail {

// A layout policy that picks a partitioner per micro-batch (hierarchical when the pick
// refuses the micro-batch).
struct random_layout {
  zeppelin::random_generator* rng;
  zeppelin::plan partition(const zeppelin::batch& b, const zeppelin::topology& t) const {
    static constexpr const char* names[] = {"hierarchical", "even_split", "allgather", "per_document", "ulysses"};
    const std::string_view name = names[pick(*rng, 0, 4)];
    const zeppelin::partitioner_settings s{.capacity = b.total_tokens()};
    try {
      return zeppelin::partition(zeppelin::partitioner_by_name(name, s), b, t);
    } catch (const zeppelin::error&) {
      return zeppelin::partition(zeppelin::partitioner_by_name("hierarchical", s), b, t);
    }
  }
};

// Random recomputation counts (any table a checkpoint policy could give).
struct random_recompute {
  zeppelin::random_generator* rng;
  [[nodiscard]] int recomputed_layers(const zeppelin::checkpoint_site& site) const { return pick(*rng, 0, site.layers); }
  friend bool operator==(const random_recompute&, const random_recompute&) = default;
};

// The chains of `m` micro-batches: with chunk-level 1F1B, runs of 2 - 3 that a sliced
// document spans; else every micro-batch its own.
inline std::vector<int> random_chains(zeppelin::random_generator& rng, int m, bool slices) {
  std::vector<int> chains;
  for (int k = 0; k < m;) {
    const int chain = slices && k + 1 < m && pick(rng, 0, 1) == 1 ? pick(rng, 2, std::min(3, m - k)) : 1;
    chains.push_back(chain);
    k += chain;
  }
  return chains;
}

// The pieces of micro-batches in `chains`: a chain of n > 1 slices one document over its n
// micro-batches (and adds 0 - 2 whole documents to each), a chain of 1 holds 1 - 3 whole ones.
inline void random_pieces(zeppelin::random_generator& rng, const std::vector<int>& chains, std::vector<zeppelin::token_count>& documents,
                          std::vector<std::vector<zeppelin::step_piece>>& out) {
  out.clear();
  for (const int chain : chains) {
    const std::size_t k = out.size();
    out.resize(k + static_cast<std::size_t>(chain));
    if (chain > 1) {
      const auto d = static_cast<std::int64_t>(documents.size());
      zeppelin::token_count at = 0;
      for (int i = 0; i < chain; ++i) {
        const zeppelin::token_count n = pick(rng, 1, 24);
        out[k + static_cast<std::size_t>(i)].push_back({d, at, at + n});
        at += n;
      }
      documents.push_back(at);
    }
    for (int i = 0; i < chain; ++i) {
      const int whole = chain > 1 ? pick(rng, 0, 2) : pick(rng, 1, 3);
      for (int w = 0; w < whole; ++w) {
        const zeppelin::token_count n = pick(rng, 1, 40);
        out[k + static_cast<std::size_t>(i)].push_back({static_cast<std::int64_t>(documents.size()), 0, n});
        documents.push_back(n);
      }
    }
  }
}

inline zeppelin::any_pipeline_schedule random_schedule(zeppelin::random_generator& rng, int layers, int pp, bool& slices) {
  using zeppelin::pipeline_schedule_kind;
  const int kind = pick(rng, 0, 3);
  slices = kind == 3;
  if (kind == 2 && layers >= 2 * pp) return zeppelin::make_pipeline_schedule(pipeline_schedule_kind::interleaved, 2);
  if (kind == 0) return zeppelin::make_pipeline_schedule(pipeline_schedule_kind::gpipe);
  if (kind == 3) return {zeppelin::chunk_one_f_one_b{}};
  return zeppelin::make_pipeline_schedule(pipeline_schedule_kind::one_f_one_b);
}

}  // namespace detail

inline random_step_case random_step_plan(std::uint64_t seed) {
  using namespace zeppelin;
  random_generator rng(seed, 52);
  topology_config tc;
  tc.name = "random";
  tc.nodes = pick(rng, 1, 2);
  tc.gpus_per_node = pick(rng, 0, 1) == 0 ? 2 : 4;
  tc.nics_per_node = pick(rng, 0, 1) == 0 ? 0 : 1;
  const topology cluster(tc);
  const int N = cluster.num_ranks();

  model_config m;
  m.name = "random";
  m.heads = pick(rng, 0, 1) == 0 ? 2 : 4;
  m.kv_heads = pick(rng, 1, 2);
  m.head_dim = 4;
  m.hidden = m.heads * m.head_dim;
  m.ffn_hidden = 2 * m.hidden;
  m.vocab = 16;
  m.layers = pick(rng, 2, 6);
  m.bytes_per_element = 8;

  step_program_options o;
  o.activation_bytes = o.parameter_bytes = o.gradient_bytes = o.accumulator_bytes = 8;
  o.attention.launch = pick(rng, 0, 1) == 0 ? launch_policy::per_group : launch_policy::fused_round;
  o.attention.engine = pick(rng, 0, 1) == 0 ? engine_policy::in_order : engine_policy::prioritized;
  if (pick(rng, 0, 2) == 0) o.attention.router = any_router{proxy_router{}};
  if (pick(rng, 0, 2) == 0) o.attention.remap = remap_objective::max_send;

  const detail::random_layout layout{&rng};
  const detail::random_recompute recompute{&rng};
  random_step_case out{cluster, m, {}, o, {}};
  std::vector<token_count> documents;
  const auto degree = [&](int limit) {  // a power of two in [1, limit]
    int d = 1;
    while (d * 2 <= limit && pick(rng, 0, 1) == 1) d *= 2;
    return d;
  };
  const int tp_limit = std::min(m.kv_heads, tc.gpus_per_node);
  if (N >= 4 && pick(rng, 0, 3) == 0) {
    // two replicas of their own degrees on the two halves of the cluster
    step_plan p{tc.nodes, tc.gpus_per_node, {}, {}, pick(rng, 0, 1) == 0 ? gradient_sync::switching : gradient_sync::fully_sharded};
    std::string shapes;
    for (int h = 0; h < 2; ++h) {
      const int half = N / 2, tp = degree(std::min(tp_limit, half));
      const int cp = degree(half / tp), pp = std::min(degree(half / (tp * cp)), m.layers);
      bool slices = false;
      any_pipeline_schedule schedule = detail::random_schedule(rng, m.layers, pp, slices);
      std::vector<std::vector<step_piece>> pieces;
      const std::vector<int> chains = detail::random_chains(rng, pick(rng, 1, 4), slices);
      detail::random_pieces(rng, chains, documents, pieces);
      if (slices) schedule = {chunk_one_f_one_b{chains}};
      std::vector<rank_index> ranks;
      for (int s = 0; s < pp; ++s)
        for (int c = 0; c < cp; ++c)
          for (int t = 0; t < tp; ++t) ranks.push_back(h * half + t + tp * (c + cp * s));
      const tp_collectives mode = pick(rng, 0, 1) == 0 ? tp_collectives::all_reduce : tp_collectives::sequence_parallel;
      p.replicas.push_back(make_replica(cluster, m, tp, cp, pp, std::move(ranks), mode, schedule, std::move(pieces), layout, recompute));
      shapes += (h ? " + " : "") + std::to_string(tp) + "x" + std::to_string(cp) + "x" + std::to_string(pp) + " " +
                std::string(to_string(schedule.kind()));
    }
    p.documents = std::move(documents);
    const std::string sync(to_string(p.sync));
    out.plan = std::move(p);
    out.description = "seed " + std::to_string(seed) + ": heterogeneous " + shapes + " " + sync;
    return out;
  }
  step_shape shape;
  shape.layout.tp = degree(tp_limit);
  shape.layout.cp = degree(N / shape.layout.tp);
  shape.layout.pp = std::min(degree(N / (shape.layout.tp * shape.layout.cp)), m.layers);
  shape.layout.dp = pick(rng, 1, N / (shape.layout.tp * shape.layout.cp * shape.layout.pp));
  shape.tp_mode = pick(rng, 0, 1) == 0 ? tp_collectives::all_reduce : tp_collectives::sequence_parallel;
  shape.sync = static_cast<gradient_sync>(pick(rng, 0, 3));
  bool slices = false;
  shape.schedule = detail::random_schedule(rng, m.layers, shape.layout.pp, slices);
  // chunk-level 1F1B: every replica the same chain shape (one schedule for all)
  const int M = pick(rng, 1, 4);
  std::vector<std::vector<std::vector<step_piece>>> pieces(static_cast<std::size_t>(shape.layout.dp));
  const std::vector<int> chains = detail::random_chains(rng, M, slices);
  for (auto& replica : pieces) detail::random_pieces(rng, chains, documents, replica);
  if (slices) shape.schedule = {chunk_one_f_one_b{chains}};
  out.plan = make_step_plan(cluster, m, std::move(documents), std::move(pieces), shape, layout, recompute);
  out.description = "seed " + std::to_string(seed) + ": " + std::to_string(shape.layout.tp) + "x" + std::to_string(shape.layout.cp) + "x" +
                    std::to_string(shape.layout.pp) + "x" + std::to_string(shape.layout.dp) + " " + std::string(to_string(shape.schedule.kind())) +
                    " " + std::string(to_string(shape.tp_mode)) + " " + std::string(to_string(shape.sync)) + " on " + std::to_string(tc.nodes) +
                    "x" + std::to_string(tc.gpus_per_node);
  return out;
}

}  // namespace zeppelin_test
