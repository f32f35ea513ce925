// zeppelin/step/program.hpp
// The step program: THE one description of what one training iteration runs, built once
// per step plan (step/build.hpp). The simulator (sim/simulate_step.hpp) and the host runner
// (exec/step_runner.hpp) run it through one driver (step/driver.hpp), so what the simulator
// prices is what the runner executes.
//
// Two levels, both as per-rank op lists with CUDA stream semantics (ops of one stream run in
// their order; an op also waits for the ops it names in `after`, which are the rank's own):
//   step level   per rank: blocks (the forward or backward of one virtual stage's layers
//                for one micro-batch, run by the stage's tp x cp ranks together) on the
//                compute stream, and groups of point-to-point transfers on the
//                communication stream: the pipeline's sends and receives, grouped as the
//                schedule posts them, and the gradient synchronisation;
//   layer level  a block expands (step/block.hpp, the same rules for every backend) into
//                per-member ops: the model's parts of each layer (compute), the TP
//                collectives and ZeRO-3 gathers as ring steps (groups), the micro-batch's
//                CP attention (its execution program, program/program.hpp, run by the
//                members of one TP index), and the K/V context of sliced documents.
// A group is one rank's NCCL group: its transfers (sends and receives) posted together; it
// completes when all of them have; a transfer's two ends are in one group of its source and
// one of its destination. Every transfer names what it moves (step_buffer) on both ends, so
// a runner can find the bytes in the model's tensors; `combine` says whether the receiver
// overwrites or adds (ring reduce-scatter steps). Hydraulis' switching is three job-wide
// exchanges (step_group::exchange), held as transfers or, for pricing at any size, as each
// rank's traffic alone (exchange_detail::traffic_only: what simulate_step prices per port;
// the runner refuses such a program).
// Plain data. Host code, nvcc-safe.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/cost/busiest_port.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/program.hpp>
#include <zeppelin/program/small_list.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! What an op computes for: the forward, the backward, or the forward again in backward.
enum class step_pass : std::uint8_t { forward = 0, backward = 1, recompute = 2 };

[[nodiscard]] constexpr std::string_view to_string(step_pass p) noexcept {
  return p == step_pass::forward ? "fwd" : p == step_pass::backward ? "bwd" : "recompute";
}
//! The attention program's pass an op of `p` runs (recomputation runs the forward).
[[nodiscard]] constexpr pass_kind attention_pass(step_pass p) noexcept {
  return p == step_pass::backward ? pass_kind::backward : pass_kind::forward;
}

//! The traffic a transfer belongs to.
enum class traffic_class : std::uint8_t {
  tp = 0,  //!< tensor-parallel collectives (and ZeRO-3's per-layer gathers and scatters)
  cp = 1,  //!< context parallelism: the attention programs and the K/V context of slices
  pp = 2,  //!< pipeline activations and gradients
  dp = 3,  //!< gradient synchronisation between the ranks holding the same parameters
};
inline constexpr int traffic_classes = 4;

[[nodiscard]] constexpr std::string_view to_string(traffic_class c) noexcept {
  switch (c) {
    case traffic_class::tp: return "tp";
    case traffic_class::cp: return "cp";
    case traffic_class::pp: return "pp";
    case traffic_class::dp: return "dp";
  }
  return "?";
}

//! The model's parts a compute op runs (Megatron-LM's split of a transformer layer).
enum class model_part : std::uint8_t {
  embedding = 0,          //!< token embedding (first virtual stage)
  attention_input = 1,    //!< input norm, QKV projection (column parallel), rotary
  attention_output = 2,   //!< output projection (row parallel), residual
  mlp = 3,                //!< norm, MLP (column then row parallel), residual
  head = 4,               //!< final norm, LM head, loss (last virtual stage)
  context_attention = 5,  //!< the queries of sliced documents against their kept K/V context
  context_save = 6,       //!< keep the K/V of the rank's rows of documents that continue later
  context_gradient = 7,   //!< add the dK/dV later slices returned into the rank's own
};

[[nodiscard]] constexpr std::string_view to_string(model_part p) noexcept {
  switch (p) {
    case model_part::embedding: return "embedding";
    case model_part::attention_input: return "attention_input";
    case model_part::attention_output: return "attention_output";
    case model_part::mlp: return "mlp";
    case model_part::head: return "head";
    case model_part::context_attention: return "context_attention";
    case model_part::context_save: return "context_save";
    case model_part::context_gradient: return "context_gradient";
  }
  return "?";
}

