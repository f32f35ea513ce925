// train_gpt: a small GPT trained end to end with the library, on N x P host thread ranks (the
// host loopback world), and the same training on one rank as the reference.
//   train_gpt [--system zeppelin|wlb|infinipipe|hydraulis] [--chunk-tokens C] [--pipelines TPxPPxCP,..] [--method M] [--cluster c] [--nodes N] [--gpus-per-node P] [--steps S]
//             [--tokens T] [--min-length a] [--max-length b] [--corpus FILE] [--seed s]
//             [--vocab V] [--dim D] [--heads H] [--kv-heads K] [--layers L] [--hidden F]
//             [--lr x] [--fp32] [--checkpoint none|full|selective:K|stage_aware:...] [--gradient-check N]
//             [--tp N] [--tp-collectives all_reduce|sequence_parallel] [--dp D] [--stages S] [--micro-batches M] [--schedule gpipe|1f1b|interleaved] [--virtual-stages V]
//             [--record FILE] [--write-job FILE]
//             [--world host|device|nccl] [--device d] [--rank r] [--id-file F]
// Every step of a host run (the reference's too) is one step program (step/build.hpp) that
// every rank runs with the library's step runner (exec/step_runner.hpp):
//   1. the step's documents (corpus.hpp) form each replica's micro-batches as --system says
//      (step_documents.hpp): zeppelin cuts them into D equal token shares, each into M
//      micro-batches of whole documents (step.hpp split_documents; M = --micro-batches, default
//      the stage count), each planned
//      for the N x P ranks of a stage with method M (any method of `zeppelin simulate`,
//      planner/methods.hpp; `zeppelin`, the default, lets the cost-driven planner choose the layout
//      and execution, priced for LLaMA-7B with this attention shape; or a partitioner name,
//      run with the baselines' execution); a plan that runs in several passes (hybrid_dp,
//      micro_batched) gives a micro-batch per pass (step.hpp plan_steps); the step's execution
//      is one: a micro-batch whose planner chose another than the first micro-batch's is
//      planned with the first's; wlb packs them with WLB-LLM's packer into M x D micro-batches
//      (documents may wait for a later step) and lays each out per document (all-gather) or
//      per sequence (ring), whichever the library prices faster; infinipipe hands the step's
//      documents to InfiniPipe's elastic planner (infinipipe_step.hpp), which slices those
//      longer than --chunk-tokens, packs chunks and plans back-to-back chunk-level 1F1B
//      pipelines over N x P Ulysses ranks per stage, each pipeline a step plan of its own
//      (ZeRO-3, its stage-aware recomputation unless --checkpoint is given), run one after
//      another with the gradients added up; hydraulis lets the library choose the step's
//      pipelines (or takes --pipelines) and dispatch and pack the documents over them
//      (hydraulis_step.hpp), replicas of different TP, PP and CP whose gradients meet by
//      switching mutual slices over a master copy sharded on every rank (switching_slices.hpp);
//   2. the step plan (step/step_plan.hpp): --dp D replicas (each its equal token share of
//      the step's whole documents) of TP = --tp (dividing P: a TP group stays on one node), CP
//      = N x P / TP, PP = --stages S, rank (t, c, s, d) in Megatron-LM's order
//      (parallel_layout::rank_of: t + TP (c + CP (d + D s))), on the cluster of D x S x N nodes
//      of P GPUs (the micro-batches are planned on the CP group's topology,
//      step/cp_group_topology.hpp); each micro-batch's CP layout its plan; the schedule from --schedule and
//      --virtual-stages; the layers split over the S x V virtual stages (cost/layer_split.hpp,
//      the first ones one more); the layers recomputed from --checkpoint
//      (checkpoint/any_checkpoint_policy.hpp: a recomputed layer keeps only its input and runs
//      its forward, attention included, again right before its backward; the reference keeps
//      everything, so parity also proves the recomputation exact); the gradients all-reduced
//      over the ranks holding the same parameters. Every element is sizeof(T) bytes;
//   3. each rank runs its part of the step program with the GPT as its step model
//      (step_model.hpp; with TP its shard of the heads, the MLP and the vocabulary,
//      tensor_parallel.hpp): its (token, target, position) rows dispatched to the layout of the
//      linear modules (exec/relayout.hpp, exec/linear_layout.hpp: the token-balanced layout
//      where the method remaps), the embedding, per layer RMSNorm, Q/K/V, rotary embedding at
//      the token's position in its document, Q|K|V to the attention layout, the library's
//      attention engine (rings, all-gather or all-to-all as planned), O back, output
//      projection, MLP; the LM head and the next-token cross-entropy (gpt.hpp); the backward
//      through the same path; the hidden states of the rank's rows between stages;
//   4. the gradients of a stage's parameters, summed over its ranks by the program's ring
//      all-reduces (the same bits on every rank; with TP per TP index, and the norms' over the
//      TP ranks), go into AdamW; the loss is gathered from the last stage.
// The reference is the same code with one rank and one micro-batch. Prints a progress bar on a
// terminal (plain lines otherwise) and, last,
//   loss parity: max |loss - reference| = X over S steps
// Exit status 0 when X <= 1e-10 (fp64) or 1e-4 (fp32, a relative bound times the loss), 1
// otherwise, 2 on bad input. --record FILE writes the step record (step/record.hpp) of step 0
// of the distributed run, all ranks merged; --write-job FILE its step job
// (examples/common/step_job.hpp), from which `zeppelin pipeline --job FILE --record F2`
// simulates the same step program and writes the same bytes. A file that cannot be written is
// an error (exit status 1) and leaves no partial file. --gradient-check N instead compares the
// distributed gradient of the first step's loss with central differences of the distributed
// loss at N coordinates spread over every tensor (exit status 0 when the largest relative
// error is <= 1e-5 in fp64), with the plain loop of train_loop.hpp. --world device and --world
// nccl run that plain loop on GPUs (device_main.cpp: the CUDA engine in bf16, the device
// loopback world or one process per GPU over NCCL).
#include "corpus.hpp"
#include "device_world.hpp"
#include "gpt.hpp"
#include "hydraulis_step.hpp"
#include "infinipipe_step.hpp"
#include "options.hpp"
#include "step.hpp"
#include "step_documents.hpp"
#include "step_model.hpp"
#include "train_loop.hpp"

