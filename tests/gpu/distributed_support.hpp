// tests/gpu/distributed_support.hpp
// Harness of the distributed [gpu] tests: a random fp16 attention problem over a batch, its
// single-GPU reference (the device kernels on the whole packed batch, one causal CSR block per
// sequence), plans of every partitioner, and one distributed run on a device loopback world:
// loader layout -> device dispatch -> device attention engine forward + backward -> inverse
// dispatch, gathered back into the packed order, with every rank's execution record (passes run
// once, repeated on one engine across two streams, or captured into CUDA graphs and replayed:
// pass_mode); the checks of such a run against the reference and of its record against the
// program's.
#pragma once

#include "../exec/plan_support.hpp"
#include "gpu_support.hpp"

#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/cuda/attention.hpp>
#include <zeppelin/cuda/device_loopback.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/cuda/executor/remap.hpp>
#include <zeppelin/exec/relayout.hpp>
#include <zeppelin/program/build.hpp>
#include <zeppelin/program/options.hpp>
#include <zeppelin/program/record.hpp>
#include <zeppelin/cuda/device_loopback_graph.hpp>
#include <zeppelin/cuda/graph.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace zeppelin_test {

using namespace zeppelin;

//! Packed fp16 inputs and the single-GPU reference outputs (as floats).
struct gpu_problem {
  attention_dims dims;
  device::dtype type = device::dtype::fp16;
  std::vector<std::uint16_t> q, k, v, d_o;  // [T][H or KV][D] bits
  std::vector<float> o, lse, dq, dk, dv;    // lse [H][T]
};

inline gpu_problem make_gpu_problem(const batch& b, attention_dims dims, std::uint64_t seed) {
  gpu_problem g;
  g.dims = dims;
  random_generator rng(seed, 3);
  const auto T = static_cast<std::size_t>(b.total_tokens());
  const auto fill = [&](std::vector<std::uint16_t>& x, std::size_t n) {
    x.resize(n);
    for (auto& e : x) e = to_bits(static_cast<float>(2 * rng.uniform() - 1), g.type);
  };
  const auto qn = T * static_cast<std::size_t>(dims.q_row()), kn = T * static_cast<std::size_t>(dims.kv_row());
  fill(g.q, qn), fill(g.k, kn), fill(g.v, kn), fill(g.d_o, qn);
  // the reference: one causal block per sequence on one GPU
  std::vector<std::int32_t> cu;
  for (const token_count x : b.cu_seqlens()) cu.push_back(static_cast<std::int32_t>(x));
  device_buffer<std::int32_t> cu_dev(cu);
  device_buffer<std::uint16_t> q(g.q), k(g.k), v(g.v), d_o(g.d_o), o(qn);
  device_buffer<float> lse(T * static_cast<std::size_t>(dims.heads)), delta(T * static_cast<std::size_t>(dims.heads));
  device_buffer<float> dq(qn), dk(kn), dv(kn);
  dq.fill_bytes(0), dk.fill_bytes(0), dv.fill_bytes(0);
  device::attention_forward_params f;
  f.q = q.get(), f.k = k.get(), f.v = v.get(), f.o = o.get(), f.lse = lse.get();
  f.cu_seqlens_q = cu_dev.get(), f.cu_seqlens_k = cu_dev.get();
  f.mask = block_mask::causal;
  f.num_blocks = b.size(), f.heads = dims.heads, f.kv_heads = dims.kv_heads, f.head_dim = dims.head_dim;
  f.max_seqlen_q = static_cast<std::int32_t>(b.max_length());
  f.total_q = static_cast<std::int64_t>(T);
  f.softmax_scale = static_cast<float>(dims.softmax_scale());
  f.type = g.type;
  ZEPPELIN_CUDA_CHECK(device::attention_forward(f, nullptr));
  device::attention_preprocess_params pp;
  pp.o = o.get(), pp.dout = d_o.get(), pp.delta = delta.get(), pp.rows = static_cast<std::int64_t>(T);
  pp.heads = dims.heads, pp.head_dim = dims.head_dim, pp.type = g.type;
  ZEPPELIN_CUDA_CHECK(device::attention_backward_preprocess(pp, nullptr));
  device::attention_backward_params bp;
  static_cast<device::attention_blocks&>(bp) = f;  // same inputs and block list as the forward
  bp.dout = d_o.get(), bp.lse = lse.get(), bp.delta = delta.get();
  bp.dq_accum = dq.get(), bp.dk_accum = dk.get(), bp.dv_accum = dv.get();
  bp.max_seqlen_k = static_cast<std::int32_t>(b.max_length());
  ZEPPELIN_CUDA_CHECK(device::attention_backward(bp, nullptr));
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
  const auto o_bits = o.download();
  g.o.resize(qn);
  for (std::size_t i = 0; i < qn; ++i) g.o[i] = from_bits(o_bits[i], g.type);
  g.lse = lse.download(), g.dq = dq.download(), g.dk = dk.download(), g.dv = dv.download();
  return g;
}

