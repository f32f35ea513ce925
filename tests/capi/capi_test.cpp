// The C ABI (python/capi/zeppelin_capi.h) against the C++ library it wraps: the same plans,
// fingerprints, relayouts and attention numbers; every failure a nonzero return with a
// message, nothing written, no exception across the boundary. Runs under the asan preset,
// which the Python tests cannot (an ASan library does not load into a plain interpreter).
#include <zeppelin_capi.h>

#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/model_presets.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/exec/host_attention.hpp>
#include <zeppelin/pack/any_packer.hpp>
#include <zeppelin/pack/elastic_pipeline.hpp>
#include <zeppelin/pack/stream.hpp>
#include <zeppelin/partition/capacity.hpp>
#include <zeppelin/partition/registry.hpp>
#include <zeppelin/planner/cost_driven_planner.hpp>
#include <zeppelin/remap/exact.hpp>
#include <zeppelin/remap/layout.hpp>
#include <zeppelin/strategy/plan_strategy.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {

struct plan_handle {
  zeppelin_plan* p = nullptr;
  ~plan_handle() { zeppelin_plan_destroy(p); }
};

std::vector<std::int64_t> table(int (*fn)(const zeppelin_plan*, int32_t, int64_t*, int64_t, int64_t*), const zeppelin_plan* p,
                                int32_t rank, int width) {
  std::int64_t count = -1;
  REQUIRE(fn(p, rank, nullptr, 0, &count) == 0);
  std::vector<std::int64_t> out(static_cast<std::size_t>(count * width), -7);
  if (count > 0) REQUIRE(fn(p, rank, out.data(), count - 1, &count) == 0);  // too little room: nothing written
  CHECK(std::all_of(out.begin(), out.end(), [](std::int64_t x) { return x == -7; }));
  REQUIRE(fn(p, rank, out.data(), count, &count) == 0);
  return out;
}

}  // namespace

