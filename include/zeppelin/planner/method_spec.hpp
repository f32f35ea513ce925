// zeppelin/planner/method_spec.hpp
// The methods of the Zeppelin evaluation as (partitioner, execution options) pairs, and a
// runner that plans and simulates one pair (run_spec). planner/methods.hpp runs any method by
// name, the cost-driven `zeppelin` included (planner/cost_driven_planner.hpp).
//   in : a method_spec, a batch, the PHYSICAL topology, a model, method_setup
//   out: method_run: the plan (on the tensor_parallel_view when TP > 1) and its sim_result
// | name                  | partitioner              | collective | routing | engine      | launches    | remap |
// |-----------------------|--------------------------|------------|---------|-------------|-------------|-------|
// | te_cp                 | even_split (global ring) | ring       | no      | in order    | per group   | no    |
// | llama_cp              | allgather (one group)    | all-gather | NCCL*   | in order    | per group   | no    |
// | ulysses               | ulysses (one group)      | all-to-all | no      | in order    | per group   | no    |
// | hybrid_dp             | hybrid_dp (micro-batches)| ring       | no      | in order    | per group   | no    |
// | te_cp+routing         | even_split               | ring       | yes     | in order    | per group   | no    |
// | te_cp+routing+engine  | hierarchical             | ring       | yes     | prioritized | fused round | no    |
// | zeppelin_paper        | hierarchical             | ring       | yes     | prioritized | fused round | yes   |
// | zeppelin              | the cheapest of its candidates per batch (planner/cost_driven_planner.hpp)       |
// (*) NCCL runs an all-gather over several rings (channels) whose node crossings use every
// NIC, which the simulator expresses as routed inter-node transfers; TE CP's P2P ring sends
// each K/V block through the one NIC of the sending GPU. ulysses is DeepSpeed-Ulysses over
// every rank: all-to-all over head lanes, and where the ranks outnumber the heads (or do not
// divide them) the Ulysses x ring hybrid of USP (program/detail/all_to_all_collective.hpp);
// each GPU's all-to-all traffic leaves through its own NIC, as NCCL's all-to-all sends it.
// Launches (sim_options::launch) follow what each method's implementation does. TE CP runs
// ring attention per CP group (AttnFuncWithCPAndKVP2P: one kernel call per round for its
// group); with all sequences in ONE global ring that is already one launch per rank and
// round, so per_group and fused_round give the same step for te_cp, te_cp+routing and
// llama_cp (one group each). Hybrid DP (ByteScale-like) runs each CP group's ring on its own:
// per_group. Zeppelin's engine runs a level's ring groups round by round in lockstep and its
// kernels take a CSR list of blocks with per-block offsets and masks over one K/V arena, so
// round k of every group of a level is one launch per rank, split only where the CSR form
// needs it (program/launch_waves.hpp): fused_round for te_cp+routing+engine and zeppelin.
// Without it, a rank in many small rings issues many small launches that the throughput
// tables price at a low rate. Every engine and the simulator run the same execution program
// (program/), so these launches are the ones the engines make.
// The ablations follow Fig. 11: TE CP + routing; + partitioner and engine; + remapping (the
// full Zeppelin of the paper, zeppelin_paper). `zeppelin` is the library's planner: it prices
// every candidate (the layouts and executions above, and the baselines' layouts under
// Zeppelin's execution) with this simulator and keeps the fastest, so it is never slower than
// a method it considers. Capacity: setup.tokens_per_gpu x (1 + capacity_slack) tokens per GPU (x TP
// per CP rank), the same for every method. The paper's L is a token CAPACITY per GPU, not
// the 4K tokens per GPU of the workload, and its remapping layer moves tokens (Table 3:
// 14-16 ms per forward; Fig. 11: 3.51x -> 3.64x on ArXiv), which needs attention-balanced
// layouts holding more than the average on some GPUs: L > 4K. At slack 0 (exact fill) every
// partitioner now plans, but every plan then holds exactly L tokens per GPU by construction:
// hierarchical<> cannot trade tokens for attention balance and remapping moves nothing. The
// paper does not give L; 1/8 (4608 tokens for 4K per GPU) is the headroom kept by default
// (bench/README.md, "Reproduction", shows both; reproduce_zeppelin --slack 0). Where a
// method's execution program is too large to build (te_cp, llama_cp and ulysses put every
// rank in one group: G x G position-rounds, refused past program_options::max_member_rounds
// from about 1,024 GPUs; or TE CP's zigzag shards of many short documents, past
// max_shard_pairs), run_spec prices it from two smaller runs, over the group's members or the
// batch's documents, and extrapolates (sim/step_extrapolation.hpp; sim_result::extrapolated).
// Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/partition/any_load_metric.hpp>
#include <zeppelin/partition/capacity.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/sim/cost_model.hpp>
#include <zeppelin/sim/step_extrapolation.hpp>
#include <zeppelin/sim/options.hpp>
#include <zeppelin/sim/result.hpp>
#include <zeppelin/sim/simulate.hpp>
#include <zeppelin/sim/tensor_parallel.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! The methods of the table above; `candidate` marks a (layout, execution) pair that only the
//! cost-driven planner considers (planner/cost_driven_planner.hpp).
enum class method_kind : std::uint8_t {
  te_cp,
  llama_cp,
  hybrid_dp,
  te_cp_routing,
  te_cp_routing_engine,
  zeppelin,
  ulysses,
  zeppelin_paper,
  candidate
};

