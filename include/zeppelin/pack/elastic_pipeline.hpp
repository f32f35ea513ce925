// zeppelin/pack/elastic_pipeline.hpp
// InfiniPipe's planner end to end (Wang et al., "InfiniPipe: Elastic Pipeline Parallelism
// for Efficient Variable-Length Long-Context LLM Training", sections 3.2 - 3.3): a global
// batch becomes chunks, the chunks become back-to-back chunk-level 1F1B pipelines, and each
// pipeline gets the checkpointing that fits its memory with the least recomputation.
//   in : the sequences' lengths and elastic_pipeline_options (the sequence processor with its
//        cost model, the memory numbers and per-stage budgets, the checkpoint search budget)
//   out: elastic_plan: the chunking, and per pipeline its chunks in forward order, its chains
//        (schedule/pipeline/chunk_one_f_one_b.hpp), its stage-aware checkpoint plan and its
//        predicted seconds; the iteration's predicted seconds (their sum)
// For every slice count n = 1 .. min(max_slices, longest) whose mesh fits max_chunk_tokens,
// and for the sequences packed whole (first-fit decreasing into chunks of the longest
// sequence's length, fixed_size_chunks: Megatron-LM's packing, so the plan is never worse
// than it by the planner's own price):
//   1. chunk (pack/sequence_processor.hpp, Algorithm 1);
//   2. order the chunks longest sequence first (pack/chunk_order.hpp);
//   3. group the units into pipelines by chunk count (pack/chunk_grouping.hpp, Eq. 14). A
//      pipeline costs the makespan of its chunk-level 1F1B schedule
//      (schedule/pipeline/makespan.hpp) with each chunk's forward and backward T of the
//      cost model on a stage (cost/chunk_cost.hpp) and, added to a backward, one layer's
//      forward compute per layer the stage-aware checkpointing recomputes there
//      (checkpoint/stage_aware.hpp), estimated by greedy_stage_aware_checkpointing (a
//      maximal plan in O(windows); +infinity when even full recomputation does not fit).
//      This is the step simulator's step (sim/simulate_step.hpp) without the transfers. (The paper's
//      closed form, sum T + (d_p - 1) mean T, misses the bubbles of unequal chunks and of
//      slice chains: up to 28 % below the simulated time on fixed-size chunks.)
// The plan of least predicted seconds wins (ties: the smaller n, then the slices). A slice
// count is skipped, exactly, when its chunks' forward and backward seconds alone (a lower
// bound of any of its plans) reach the best plan found so far. Its pipelines' checkpoint
// plans are then searched (best_stage_aware_checkpointing within options.checkpoint's node
// budget), keeping whichever of the two recomputes fewer layers, and priced again: the
// exact search over every candidate pipeline of every n is what would be too slow
// (hundreds of programs with hundreds of diagonals each). Deterministic.
// Errors: invalid_argument for inconsistent options (degrees, one budget per stage) or what
// the parts refuse (no sequences, bad lengths); infeasible when no slice count gives a plan
// that fits (naming the longest sequence and the slices tried).
// Host-only.
#pragma once

#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/chunk_cost.hpp>
#include <zeppelin/pack/chunk_grouping.hpp>
#include <zeppelin/pack/chunk_order.hpp>
#include <zeppelin/pack/fixed_chunks.hpp>
#include <zeppelin/pack/sequence_processor.hpp>
#include <zeppelin/schedule/pipeline/chunk_one_f_one_b.hpp>
#include <zeppelin/schedule/pipeline/makespan.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct elastic_pipeline_options {
  sequence_processor processor;            //!< chunking and its cost model (d_s, d_p)
  infinipipe_memory memory;                //!< M_token, e, D, L, d_s, d_p
  std::vector<double> budget_bytes;        //!< per stage: G - M_ms(p)
  stage_aware_options checkpoint{.max_nodes = 200};  //!< per pipeline: an anytime answer

  //! The options for `model` on d_s x d_p GPUs of `topo` (chunk_cost_model::for_model), with
  //! `usable_bytes` of each GPU (its memory minus what the framework keeps).
  [[nodiscard]] static elastic_pipeline_options for_model(const model_config& model, const topology& topo, int sp_degree, int pp_degree,
                                                          double usable_bytes) {
    return {.processor = {.cost = chunk_cost_model::for_model(model, topo, sp_degree, pp_degree)},
            .memory = infinipipe_memory_of(model, sp_degree, pp_degree),
            .budget_bytes = stage_budgets(model, usable_bytes, sp_degree, pp_degree)};
  }
};

//! One chunk-level 1F1B pipeline of the iteration.
struct elastic_pipeline {
  std::vector<std::int64_t> forward;  //!< chunk indices (into elastic_plan::chunks) in forward order
  std::vector<int> chains;            //!< chunks per unit in forward order: chunk_one_f_one_b{.chains}
  stage_aware_plan checkpoint;        //!< ckpt(stage, k) for the k-th chunk of `forward`
  double seconds = 0;                 //!< predicted (see the file comment)
  friend bool operator==(const elastic_pipeline&, const elastic_pipeline&) = default;
};