TEST_CASE("plans equal the library's, shard for shard, with its fingerprint", "[capi]") {
  CHECK(zeppelin_capi_version() == ZEPPELIN_CAPI_VERSION);
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::int64_t> lengths(1 + rng() % 30);
    for (auto& l : lengths) l = 1 + static_cast<std::int64_t>(rng() % (rng() % 2 ? 64 : 4000));
    const int nodes = 1 + static_cast<int>(rng() % 3), gpus = 1 + static_cast<int>(rng() % 4);
    const std::string_view name = partitioner_names[static_cast<std::size_t>(trial) % partitioner_names.size()];
    plan_handle h;
    REQUIRE(zeppelin_plan_create(lengths.data(), static_cast<int64_t>(lengths.size()), nodes, gpus, std::string(name).c_str(), 0, 0,
                                 &h.p) == 0);
    const batch b(lengths);
    const topology t(topology_config{.nodes = nodes, .gpus_per_node = gpus});
    const plan want = partition(partitioner_by_name(name, {.capacity = balanced_capacity(b, t), .cp_size = 0, .metric = {}}), b, t);
    CHECK(zeppelin_plan_fingerprint(h.p) == fingerprint(want));
    CHECK(zeppelin_plan_ranks(h.p) == want.num_ranks());
    CHECK(zeppelin_plan_micro_batches(h.p) == want.micro_batches());
    CHECK(zeppelin_plan_capacity(h.p) == want.capacity);
    REQUIRE(zeppelin_plan_groups(h.p) == static_cast<int32_t>(want.groups.size()));
    for (rank_index r = 0; r < want.num_ranks(); ++r) {
      const auto rows = table(zeppelin_plan_shards, h.p, r, 5);
      const auto& shards = want.placements[static_cast<std::size_t>(r)].shards;
      REQUIRE(rows.size() == shards.size() * 5);
      for (std::size_t i = 0; i < shards.size(); ++i) {
        CHECK(rows[i * 5 + 0] == shards[i].seq);
        CHECK(rows[i * 5 + 1] == shards[i].range.begin);
        CHECK(rows[i * 5 + 2] == shards[i].range.end);
        CHECK(rows[i * 5 + 3] == (shards[i].group == no_group ? -1 : shards[i].group));
        CHECK(rows[i * 5 + 4] == shards[i].micro_batch);
      }
    }
    for (std::size_t g = 0; g < want.groups.size(); ++g) {
      std::int64_t count = 0;
      int32_t collective = -1, zone = -1;
      std::vector<std::int64_t> members(want.groups[g].ranks.size());
      REQUIRE(zeppelin_plan_group(h.p, static_cast<int32_t>(g), members.data(), static_cast<int64_t>(members.size()), &count,
                                  &collective, &zone) == 0);
      CHECK(std::equal(members.begin(), members.end(), want.groups[g].ranks.begin()));
      CHECK(collective == static_cast<int32_t>(want.groups[g].collective));
      CHECK(zone == static_cast<int32_t>(want.groups[g].zone));
    }
    // the relayout of micro-batch 0 equals plan_remap's
    zeppelin_relayout* x = nullptr;
    REQUIRE(zeppelin_relayout_create(h.p, 0, 2.0, &x) == 0);
    const relayout_plan rx = plan_remap(want, t, 2.0, exact_remap{}, 0);
    for (rank_index r = 0; r < want.num_ranks(); ++r) {
      std::int64_t count = 0;
      REQUIRE(zeppelin_relayout_segments(x, r, 0, nullptr, 0, &count) == 0);
      std::vector<std::int64_t> rows(static_cast<std::size_t>(count * 5));
      REQUIRE(zeppelin_relayout_segments(x, r, 0, rows.data(), count, &count) == 0);
      const auto& sends = rx.ranks[static_cast<std::size_t>(r)].sends;
      REQUIRE(rows.size() == sends.size() * 5);
      for (std::size_t i = 0; i < sends.size(); ++i) {
        CHECK(rows[i * 5 + 3] == sends[i].to);
        CHECK(rows[i * 5 + 4] == sends[i].from_offset);
      }
      REQUIRE(zeppelin_relayout_target(x, r, nullptr, 0, &count) == 0);
      CHECK(count == static_cast<std::int64_t>(rx.target[static_cast<std::size_t>(r)].shards.size()));
    }
    zeppelin_relayout_destroy(x);
  }
}