//! A method: its name and how it partitions and executes (the rows of the table above).
struct method_spec {
  method_kind kind = method_kind::te_cp;
  std::string_view name;
  std::string_view description;
  std::string_view partitioner;                     //!< a partitioner_names entry (partition/registry.hpp); empty for zeppelin
  bool routing = false;                             //!< proxy_router, else direct_router
  engine_policy engine = engine_policy::in_order;
  bool remap = false;                               //!< remap with the exact solver (max_send)
  launch_policy launch = launch_policy::per_group;  //!< see the file comment
  //! The collective of every group that spans ranks, in place of the partitioner's (none: the
  //! partitioner's own, e.g. all_gather for allgather); the layout stays the partitioner's.
  std::optional<collective_kind> collective{};
};

//! Every method, baselines first, then the ablations and Zeppelin.
inline constexpr std::array<method_spec, 8> method_specs{{
    {method_kind::te_cp, "te_cp", "TransformerEngine CP: even zigzag split, one global ring", even_split::name, false,
     engine_policy::in_order, false},
    {method_kind::llama_cp, "llama_cp", "LLaMA-3 CP: even split, all-gather K/V before attention", allgather::name, true,
     engine_policy::in_order, false},
    {method_kind::ulysses, "ulysses", "DeepSpeed-Ulysses: contiguous split, all-to-all over head lanes (USP's ring where ranks outnumber heads)",
     ulysses::name, false, engine_policy::in_order, false},
    {method_kind::hybrid_dp, "hybrid_dp", "ByteScale-like: DP for short, ring CP for long, FLOP-balanced micro-batches",
     hybrid_dp::name, false, engine_policy::in_order, false},
    {method_kind::te_cp_routing, "te_cp+routing", "TE CP with proxy routing over every NIC", even_split::name, true,
     engine_policy::in_order, false},
    {method_kind::te_cp_routing_engine, "te_cp+routing+engine",
     "routing + hierarchical partitioner + attention engine (no remapping)", hierarchical<>::name, true,
     engine_policy::prioritized, false, launch_policy::fused_round},
    {method_kind::zeppelin_paper, "zeppelin_paper", "Zeppelin as published: hierarchical partitioner, engine, routing, remapping",
     hierarchical<>::name, true, engine_policy::prioritized, true, launch_policy::fused_round},
    {method_kind::zeppelin, "zeppelin", "Zeppelin's planner: the fastest of its candidates under the cost model (zeppelin_paper, every baseline)",
     "", true, engine_policy::prioritized, true, launch_policy::fused_round},
}};