//! The rows of `pl` (a layout of b) cut out of a packed [T][w] array.
template <class T>
std::vector<T> layout_rows(const std::vector<T>& packed, const placement& pl, const batch& b, std::size_t w) {
  std::vector<T> out;
  for (const shard& s : pl.shards) {
    const auto from = packed.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b.offset(s.seq) + s.range.begin) * w);
    out.insert(out.end(), from, from + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(s.range.size()) * w));
  }
  return out;
}

//! The distributed results in packed order (as floats), what every rank's engine moved and
//! launched (merged, sorted) and the program it ran.
struct gpu_results {
  std::vector<float> o, lse, dq, dk, dv;
  execution_record record;
  execution_program program;
};

//! How run_device_distributed runs the engine's passes.
enum class pass_mode {
  once,      //!< one forward and one backward
  repeated,  //!< three of each on one engine, outputs poisoned before each, every second pair
             //!< on another stream: the kept arenas, streams and events serve every pass
  captured,  //!< prepare(), both passes captured into CUDA graphs before the inputs are
             //!< dispatched (one rank: its own capture; several: the world's, cuda/
             //!< device_loopback_graph.hpp), then replayed twice (outputs poisoned before each)
};

//! One distributed run of plan p on topology t under `options` (see the file comment).
inline gpu_results run_device_distributed(const plan& p, const batch& b, const topology& t, const gpu_problem& g,
                                          const program_options& options = {}, pass_mode mode = pass_mode::once) {
  const attention_dims dims = g.dims;
  const device_attention_engine engine(p, b, t, dims, g.type, options);
  const rank_index R = p.num_ranks();
  const auto loader = loader_layout(b, R);
  const relayout_plan disp = make_dispatch_plan(loader, p.placements);
  const relayout_plan back = inverse(disp);
  const auto T = static_cast<std::size_t>(b.total_tokens());
  const auto qw = static_cast<std::size_t>(dims.q_row()), kw = static_cast<std::size_t>(dims.kv_row());
  const auto H = static_cast<std::size_t>(dims.heads);
  gpu_results out{std::vector<float>(T * qw, NAN), std::vector<float>(T * H, NAN), std::vector<float>(T * qw, NAN),
                  std::vector<float>(T * kw, NAN), std::vector<float>(T * kw, NAN), {}, engine.program()};
  std::mutex out_mutex;
  world_capture world_forward(R), world_backward(R);
  std::barrier replays(R);
  device_loopback_world world{.ranks = R, .gpus_per_node = p.gpus_per_node, .timeout = std::chrono::milliseconds(60000)};
  world.run([&](device_loopback_comm& c) {
    const rank_index me = c.rank();
    const cudaStream_t s = c.compute_stream();
    const placement& lp = loader[static_cast<std::size_t>(me)];
    const auto nl = static_cast<std::size_t>(disp.ranks[static_cast<std::size_t>(me)].source_tokens);
    const auto n = static_cast<std::size_t>(engine.rows(me));
    const std::size_t e = 2;  // fp16
    device_buffer<std::uint16_t> lq(layout_rows(g.q, lp, b, qw)), lk(layout_rows(g.k, lp, b, kw)), lv(layout_rows(g.v, lp, b, kw)),
        ldo(layout_rows(g.d_o, lp, b, qw));
    device_buffer<std::uint16_t> q(n * qw), k(n * kw), v(n * kw), d_o(n * qw), o(n * qw), dq(n * qw), dk(n * kw), dv(n * kw);
    device_buffer<float> lse(n * H);
    device_buffer<std::uint16_t> bo(nl * qw), bdq(nl * qw), bdk(nl * kw), bdv(nl * kw);
    const auto poison = [&] {  // NaN in fp16 and fp32
      ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
      for (auto* x : {&o, &dq, &dk, &dv, &bo, &bdq, &bdk, &bdv}) x->fill_bytes(0xff);
      lse.fill_bytes(0xff);
      ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());  // cudaMemset runs on the legacy stream, which s does not wait for
    };
    poison();
    const device_forward_io fio{q.get(), k.get(), v.get(), o.get(), lse.get()};
    const device_backward_io bio{q.get(), k.get(), v.get(), o.get(), d_o.get(), lse.get(), dq.get(), dk.get(), dv.get()};
    device::cuda_graph forward_graph, backward_graph;  // one rank: its own; several: the world's, on rank 0
    execution_record mine;  // captured: what the graphs hold, recorded as they were captured
    if (mode == pass_mode::captured) {
      engine.prepare(c, s);
      if (R == 1) {
        forward_graph = device::capture_graph(s, [&] { engine.forward(c, fio, s, &mine); });
        backward_graph = device::capture_graph(s, [&] { engine.backward(c, bio, s, &mine); });
      } else {
        world_forward.capture(c, s, [&] { engine.forward(c, fio, s, &mine); });
        world_backward.capture(c, s, [&] { engine.backward(c, bio, s, &mine); });
        if (me == 0) forward_graph = world_forward.take(), backward_graph = world_backward.take();
      }
    }
    execute_remap_device(c, disp, lq.get(), q.get(), qw * e, s, "dispatch q");
    execute_remap_device(c, disp, lk.get(), k.get(), kw * e, s, "dispatch k");
    execute_remap_device(c, disp, lv.get(), v.get(), kw * e, s, "dispatch v");
    execute_remap_device(c, disp, ldo.get(), d_o.get(), qw * e, s, "dispatch do");
    if (mode == pass_mode::captured) {
      for (int replay = 0; replay < 2; ++replay) {
        poison();  // after this rank's dispatch has completed
        replays.arrive_and_wait();
        if (forward_graph) {
          forward_graph.launch(s);
          backward_graph.launch(s);
          ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
        }
        replays.arrive_and_wait();
      }
    } else {
      const device::cuda_stream other(0);
      const int pairs = mode == pass_mode::repeated ? 3 : 1;
      for (int pair = 0; pair < pairs; ++pair) {
        if (pair > 0) poison();
        const cudaStream_t on = pair % 2 == 1 ? other.get() : s;
        device::stream_wait(on, s);
        engine.forward(c, fio, on, pair == 0 ? &mine : nullptr);
        engine.backward(c, bio, on, pair == 0 ? &mine : nullptr);
        device::stream_wait(s, on);
      }
    }
    execute_remap_device(c, back, o.get(), bo.get(), qw * e, s, "return o");
    execute_remap_device(c, back, dq.get(), bdq.get(), qw * e, s, "return dq");
    execute_remap_device(c, back, dk.get(), bdk.get(), kw * e, s, "return dk");
    execute_remap_device(c, back, dv.get(), bdv.get(), kw * e, s, "return dv");
    ZEPPELIN_CUDA_CHECK(cudaStreamSynchronize(s));
    c.synchronize("end");
    const auto ho = bo.download(), hdq = bdq.download(), hdk = bdk.download(), hdv = bdv.download();
    const auto hl = lse.download();
    std::lock_guard lock(out_mutex);
    out.record.merge(mine);
    std::size_t row = 0;
    for (const shard& sh : lp.shards) {  // loader layout rows -> packed rows
      const auto at = static_cast<std::size_t>(b.offset(sh.seq) + sh.range.begin);
      for (token_count i = 0; i < sh.range.size(); ++i, ++row) {
        for (std::size_t x = 0; x < qw; ++x) {
          out.o[(at + i) * qw + x] = from_bits(ho[row * qw + x], g.type);
          out.dq[(at + i) * qw + x] = from_bits(hdq[row * qw + x], g.type);
        }
        for (std::size_t x = 0; x < kw; ++x) {
          out.dk[(at + i) * kw + x] = from_bits(hdk[row * kw + x], g.type);
          out.dv[(at + i) * kw + x] = from_bits(hdv[row * kw + x], g.type);
        }
      }
    }
    row = 0;
    for (const shard& sh : p.placements[static_cast<std::size_t>(me)].shards) {  // plan rows -> packed LSE
      const auto at = static_cast<std::size_t>(b.offset(sh.seq) + sh.range.begin);
      for (token_count i = 0; i < sh.range.size(); ++i, ++row)
        for (std::size_t h = 0; h < H; ++h) out.lse[h * T + at + i] = hl[h * n + row];
    }
  });
  out.record.sort();
  return out;
}