//! The tensors transfers move.
enum class step_tensor : std::uint8_t {
  activation = 0,           //!< boundary activation leaving virtual stage `virtual_stage` forward
  activation_gradient = 1,  //!< boundary gradient leaving virtual stage `virtual_stage` backward
  layer_input = 2,          //!< a TP collective's tensor, rows x hidden: the input of `part` of
                            //!< `layer` (forward: all-gathered), or its gradient (backward: reduced)
  layer_output = 3,         //!< the output of `part` of `layer` (forward: reduced), or its
                            //!< gradient (backward: all-gathered)
  parameters = 4,           //!< the rank's parameters of `layer` (-1: all of its stage's)
  gradients = 5,            //!< the rank's gradients of `layer` (-1: all of its stage's)
  context = 6,              //!< K/V of document `document` the rank kept from its earlier slices
  context_gradient = 7,     //!< the dK/dV of those kept rows, added up over the later slices
  loss_statistics = 8,      //!< the vocabulary-parallel cross-entropy's per-row statistics: TP rank
                            //!< t's (log-sum-exp of its logits, its target logit) at rows [t n, (t + 1) n)
  gathered_context = 9,     //!< the K/V context of document `document` a slice's rank gathered: every
                            //!< CP rank's kept rows in CP order (the rank's own included, not moved)
  gathered_context_gradient = 10,  //!< its dK/dV, sent back to the ranks that kept the rows (added there)
  master_parameters = 11,   //!< switching: the master range of the parameters of `layers` layers from
                            //!< `layer` a rank owns (what a pull reads there)
  master_gradients = 12,    //!< switching: the same range of their gradients (where a push lands)
};

[[nodiscard]] constexpr std::string_view to_string(step_tensor t) noexcept {
  switch (t) {
    case step_tensor::activation: return "activation";
    case step_tensor::activation_gradient: return "activation_gradient";
    case step_tensor::layer_input: return "layer_input";
    case step_tensor::layer_output: return "layer_output";
    case step_tensor::parameters: return "parameters";
    case step_tensor::gradients: return "gradients";
    case step_tensor::context: return "context";
    case step_tensor::context_gradient: return "context_gradient";
    case step_tensor::loss_statistics: return "loss_statistics";
    case step_tensor::gathered_context: return "gathered_context";
    case step_tensor::gathered_context_gradient: return "gathered_context_gradient";
    case step_tensor::master_parameters: return "master_parameters";
    case step_tensor::master_gradients: return "master_gradients";
  }
  return "?";
}

//! A byte range of one tensor of a rank, named alike by both ends of a transfer.
struct step_buffer {
  step_tensor tensor = step_tensor::activation;
  step_pass pass = step_pass::forward;
  model_part part = model_part::embedding;  //!< layer_input, layer_output: whose tensor
  std::int32_t micro_batch = -1;            //!< -1: none (parameters, gradients)
  std::int32_t virtual_stage = -1;
  std::int32_t layer = -1;
  std::int64_t document = -1;               //!< context tensors
  std::int64_t offset = 0;                  //!< first byte
  std::int64_t bytes = 0;
  //! parameters, gradients: layers [layer, layer + layers) (0: one layer, or with layer -1 all
  //! of the rank's stage); a switching transfer's slices are laid out segment-major, so a
  //! segment range of every tensor of the layers is one byte range
  std::int32_t layers = 0;
  friend constexpr bool operator==(const step_buffer&, const step_buffer&) = default;
};

//! How the receiver treats the bytes it receives.
enum class combine_kind : std::uint8_t {
  copy = 0,  //!< overwrite its range of `to`
  add = 1,   //!< add them, element by element, into its range of `to` (a ring reduction step)
};

//! One point-to-point transfer: `bytes` from `src`'s `from` to `dst`'s `to`.
struct step_transfer {
  rank_index src = 0;
  rank_index dst = 0;
  std::int64_t bytes = 0;
  traffic_class traffic = traffic_class::pp;
  combine_kind combine = combine_kind::copy;
  step_buffer from{};
  step_buffer to{};
  friend constexpr bool operator==(const step_transfer&, const step_transfer&) = default;
};

//! One rank's NCCL group: its transfers (sends where it is the source, receives where it
//! is the destination) in the order it posts them.
struct step_group {
  rank_index rank = 0;
  std::vector<std::int32_t> transfers;
  //! The job-wide exchange the group is one rank's part of (Hydraulis' pull, the push's
  //! reduction, its link to the owners), in [0, step_program::exchanges); -1: none. A
  //! simulator may price an exchange as a whole (sim/step_backend.hpp, exchange_pricing).
  std::int32_t exchange = -1;
  friend bool operator==(const step_group&, const step_group&) = default;
};

//! The stream of a step or layer op.
enum class step_stream : std::uint8_t { compute = 0, communication = 1 };

//! The forward or backward of one virtual stage's layers for one micro-batch, on every rank of
//! the stage (tp x cp members). A backward first recomputes `recomputed` of its first layers
//! (each right before its backward).
struct step_block {
  std::int32_t replica = 0;
  std::int32_t stage = 0;           //!< pipeline stage (the ranks)
  std::int32_t virtual_stage = 0;   //!< chunk x pp + stage (the layers)
  std::int32_t micro_batch = 0;
  step_pass pass = step_pass::forward;  //!< forward or backward
  std::int32_t first_layer = 0;
  std::int32_t layers = 0;
  std::int32_t recomputed = 0;
  bool first = false;  //!< the first virtual stage: the block runs the embedding
  bool last = false;   //!< the last virtual stage: the block runs the head and the loss
  friend constexpr bool operator==(const step_block&, const step_block&) = default;
};

