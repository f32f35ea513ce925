// zeppelin/partition/partitioner.hpp
// The partitioner concept: a small regular value type (configuration in its members) that
// turns a batch of sequence lengths and a cluster topology into a plan.
//   in : batch (lengths), topology (N nodes x P GPUs)
//   out: plan (core/plan.hpp) that passes validate(plan, batch, topology); plan.method ==
//        P::name, plan.capacity == the partitioner's token capacity per GPU per micro-batch
// Every model throws, and returns nothing half-built, on bad input:
//   invalid_argument  capacity <= 0, a configuration that does not fit the topology
//   infeasible        batch.total_tokens() > N * P * capacity, or a layout that needs more
//                     than `capacity` tokens on some rank (the message names both numbers)
// Models: hierarchical (Zeppelin), even_split (TE CP), allgather (LLaMA-3 CP), hybrid_dp
// (ByteScale-like), per_document (WLB-LLM). Host-only.
#pragma once

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/config.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>

#include <concepts>
#include <string_view>

ZEPPELIN_NAMESPACE_BEGIN

//! A sequence partitioner: `p.partition(batch, topology)` returns a valid plan and
//! `P::name` names the method (the value of plan.method).
template <class P>
concept partitioner = std::regular<P> && requires(const P& p, const batch& b, const topology& t) {
  { p.partition(b, t) } -> std::same_as<plan>;
  { P::name } -> std::convertible_to<std::string_view>;
  { p.capacity } -> std::convertible_to<token_count>;
};

ZEPPELIN_NAMESPACE_END
