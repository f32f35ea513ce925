// tests/exec/exec_test_support.hpp
// The end-to-end harness of the executor tests: random Q, K, V, dO for a batch, the dense
// single-rank reference per sequence, and one distributed run (loader layout -> dispatch ->
// attention forward and backward -> the program's remap round trip, when it remaps ->
// inverse dispatch) on a host loopback world, returning the largest errors against the
// reference and, optionally, every rank's execution record.
#pragma once

#include <zeppelin/comm.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/program.hpp>
#include <zeppelin/remap/exact.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <vector>

namespace zeppelin_test {

using namespace zeppelin;

struct run_errors {
  double out = 0, lse = 0, grad = 0;  // max |distributed - reference|
  double remap = 0;                   // remapped rows vs reference, and the round trip
  bool remap_round_trip_exact = true;
};

template <class T>
struct problem_data {
  attention_dims dims;
  std::vector<T> q, k, v, d_o;         // packed stream [T][H or KV][D]
  std::vector<T> o, lse, dq, dk, dv;   // reference; lse packed as [seq offset * H + h * L + pos]
};

template <class T>
problem_data<T> make_problem(const batch& b, attention_dims dims, std::uint64_t seed) {
  problem_data<T> d{dims, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  const auto T_ = static_cast<std::size_t>(b.total_tokens());
  random_generator rng(seed, 17);
  const auto fill = [&](std::vector<T>& x, std::size_t n) {
    x.resize(n);
    for (auto& e : x) e = static_cast<T>(2 * rng.uniform() - 1);
  };
  fill(d.q, T_ * static_cast<std::size_t>(dims.q_row()));
  fill(d.k, T_ * static_cast<std::size_t>(dims.kv_row()));
  fill(d.v, T_ * static_cast<std::size_t>(dims.kv_row()));
  fill(d.d_o, T_ * static_cast<std::size_t>(dims.q_row()));
  d.o.resize(d.q.size()), d.dq.resize(d.q.size()), d.dk.resize(d.k.size()), d.dv.resize(d.k.size());
  d.lse.resize(T_ * static_cast<std::size_t>(dims.heads));
  for (sequence_index s = 0; s < b.size(); ++s) {
    const token_count off = b.offset(s), len = b.length(s);
    const auto qo = static_cast<std::size_t>(off * dims.q_row()), ko = static_cast<std::size_t>(off * dims.kv_row());
    T* lse = d.lse.data() + off * dims.heads;
    reference_forward(dims, len, d.q.data() + qo, d.k.data() + ko, d.v.data() + ko, d.o.data() + qo, lse);
    reference_backward(dims, len, d.q.data() + qo, d.k.data() + ko, d.v.data() + ko, d.o.data() + qo, d.d_o.data() + qo, lse,
                       d.dq.data() + qo, d.dk.data() + ko, d.dv.data() + ko);
  }
  return d;
}

//! The reference LSE of (seq, pos, head).
template <class T>
T reference_lse(const problem_data<T>& d, const batch& b, sequence_index s, token_count pos, std::int32_t h) {
  return d.lse[static_cast<std::size_t>(b.offset(s) * d.dims.heads + h * b.length(s) + pos)];
}

template <class T>
std::vector<T> loader_rows(const std::vector<T>& global, const placement& pl, const batch& b, std::int64_t w) {
  std::vector<T> out;
  for (const shard& s : pl.shards) {
    const auto from = global.begin() + static_cast<std::ptrdiff_t>((b.offset(s.seq) + s.range.begin) * w);
    out.insert(out.end(), from, from + static_cast<std::ptrdiff_t>(s.range.size() * w));
  }
  return out;
}

//! What run_distributed executes of `prog`: every attention launch and phase, and the remap
//! segments it runs once each (forward remap_out, backward remap_in), sorted.
inline execution_record run_distributed_record(const execution_program& prog) {
  execution_record expected;
  for (const program_phase& ph : prog.phases) {
    const level_kind k = prog.levels[static_cast<std::size_t>(ph.level)].kind;
    const bool skipped =
        (k == level_kind::remap_in && ph.pass == pass_kind::forward) || (k == level_kind::remap_out && ph.pass == pass_kind::backward);
    if (!skipped)
      for (const transfer& piece : ph.pieces) expected.add(ph, piece);
  }
  for (const program_launch& l : prog.launches) expected.add(l);
  expected.sort();
  return expected;
}

//! One distributed forward + backward of plan p on topology t (program built with `options`)
//! against the reference. When the program remaps, O also goes to the token-balanced layout
//! and back (forward remap_out, backward remap_in: both move q rows). `record`, when given,
//! receives every rank's execution record.
template <class T>
run_errors run_distributed(const plan& p, const batch& b, const topology& t, const problem_data<T>& d, program_options options = {},
                           execution_record* record = nullptr) {
  const attention_dims dims = d.dims;
  const attention_engine<T> engine(p, b, t, dims, options);
  const rank_index R = p.num_ranks();
  const auto loader = loader_layout(b, R);
  const relayout_plan disp = make_dispatch_plan(loader, p.placements);
  const relayout_plan back = inverse(disp);
  std::vector<T> o(d.o.size()), dq(d.dq.size()), dk(d.dk.size()), dv(d.dv.size());
  std::vector<run_errors> per_rank(static_cast<std::size_t>(R));
  host_loopback_world world{.ranks = R, .gpus_per_node = p.gpus_per_node, .timeout = std::chrono::milliseconds(20000)};
  std::mutex out_mutex;
  world.run([&](host_loopback_comm& c) {
    const rank_index me = c.rank();
    execution_record mine;
    execution_record* rec = record ? &mine : nullptr;
    const auto& lp = loader[static_cast<std::size_t>(me)];
    const std::int64_t qw = dims.q_row(), kw = dims.kv_row();
    const token_count n = engine.rows(me);
    const auto to_plan = [&](const std::vector<T>& global, std::int64_t w, const char* what) {
      const std::vector<T> src = loader_rows(global, lp, b, w);
      std::vector<T> dst(static_cast<std::size_t>(n * w));
      execute_relayout(c, disp, std::span<const T>(src), std::span<T>(dst), w, std::string("dispatch ") + what);
      return dst;
    };
    const auto q = to_plan(d.q, qw, "q"), k = to_plan(d.k, kw, "k"), v = to_plan(d.v, kw, "v"), g = to_plan(d.d_o, qw, "do");
    std::vector<T> lo(static_cast<std::size_t>(n * qw)), ll(static_cast<std::size_t>(n * dims.heads));
    engine.forward(c, std::span<const T>(q), std::span<const T>(k), std::span<const T>(v), std::span<T>(lo), std::span<T>(ll), rec);
    std::vector<T> lq(lo.size()), lk(k.size()), lv(v.size());
    engine.backward(c, std::span<const T>(q), std::span<const T>(k), std::span<const T>(v), std::span<const T>(lo),
                    std::span<const T>(g), std::span<const T>(ll), std::span<T>(lq), std::span<T>(lk), std::span<T>(lv), rec);
    run_errors& e = per_rank[static_cast<std::size_t>(me)];
    // LSE in the plan layout
    {
      token_count row = 0;
      for (const shard& s : p.placements[static_cast<std::size_t>(me)].shards)
        for (token_count pos = s.range.begin; pos < s.range.end; ++pos, ++row)
          for (std::int32_t h = 0; h < dims.heads; ++h)
            e.lse = std::max(e.lse, std::abs(double(ll[static_cast<std::size_t>(h * n + row)]) -
                                             double(reference_lse(d, b, s.seq, pos, h))));
    }
    for (std::int32_t mb = 0; mb < static_cast<std::int32_t>(engine.program().linear_layout.size()); ++mb) {
      // O to the token-balanced layout (forward remap_out), checked row by row, and back
      if (engine.program().linear_layout[static_cast<std::size_t>(mb)].empty()) continue;  // balanced already
      const auto& target = engine.program().linear_layout[static_cast<std::size_t>(mb)][static_cast<std::size_t>(me)];
      token_count rows = 0;
      for (const shard& s : target.shards) rows += s.range.size();
      std::vector<T> linear(static_cast<std::size_t>(rows * qw));
      engine.remap(c, pass_kind::forward, mb, segment_kind::remap_out, std::span<const T>(lo), std::span<T>(linear), rec);
      token_count row = 0;
      for (const shard& s : target.shards)
        for (token_count pos = s.range.begin; pos < s.range.end; ++pos, ++row)
          for (std::int64_t j = 0; j < qw; ++j)
            e.remap = std::max(e.remap, std::abs(double(linear[static_cast<std::size_t>(row * qw + j)]) -
                                                 double(d.o[static_cast<std::size_t>((b.offset(s.seq) + pos) * qw + j)])));
      std::vector<T> again(lo.size(), T(0));
      for (std::size_t i = 0; i < p.placements[static_cast<std::size_t>(me)].shards.size(); ++i) {  // rows of other micro-batches
        const shard& s = p.placements[static_cast<std::size_t>(me)].shards[i];
        if (s.micro_batch == mb) continue;
        const auto at = static_cast<std::ptrdiff_t>(engine.shard_row(me, i) * qw);
        std::copy_n(lo.begin() + at, s.range.size() * qw, again.begin() + at);
      }
      engine.remap(c, pass_kind::backward, mb, segment_kind::remap_in, std::span<const T>(linear), std::span<T>(again), rec);
      e.remap_round_trip_exact = e.remap_round_trip_exact && again == lo;
    }
    if (record) {
      std::lock_guard lock(out_mutex);
      record->merge(mine);
    }
    // back to the loader layout
    const auto to_loader = [&](const std::vector<T>& local, std::int64_t w, std::vector<T>& global, const char* what) {
      std::vector<T> dst(static_cast<std::size_t>(back.ranks[static_cast<std::size_t>(me)].target_tokens * w));
      execute_relayout(c, back, std::span<const T>(local), std::span<T>(dst), w, std::string("undispatch ") + what);
      std::lock_guard lock(out_mutex);
      std::size_t at = 0;
      for (const shard& s : lp.shards)
        for (std::int64_t j = 0; j < s.range.size() * w; ++j)
          global[static_cast<std::size_t>((b.offset(s.seq) + s.range.begin) * w + j)] = dst[at++];
    };
    to_loader(lo, qw, o, "o");
    to_loader(lq, qw, dq, "dq");
    to_loader(lk, kw, dk, "dk");
    to_loader(lv, kw, dv, "dv");
  });
  run_errors out;
  for (const auto& e : per_rank) {
    out.lse = std::max(out.lse, e.lse);
    out.remap = std::max(out.remap, e.remap);
    out.remap_round_trip_exact = out.remap_round_trip_exact && e.remap_round_trip_exact;
  }
  const auto diff = [](const std::vector<T>& a, const std::vector<T>& r) {
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(r[i])));
    return m;
  };
  out.out = diff(o, d.o);
  out.grad = std::max({diff(dq, d.dq), diff(dk, d.dk), diff(dv, d.dv)});
  if (record) record->sort();
  return out;
}

}  // namespace zeppelin_test