//! The method_specs entry of `kind` (not `candidate`).
[[nodiscard]] consteval method_spec method_spec_of(method_kind kind) {
  for (const method_spec& s : method_specs)
    if (s.kind == kind) return s;
  throw "method_spec_of: no method of this kind";
}

//! The method called `name` (a method_specs name). Throws invalid_argument listing the names.
[[nodiscard]] inline const method_spec& method_by_name(std::string_view name) {
  std::string valid;
  for (const method_spec& s : method_specs) {
    if (s.name == name) return s;
    valid += (valid.empty() ? "" : ", ") + std::string(s.name);
  }
  ZEPPELIN_THROW(invalid_argument, "unknown method '" + std::string(name) + "' (valid: " + valid + ")", {});
}

//! How a method is run.
struct method_setup {
  token_count tokens_per_gpu = 4096;  //!< the paper's 4K per GPU
  double capacity_slack = default_capacity_slack;  //!< headroom over tokens_per_gpu; 0 = exact fill (see the file comment)
  int tensor_parallel = 1;            //!< TP inside CP (13B on cluster A, 30B on cluster C: 2)
  int chained_layers = 1;             //!< sim_options::chained_layers
  int threads = 1;                    //!< sim_options::threads
  //! The load metric hierarchical<> balances with (te_cp+routing+engine and zeppelin;
  //! partition/load_metric.hpp); the cost-model metric prices the model's heads and head_dim.
  load_metric_kind metric = load_metric_kind::attention;
  bool record_trace = false;
  bool record_execution = false;          //!< sim_options::record_execution
  std::optional<launch_policy> launch{};  //!< default: the method's (method_spec::launch)
  std::optional<sim_cost_model> cost{};  //!< default: sim_cost_model::for_topology(view)
};

struct method_run {
  std::string name;
  std::string candidate;  //!< what planned it: `name`, or the cost-driven planner's chosen candidate
  topology view;  //!< the CP topology (tensor_parallel_view of the physical one)
  plan layout;
  sim_result result;
};

//! Capacity in tokens per CP rank for `setup` (x TP).
[[nodiscard]] inline token_count method_capacity(const method_setup& setup) {
  ZEPPELIN_EXPECTS(setup.tokens_per_gpu >= 1 && std::isfinite(setup.capacity_slack) && setup.capacity_slack >= 0,
                   "tokens per GPU must be positive and the slack finite and non-negative",
                   {{"tokens_per_gpu", double(setup.tokens_per_gpu)}, {"capacity_slack", setup.capacity_slack}});
  const double per_rank =
      std::ceil(static_cast<double>(setup.tokens_per_gpu) * (1 + setup.capacity_slack)) * std::max(setup.tensor_parallel, 1);
  ZEPPELIN_EXPECTS(per_rank < 0x1p62, "tokens per GPU x (1 + capacity slack) x TP must stay below 2^62 tokens",
                   {{"tokens_per_gpu", double(setup.tokens_per_gpu)},
                    {"capacity_slack", setup.capacity_slack},
                    {"tensor_parallel", double(setup.tensor_parallel)}});
  return static_cast<token_count>(per_rank);
}

//! `groups` with every group that spans ranks running `c`.
inline void set_collective(std::vector<ring_group>& groups, collective_kind c) {
  for (ring_group& g : groups)
    if (g.zone != zone_kind::local) g.collective = c;
}

//! `groups` with every group that spans ranks running spec.collective, when the spec names one.
inline void set_collective_of(const method_spec& spec, std::vector<ring_group>& groups) {
  if (spec.collective) set_collective(groups, *spec.collective);
}

//! `p` with every group that spans ranks running spec.collective, when the spec names one.
[[nodiscard]] inline plan with_collective_of(const method_spec& spec, plan p) {
  set_collective_of(spec, p.groups);
  return p;
}

