// zeppelin/planner/cheapest_layout.hpp
// A CP layout policy that chooses per micro-batch: it lays the micro-batch out with each of its
// candidate partitioners and keeps the layout whose slowest rank's attention is fastest.
// WLB-LLM's adaptive CP sharding is this policy over per_document and per_sequence
// (wlb_adaptive_layout): per-document sharding balances every document's pairs but cuts short
// documents into chunks below one kernel tile; per-sequence sharding keeps chunks long but
// balances only the packed sequence.
//   in : a batch (a micro-batch's pieces) and the CP group's topology (the layout policy
//        interface of step/make_plan.hpp); candidates, the attention time model, the wire
//        format of one CP rank's launches (heads after TP, head dim)
//   out: the chosen plan: per candidate, the forward + backward seconds of each rank's
//        attention launches (its execution program's, sim/backend.hpp price_launches: tiles,
//        CSR blocks) summed per rank; the smallest slowest rank wins, ties to the earlier
//        candidate. A pure function of its inputs: every rank chooses alike.
// Errors: invalid_argument with no candidates; when every candidate refuses the batch, the last
// refusal. Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cost/attention_time_model.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/sim/backend.hpp>

#include <algorithm>
#include <exception>
#include <limits>
#include <optional>
#include <vector>

ZEPPELIN_NAMESPACE_BEGIN

struct cheapest_layout {
  std::vector<any_partitioner> candidates;
  attention_time_model attention = attention_time_model::h100_fa2();
  wire_format wire{};  //!< the heads and head dim one CP rank's launches compute

  //! The slowest rank's attention seconds (forward + backward) of `p`.
  [[nodiscard]] double slowest_rank_seconds(const plan& p, const batch& b, const topology& t) const {
    program_options o;
    o.wire = wire;
    const execution_program prog = make_program(p, b, t, o);
    const std::vector<detail::call_cost> prices = price_launches(prog, attention);
    std::vector<double> per_rank(static_cast<std::size_t>(prog.num_ranks()), 0.0);
    for (std::size_t i = 0; i < prog.launches.size(); ++i)
      per_rank[static_cast<std::size_t>(prog.launches[i].rank)] +=
          prog.launches[i].pass == pass_kind::forward ? prices[i].forward_s : prices[i].backward_s;
    return per_rank.empty() ? 0.0 : *std::max_element(per_rank.begin(), per_rank.end());
  }

  [[nodiscard]] plan partition(const batch& b, const topology& t) const {
    ZEPPELIN_EXPECTS(!candidates.empty(), "cheapest_layout needs at least one candidate partitioner", {});
    std::optional<plan> best;
    double best_s = std::numeric_limits<double>::infinity();
    std::exception_ptr refused;
    for (const any_partitioner& c : candidates) {
      try {
        plan p = zeppelin::partition(c, b, t);
        const double s = slowest_rank_seconds(p, b, t);
        if (!best || s < best_s) best = std::move(p), best_s = s;
      } catch (const infeasible&) {
        refused = std::current_exception();
      }
    }
    if (!best) std::rethrow_exception(refused);
    return std::move(*best);
  }
  friend bool operator==(const cheapest_layout&, const cheapest_layout&) = default;
};

//! WLB-LLM's adaptive sharding: per_document or per_sequence, of capacity `capacity`; the
//! per-document layout's groups run `per_document_collective` (WLB-LLM's own CP all-gathers
//! K/V, Llama-3 style; a ring is TransformerEngine's per-document CP).
[[nodiscard]] inline cheapest_layout wlb_adaptive_layout(token_count capacity, const attention_time_model& attention, const wire_format& wire,
                                                         collective_kind per_document_collective = collective_kind::ring) {
  return {{any_partitioner{per_document{.capacity = capacity, .collective = per_document_collective}},
           partitioner_by_name("per_sequence", {.capacity = capacity})},
          attention,
          wire};
}

ZEPPELIN_NAMESPACE_END
