// zeppelin/pack/fixed_chunk_pipeline.hpp
// The plan of InfiniPipe's fixed-chunk baselines (Wang et al., "InfiniPipe: Elastic
// Pipeline Parallelism for Efficient Variable-Length Long-Context LLM Training", section 5)
// as an elastic_plan, so that they become step plans (pack/elastic_step_plan.hpp) and the one
// step simulator prices them exactly as it prices InfiniPipe's own:
//   Seq1F1B-like      chunks of a fixed size (16K in the paper's setting) through SP x PP;
//   Megatron-like     sequences packed whole into micro-batches of the context, through the
//                     same SP x PP (fixed-size PP packing);
//   DeepSpeed-like    the same packing with d_p = 1 and d_s = every GPU (Ulysses over the
//                     cluster, ZeRO-3, no pipeline).
//   in : the sequences' lengths, elastic_pipeline_options (cost model with d_s and d_p,
//        memory numbers, per-stage budgets), the chunk size
//   out: elastic_plan with one pipeline: fixed_size_chunks (pack/fixed_chunks.hpp) in the
//        longest-first order of pack/chunk_order.hpp, chunk-level 1F1B, and the least UNIFORM
//        recompute that fits Eq. 20's windows (the same layers for every chunk and stage:
//        one static activation-checkpointing configuration, as the paper's baselines are
//        run), priced like the elastic planner's pipelines
// Errors: invalid_argument from fixed_size_chunks (no sequences, a length < 1, chunk < 1);
// infeasible when even recomputing every layer leaves a window over its budget (naming the
// chunk size and the layers per stage).
// Host-only.
#pragma once

#include <zeppelin/checkpoint/stage_aware.hpp>
#include <zeppelin/core/chunk.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/pack/chunk_order.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/fixed_chunks.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! The fixed-chunk baselines' plan (see the file comment).
[[nodiscard]] inline elastic_plan fixed_chunk_plan(std::span<const token_count> lengths, const elastic_pipeline_options& o,
                                                   token_count chunk_tokens) {
  std::vector<chunk> chunks = fixed_size_chunks(lengths, chunk_tokens);
  const chunk_order order = forward_order_of(chunks, lengths);
  elastic_pipeline p{order.forward, order.chains, {}, 0};
  const stage_aware_problem problem = checkpoint_problem_of(p, chunks, lengths, o);
  const std::size_t diagonals = chunks.size() + static_cast<std::size_t>(problem.stages) - 1;
  for (int layers = 0; layers <= problem.max_layers; ++layers) {
    std::vector<int> uniform(diagonals, layers);
    if (!fits(problem, uniform)) continue;
    std::vector<std::int64_t> f2b;
    f2b.reserve(problem.chunks.size());
    for (const stage_aware_chunk& k : problem.chunks) f2b.push_back(k.backward_position);
    const std::int64_t total = static_cast<std::int64_t>(diagonals) * layers;
    p.checkpoint = {problem.stages, std::move(f2b), std::move(uniform), total, 0, 0};
    detail::price(p, chunks, o);
    const double seconds = p.seconds;
    return {{{}, std::move(chunks)}, {std::move(p)}, seconds};
  }
  ZEPPELIN_THROW(infeasible,
                 "fixed chunks of " + std::to_string(chunk_tokens) + " tokens do not fit even when every layer is recomputed",
                 {{"chunk_tokens", double(chunk_tokens)}, {"layers_per_stage", double(problem.max_layers)}});
}

ZEPPELIN_NAMESPACE_END