//! The largest error over the sequences of b of `got` against `ref` (packed [T][w]): per
//! sequence ||got - ref||_2 / max(||ref||_2, floor * sqrt(n)) over its n values. The absolute
//! floor keeps a sequence whose true gradient is 0 (a 1-token sequence has dQ = dK = 0) from
//! dividing rounding residue by rounding residue; per sequence, a short sequence's error is
//! not hidden in the norm of a long one. NaN anywhere gives infinity.
inline double max_sequence_error(const std::vector<float>& got, const std::vector<float>& ref, const batch& b, std::size_t w,
                                 double floor) {
  double worst = 0;
  for (sequence_index s = 0; s < b.size(); ++s) {
    const auto from = static_cast<std::size_t>(b.offset(s)) * w, n = static_cast<std::size_t>(b.length(s)) * w;
    double num = 0, den = 0;
    for (std::size_t i = from; i < from + n; ++i) {
      if (std::isnan(got[i])) return INFINITY;
      const double d = double(got[i]) - double(ref[i]);
      num += d * d;
      den += double(ref[i]) * double(ref[i]);
    }
    worst = std::max(worst, std::sqrt(num) / std::max(std::sqrt(den), floor * std::sqrt(static_cast<double>(n))));
  }
  return worst;
}

//! Largest |a - b| (NaN in a counts as infinite).
inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i])) return INFINITY;
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  }
  return m;
}

