// zeppelin/schedule/pipeline/schedule_policy.hpp
// The concept every pipeline schedule policy models.
//   in : stages P (>= 1) and the tokens of each micro-batch, in the order they enter the
//        pipeline (micro-batches may differ in size; none is padded)
//   out: a pipeline_schedule (pipeline_schedule.hpp) that validate() accepts
// Models: gpipe (gpipe.hpp), one_f_one_b (one_f_one_b.hpp), interleaved_one_f_one_b
// (interleaved.hpp). Policies are small value types: configuration lives in their members.
// A policy whose schedules validate() accepts for every input (the models here: the tests
// check it over seeded random inputs) declares `static constexpr bool valid_by_construction
// = true`; consumers then skip re-validating each schedule (O(ops), as long as building it).
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/types.hpp>
#include <zeppelin/schedule/pipeline/pipeline_schedule.hpp>

#include <concepts>
#include <span>

ZEPPELIN_NAMESPACE_BEGIN

template <class S>
concept pipeline_schedule_policy = std::regular<S> && requires(const S& s, int stages, std::span<const token_count> tokens) {
  { s.build(stages, tokens) } -> std::same_as<pipeline_schedule>;
};

//! True when S declares its schedules valid for every input (see the file comment).
template <class S>
inline constexpr bool schedule_valid_by_construction = [] {
  if constexpr (requires { S::valid_by_construction; }) return static_cast<bool>(S::valid_by_construction);
  else return false;
}();

ZEPPELIN_NAMESPACE_END