TEST_CASE("failures return nonzero with the library's message and write nothing", "[capi]") {
  const std::int64_t lengths[] = {10, 0, 5};
  zeppelin_plan* p = reinterpret_cast<zeppelin_plan*>(0x1);
  CHECK(zeppelin_plan_create(lengths, 3, 1, 2, "hierarchical", 0, 0, &p) != 0);
  CHECK(p == reinterpret_cast<zeppelin_plan*>(0x1));
  CHECK(std::string(zeppelin_last_error()).find("length") != std::string::npos);
  CHECK(zeppelin_plan_create(lengths, 1, 1, 2, "nope", 0, 0, &p) != 0);
  CHECK(std::string(zeppelin_last_error()).find("unknown partitioner 'nope'") != std::string::npos);
  CHECK(zeppelin_plan_create(lengths, 1, 0, 2, "hierarchical", 0, 0, &p) != 0);
  CHECK(std::string(zeppelin_last_error()).find("node") != std::string::npos);
  CHECK(zeppelin_plan_create(lengths, 1, 1, 2, "hierarchical", -5, 0, &p) != 0);
  CHECK(std::string(zeppelin_last_error()).find("capacity must be >= 0") != std::string::npos);
  CHECK(zeppelin_plan_create(nullptr, 0, 1, 2, "hierarchical", 0, 0, &p) != 0);
  const std::int64_t huge[] = {std::int64_t{1} << 62, std::int64_t{1} << 62};
  CHECK(zeppelin_plan_create(huge, 2, 1, 2, "hierarchical", 0, 0, &p) != 0);  // overflowing total: refused, no UB

  plan_handle h;
  REQUIRE(zeppelin_plan_create(lengths, 1, 1, 2, "hierarchical", 0, 0, &h.p) == 0);
  CHECK(std::string(zeppelin_last_error()).empty());
  std::int64_t count = 0;
  CHECK(zeppelin_plan_shards(h.p, 2, nullptr, 0, &count) != 0);
  CHECK(std::string(zeppelin_last_error()).find("rank 2 is outside the plan's 2 ranks") != std::string::npos);
  CHECK(zeppelin_plan_shards(h.p, 0, nullptr, 0, nullptr) != 0);
  CHECK(zeppelin_plan_group(h.p, 5, nullptr, 0, &count, nullptr, nullptr) != 0);
  zeppelin_relayout* x = nullptr;
  CHECK(zeppelin_relayout_create(h.p, 1, 1.0, &x) != 0);
  CHECK(zeppelin_relayout_create(h.p, 0, -1.0, &x) != 0);
  CHECK(x == nullptr);
  double q[4] = {}, o[4] = {}, lse[2] = {};
  CHECK(zeppelin_attention_forward(7, 1, 1, 2, 0, 0, 2, 0, 2, q, q, q, o, lse, 2) != 0);
  CHECK(std::string(zeppelin_last_error()).find("dtype must be 0 (float32) or 1 (float64)") != std::string::npos);
  CHECK(zeppelin_attention_forward(1, 3, 2, 2, 0, 0, 2, 0, 2, q, q, q, o, lse, 2) != 0);
  CHECK(zeppelin_attention_forward(1, 1, 1, 2, 0, 2, 1, 0, 2, q, q, q, o, lse, 2) != 0);
  CHECK(zeppelin_attention_forward(1, 1, 1, 2, 0, 0, 2, 0, 2, q, q, q, o, lse, 1) != 0);
  // a NULL buffer the call would touch is refused by name, never dereferenced
  CHECK(zeppelin_attention_forward(1, 1, 1, 2, 0, 0, 2, 0, 2, q, q, nullptr, o, lse, 2) != 0);
  CHECK(std::string(zeppelin_last_error()).rfind("zeppelin_attention_forward: v must not be NULL", 0) == 0);
  CHECK(zeppelin_attention_backward(1, 1, 1, 2, 0, 0, 2, 0, 2, q, q, q, o, q, lse, 2, q, nullptr, q) != 0);
  CHECK(std::string(zeppelin_last_error()).rfind("zeppelin_attention_backward: dk must not be NULL", 0) == 0);
  CHECK(zeppelin_lse_merge(1, 2, 1, 2, o, nullptr, 2, q, lse, 2) != 0);
  CHECK(std::string(zeppelin_last_error()).rfind("zeppelin_lse_merge: lse_acc must not be NULL", 0) == 0);
  CHECK(zeppelin_lse_merge(1, 0, 1, 2, nullptr, nullptr, 0, nullptr, nullptr, 0) == 0);  // nothing to touch
  CHECK(zeppelin_attention_forward(1, 1, 1, 2, 0, 0, 0, 0, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0) == 0);
  if (zeppelin_capi_has_cuda() == 0) {
    CHECK(zeppelin_cuda_attention_preprocess(2, 1, 1, 64, q, q, nullptr, 1, nullptr) != 0);
    CHECK(std::string(zeppelin_last_error()).find("built without CUDA") != std::string::npos);
  } else {
    CHECK(zeppelin_cuda_attention_preprocess(9, 1, 1, 64, q, q, nullptr, 1, nullptr) != 0);  // refused before any launch
    CHECK(std::string(zeppelin_last_error()).find("dtype must be 2 (bfloat16) or 3 (float16)") != std::string::npos);
  }
}

