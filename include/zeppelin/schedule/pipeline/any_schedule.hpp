// zeppelin/schedule/pipeline/any_schedule.hpp
// The pipeline schedule policies as one value, chosen at run time (a command line, a config).
//   in : a pipeline_schedule_kind (or its name: "gpipe", "1f1b", "interleaved",
//        "chunk-1f1b") and, for interleaved, the virtual stages per stage; chunk-level 1F1B
//        made by name has no slice chains (every chunk its own chain: 1F1B's order); build
//        chunk_one_f_one_b{.chains} from a chunking for InfiniPipe's chains
//   out: any_pipeline_schedule, itself a pipeline_schedule_policy
// Errors: pipeline_schedule_kind_by_name throws invalid_argument listing the valid names.
// nvcc-safe (host-only).
#pragma once

#include <zeppelin/core/config.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/schedule/pipeline/chunk_one_f_one_b.hpp>
#include <zeppelin/schedule/pipeline/gpipe.hpp>
#include <zeppelin/schedule/pipeline/interleaved.hpp>
#include <zeppelin/schedule/pipeline/one_f_one_b.hpp>
#include <zeppelin/schedule/pipeline/schedule_policy.hpp>

#include <array>
#include <span>
#include <string>
#include <string_view>
#include <variant>

ZEPPELIN_NAMESPACE_BEGIN

inline constexpr std::array<pipeline_schedule_kind, 4> pipeline_schedule_kinds{
    pipeline_schedule_kind::gpipe, pipeline_schedule_kind::one_f_one_b, pipeline_schedule_kind::interleaved,
    pipeline_schedule_kind::chunk_one_f_one_b};

//! The kind called `name` ("gpipe", "1f1b", "interleaved", "chunk-1f1b").
[[nodiscard]] inline pipeline_schedule_kind pipeline_schedule_kind_by_name(std::string_view name) {
  std::string valid;
  for (const pipeline_schedule_kind k : pipeline_schedule_kinds) {
    if (to_string(k) == name) return k;
    valid += (valid.empty() ? "" : ", ") + std::string(to_string(k));
  }
  ZEPPELIN_THROW(invalid_argument, "unknown pipeline schedule '" + std::string(name) + "' (valid: " + valid + ")", {});
}

struct any_pipeline_schedule {
  std::variant<gpipe, one_f_one_b, interleaved_one_f_one_b, chunk_one_f_one_b> policy;

  [[nodiscard]] pipeline_schedule build(int stages, std::span<const token_count> tokens) const {
    return std::visit([&](const auto& p) { return p.build(stages, tokens); }, policy);
  }
  //! The model chunks per stage its schedules have (V).
  [[nodiscard]] int virtual_stages() const noexcept {
    const auto* i = std::get_if<interleaved_one_f_one_b>(&policy);
    return i ? i->virtual_stages : 1;
  }
  //! The kind of the schedules it builds.
  [[nodiscard]] pipeline_schedule_kind kind() const noexcept {
    constexpr pipeline_schedule_kind kinds[] = {pipeline_schedule_kind::gpipe, pipeline_schedule_kind::one_f_one_b,
                                                pipeline_schedule_kind::interleaved, pipeline_schedule_kind::chunk_one_f_one_b};
    return kinds[policy.index()];
  }
  static constexpr bool valid_by_construction = true;  // every alternative is
  friend bool operator==(const any_pipeline_schedule&, const any_pipeline_schedule&) = default;
};
static_assert(pipeline_schedule_policy<any_pipeline_schedule> && schedule_valid_by_construction<any_pipeline_schedule>);

//! The policy of kind `k`; `virtual_stages` configures interleaved and must be 1 otherwise.
//! Throws invalid_argument for virtual_stages != 1 with GPipe or 1F1B.
[[nodiscard]] inline any_pipeline_schedule make_pipeline_schedule(pipeline_schedule_kind k, int virtual_stages = 1) {
  ZEPPELIN_EXPECTS(k == pipeline_schedule_kind::interleaved || virtual_stages == 1,
                   "virtual stages apply to the interleaved schedule only", {{"virtual_stages", double(virtual_stages)}});
  switch (k) {
    case pipeline_schedule_kind::gpipe: return {gpipe{}};
    case pipeline_schedule_kind::one_f_one_b: return {one_f_one_b{}};
    case pipeline_schedule_kind::interleaved: return {interleaved_one_f_one_b{.virtual_stages = virtual_stages}};
    case pipeline_schedule_kind::chunk_one_f_one_b: return {chunk_one_f_one_b{}};
  }
  ZEPPELIN_THROW(invalid_argument, "unknown pipeline schedule kind", {{"kind", double(static_cast<int>(k))}});
}

ZEPPELIN_NAMESPACE_END