inline bool any_nan(const std::vector<float>& a) {
  return std::any_of(a.begin(), a.end(), [](float x) { return std::isnan(x); });
}

//! 1 to 4 sequences: lengths 1, shorter than a group, not divisible by 2G, and a few longer
//! ones (more than one kernel tile).
inline batch gpu_lengths(random_generator& rng, rank_index ranks) {
  std::vector<token_count> lengths;
  const auto n = static_cast<int>(rng.between(1, 5));
  for (int i = 0; i < n; ++i) {
    const auto kind = rng.below(4);
    lengths.push_back(kind == 0 ? 1 : kind == 1 ? rng.between(2, ranks + 1) : rng.between(2, 96 * ranks));
  }
  return batch(lengths);
}

//! A distributed run against the single-GPU reference: fp16 outputs of fp32 arithmetic in
//! another summation order, a few fp16 ulps per sequence, and an absolute floor of 1e-2 per
//! value (max_sequence_error).
inline void check_against_reference(const gpu_results& got, const gpu_problem& ref, const batch& b) {
  const auto qw = static_cast<std::size_t>(ref.dims.q_row()), kw = static_cast<std::size_t>(ref.dims.kv_row());
  CHECK(max_sequence_error(got.o, ref.o, b, qw, 1e-2) < 4e-3);
  CHECK(max_abs_diff(got.lse, ref.lse) < 1e-3);
  CHECK(max_sequence_error(got.dq, ref.dq, b, qw, 1e-2) < 1e-2);
  CHECK(max_sequence_error(got.dk, ref.dk, b, kw, 1e-2) < 1e-2);
  CHECK(max_sequence_error(got.dv, ref.dv, b, kw, 1e-2) < 1e-2);
}

//! The engine ran exactly its program, and that program is the one make_program gives for the
//! same plan, topology and options (the host engine's and the simulator's program).
inline void check_record(const gpu_results& got, const plan& p, const batch& b, const topology& t, program_options o) {
  CHECK(got.record == program_record(got.program));
  o.wire = got.program.wire;  // the engine's: fp16 elements, fp32 accumulators
  CHECK(program_record(make_program(p, b, t, o)) == got.record);
}

}  // namespace zeppelin_test
