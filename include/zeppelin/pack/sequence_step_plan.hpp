// zeppelin/pack/sequence_step_plan.hpp
// Step plans over parts of a global batch, run one after another: how InfiniPipe's pipelines
// (pack/elastic_step_plan.hpp) and FlexSP's micro-batches (pack/flexsp_step_plan.hpp) become
// an iteration of the one step simulator (sim/simulate_step.hpp).
//   sequence_step_plan      a step plan whose documents are some of the batch's sequences:
//                           document d is sequence sequences[d] (a step plan must cover
//                           every document it lists, so each part lists only its own)
//   documents_of            the pieces of such a part, named by sequence, renumbered into its
//                           documents (in order of first appearance) with their lengths
//   simulate_back_to_back   each part's step program (step/build.hpp) simulated on its own;
//                           the iteration is their sum: a part starts once the one before
//                           has drained (a pipeline flush, or FlexSP's next micro-batch), and
//                           gradients accumulate across parts; with a finite deadline in the
//                           simulator options it stops once the sum passes it (stopped)
// Element sizes: activations and parameters move at the model's bytes per element, gradients
// at step_program_options' (fp32). With exchange_pricing::per_port the programs hold their
// switching exchanges as each rank's traffic (exchange_detail::traffic_only), so Hydraulis'
// switching prices at any number of GPUs. The simulator's own memory check is off by default: the
// planner that made the parts decided what fits (Eq. 20, or FlexSP's activation budget).
// Errors: invalid_argument for no parts, a piece naming an unknown sequence; what
// make_step_program and simulate_step throw.
// Host-only.
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/model.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/sim/simulate_step.hpp>
#include <zeppelin/step/build.hpp>
#include <zeppelin/step/step_plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

//! A step plan over some sequences of a batch (see the file comment).
struct sequence_step_plan {
  step_plan plan;
  std::vector<std::int64_t> sequences;  //!< per document of `plan`: its sequence in the batch
  friend bool operator==(const sequence_step_plan&, const sequence_step_plan&) = default;
};

//! Renumbers `micro_batches` (pieces whose `document` is a sequence index into `lengths`) into
//! documents of their own: returns the documents' lengths, and per document its sequence in
//! `sequences` (in order of first appearance).
[[nodiscard]] inline std::vector<token_count> documents_of(std::vector<std::vector<step_piece>>& micro_batches,
                                                           std::span<const token_count> lengths, std::vector<std::int64_t>& sequences) {
  std::vector<std::int64_t> document_of(lengths.size(), -1);
  std::vector<token_count> documents;
  sequences.clear();
  for (std::vector<step_piece>& pieces : micro_batches)
    for (step_piece& x : pieces) {
      ZEPPELIN_EXPECTS(x.document >= 0 && static_cast<std::size_t>(x.document) < lengths.size(), "a piece names an unknown sequence",
                       {{"sequence", double(x.document)}, {"sequences", double(lengths.size())}});
      std::int64_t& d = document_of[static_cast<std::size_t>(x.document)];
      if (d < 0) {
        d = static_cast<std::int64_t>(documents.size());
        documents.push_back(lengths[static_cast<std::size_t>(x.document)]);
        sequences.push_back(x.document);
      }
      x.document = d;
    }
  return documents;
}

//! The step program options of `model`: activations and parameters at its element size.
[[nodiscard]] inline step_program_options step_options_of(const model_config& model) {
  step_program_options o;
  o.activation_bytes = o.parameter_bytes = model.bytes_per_element;
  o.accumulator_bytes = std::max(o.accumulator_bytes, o.activation_bytes);
  return o;
}

//! The simulator options the parts run with: per_shape pricing, no memory check (see the file
//! comment).
[[nodiscard]] inline step_sim_options back_to_back_sim_options() {
  step_sim_options o;
  o.pricing = block_pricing::per_shape;
  o.memory_capacity_bytes = std::numeric_limits<double>::infinity();
  return o;
}

struct back_to_back_result {
  double iteration_s = 0;              //!< the parts' sum
  bool stopped = false;                //!< the sum passed sim.deadline_s: iteration_s +inf, the parts priced until then
  std::vector<step_sim_result> parts;  //!< one per part, in order
};

//! Simulates `parts` one after another (see the file comment).
[[nodiscard]] inline back_to_back_result simulate_back_to_back(std::span<const sequence_step_plan> parts, const topology& cluster,
                                                               const model_config& model, const step_sim_options& sim = back_to_back_sim_options()) {
  ZEPPELIN_EXPECTS(!parts.empty(), "a back-to-back iteration needs at least one step plan", {});
  const sim_cost_model cost = sim_cost_model::for_topology(cluster);
  step_program_options options = step_options_of(model);
  if (sim.exchanges == exchange_pricing::per_port) options.exchanges = exchange_detail::traffic_only;  // each rank's traffic is all it reads
  back_to_back_result out;
  step_sim_options left = sim;
  for (const sequence_step_plan& part : parts) {
    left.deadline_s = sim.deadline_s - out.iteration_s;
    out.parts.push_back(simulate_step(make_step_program(part.plan, cluster, model, options), cluster, cost, left));
    out.iteration_s += out.parts.back().iteration_s;
    if (out.parts.back().stopped) {
      out.stopped = true;
      break;
    }
  }
  return out;
}

ZEPPELIN_NAMESPACE_END