enum class step_op_kind : std::uint8_t {
  block = 0,  //!< index into step_program::blocks (compute stream)
  group = 1,  //!< index into step_program::groups (communication stream)
};

//! One op of a rank's step-level list.
struct step_op {
  step_op_kind kind = step_op_kind::block;
  std::int32_t index = 0;
  small_list<std::int32_t, 2> after;  //!< earlier ops of the same rank it waits for
  friend bool operator==(const step_op&, const step_op&) = default;
};

//! A micro-batch's CP layout, made executable: its attention program (built with the heads
//! of one TP rank), and per CP rank the rows of its linear modules and, per piece, the rows
//! of the piece it holds in the attention layout and the rows of the piece's context it kept
//! from the document's earlier slices.
struct step_layout {
  execution_program attention;
  std::vector<token_count> linear_rows;               //!< [cp rank]
  std::vector<std::vector<token_count>> piece_rows;   //!< [cp rank][piece]
  std::vector<std::vector<token_count>> context_rows; //!< [cp rank][piece]
  friend bool operator==(const step_layout&, const step_layout&) = default;
};

//! How a step program holds Hydraulis' switching, the job-wide exchanges.
enum class exchange_detail : std::uint8_t {
  listed = 0,        //!< every transfer (what a runner executes), up to max_switching_transfers
  traffic_only = 1,  //!< each rank's bytes per link class (step_program::exchange_traffic) and no
                     //!< transfers: what a simulator pricing per port needs, at any size; no runner runs it
};

[[nodiscard]] constexpr std::string_view to_string(exchange_detail d) noexcept { return d == exchange_detail::traffic_only ? "traffic_only" : "listed"; }

//! Sizes the program's transfers and the buffers it names use.
struct step_program_options {
  program_options attention{};  //!< how each CP layout's attention runs (its wire format is set from the model)
  int activation_bytes = 2;     //!< bytes of an activation element (boundary tensors, TP collectives, context)
  int parameter_bytes = 2;      //!< bytes of a parameter as the collectives move it
  int gradient_bytes = 4;       //!< bytes of a gradient as the collectives move it (Megatron-LM: fp32)
  int accumulator_bytes = 4;    //!< bytes of the attention's dK/dV accumulators (at least activation_bytes)
  //! Largest number of transfers Hydraulis' switching (step/build.hpp) may list: each holds
  //! two buffer descriptions (about 150 bytes with its op entries), so 2^22 keeps the sync
  //! within about a GB. Beyond it make_step_program throws resource_limit.
  std::int64_t max_switching_transfers = std::int64_t{1} << 22;
  exchange_detail exchanges = exchange_detail::listed;  //!< how the switching is held
  friend bool operator==(const step_program_options&, const step_program_options&) = default;
};

//! Where a global rank sits in the plan.
struct step_position {
  std::int32_t replica = -1;  //!< -1: the rank runs nothing
  std::int32_t tp = 0, cp = 0, stage = 0;
  friend constexpr bool operator==(const step_position&, const step_position&) = default;
};

struct step_program {
  step_plan plan;                                  //!< what it was built from
  model_config model;
  step_program_options options;
  std::vector<step_position> positions;            //!< [global rank]
  std::vector<std::vector<step_layout>> layouts;   //!< [replica][micro-batch]
  std::vector<std::vector<double>> stage_parameters;  //!< [replica][stage]: parameters one TP rank holds
  //! [replica][stage]: of those, the ones every TP rank holds (the norms). With TP they are
  //! the last ones of the stage's gradients: their TP ranks' gradients are partial sums (the
  //! norms' backward runs on each rank's share of the gradient), summed over the TP ranks
  //! by the gradient synchronisation.
  std::vector<std::vector<double>> stage_replicated_parameters;
  std::vector<step_block> blocks;
  std::vector<step_transfer> transfers;
  std::vector<step_group> groups;
  std::int32_t exchanges = 0;                      //!< job-wide exchanges its groups name (step_group::exchange)
  //! [exchange][global rank]: with exchange_detail::traffic_only, what each rank sends and
  //! receives in the exchange (its groups then list no transfers); empty otherwise
  std::vector<std::vector<rank_traffic>> exchange_traffic;
  std::vector<std::vector<step_op>> ranks;         //!< [global rank]: its step-level ops

  [[nodiscard]] rank_index num_ranks() const noexcept { return static_cast<rank_index>(ranks.size()); }
  [[nodiscard]] const step_replica& replica(std::int32_t r) const { return plan.replicas[static_cast<std::size_t>(r)]; }
  [[nodiscard]] const step_layout& layout(std::int32_t replica, std::int32_t micro_batch) const {
    return layouts[static_cast<std::size_t>(replica)][static_cast<std::size_t>(micro_batch)];
  }
  friend bool operator==(const step_program&, const step_program&) = default;
};

ZEPPELIN_NAMESPACE_END
