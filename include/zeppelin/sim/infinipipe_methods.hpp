// zeppelin/sim/infinipipe_methods.hpp
// InfiniPipe and the baselines of its evaluation (Wang et al., "InfiniPipe: Elastic Pipeline
// Parallelism for Efficient Variable-Length Long-Context LLM Training", section 5) as methods
// of the 4D step simulator, so one batch can be priced under each on the same cost model,
// links and ZeRO-3 traffic.
//   in : a method, the sequences' lengths, the model, a topology with at least
//        sp_degree x pp_degree GPUs, infinipipe_setting (degrees, usable bytes per GPU, the
//        fixed chunk size, the context, the elastic planner's slice limit)
//   out: the simulated iteration seconds; +infinity when the method cannot fit the batch in
//        memory (even recomputing every layer)
// | method         | plan                                                          | runs on                 |
// |----------------|---------------------------------------------------------------|-------------------------|
// | infinipipe     | plan_elastic_pipeline (pack/elastic_pipeline.hpp)              | simulate_elastic_step   |
// | seq1f1b_like   | fixed_chunk_plan, fixed_chunk_tokens chunks, SP x PP           | simulate_elastic_step   |
// | megatron_like  | fixed_chunk_plan, chunks of the context (packing), SP x PP     | simulate_elastic_step   |
// | deepspeed_like | fixed_chunk_plan, chunks of the context, Ulysses and ZeRO-3    | simulate_elastic_step   |
// |                | over every GPU of the topology, no pipeline                   |                         |
// | flexsp_like    | per-sequence Ulysses groups, ZeRO-3 over every GPU             | simulate_flexsp_step    |
// The first three use sp_degree x pp_degree GPUs; the last two every GPU of the topology.
// The context is the micro-batch size of the packing baselines (0: the longest sequence).
// Errors: invalid_argument for degrees < 1, a topology with fewer GPUs than sp x pp, a
// context or chunk size < 0 / < 1, usable bytes not positive, or what the parts refuse
// (lengths, Ulysses groups that are neither inside a node nor whole nodes).
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/fixed_chunk_pipeline.hpp>
#include <zeppelin/sim/elastic_step.hpp>
#include <zeppelin/sim/flexsp_step.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

enum class infinipipe_method : std::uint8_t { infinipipe, seq1f1b_like, megatron_like, deepspeed_like, flexsp_like };

//! Every method, in the order a comparison prints them.
inline constexpr std::array<infinipipe_method, 5> infinipipe_methods{infinipipe_method::infinipipe, infinipipe_method::seq1f1b_like,
                                                                     infinipipe_method::megatron_like, infinipipe_method::deepspeed_like,
                                                                     infinipipe_method::flexsp_like};

[[nodiscard]] constexpr std::string_view to_string(infinipipe_method m) noexcept {
  switch (m) {
    case infinipipe_method::infinipipe: return "infinipipe";
    case infinipipe_method::seq1f1b_like: return "seq1f1b_like";
    case infinipipe_method::megatron_like: return "megatron_like";
    case infinipipe_method::deepspeed_like: return "deepspeed_like";
    case infinipipe_method::flexsp_like: return "flexsp_like";
  }
  return "?";
}

struct infinipipe_setting {
  int sp_degree = 8;                    //!< Ulysses degree of a stage (InfiniPipe, Seq1F1B-, Megatron-like)
  int pp_degree = 4;                    //!< pipeline stages
  double usable_bytes = 72.0 * (1ull << 30);  //!< of one GPU: its memory less what the framework keeps
  token_count fixed_chunk_tokens = 16384;     //!< Seq1F1B-like chunk size
  token_count context = 0;              //!< micro-batch size of the packing baselines; 0: the longest sequence
  int max_slices = 16;                  //!< the elastic planner's slice limit
  friend bool operator==(const infinipipe_setting&, const infinipipe_setting&) = default;
};

//! The simulated iteration seconds of `method` on `lengths` (see the file comment).
[[nodiscard]] inline double simulate_infinipipe_method(infinipipe_method method, std::span<const token_count> lengths, const model_config& model,
                                                       const topology& topo, const infinipipe_setting& s) {
  ZEPPELIN_EXPECTS(s.sp_degree >= 1 && s.pp_degree >= 1, "SP and PP degrees must be at least 1",
                   {{"sp_degree", double(s.sp_degree)}, {"pp_degree", double(s.pp_degree)}});
  ZEPPELIN_EXPECTS(static_cast<long long>(s.sp_degree) * s.pp_degree <= topo.num_ranks(), "the topology has fewer GPUs than SP x PP",
                   {{"sp_x_pp", double(s.sp_degree) * s.pp_degree}, {"gpus", double(topo.num_ranks())}});
  ZEPPELIN_EXPECTS(s.context >= 0 && s.fixed_chunk_tokens >= 1, "the context must be >= 0 (0: the longest sequence) and a fixed chunk >= 1 token",
                   {{"context", double(s.context)}, {"fixed_chunk_tokens", double(s.fixed_chunk_tokens)}});
  ZEPPELIN_EXPECTS(std::isfinite(s.usable_bytes) && s.usable_bytes > 0, "the usable bytes of a GPU must be positive and finite",
                   {{"usable_bytes", s.usable_bytes}});
  ZEPPELIN_EXPECTS(!lengths.empty(), "a step needs at least one sequence", {});
  const token_count context = s.context > 0 ? s.context : *std::max_element(lengths.begin(), lengths.end());
  const auto pipelined = [&](int sp, int pp) { return elastic_pipeline_options::for_model(model, topo, sp, pp, s.usable_bytes); };
  const auto fixed = [&](const elastic_pipeline_options& o, token_count chunk_tokens) {
    try {
      return simulate_elastic_step(fixed_chunk_plan(lengths, o, chunk_tokens), model, o, topo).iteration_s;
    } catch (const infeasible&) {
      return std::numeric_limits<double>::infinity();
    }
  };
  switch (method) {
    case infinipipe_method::infinipipe: {
      elastic_pipeline_options o = pipelined(s.sp_degree, s.pp_degree);
      o.processor.max_slices = s.max_slices;
      try {
        return simulate_elastic_step(plan_elastic_pipeline(lengths, o), model, o, topo).iteration_s;
      } catch (const infeasible&) {
        return std::numeric_limits<double>::infinity();
      }
    }
    case infinipipe_method::seq1f1b_like: return fixed(pipelined(s.sp_degree, s.pp_degree), s.fixed_chunk_tokens);
    case infinipipe_method::megatron_like: return fixed(pipelined(s.sp_degree, s.pp_degree), context);
    case infinipipe_method::deepspeed_like: return fixed(pipelined(topo.num_ranks(), 1), context);
    case infinipipe_method::flexsp_like: return simulate_flexsp_step(lengths, model, topo, s.usable_bytes).iteration_s;
  }
  ZEPPELIN_THROW(invalid_argument, "unknown InfiniPipe method", {{"method", double(static_cast<int>(method))}});
}

ZEPPELIN_NAMESPACE_END