struct elastic_plan {
  chunking chunks;
  std::vector<elastic_pipeline> pipelines;  //!< by increasing chunk count of their units
  double seconds = 0;                       //!< the sum of the pipelines'
  friend bool operator==(const elastic_plan&, const elastic_plan&) = default;
};

//! Eq. 20 for pipeline `p` (its chunks, indices into `chunks`, in forward order, and its
//! chains): each chunk's backward position under chunk-level 1F1B, N_P its longest chain,
//! the options' memory numbers and budgets.
[[nodiscard]] inline stage_aware_problem checkpoint_problem_of(const elastic_pipeline& p, std::span<const chunk> chunks,
                                                               std::span<const token_count> lengths, const elastic_pipeline_options& o) {
  std::vector<chunk> own;
  for (const std::int64_t k : p.forward) own.push_back(chunks[static_cast<std::size_t>(k)]);
  const int stages = o.processor.cost.d_p;
  return {.stages = stages,
          .max_layers = o.memory.layers / stages,
          .prefill_chunks = *std::max_element(p.chains.begin(), p.chains.end()),
          .budget_bytes = o.budget_bytes,
          .chunks = stage_aware_chunks(own, lengths, chunk_one_f_one_b{.chains = p.chains}.backward_positions(static_cast<int>(own.size())), o.memory)};
}

namespace detail {

// The units of `order` whose chain length lies in [lo, hi], in order: a pipeline without
// checkpointing or seconds yet.
[[nodiscard]] inline elastic_pipeline units_between(const chunk_order& order, int lo, int hi) {
  elastic_pipeline p;
  std::size_t at = 0;
  for (const int chain : order.chains) {
    if (chain >= lo && chain <= hi) {
      p.chains.push_back(chain);
      p.forward.insert(p.forward.end(), order.forward.begin() + static_cast<std::ptrdiff_t>(at),
                       order.forward.begin() + static_cast<std::ptrdiff_t>(at) + chain);
    }
    at += static_cast<std::size_t>(chain);
  }
  return p;
}

// p.seconds for p.checkpoint (see the file comment).
inline void price(elastic_pipeline& p, std::span<const chunk> chunks, const elastic_pipeline_options& o) {
  const chunk_cost_model& cost = o.processor.cost;
  std::vector<double> forward, backward, layer_forward;
  std::vector<token_count> tokens;
  const double layers_per_stage = static_cast<double>(o.memory.layers) / cost.d_p;
  for (const std::int64_t k : p.forward) {
    const chunk& ch = chunks[static_cast<std::size_t>(k)];
    forward.push_back(cost.seconds(cost.forward, ch));
    backward.push_back(cost.seconds(cost.backward, ch));
    layer_forward.push_back(cost.compute_seconds(cost.forward, ch) / layers_per_stage);  // recomputing a layer: compute only
    tokens.push_back(ch.tokens());
  }
  const pipeline_schedule schedule = chunk_one_f_one_b{.chains = p.chains}.build(cost.d_p, tokens);
  p.seconds = pipeline_makespan(
      schedule, [&](int, int k, int) { return forward[static_cast<std::size_t>(k)]; },
      [&](int stage, int k, int) {
        const auto i = static_cast<std::size_t>(k);
        return backward[i] + layer_forward[i] * static_cast<double>(p.checkpoint.recomputed_layers(stage, k));
      });
}

// A lower bound of any plan of `chunks`: each chunk runs its forward and backward on every
// stage of the pipeline it is in, so every plan's pipelines together take at least the sum
// of those. O(chunks), against the grouping's m(m + 1) / 2 priced schedules.
[[nodiscard]] inline double busy_seconds_bound(std::span<const chunk> chunks, const elastic_pipeline_options& o) {
  const chunk_cost_model& cost = o.processor.cost;
  double seconds = 0;
  for (const chunk& ch : chunks) seconds += cost.seconds(cost.forward, ch) + cost.seconds(cost.backward, ch);
  return seconds;
}

// The candidate pipeline of chain lengths [lo, hi] with its greedy checkpointing, priced;
// nullopt when no checkpointing fits.
inline std::optional<elastic_pipeline> estimated_pipeline(const chunking& c, std::span<const token_count> lengths, const chunk_order& order,
                                                          int lo, int hi, const elastic_pipeline_options& o) {
  elastic_pipeline p = units_between(order, lo, hi);
  try {
    p.checkpoint = greedy_stage_aware_checkpointing(checkpoint_problem_of(p, c.chunks, lengths, o));
  } catch (const infeasible&) {
    return std::nullopt;
  }
  price(p, c.chunks, o);
  return p;
}

// The pipelines of one chunking (steps 2-3), or nullopt when no grouping fits.
inline std::optional<elastic_plan> schedule_chunking(chunking c, std::span<const token_count> lengths, const elastic_pipeline_options& o) {
  const chunk_order order = forward_order_of(c.chunks, lengths);
  std::vector<int> levels = order.chains;  // the distinct chain lengths
  std::sort(levels.begin(), levels.end());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  const std::size_t m = levels.size();
  struct memo_entry {
    bool solved = false;
    std::optional<elastic_pipeline> pipeline;  // nullopt: no checkpointing fits
  };
  std::vector<memo_entry> memo(m * m);  // by (lo, hi)
  const auto index = [&](int count) { return static_cast<std::size_t>(std::lower_bound(levels.begin(), levels.end(), count) - levels.begin()); };
  const auto pipeline = [&](int lo, int hi) -> const std::optional<elastic_pipeline>& {
    memo_entry& e = memo[index(lo) * m + index(hi)];
    if (!e.solved) e.pipeline = estimated_pipeline(c, lengths, order, lo, hi, o), e.solved = true;
    return e.pipeline;
  };
  chunk_grouping grouping;
  try {
    grouping = group_pipelines(order.chains, [&](int lo, int hi) {
      const std::optional<elastic_pipeline>& p = pipeline(lo, hi);
      return p ? p->seconds : std::numeric_limits<double>::infinity();
    });
  } catch (const infeasible&) {
    return std::nullopt;
  }
  elastic_plan plan{{}, {}, grouping.seconds};
  for (const chunk_grouping::pipeline& g : grouping.pipelines) plan.pipelines.push_back(*pipeline(g.first_count, g.last_count));
  plan.chunks = std::move(c);
  return plan;
}

}  // namespace detail

