// fuzz/planner_fuzz.cpp
// Fuzz target: every partitioner of the registry (partition/registry.hpp), plus the
// hierarchical one with metric_allocation, on a small batch and topology decoded from bytes.
// Input layout (fuzz_input.hpp; little-endian; missing bytes read as 0):
//   byte  flags      bits 0-1: width code of the lengths, bits 2-3: of the capacity
//                    (0: 1 + u8, 1: 1 + u16, 2: 1 + u32, 3: raw int64, any sign);
//                    bit 4: cp_size is a raw int32 (else one byte, mod 65)
//   byte  nodes      mod 9 (0 is refused by topology)
//   byte  gpus       per node, mod 9
//   byte  metric     mod 3: tokens, attention, cost_model (H100, 32 heads of 128)
//   cp_size          int32 or byte, see bit 4
//   capacity         by its width code
//   byte  count      1 + count mod 16 sequences
//   lengths          count values by their width code
// Properties:
//   - batch, topology and every partitioner either succeed or throw zeppelin::error; nothing
//     else escapes, nothing crashes, no sanitizer report;
//   - a returned plan passes validate (core/validate.hpp: coverage, capacity, groups...), holds
//     exactly the batch's tokens, names its method and keeps the capacity;
//   - hierarchical never takes its "unreachable" contiguous last resort (no such note);
//   - when the batch fits (total <= N P L), hierarchical, even_split, and allgather and
//     per_document with one CP group of all ranks never refuse it as infeasible.
#include "fuzz_input.hpp"
#include "fuzz_topology.hpp"

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/checked_math.hpp>
#include <zeppelin/core/error.hpp>
#include <zeppelin/core/plan.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/core/validate.hpp>
#include <zeppelin/partition/hierarchical.hpp>
#include <zeppelin/partition/metric_allocation.hpp>
#include <zeppelin/partition/registry.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace {

using namespace zeppelin;

struct planner_case {
  int nodes = 1, gpus = 1;
  unsigned metric = 0;
  std::int32_t cp_size = 0;
  token_count capacity = 1;
  std::vector<token_count> lengths;
};

planner_case decode(zeppelin_fuzz::fuzz_input& in) {
  planner_case c;
  const std::uint8_t flags = in.byte();
  const unsigned length_width = flags & 3u, capacity_width = (flags >> 2) & 3u;
  c.nodes = in.byte() % 9;
  c.gpus = in.byte() % 9;
  c.metric = in.byte() % 3u;
  c.cp_size = (flags & 16u) ? in.i32() : static_cast<std::int32_t>(in.byte() % 65);
  c.capacity = in.sized(capacity_width);
  const int count = 1 + in.byte() % 16;
  for (int i = 0; i < count; ++i) c.lengths.push_back(in.sized(length_width));
  return c;
}

any_load_metric make_metric(unsigned kind) {
  return make_load_metric(static_cast<load_metric_kind>(kind), gpus::h100_sxm(), 32, 128);
}

void check_plan(const plan& p, const batch& b, const topology& t, std::string_view name, token_count capacity) {
  const auto violations = find_violations(p, b, t);
  if (!violations.empty()) {
    std::fprintf(stderr, "%.*s: invalid plan: %s\n", static_cast<int>(name.size()), name.data(),
                 violations.front().message.c_str());
    ZEPPELIN_FUZZ_FAIL("a returned plan fails validate");
  }
  token_count held = 0;
  for (const placement& pl : p.placements) held += pl.tokens();
  ZEPPELIN_FUZZ_CHECK(held == b.total_tokens());
  ZEPPELIN_FUZZ_CHECK(p.method == name);
  ZEPPELIN_FUZZ_CHECK(p.capacity == capacity);
  if (name == "hierarchical")
    for (const plan_note& note : p.notes) ZEPPELIN_FUZZ_CHECK(note.kind != note_kind::contiguous_fallback);
}

//! Runs `plan_it` and checks its plan; a zeppelin::error is a refusal, and an infeasible one
//! is a bug when `must_fit`.
template <class Plan>
void run(std::string_view name, const batch& b, const topology& t, token_count capacity, bool must_fit,
         Plan&& plan_it) {
  std::optional<plan> p;
  try {
    p.emplace(plan_it());
  } catch (const infeasible& e) {
    if (must_fit) {
      std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(name.size()), name.data(), e.what());
      ZEPPELIN_FUZZ_FAIL("a batch that fits N * P * L was refused as infeasible");
    }
    return;
  } catch (const zeppelin::error&) {
    return;
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  check_plan(*p, b, t, name, capacity);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  zeppelin_fuzz::fuzz_input in(data, size);
  const planner_case c = decode(in);
  std::optional<batch> b;
  std::optional<topology> t;
  any_load_metric metric;
  try {
    b.emplace(c.lengths);
    t.emplace(zeppelin_fuzz::small_topology(c.nodes, c.gpus));
    metric = make_metric(c.metric);
  } catch (const zeppelin::error&) {
    return 0;  // refused input (a length <= 0 or past max_sequence_length, no node, ...)
  } catch (...) {
    ZEPPELIN_FUZZ_UNEXPECTED();
  }
  // N P L saturates at INT64_MAX, the largest total a batch has
  const bool fits = c.capacity > 0 && b->total_tokens() <= saturating_mul(c.capacity, t->num_ranks());
  const bool one_group = c.cp_size == 0 || c.cp_size == t->num_ranks();
  const partitioner_settings settings{.capacity = c.capacity, .cp_size = c.cp_size, .metric = metric};
  for (const std::string_view name : partitioner_names) {
    const bool must_fit = fits && (name == "hierarchical" || name == "even_split" ||
                                   ((name == "allgather" || name == "per_document") && one_group));
    run(name, *b, *t, c.capacity, must_fit, [&] { return partition(partitioner_by_name(name, settings), *b, *t); });
  }
  std::visit(
      [&](const auto& m) {
        using metric_type = std::decay_t<decltype(m)>;
        const hierarchical<metric_type, metric_allocation> h{.capacity = c.capacity, .metric = m};
        run("hierarchical", *b, *t, c.capacity, fits, [&] { return h.partition(*b, *t); });
      },
      metric);
  return 0;
}