TEST_CASE("block attention and the LSE merge of two key halves equal one dense call", "[capi]") {
  const int heads = 4, kv_heads = 2, dim = 8, len = 23, split = 9;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal;
  std::vector<double> q(len * heads * dim), k(len * kv_heads * dim), v(k.size()), d_o(q.size());
  for (auto* x : {&q, &k, &v, &d_o})
    for (double& e : *x) e = normal(rng);
  const attention_dims dims{heads, kv_heads, dim, 0};
  std::vector<double> o_ref(q.size()), lse_ref(heads * len);
  reference_forward(dims, len, q.data(), k.data(), v.data(), o_ref.data(), lse_ref.data());

  // keys [0, split) and [split, len) as two blocks, merged
  std::vector<double> o(q.size()), lse(heads * len), o2(q.size()), lse2(heads * len);
  REQUIRE(zeppelin_attention_forward(1, heads, kv_heads, dim, 0, 0, len, 0, split, q.data(), k.data(), v.data(), o.data(), lse.data(),
                                     len) == 0);
  REQUIRE(zeppelin_attention_forward(1, heads, kv_heads, dim, 0, 0, len, split, len, q.data(), k.data() + split * kv_heads * dim,
                                     v.data() + split * kv_heads * dim, o2.data(), lse2.data(), len) == 0);
  REQUIRE(zeppelin_lse_merge(1, len, heads, dim, o.data(), lse.data(), len, o2.data(), lse2.data(), len) == 0);
  for (std::size_t i = 0; i < o.size(); ++i) CHECK(o[i] == Approx(o_ref[i]).margin(1e-12));
  for (std::size_t i = 0; i < lse.size(); ++i) CHECK(lse[i] == Approx(lse_ref[i]).margin(1e-12));

  // the backward of the two blocks adds up to the dense backward
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), dq_ref(q.size()), dk_ref(k.size()), dv_ref(v.size());
  reference_backward(dims, len, q.data(), k.data(), v.data(), o_ref.data(), d_o.data(), lse_ref.data(), dq_ref.data(), dk_ref.data(),
                     dv_ref.data());
  REQUIRE(zeppelin_attention_backward(1, heads, kv_heads, dim, 0, 0, len, 0, split, q.data(), k.data(), v.data(), o.data(), d_o.data(),
                                      lse.data(), len, dq.data(), dk.data(), dv.data()) == 0);
  const auto off = static_cast<std::ptrdiff_t>(split * kv_heads * dim);
  REQUIRE(zeppelin_attention_backward(1, heads, kv_heads, dim, 0, 0, len, split, len, q.data(), k.data() + off, v.data() + off,
                                      o.data(), d_o.data(), lse.data(), len, dq.data(), dk.data() + off, dv.data() + off) == 0);
  for (std::size_t i = 0; i < dq.size(); ++i) CHECK(dq[i] == Approx(dq_ref[i]).margin(1e-11));
  for (std::size_t i = 0; i < dk.size(); ++i) CHECK(dk[i] == Approx(dk_ref[i]).margin(1e-11));
  for (std::size_t i = 0; i < dv.size(); ++i) CHECK(dv[i] == Approx(dv_ref[i]).margin(1e-11));
}

TEST_CASE("packings equal pack_stream's, document for document", "[capi]") {
  std::mt19937_64 rng(3);
  for (const packer_kind kind : {packer_kind::original, packer_kind::fixed_greedy, packer_kind::wlb}) {
    std::vector<std::int64_t> lengths(1 + rng() % 200);
    for (auto& l : lengths) l = 1 + static_cast<std::int64_t>(rng() % 2048);
    zeppelin_packing* x = nullptr;
    REQUIRE(zeppelin_packing_create(lengths.data(), static_cast<int64_t>(lengths.size()), std::string(to_string(kind)).c_str(), 4, 2048,
                                    &x) == 0);
    const packing_run want = pack_stream(make_packer(kind), std::vector<token_count>(lengths.begin(), lengths.end()),
                                         packing_limits{.micro_batches = 4, .max_tokens = 2048});
    CHECK(zeppelin_packing_iterations(x) == static_cast<std::int64_t>(want.iterations.size()));
    std::int64_t count = 0;
    REQUIRE(zeppelin_packing_table(x, nullptr, 0, &count) == 0);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(count * 3));
    REQUIRE(zeppelin_packing_table(x, rows.data(), count, &count) == 0);
    std::size_t at = 0;
    for (std::size_t i = 0; i < want.iterations.size(); ++i)
      for (std::size_t m = 0; m < want.iterations[i].micro_batches.size(); ++m)
        for (const std::int64_t d : want.iterations[i].micro_batches[m].documents) {
          REQUIRE(at + 2 < rows.size());
          CHECK(rows[at] == static_cast<std::int64_t>(i));
          CHECK(rows[at + 1] == static_cast<std::int64_t>(m));
          CHECK(rows[at + 2] == d);
          at += 3;
        }
    CHECK(at == rows.size());
    zeppelin_packing_destroy(x);
  }
  zeppelin_packing* x = nullptr;
  const std::int64_t too_long[] = {10, 5000};
  CHECK(zeppelin_packing_create(too_long, 2, "wlb", 2, 4096, &x) != 0);
  CHECK(std::string(zeppelin_last_error()).find("longer than the micro-batch token limit") != std::string::npos);
  CHECK(x == nullptr);
}