//! InfiniPipe's plan of one iteration (see the file comment).
[[nodiscard]] inline elastic_plan plan_elastic_pipeline(std::span<const token_count> lengths, const elastic_pipeline_options& o) {
  validate(o.processor.cost);
  ZEPPELIN_EXPECTS(o.memory.sp_degree == o.processor.cost.d_s && o.memory.pp_degree == o.processor.cost.d_p,
                   "the memory numbers and the cost model must share the SP and PP degrees",
                   {{"memory_sp", double(o.memory.sp_degree)}, {"cost_sp", double(o.processor.cost.d_s)},
                    {"memory_pp", double(o.memory.pp_degree)}, {"cost_pp", double(o.processor.cost.d_p)}});
  ZEPPELIN_EXPECTS(o.budget_bytes.size() == static_cast<std::size_t>(o.processor.cost.d_p), "one memory budget per pipeline stage",
                   {{"budgets", double(o.budget_bytes.size())}, {"stages", double(o.processor.cost.d_p)}});
  ZEPPELIN_EXPECTS(!lengths.empty(), "an elastic pipeline plan needs at least one sequence", {});
  const token_count longest = *std::max_element(lengths.begin(), lengths.end());
  const int most = static_cast<int>(std::min<token_count>(o.processor.max_slices, std::max<token_count>(longest, 1)));
  std::optional<elastic_plan> best;
  for (int n = 1; n <= most; ++n) {
    chunking c;
    try {
      c = o.processor.process(lengths, n);
    } catch (const infeasible&) {
      continue;  // the mesh's first slice is over max_chunk_tokens
    }
    // a chunking whose bound reaches the best plan cannot replace it (ties keep the smaller n)
    if (best && detail::busy_seconds_bound(c.chunks, o) >= best->seconds) continue;
    std::optional<elastic_plan> plan = detail::schedule_chunking(std::move(c), lengths, o);
    if (plan && (!best || plan->seconds < best->seconds)) best = std::move(plan);
  }
  if (o.processor.max_chunk_tokens == 0 || longest <= o.processor.max_chunk_tokens) {  // the sequences packed whole
    chunking whole{{longest}, fixed_size_chunks(lengths, longest)};
    if (!best || detail::busy_seconds_bound(whole.chunks, o) < best->seconds) {
      std::optional<elastic_plan> plan = detail::schedule_chunking(std::move(whole), lengths, o);
      if (plan && (!best || plan->seconds < best->seconds)) best = std::move(plan);
    }
  }
  if (!best)
    ZEPPELIN_THROW(infeasible, "no slice count gives an elastic pipeline plan that fits in memory, even with full recomputation",
                   {{"longest", double(longest)}, {"max_slices", double(most)}});
  // the chosen pipelines' checkpointing searched, kept where it beats the greedy estimate
  best->seconds = 0;
  for (elastic_pipeline& p : best->pipelines) {
    stage_aware_plan searched = best_stage_aware_checkpointing(checkpoint_problem_of(p, best->chunks.chunks, lengths, o), o.checkpoint);
    if (searched.total_layers <= p.checkpoint.total_layers) p.checkpoint = std::move(searched);
    detail::price(p, best->chunks.chunks, o);
    best->seconds += p.seconds;
  }
  return *std::move(best);
}

ZEPPELIN_NAMESPACE_END
