// zeppelin/pack/infinipipe_methods.hpp
// InfiniPipe and the baselines of its evaluation (Wang et al., "InfiniPipe: Elastic Pipeline
// Parallelism for Efficient Variable-Length Long-Context LLM Training", section 5) as step
// plans, so one batch is priced under each by the one step simulator (sim/simulate_step.hpp):
// the same kernels, links, all-to-alls, K/V context exchange and ZeRO-3 traffic.
//   in : a method, the sequences' lengths, the model, a topology with at least
//        sp_degree x pp_degree GPUs, infinipipe_setting (degrees, usable bytes per GPU, the
//        fixed chunk size, the context, the elastic planner's slice limit)
//   out: infinipipe_method_plans: the method's step plans, run one after another
//        (std::nullopt when it cannot fit the batch in memory, even recomputing every
//        layer); simulate_infinipipe_method: the sum of their simulated iteration seconds
//        (+infinity where the plans are nullopt)
// | method         | plan                                                      | step plans             |
// |----------------|-----------------------------------------------------------|------------------------|
// | infinipipe     | plan_elastic_pipeline (pack/elastic_pipeline.hpp)          | elastic_step_plans     |
// | seq1f1b_like   | fixed_chunk_plan, fixed_chunk_tokens chunks, SP x PP       | elastic_step_plans     |
// | megatron_like  | fixed_chunk_plan, chunks of the context (packing), SP x PP | elastic_step_plans     |
// | deepspeed_like | fixed_chunk_plan, chunks of the context, Ulysses and ZeRO-3| elastic_step_plans     |
// |                | over every GPU of the topology, no pipeline                |                        |
// | flexsp_like    | assign_flexsp_groups (pack/flexsp_assignment.hpp)          | flexsp_step_plans      |
// The first three use sp_degree x pp_degree GPUs; the last two every GPU of the topology.
// elastic_step_plans is pack/elastic_step_plan.hpp, flexsp_step_plans
// pack/flexsp_step_plan.hpp; the plans run by simulate_back_to_back
// (pack/sequence_step_plan.hpp: per_shape pricing, the planners decide what fits).
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
#include <zeppelin/pack/elastic_step_plan.hpp>
#include <zeppelin/pack/fixed_chunk_pipeline.hpp>
#include <zeppelin/pack/flexsp_assignment.hpp>
#include <zeppelin/pack/flexsp_step_plan.hpp>
#include <zeppelin/pack/sequence_step_plan.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

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
  int sp_degree = 8;                          //!< Ulysses degree of a stage (InfiniPipe, Seq1F1B-, Megatron-like)
  int pp_degree = 4;                          //!< pipeline stages
  double usable_bytes = 72.0 * (1ull << 30);  //!< of one GPU: its memory less what the framework keeps
  token_count fixed_chunk_tokens = 16384;     //!< Seq1F1B-like chunk size
  token_count context = 0;                    //!< micro-batch size of the packing baselines; 0: the longest sequence
  int max_slices = 16;                        //!< the elastic planner's slice limit
  friend bool operator==(const infinipipe_setting&, const infinipipe_setting&) = default;
};

//! The step plans of `method` on `lengths`, in the order they run; std::nullopt when the
//! method cannot fit the batch (see the file comment).
[[nodiscard]] inline std::optional<std::vector<sequence_step_plan>> infinipipe_method_plans(infinipipe_method method, std::span<const token_count> lengths,
                                                                                           const model_config& model, const topology& topo,
                                                                                           const infinipipe_setting& s) {
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
  const auto fixed = [&](const elastic_pipeline_options& o, token_count chunk_tokens) -> std::optional<std::vector<sequence_step_plan>> {
    elastic_plan plan;
    try {
      plan = fixed_chunk_plan(lengths, o, chunk_tokens);
    } catch (const infeasible&) {
      return std::nullopt;
    }
    return elastic_step_plans(plan, lengths, model, o, topo);
  };
  switch (method) {
    case infinipipe_method::infinipipe: {
      elastic_pipeline_options o = pipelined(s.sp_degree, s.pp_degree);
      o.processor.max_slices = s.max_slices;
      elastic_plan plan;
      try {
        plan = plan_elastic_pipeline(lengths, o);
      } catch (const infeasible&) {
        return std::nullopt;
      }
      return elastic_step_plans(plan, lengths, model, o, topo);
    }
    case infinipipe_method::seq1f1b_like: return fixed(pipelined(s.sp_degree, s.pp_degree), s.fixed_chunk_tokens);
    case infinipipe_method::megatron_like: return fixed(pipelined(s.sp_degree, s.pp_degree), context);
    case infinipipe_method::deepspeed_like: return fixed(pipelined(topo.num_ranks(), 1), context);
    case infinipipe_method::flexsp_like:
      return flexsp_step_plans(assign_flexsp_groups(lengths, model, topo, s.usable_bytes), lengths, model, topo);
  }
  ZEPPELIN_THROW(invalid_argument, "unknown InfiniPipe method", {{"method", double(static_cast<int>(method))}});
}

//! The simulated iteration seconds of `method` on `lengths`: the sum over its step plans of
//! simulate_step; +infinity when it cannot fit the batch (see the file comment).
[[nodiscard]] inline double simulate_infinipipe_method(infinipipe_method method, std::span<const token_count> lengths, const model_config& model,
                                                       const topology& topo, const infinipipe_setting& s) {
  const std::optional<std::vector<sequence_step_plan>> plans = infinipipe_method_plans(method, lengths, model, topo, s);
  if (!plans) return std::numeric_limits<double>::infinity();
  return simulate_back_to_back(*plans, topo, model).iteration_s;
}

ZEPPELIN_NAMESPACE_END