TEST_CASE("strategies and chunkings equal plan_strategy's and plan_elastic_pipeline's", "[capi]") {
  std::mt19937_64 rng(8);
  std::vector<std::int64_t> lengths(40);
  for (auto& l : lengths) l = 64 + static_cast<std::int64_t>(rng() % (rng() % 2 ? 2000 : 40000));
  const std::vector<token_count> batch(lengths.begin(), lengths.end());

  zeppelin_strategy* s = nullptr;
  REQUIRE(zeppelin_strategy_create(lengths.data(), 40, 16, 8, "7b", 80.0 * (1ull << 30), 8.0 * (1ull << 30), 100, 1, &s) == 0);
  gpu_spec gpu = gpus::a800_80g();
  gpu.memory_bytes = 80.0 * (1ull << 30);
  const strategy_choice want =
      plan_strategy(model_by_name("7b"), {.gpus = 16, .gpus_per_node = 8, .gpu = gpu, .margin_bytes = 8.0 * (1ull << 30), .dispatch = {100, 1}},
                    batch);
  CHECK(zeppelin_strategy_seconds(s) == want.plan.seconds);
  std::int64_t count = 0;
  REQUIRE(zeppelin_strategy_pipelines(s, nullptr, 0, &count) == 0);
  CHECK(count == static_cast<std::int64_t>(want.plan.pipelines.size()));
  REQUIRE(zeppelin_strategy_micro_batches(s, nullptr, 0, &count) == 0);
  CHECK(count == 40);  // every sequence in one micro-batch
  zeppelin_strategy_destroy(s);
  CHECK(zeppelin_strategy_create(lengths.data(), 40, 16, 8, "no-such-model", 80e9, 8e9, 100, 1, &s) != 0);
  CHECK(zeppelin_strategy_create(lengths.data(), 40, 16, 8, "7b", 80e9, 8e9, 0, 1, &s) != 0);
  CHECK(std::string(zeppelin_last_error()).find("trials must be >= 1") != std::string::npos);

  zeppelin_chunking* c = nullptr;
  const double usable = 72.0 * (1ull << 30);
  REQUIRE(zeppelin_chunking_create(lengths.data(), 40, 8, 4, "gpt-13b", usable, 16, &c) == 0);
  auto options = elastic_pipeline_options::for_model(model_by_name("gpt-13b"), clusters::infinipipe_a800_ib(4), 8, 4, usable);
  options.processor.max_slices = 16;
  const elastic_plan plan = plan_elastic_pipeline(batch, options);
  CHECK(zeppelin_chunking_seconds(c) == plan.seconds);
  REQUIRE(zeppelin_chunking_mesh(c, nullptr, 0, &count) == 0);
  std::vector<std::int64_t> mesh(static_cast<std::size_t>(count));
  REQUIRE(zeppelin_chunking_mesh(c, mesh.data(), count, &count) == 0);
  CHECK(std::equal(mesh.begin(), mesh.end(), plan.chunks.mesh.begin(), plan.chunks.mesh.end()));
  REQUIRE(zeppelin_chunking_checkpoint(c, nullptr, 0, &count) == 0);
  std::size_t chunks_in_pipelines = 0;
  for (const elastic_pipeline& p : plan.pipelines) chunks_in_pipelines += p.forward.size();
  CHECK(count == static_cast<std::int64_t>(4 * chunks_in_pipelines));
  zeppelin_chunking_destroy(c);
  CHECK(zeppelin_chunking_create(lengths.data(), 40, 0, 4, "gpt-13b", usable, 16, &c) != 0);
  CHECK(std::string(zeppelin_last_error()).find("SP and PP degrees must be >= 1") != std::string::npos);
}