//! The partitioner `spec` names, for the CP view `view` with `capacity` tokens per rank; the
//! cost-model metric prices model `m`'s heads (32 x 128 when none is given) on view.gpu().
//! Throws invalid_argument for the cost-driven `zeppelin`, whose partitioner depends on the
//! batch (plan it with planner/cost_driven_planner.hpp).
[[nodiscard]] inline any_partitioner partitioner_of(const method_spec& spec, const topology& view, token_count capacity,
                                                    load_metric_kind metric = load_metric_kind::attention, const model_config* m = nullptr) {
  ZEPPELIN_EXPECTS(spec.kind != method_kind::zeppelin,
                   "the zeppelin method chooses its layout per batch by cost: plan it with plan_by_cost "
                   "(planner/cost_driven_planner.hpp) or run it with run_method",
                   {});
  const partitioner_settings settings{
      .capacity = capacity, .cp_size = 0, .metric = make_load_metric(metric, view.gpu(), m ? m->heads : 32, m ? m->head_dim : 128)};
  return partitioner_by_name(spec.partitioner, settings);
}

//! The plan `spec`'s partitioner (partitioner_of) makes for `b` on `view`, its groups running
//! the partitioner's own collectives.
[[nodiscard]] inline plan partitioner_plan(const method_spec& spec, const batch& b, const topology& view, token_count capacity,
                                           load_metric_kind metric = load_metric_kind::attention, const model_config* m = nullptr) {
  return partition(partitioner_of(spec, view, capacity, metric, m), b, view);
}

//! The plan `spec` makes: partitioner_plan with its groups running spec.collective when it
//! names one.
[[nodiscard]] inline plan partition_for(const method_spec& spec, const batch& b, const topology& view, token_count capacity,
                                       load_metric_kind metric = load_metric_kind::attention, const model_config* m = nullptr) {
  return with_collective_of(spec, partitioner_plan(spec, b, view, capacity, metric, m));
}

//! The sim_options of `spec` under `setup` (the collective of llama_cp's all-gather groups is
//! in its plan: partition/allgather.hpp sets it).
[[nodiscard]] inline sim_options options_for(const method_spec& spec, const method_setup& setup) {
  sim_options o;
  if (spec.routing) o.router.policy = proxy_router{};
  if (spec.remap) o.remap = remap_objective::max_send;
  o.engine = spec.engine;
  o.launch = setup.launch ? *setup.launch : spec.launch;
  o.tensor_parallel = setup.tensor_parallel;
  o.chained_layers = setup.chained_layers;
  o.threads = setup.threads;
  o.record_trace = setup.record_trace;
  o.record_execution = setup.record_execution;
  return o;
}

//! Plans `spec` with its own partitioner and simulates it with its own options on batch `b`,
//! physical topology `physical`, model `m`. Throws what partition_for and simulate() throw
//! (infeasible when the batch does not fit).
[[nodiscard]] inline method_run run_spec(const method_spec& spec, const batch& b, const topology& physical, const model_config& m,
                                         const method_setup& setup = {}) {
  topology view = tensor_parallel_view(physical, setup.tensor_parallel);
  plan layout = partition_for(spec, b, view, method_capacity(setup), setup.metric, &m);
  const sim_cost_model cost = setup.cost ? *setup.cost : sim_cost_model::for_topology(view);
  const sim_options options = options_for(spec, setup);
  sim_result result;
  try {
    result = simulate(layout, b, view, m, options, cost);
  } catch (const resource_limit&) {
    // a program too large to build: priced from two smaller runs over what is identical in
    // it (sim/step_extrapolation.hpp); nothing to trace or record there
    std::optional<sim_result> extrapolated;
    if (!options.record_trace && !options.record_execution)
      extrapolated = extrapolate_step(layout, b, physical, setup.tensor_parallel, m, to_program_options(options, wire_format::for_model(m)), cost,
                                      [&](const batch& sample, const topology& cluster) { return run_spec(spec, sample, cluster, m, setup).result; });
    if (!extrapolated) throw;
    result = std::move(*extrapolated);
  }
  result.method = std::string(spec.name);
  return {std::string(spec.name), std::string(spec.name), std::move(view), std::move(layout), std::move(result)};
}

ZEPPELIN_NAMESPACE_END