#include "../common/cli_integers.hpp"
#include "../common/priced_model.hpp"
#include "../common/step_job.hpp"

#include <zeppelin/checkpoint/any_checkpoint_policy.hpp>
#include <zeppelin/comm.hpp>
#include <zeppelin/comm/sub_communicator.hpp>
#include <zeppelin/core/output_file.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/cost/layer_split.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/exec/step_runner.hpp>
#include <zeppelin/pack/packing_methods.hpp>
#include <zeppelin/planner/methods.hpp>
#include <zeppelin/program.hpp>
#include <zeppelin/schedule/pipeline/any_schedule.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/cp_group_topology.hpp>
#include <zeppelin/step/make_plan.hpp>
#include <zeppelin/step/record.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <variant>
#include <vector>

using namespace zeppelin;
using train_gpt::gpt_config;
using train_gpt::gpt_params;
using train_gpt::planned_step;

namespace {

using train_gpt::method_or_partitioner;
using train_gpt::options;
using train_gpt::run_result;

// The files a run writes of its first step (empty: none).
struct step_outputs {
  std::string record;  //!< --record: the step record of the distributed run's step 0
  std::string job;     //!< --write-job: its step job
};

// An output file that could not be written (exit status 1, not a usage error).
struct output_failed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class Write>
void write_output(const std::string& path, Write&& write, const char* what) {
  try {
    zeppelin::write_output_file(path, std::forward<Write>(write), what);
  } catch (const zeppelin::error& e) {
    throw output_failed(e.what());
  }
}

// The names a command-line option maps to values (its accepted texts, listed once).
template <class V>
std::vector<std::string> names_of(const std::map<std::string, V>& by_name) {
  std::vector<std::string> out;
  for (const auto& [name, value] : by_name) out.push_back(name);
  return out;
}

// The job's TP x CP x PP x DP degrees (see the file comment, 2.).
parallel_layout layout_of(const options& o) { return {o.tp, o.nodes * o.gpus_per_node / o.tp, o.stages, o.dp}; }

// How a step's micro-batches are laid out over a stage's CP ranks: a method of `zeppelin
// simulate` or a partitioner (Zeppelin's system), a CP layout policy (WLB-LLM's adaptive
// sharding), or InfiniPipe's planner, which also forms the micro-batches (chunks of slices).
using micro_batch_layout = std::variant<method_spec, any_cp_layout, train_gpt::infinipipe_planning, train_gpt::hydraulis_planning>;

// One step's micro-batches (see the file comment, 1.), planned for `group`, a stage's CP ranks:
// per replica, each micro-batch of `docs` laid out by `how` (a method may run one in several
// passes). One execution for all: a micro-batch whose planner chose another than the step's
// first's is planned with the first's.
template <class T>
std::vector<std::vector<planned_step<T>>> plan_micro_batches(const options& o, const train_gpt::step_documents& docs, const topology& group,
                                                             const micro_batch_layout& how) {
  std::vector<std::vector<planned_step<T>>> out;
  std::optional<std::pair<method_spec, program_options>> first;  // the step's first micro-batch's execution
  for (const std::vector<train_gpt::step_batch>& replica : docs) {
    std::vector<planned_step<T>>& mine = out.emplace_back();
    for (const train_gpt::step_batch& part : replica) {
      std::vector<planned_step<T>> planned = std::visit(
          [&](const auto& layout) -> std::vector<planned_step<T>> {
            using L = std::decay_t<decltype(layout)>;
            if constexpr (std::is_same_v<L, method_spec>)
              return train_gpt::plan_steps<T>(part, group, layout, o.model);
            else if constexpr (std::is_same_v<L, any_cp_layout>)
              return std::vector<planned_step<T>>{train_gpt::plan_step<T>(part, group, layout, o.model)};
            else
              ZEPPELIN_THROW(invalid_argument, "InfiniPipe's and Hydraulis' micro-batches come from their own planners", {});
          },
          how);
      if (first && planned.front().options != first->second) planned = train_gpt::plan_steps<T>(part, group, first->first, o.model);
      for (planned_step<T>& p : planned) {
        if (!first) first.emplace(p.executed, p.options);
        ZEPPELIN_EXPECTS(p.options == first->second, "a step's micro-batches need one execution",
                         {{"replica", double(out.size() - 1)}, {"micro_batch", double(mine.size())}});
        mine.push_back(std::move(p));
      }
    }
  }
  return out;
}

// The documents of o.steps steps as the system forms them (train_gpt::step_documents), and how
// their micro-batches are laid out.
template <class T>
std::pair<std::vector<train_gpt::step_documents>, micro_batch_layout> form_steps(const options& o) {
  train_gpt::corpus data = train_gpt::corpus_of(o);
  std::vector<train_gpt::step_documents> out;
  if (o.system == train_gpt::training_system::zeppelin) {
    for (int step = 0; step < o.steps; ++step) out.push_back(train_gpt::equal_shares(data.next(step, o.tokens), o.dp, o.micro_batch_count()));
    return {std::move(out), method_or_partitioner(o.method)};
  }
  if (o.system == train_gpt::training_system::infinipipe) {
    const topology cluster = cluster_by_name(o.cluster, o.stages * o.nodes, o.gpus_per_node);
    const model_config priced = example_cli::priced_model(o.model.heads, o.model.kv_heads, o.model.head_dim(), static_cast<int>(sizeof(T)));
    train_gpt::infinipipe_planning planning{
        .options = elastic_pipeline_options::for_model(priced, cluster, layout_of(o).cp, o.stages, 0.9 * cluster.gpu().memory_bytes),
        .recompute = std::nullopt};
    planning.options.processor.max_chunk_tokens = o.chunk_tokens;
    if (!o.checkpoint.empty()) planning.recompute = checkpoint_policy_by_name(o.checkpoint);
    for (int step = 0; step < o.steps; ++step) out.push_back({{data.next(step, o.tokens)}});
    return {std::move(out), std::move(planning)};
  }
  if (o.system == train_gpt::training_system::hydraulis) {
    const topology cluster = cluster_by_name(o.cluster, o.nodes, o.gpus_per_node);
    train_gpt::hydraulis_planning planning;
    planning.priced = example_cli::priced_model(o.model.heads, o.model.kv_heads, o.model.head_dim(), static_cast<int>(sizeof(T)));
    planning.settings = {.gpus = cluster.num_ranks(), .gpus_per_node = cluster.gpus_per_node(), .gpu = cluster.gpu()};
    if (!o.pipelines.empty()) planning.fixed = train_gpt::strategy_of(o.pipelines, planning.priced, planning.settings);
    if (!o.checkpoint.empty()) planning.recompute = checkpoint_policy_by_name(o.checkpoint);
    for (int step = 0; step < o.steps; ++step) out.push_back({{data.next(step, o.tokens)}});
    return {std::move(out), std::move(planning)};
  }
  const topology cluster = cluster_by_name(o.cluster, 1, o.gpus_per_node);
  const packing_target target{example_cli::priced_model(o.model.heads, o.model.kv_heads, o.model.head_dim(), static_cast<int>(sizeof(T))),
                              cluster.gpu(), layout_of(o)};
  train_gpt::wlb_packing packing(target, o.micro_batch_count(), o.tokens, o.max_length);
  for (int step = 0; step < o.steps; ++step) out.push_back(packing.next(step, data.next(step, o.tokens)));
  return {std::move(out), packing.layout()};
}

// Replica d's shape and ranks, in Megatron-LM's order (parallel_layout::rank_of: TP fastest,
// then CP, DP, PP), before its micro-batches.
step_replica replica_shape(const options& o, int d) {
  const parallel_layout l = layout_of(o);
  step_replica r;
  r.tp = l.tp, r.cp = l.cp, r.pp = l.pp;
  r.tp_mode = o.tp_mode;
  for (int s = 0; s < r.pp; ++s)
    for (int c = 0; c < r.cp; ++c)
      for (int t = 0; t < r.tp; ++t) r.ranks.push_back(l.rank_of({t, c, s, d}));
  return r;
}

// Replica `r` of a step: its micro-batches' pieces (their documents appended to `documents`)
// and CP layouts, the schedule, the layers per virtual stage and those recomputed.
template <class T>
step_replica replica_of_step(const options& o, const model_config& model, const any_checkpoint_policy& recompute, step_replica r,
                             const std::vector<planned_step<T>>& micro_batches, std::vector<token_count>& documents) {
  r.schedule = make_pipeline_schedule(o.schedule, o.chunks());
  r.layers = split_layers(model.layers, o.stages * o.chunks());
  for (const planned_step<T>& mb : micro_batches) {
    step_micro_batch x;
    const batch& b = mb.data.lengths;
    for (sequence_index q = 0; q < b.size(); ++q) {
      x.pieces.push_back({static_cast<std::int64_t>(documents.size()), 0, b.length(q)});
      documents.push_back(b.length(q));
    }
    x.layout = mb.layout;
    r.micro_batches.push_back(std::move(x));
  }
  r.recompute = recompute_counts(r, recompute);
  return r;
}

// The step plan of one step (see the file comment, 2.) on `cluster`, from each replica's
// micro-batches' plans (their documents in order are the step's).
template <class T>
step_plan plan_of_step(const options& o, const topology& cluster, const model_config& model, const any_checkpoint_policy& recompute,
                       const std::vector<std::vector<planned_step<T>>>& replicas) {
  step_plan p;
  p.nodes = cluster.nodes();
  p.gpus_per_node = cluster.gpus_per_node();
  p.sync = gradient_sync::all_reduce;
  for (int d = 0; d < o.dp; ++d)
    p.replicas.push_back(replica_of_step(o, model, recompute, replica_shape(o, d), replicas[static_cast<std::size_t>(d)], p.documents));
  return p;
}

// One step program of a step and its micro-batches, planned.
template <class T>
struct step_part {
  std::vector<std::vector<planned_step<T>>> micro_batches;  //!< [replica][micro-batch]
  step_program program;
};

// One step: its parts, run one after another (one, but for InfiniPipe's back-to-back
// pipelines), the gradients added up over them.
template <class T>
struct prepared_step {
  std::vector<step_part<T>> parts;
  double targets = 0, tokens = 0;
  step_program_options options;
};

// Step `docs` (see the file comment, 1. and 2.) on `cluster`, its micro-batches planned for
// `group`, a stage's CP ranks; every element sizeof(T) bytes.
template <class T>
prepared_step<T> prepare(const options& o, const topology& cluster, const topology& group, const model_config& model,
                         const any_checkpoint_policy& recompute, const train_gpt::step_documents& docs, const micro_batch_layout& how) {
  prepared_step<T> out;
  out.options.activation_bytes = out.options.parameter_bytes = out.options.gradient_bytes = out.options.accumulator_bytes =
      static_cast<int>(sizeof(T));
  if (const auto* infinipipe = std::get_if<train_gpt::infinipipe_planning>(&how)) {
    for (train_gpt::planned_part<T>& part :
         train_gpt::infinipipe_parts<T>(docs.front().front(), *infinipipe, o.model, model, cluster, out.options.attention)) {
      step_part<T>& mine = out.parts.emplace_back();
      if (infinipipe->recompute) {
        step_replica& r = part.plan.replicas.front();
        r.recompute = recompute_counts(r, *infinipipe->recompute);
      }
      mine.program = make_step_program(part.plan, cluster, model, out.options);
      mine.micro_batches.push_back(std::move(part.micro_batches));
    }
  } else if (const auto* hydraulis = std::get_if<train_gpt::hydraulis_planning>(&how)) {
    train_gpt::planned_replicas<T> planned =
        train_gpt::hydraulis_replicas<T>(docs.front().front(), *hydraulis, o.model, model, cluster, out.options.attention);
    step_part<T>& mine = out.parts.emplace_back();
    mine.program = make_step_program(planned.plan, cluster, model, out.options);
    mine.micro_batches = std::move(planned.micro_batches);
  } else {
    step_part<T>& mine = out.parts.emplace_back();
    mine.micro_batches = plan_micro_batches<T>(o, docs, group, how);
    out.options.attention = mine.micro_batches.front().front().options;
    mine.program = make_step_program(plan_of_step(o, cluster, model, recompute, mine.micro_batches), cluster, model, out.options);
  }
  for (const step_part<T>& part : out.parts)
    for (const std::vector<planned_step<T>>& replica : part.micro_batches)
      for (const planned_step<T>& mb : replica) out.targets += mb.targets, out.tokens += static_cast<double>(mb.data.lengths.total_tokens());
  return out;
}

// What one run of a step program gave: the summed loss of every rank's rows (in rank order),
// per rank the gradients of its stage's tensors of its TP shard (as the program's sync left
// them), the most activation values a rank kept, the ranks' merged step record.
template <class T>
struct step_outcome {
  double loss = 0;
  std::vector<gpt_params<T>> gradients;  //!< [rank]
  double kept = 0;
  step_record record;
};

// Every rank of `world` runs its part of each of the step's programs in turn with the GPT as
// its step model and its parameters `params[rank]` (its TP shard), the gradients added up over
// the programs; `recording` merges the ranks' step records of the first program.
template <class T>
step_outcome<T> run_step(host_loopback_world& world, const gpt_config& cfg, const prepared_step<T>& s,
                         const std::vector<gpt_params<T>>& params, bool recording) {
  step_outcome<T> out;
  out.gradients.resize(params.size());
  std::vector<double> losses(params.size(), 0.0);
  std::mutex m;
  for (std::size_t part = 0; part < s.parts.size(); ++part) {
    const step_program& prog = s.parts[part].program;
    const bool record_part = recording && part == 0;
    world.run([&](host_loopback_comm& c) {
    // the CP ranks of the rank's replica, stage and TP index: the dispatch's communicator (a
    // rank that runs no replica, an owner of switching's master copy only: itself)
    const step_position at = prog.positions.at(static_cast<std::size_t>(c.rank()));
    const bool idle = at.replica < 0;
    std::vector<rank_index> members;
    if (idle) members.push_back(c.rank());
    else
      for (int i = 0; i < prog.replica(at.replica).cp; ++i) members.push_back(prog.replica(at.replica).rank_of(at.tp, i, at.stage));
    sub_communicator<host_loopback_comm> stage_comm(c, members);
    const auto ri = static_cast<std::size_t>(c.rank());
    static const std::vector<planned_step<T>> none;
    train_gpt::gpt_step_model<T, host_loopback_comm> rank_model(
        prog, c.rank(), stage_comm, cfg, idle ? none : s.parts[part].micro_batches[static_cast<std::size_t>(at.replica)], params[ri],
        1.0 / s.targets);
    step_record mine;
    run_step_rank(prog, rank_model, c, record_part ? &mine : nullptr);
    losses[ri] += rank_model.loss();
    // switching leaves each rank the reduced gradients of the master elements it owns (whole-model shaped)
    gpt_params<T> g = prog.plan.sync == gradient_sync::switching
                          ? train_gpt::zero_params<T>(cfg)
                          : train_gpt::zero_params<T>(train_gpt::shard_config(cfg, {prog.replica(at.replica).tp, at.tp}));
    rank_model.gradients_into(g);
    if (part == 0) out.gradients[ri] = std::move(g);
    else train_gpt::add_params(out.gradients[ri], g);
    std::lock_guard lock(m);
    out.kept = std::max(out.kept, rank_model.peak_kept());
    if (record_part) out.record.merge(mine);
    });
  }
  for (const double x : losses) out.loss += x;
  return out;
}

// The cluster of the job (D x S x N nodes of P GPUs), and the topology its micro-batches are
// planned on (a stage's CP ranks).
inline std::pair<topology, topology> topologies_of(const options& o) {
  topology cluster = cluster_by_name(o.cluster, o.dp * o.stages * o.nodes, o.gpus_per_node);
  topology group = cp_group_topology(cluster, replica_shape(o, 0), 0, 0);
  return {std::move(cluster), std::move(group)};
}

// Every rank's TP shard of the whole model's `w`.
template <class T>
std::vector<gpt_params<T>> rank_parameters(const options& o, const gpt_params<T>& w) {
  std::vector<gpt_params<T>> out;
  // Hydraulis: every rank a master copy of the whole model, of which it keeps its switching segments
  for (rank_index r = 0; r < layout_of(o).gpus(); ++r)
    out.push_back(o.system == train_gpt::training_system::hydraulis ? w : train_gpt::shard_params(o.model, w, {o.tp, r % o.tp}));
  return out;
}

// Trains o.steps steps on o.dp x o.stages x o.nodes x o.gpus_per_node host thread ranks, each
// step one step program (see the file comment); writes `outputs` of step 0.
template <class T>
run_result train(const options& o, const std::vector<train_gpt::step_documents>& steps, const micro_batch_layout& how,
                 const any_checkpoint_policy& recompute, bool progress, const char* label, const step_outputs& outputs) {
  const gpt_config& cfg = o.model;
  const auto [cluster, group] = topologies_of(o);
  const model_config model = train_gpt::gpt_model_config(cfg, static_cast<int>(sizeof(T)));
  // every rank keeps its own copy of its TP shard of the parameters and optimizer state, as
  // processes would (with pipeline stages a rank uses and updates only its stage's layers)
  std::vector<gpt_params<T>> params = rank_parameters(o, train_gpt::init_params<T>(cfg, o.seed));
  std::vector<train_gpt::adamw<T>> optimizers;
  for (rank_index r = 0; r < cluster.num_ranks(); ++r)
    optimizers.push_back(train_gpt::fresh_adamw<T>(o, o.system == train_gpt::training_system::hydraulis
                                                          ? cfg
                                                          : train_gpt::shard_config(cfg, {o.tp, r % o.tp})));
  host_loopback_world world{.ranks = cluster.num_ranks(), .gpus_per_node = cluster.gpus_per_node(), .timeout = std::chrono::seconds(600)};

  run_result result;
  for (int step = 0; step < o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    const prepared_step<T> s = prepare<T>(o, cluster, group, model, recompute, steps[static_cast<std::size_t>(step)], how);
    result.executed = std::string(s.parts.back().micro_batches.back().back().executed.name);
    result.parts = std::max(result.parts, static_cast<int>(s.parts.size()));
    result.pipelines.clear();
    for (const step_replica& r : s.parts.back().program.plan.replicas)
      result.pipelines += (result.pipelines.empty() ? "" : ",") + std::to_string(r.tp) + "x" + std::to_string(r.pp) + "x" + std::to_string(r.cp);
    for (const step_part<T>& part : s.parts)
      for (const std::vector<planned_step<T>>& replica : part.micro_batches)
        for (const planned_step<T>& mb : replica) ++result.layouts[std::string(mb.executed.name)];
    for (const step_part<T>& part : s.parts)
      for (const step_replica& r : part.program.plan.replicas)
        for (const step_micro_batch& mb : r.micro_batches)
          for (const step_piece& x : mb.pieces)
            if (x.tokens() < part.program.plan.documents[static_cast<std::size_t>(x.document)]) ++result.slices;
    if (step == 0 && !outputs.job.empty()) {
      const example_cli::step_job job{o.cluster, cluster.nodes(), cluster.gpus_per_node(), model, s.options, s.parts.front().program.plan};
      write_output(outputs.job, [&](std::ostream& out) { example_cli::write_step_job(out, job); }, "--write-job");
    }
    const bool recording = step == 0 && !outputs.record.empty();
    step_outcome<T> outcome = run_step(world, cfg, s, params, recording);
    for (std::size_t r = 0; r < params.size(); ++r) optimizers[r].step(params[r], outcome.gradients[r]);
    result.kept = std::max(result.kept, outcome.kept);
    if (recording) write_output(outputs.record, [&](std::ostream& out) { write_step_record_json(out, outcome.record); }, "--record");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    train_gpt::report_step(result, progress, label, step, o.steps, outcome.loss / s.targets, s.tokens, seconds);
  }
  // the CP ranks and replicas of one stage and TP index must hold identical parameters, bit
  // for bit (a rank is compared with CP rank 0 of its stage and TP index in replica 0); with
  // ZeRO-3 (InfiniPipe) a CP rank keeps only its chunks up to date, which every use gathers
  const parallel_layout l = layout_of(o);
  const bool sharded = o.system == train_gpt::training_system::infinipipe || o.system == train_gpt::training_system::hydraulis;
  for (rank_index r = 0; r < cluster.num_ranks() && !sharded; ++r) {
    const layout_coordinates at = l.coordinates_of(r);
    const rank_index same = l.rank_of({at.tp, 0, at.pp, 0});
    ZEPPELIN_EXPECTS(train_gpt::flatten(params[static_cast<std::size_t>(r)]) == train_gpt::flatten(params[static_cast<std::size_t>(same)]),
                     "the CP ranks and replicas of a stage hold different parameters after training", {{"rank", double(r)}, {"same_as", double(same)}});
  }
  return result;
}

// The distributed gradient of the first step's mean loss against central differences of the
// distributed loss, at `samples` coordinates spread over every tensor, both through the step
// program the training runs (TP, CP, PP and DP included). The analytic gradient of the whole
// model is assembled from CP rank 0 of replica 0 of every (stage, TP index): its shard's
// tensors of its stage. Returns the largest |analytic - numeric| / max(1e-3, |numeric|).
template <class T>
double gradient_check(const options& o, int samples) {
  const gpt_config& cfg = o.model;
  options first = o;
  first.steps = 1;
  const auto [steps, how] = form_steps<T>(first);
  const auto [cluster, group] = topologies_of(o);
  const model_config model = train_gpt::gpt_model_config(cfg, static_cast<int>(sizeof(T)));
  const prepared_step<T> s = prepare<T>(o, cluster, group, model, checkpoint_policy_by_name(o.checkpoint_or_none()), steps.front(), how);
  host_loopback_world world{.ranks = cluster.num_ranks(), .gpus_per_node = cluster.gpus_per_node(), .timeout = std::chrono::seconds(600)};
  const parallel_layout l = layout_of(o);
  const auto loss_at = [&](const gpt_params<T>& at, gpt_params<T>* grads) {
    step_outcome<T> outcome = run_step(world, cfg, s, rank_parameters(o, at), false);
    if (grads) {
      *grads = train_gpt::zero_params<T>(cfg);
      // with ZeRO-3 (InfiniPipe) every CP rank holds its chunks of the gradients, zeros elsewhere;
      // with switching (Hydraulis) every rank the whole model's elements it owns
      const bool chunked = o.system == train_gpt::training_system::infinipipe;
      for (rank_index r = 0; r < cluster.num_ranks(); ++r) {
        const layout_coordinates c = l.coordinates_of(r);
        if (o.system == train_gpt::training_system::hydraulis) train_gpt::add_params(*grads, outcome.gradients[static_cast<std::size_t>(r)]);
        else if ((c.cp == 0 || chunked) && c.dp == 0) train_gpt::add_shard(cfg, outcome.gradients[static_cast<std::size_t>(r)], {o.tp, c.tp}, *grads);
      }
    }
    return outcome.loss / s.targets;
  };
  gpt_params<T> w = train_gpt::init_params<T>(cfg, o.seed), analytic;
  (void)loss_at(w, &analytic);
  std::vector<std::vector<T>*> tensors, grads;
  w.for_each([&](std::vector<T>& x) { tensors.push_back(&x); });
  analytic.for_each([&](std::vector<T>& x) { grads.push_back(&x); });
  zeppelin::random_generator rng(o.seed, 99);
  double worst = 0;
  const double h = 1e-5;
  for (int i = 0; i < samples; ++i) {
    const std::size_t ti = static_cast<std::size_t>(i) % tensors.size();
    const std::size_t j = rng.below(tensors[ti]->size());
    const T saved = (*tensors[ti])[j];
    (*tensors[ti])[j] = static_cast<T>(saved + h);
    const double up = loss_at(w, nullptr);
    (*tensors[ti])[j] = static_cast<T>(saved - h);
    const double down = loss_at(w, nullptr);
    (*tensors[ti])[j] = saved;
    const double numeric = (up - down) / (2 * h), exact = static_cast<double>((*grads[ti])[j]);
    worst = std::max(worst, std::abs(exact - numeric) / std::max(1e-3, std::abs(numeric)));
  }
  return worst;
}

template <class T>
int run(const options& o, const step_outputs& outputs) {
  const topology t = cluster_by_name(o.cluster, o.nodes, o.gpus_per_node);
  const bool progress = isatty(fileno(stdout)) != 0;
  std::printf("train_gpt: %s, %d layers, width %d, %d heads (%d K/V), vocab %d; %d steps of %lld tokens; method %s on %d x %d "
              "ranks, %s\n",
              o.corpus_file.empty() ? "synthetic documents" : o.corpus_file.c_str(), o.model.layers, o.model.dim, o.model.heads,
              o.model.kv_heads, o.model.vocab, o.steps, static_cast<long long>(o.tokens), o.method.c_str(), t.nodes(),
              t.gpus_per_node(), o.fp32 ? "fp32" : "fp64");
  if (o.gradient_check > 0) {
    const double worst = gradient_check<T>(o, o.gradient_check);
    const double tolerance = o.fp32 ? 5e-2 : 1e-5;
    std::printf("gradient check: max relative error %.3e over %d coordinates (%d ranks, tolerance %.0e)\n", worst, o.gradient_check,
                static_cast<int>(layout_of(o).gpus()), tolerance);
    return worst <= tolerance ? 0 : 1;
  }
  // the reference keeps every activation on one rank, its step's documents not cut into
  // micro-batches; the ranks recompute what --checkpoint says
  options one_rank = o;
  one_rank.nodes = 1, one_rank.gpus_per_node = 1, one_rank.stages = 1, one_rank.micro_batches = 1, one_rank.tp = 1, one_rank.dp = 1;
  one_rank.schedule = pipeline_schedule_kind::one_f_one_b;
  const auto [steps, how] = form_steps<T>(o);
  std::vector<train_gpt::step_documents> whole_steps;
  for (const train_gpt::step_documents& s : steps) whole_steps.push_back(train_gpt::merged(s));
  const run_result reference = train<T>(one_rank, whole_steps, method_or_partitioner(o.method), {no_recompute{}}, progress, "reference", {});
  const run_result distributed = train<T>(o, steps, how, checkpoint_policy_by_name(o.checkpoint_or_none()), progress, "ranks", outputs);
  const auto [worst, scale] = train_gpt::max_loss_gap(reference, distributed);
  const double tolerance = o.fp32 ? 1e-4 * std::max(1.0, scale) : 1e-10;
  std::printf("loss: %.6f -> %.6f; tokens/s: reference %.0f, %d ranks %.0f (method %s, last step: %s)\n", reference.loss.front(),
              reference.loss.back(), reference.tokens / reference.seconds, t.num_ranks() * o.stages * o.dp,
              distributed.tokens / distributed.seconds, o.method.c_str(), distributed.executed.c_str());
  std::printf("micro-batch layouts:");
  for (const auto& [name, count] : distributed.layouts) std::printf(" %s %d", name.c_str(), count);
  std::printf("\n");
  if (o.dp > 1) std::printf("data parallelism: %d replicas, each its share of the step's documents\n", o.dp);
  if (o.system == train_gpt::training_system::hydraulis)
    std::printf("hydraulis: pipelines of the last step %s, gradients switched as mutual slices over all %d ranks\n",
                distributed.pipelines.c_str(), t.num_ranks());
  if (o.system == train_gpt::training_system::infinipipe)
    std::printf("infinipipe: up to %d chunk-level 1F1B pipeline(s) per step, %lld document slices in all, ZeRO-3 over each stage's "
                "%d ranks\n",
                distributed.parts, static_cast<long long>(distributed.slices), t.num_ranks());
  if (o.tp > 1)
    std::printf("tensor parallelism: %d ranks per TP group (the heads, the MLP and the vocabulary split), %d CP ranks per stage\n", o.tp,
                t.num_ranks() / o.tp);
  if (o.pipelined() && o.system != train_gpt::training_system::infinipipe)
    std::printf("pipeline: %d stage(s) of %d ranks, %s schedule, %d virtual stage(s) per stage, up to %d micro-batches per step\n",
                o.stages, t.num_ranks(), std::string(to_string(o.schedule)).c_str(), o.chunks(), o.micro_batch_count());
  std::printf("activations kept between forward and backward: reference %.0f values, ranks at most %.0f each (checkpoint %s)\n",
              reference.kept, distributed.kept,
              o.checkpoint.empty() && o.system == train_gpt::training_system::infinipipe ? "InfiniPipe's stage-aware plan"
                                                                                          : o.checkpoint_or_none().c_str());
  std::printf("loss parity: max |loss - reference| = %.3e over %d steps\n", worst, o.steps);
  return worst <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"A small GPT trained with zeppelin's planning and attention engine on host thread ranks, against one rank"};
  std::vector<std::string> methods;
  for (const method_spec& s : method_specs) methods.emplace_back(s.name);
  for (const std::string_view p : partitioner_names) methods.emplace_back(p);
  app.add_option("--method", o.method, "a method of zeppelin simulate, or a partitioner")
      ->check(CLI::IsMember(methods))
      ->capture_default_str();
  app.add_option("--cluster", o.cluster, "cluster preset")->check(CLI::IsMember({"a", "b", "c", "wlb", "hydraulis", "infinipipe"}));
  using example_cli::add_integer_option;
  add_integer_option(&app, "--nodes", o.nodes, "nodes N")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--gpus-per-node", o.gpus_per_node, "ranks per node P")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--steps", o.steps, "training steps")->check(CLI::Range(1, 100000));
  add_integer_option(&app, "--tokens", o.tokens, "tokens per step")->check(CLI::Range(2, 1 << 20));
  add_integer_option(&app, "--min-length", o.min_length, "shortest synthetic document")->check(CLI::Range(2, 1 << 20));
  add_integer_option(&app, "--max-length", o.max_length, "longest synthetic document")->check(CLI::Range(2, 1 << 20));
  app.add_option("--corpus", o.corpus_file, "documents of token ids, one per line (default: synthetic)")->check(CLI::ExistingFile);
  add_integer_option(&app, "--seed", o.seed, "seed of the data and the initial parameters");
  add_integer_option(&app, "--vocab", o.model.vocab, "vocabulary size")->check(CLI::Range(2, 1 << 16));
  add_integer_option(&app, "--dim", o.model.dim, "model width (heads x head dim)")->check(CLI::Range(2, 4096));
  add_integer_option(&app, "--heads", o.model.heads, "query heads")->check(CLI::Range(1, 256));
  add_integer_option(&app, "--kv-heads", o.model.kv_heads, "key/value heads (divides heads)")->check(CLI::Range(1, 256));
  add_integer_option(&app, "--layers", o.model.layers, "layers")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--hidden", o.model.hidden, "MLP width")->check(CLI::Range(1, 16384));
  app.add_option("--lr", o.lr, "AdamW learning rate")->check(CLI::Range(0.0, 1.0));
  app.add_flag("--fp32", o.fp32, "train in fp32 (default fp64)");
  app.add_option("--checkpoint", o.checkpoint,
                 "layers the ranks recompute in backward: none (the default), full, selective:K, or a stage-aware plan "
                 "stage_aware:S:B0,...:C0,...; with --system infinipipe it replaces the stage-aware recomputation the planner chose");
  const std::map<std::string, train_gpt::training_system> systems{{"zeppelin", train_gpt::training_system::zeppelin},
                                                                   {"wlb", train_gpt::training_system::wlb},
                                                                   {"infinipipe", train_gpt::training_system::infinipipe},
                                                                   {"hydraulis", train_gpt::training_system::hydraulis}};
  std::string system = "zeppelin";
  app.add_option("--system", system,
                 "whose composition trains: zeppelin (equal token shares, each micro-batch planned by --method), wlb (WLB-LLM's "
                 "packer with outlier delay, per-document all-gather or per-sequence ring CP, whichever is faster) or infinipipe "
                 "(InfiniPipe's elastic pipelines: documents sliced into chunks, chunk-level 1F1B, Ulysses, stage-aware "
                 "checkpointing, ZeRO-3) or hydraulis (Hydraulis' pipelines of different TP x PP x CP, the step's documents "
                 "dispatched and packed by its two-stage planner, gradients brought together by switching mutual slices)")
      ->check(CLI::IsMember(names_of(systems)))
      ->capture_default_str();
  add_integer_option(&app, "--chunk-tokens", o.chunk_tokens,
                     "--system infinipipe: the most tokens one chunk may hold (longer documents are sliced; 0: no limit)")
      ->check(CLI::Range(0, 1 << 20));
  std::string pipelines;
  app.add_option("--pipelines", pipelines,
                 "--system hydraulis: the pipelines, TPxPPxCP each, comma-separated (e.g. 2x1x1,1x2x1,1x1x2); default: the "
                 "library's proposal for each step");
  add_integer_option(&app, "--tp", o.tp, "tensor-parallel ranks per group (divides --gpus-per-node)")->check(CLI::Range(1, 64));
  const std::map<std::string, zeppelin::tp_collectives> tp_modes{{"all_reduce", zeppelin::tp_collectives::all_reduce},
                                                                   {"sequence_parallel", zeppelin::tp_collectives::sequence_parallel}};
  std::string tp_collectives = "all_reduce";
  app.add_option("--tp-collectives", tp_collectives,
                 "how TP's collectives run: all_reduce, or sequence_parallel (reduce-scatters and all-gathers, row shares between "
                 "stages)")
      ->check(CLI::IsMember(names_of(tp_modes)))
      ->capture_default_str();
  add_integer_option(&app, "--dp", o.dp, "data-parallel replicas, each --stages x --nodes x --gpus-per-node ranks")->check(CLI::Range(1, 16));
  add_integer_option(&app, "--stages", o.stages, "pipeline stages, each a group of nodes x gpus-per-node ranks")->check(CLI::Range(1, 16));
  add_integer_option(&app, "--micro-batches", o.micro_batches, "micro-batches per step (whole documents; 0: the stage count)")
      ->check(CLI::Range(0, 256));
  std::string schedule = "1f1b";
  app.add_option("--schedule", schedule, "pipeline schedule: gpipe, 1f1b, interleaved")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();
  add_integer_option(&app, "--virtual-stages", o.virtual_stages, "model chunks per stage of the interleaved schedule")
      ->check(CLI::Range(1, 16));
  step_outputs outputs;
  app.add_option("--record", outputs.record,
                 "write the step record of the distributed run's first step (zeppelin.step_record; infinipipe: of its first "
                 "pipeline)");
  app.add_option("--write-job", outputs.job,
                 "write the distributed run's first step as a step job (zeppelin.step_job) for `zeppelin pipeline --job` "
                 "(infinipipe: its first pipeline)");
  add_integer_option(&app, "--gradient-check", o.gradient_check,
                     "instead of training: check the distributed gradient of the first step at N coordinates against "
                     "central differences")
      ->check(CLI::Range(0, 100000));
  const std::map<std::string, train_gpt::world_kind> worlds{
      {"host", train_gpt::world_kind::host}, {"device", train_gpt::world_kind::device}, {"nccl", train_gpt::world_kind::nccl}};
  app.add_option("--world", o.world,
                 "where the ranks run: host (threads, the host engine), device (threads on one GPU, the CUDA engine in bf16), nccl "
                 "(this process is one rank, one GPU each)")
      ->transform(CLI::CheckedTransformer(worlds))
      ->capture_default_str();
  add_integer_option(&app, "--device", o.device, "--world device: the GPU the ranks share")->check(CLI::Range(0, 1023));
  add_integer_option(&app, "--rank", o.rank, "--world nccl: this process's rank")->check(CLI::Range(0, 1 << 20));
  app.add_option("--id-file", o.id_file, "--world nccl: a path all ranks see, which must not exist yet (rank 0 writes the NCCL id)");
  example_cli::refuse_empty_values(app);
  CLI11_PARSE(app, argc, argv);
  try {
    o.schedule = pipeline_schedule_kind_by_name(schedule);
    o.system = systems.at(system);
    o.tp_mode = tp_modes.at(tp_collectives);
    // InfiniPipe's and Hydraulis' planners choose the schedule, the micro-batches and (Hydraulis)
    // the TP collectives themselves: a value given for them would be silently ignored
    std::vector<std::string> planned;
    if (o.system == train_gpt::training_system::infinipipe) planned = {"--schedule", "--virtual-stages", "--micro-batches"};
    if (o.system == train_gpt::training_system::hydraulis) planned = {"--schedule", "--virtual-stages", "--micro-batches", "--tp-collectives"};
    for (const std::string& name : planned)
      ZEPPELIN_EXPECTS(app.count(name) == 0,
                       name + " is chosen by the planner of --system " + system + " (its pipelines' schedule, micro-batches and TP collectives)",
                       {});
    ZEPPELIN_EXPECTS(o.model.dim % o.model.heads == 0 && o.model.head_dim() % 2 == 0 && o.model.heads % o.model.kv_heads == 0,
                     "the width must split into heads of an even head dim, and the K/V heads divide the heads",
                     {{"dim", double(o.model.dim)}, {"heads", double(o.model.heads)}, {"kv_heads", double(o.model.kv_heads)}});
    ZEPPELIN_EXPECTS(o.min_length <= o.max_length, "--min-length exceeds --max-length",
                     {{"min_length", double(o.min_length)}, {"max_length", double(o.max_length)}});
    (void)checkpoint_policy_by_name(o.checkpoint_or_none());  // a bad policy fails before any training
    ZEPPELIN_EXPECTS(o.model.layers >= o.stages * o.chunks(),
                     "every virtual pipeline stage needs a layer: --layers must be at least --stages (times "
                     "--virtual-stages with the interleaved schedule)",
                     {{"layers", double(o.model.layers)}, {"stages", double(o.stages)}, {"virtual_stages", double(o.chunks())}});
    ZEPPELIN_EXPECTS(o.gpus_per_node % o.tp == 0, "a TP group stays on one node: --tp must divide --gpus-per-node",
                     {{"tp", double(o.tp)}, {"gpus_per_node", double(o.gpus_per_node)}});
    train_gpt::check_tensor_parallel(o.model, o.tp);
    ZEPPELIN_EXPECTS(o.system != train_gpt::training_system::infinipipe || (o.tp == 1 && o.dp == 1),
                     "--system infinipipe plans one pipeline of --stages stages of N x P Ulysses ranks (no --tp, no --dp)",
                     {{"tp", double(o.tp)}, {"dp", double(o.dp)}});
    o.pipelines = train_gpt::pipelines_by_text(pipelines);
    ZEPPELIN_EXPECTS(o.system != train_gpt::training_system::hydraulis || (o.tp == 1 && o.dp == 1 && o.stages == 1),
                     "--system hydraulis chooses each pipeline's TP, PP and CP itself (no --tp, --dp or --stages; --pipelines "
                     "fixes them)",
                     {{"tp", double(o.tp)}, {"dp", double(o.dp)}, {"stages", double(o.stages)}});
    ZEPPELIN_EXPECTS(o.pipelines.empty() || o.system == train_gpt::training_system::hydraulis, "--pipelines fixes Hydraulis' pipelines (--system hydraulis)", {});
    ZEPPELIN_EXPECTS(o.chunk_tokens == 0 || o.system == train_gpt::training_system::infinipipe,
                     "--chunk-tokens limits InfiniPipe's chunks (--system infinipipe)", {{"chunk_tokens", double(o.chunk_tokens)}});
    ZEPPELIN_EXPECTS((o.tp == 1 && o.dp == 1 && o.system == train_gpt::training_system::zeppelin) || o.world == train_gpt::world_kind::host,
                     "--tp, --dp and --system wlb, infinipipe or hydraulis run in the host world (not a GPU world)", {{"tp", double(o.tp)}, {"dp", double(o.dp)}});
    ZEPPELIN_EXPECTS((outputs.record.empty() && outputs.job.empty()) || (o.world == train_gpt::world_kind::host && o.gradient_check == 0),
                     "--record and --write-job write a host training run's first step (not --gradient-check or a GPU world)", {});
    if (o.world != train_gpt::world_kind::host) return train_gpt::run_on_device(o);
    return o.fp32 ? run<float>(o, outputs) : run<double>(o, outputs);
  } catch (const output_failed& e) {
    std::cerr << "train_gpt: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "train_gpt: " << e.what() << '\n';
    return 2;
  }
}