TEST_CASE("cost-driven plans equal plan_by_cost's, with its choice and step", "[capi]") {
  const std::vector<std::int64_t> lengths{9000, 300, 120, 4000, 64, 700, 15000, 2500};
  zeppelin_plan* p = nullptr;
  REQUIRE(zeppelin_plan_by_cost(lengths.data(), 8, "c", 2, 4, "7b", 0, &p) == 0);
  const batch b(std::vector<token_count>(lengths.begin(), lengths.end()));
  const topology t = cluster_by_name("c", 2, 4);
  method_setup setup;
  setup.tokens_per_gpu = balanced_capacity(b, t);
  setup.capacity_slack = 0;
  const cost_driven_choice want = plan_by_cost(b, t, model_by_name("7b"), setup);
  CHECK(zeppelin_plan_fingerprint(p) == fingerprint(want.chosen.layout));
  CHECK(std::string(zeppelin_plan_choice(p)) == want.chosen.candidate);
  CHECK(zeppelin_plan_predicted_step(p) == want.chosen.result.step_time_s);
  zeppelin_plan_destroy(p);
  plan_handle plain;
  REQUIRE(zeppelin_plan_create(lengths.data(), 8, 2, 4, "hierarchical", 0, 0, &plain.p) == 0);
  CHECK(std::string(zeppelin_plan_choice(plain.p)).empty());
  CHECK(std::isnan(zeppelin_plan_predicted_step(plain.p)));
  CHECK(zeppelin_plan_by_cost(lengths.data(), 8, "no-such-cluster", 2, 4, "7b", 0, &p) != 0);
  CHECK(zeppelin_plan_by_cost(lengths.data(), 8, "c", 2, 4, "7b", -1, &p) != 0);
  CHECK(std::string(zeppelin_last_error()).find("capacity must be >= 0") != std::string::npos);
}

TEST_CASE("plans round-trip through the plan JSON, checked against their lengths", "[capi]") {
  const std::vector<std::int64_t> lengths{900, 30, 4000, 12, 512};
  plan_handle h;
  REQUIRE(zeppelin_plan_create(lengths.data(), 5, 2, 2, "hierarchical", 0, 0, &h.p) == 0);
  std::int64_t length = 0;
  REQUIRE(zeppelin_plan_json(h.p, nullptr, 0, &length) == 0);
  std::string text(static_cast<std::size_t>(length), '\0');
  REQUIRE(zeppelin_plan_json(h.p, text.data(), length, &length) == 0);
  CHECK(text.find("\"format\":\"zeppelin.plan\"") != std::string::npos);
  plan_handle back;
  REQUIRE(zeppelin_plan_read_json(text.data(), length, &back.p) == 0);
  CHECK(zeppelin_plan_fingerprint(back.p) == zeppelin_plan_fingerprint(h.p));
  std::int64_t count = 0;
  std::vector<std::int64_t> read_lengths(5);
  REQUIRE(zeppelin_plan_lengths(back.p, read_lengths.data(), 5, &count) == 0);
  CHECK(read_lengths == lengths);
  zeppelin_plan* bad = nullptr;
  const std::string tampered = std::string(text).replace(text.find("\"capacity\":"), 11, "\"capacity\":1");
  CHECK(zeppelin_plan_read_json(tampered.data(), static_cast<int64_t>(tampered.size()), &bad) != 0);
  CHECK(bad == nullptr);
  CHECK(zeppelin_plan_read_json("{", 1, &bad) != 0);
}
