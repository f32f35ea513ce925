// host_ring_attention: one attention layer of a method (planner/methods.hpp: its partitioner,
// collective, routing, engine, launches and remap) executed for real on N * P host thread
// ranks (host loopback world), forward and backward, and checked against the dense
// single-rank reference of every sequence.
//   host_ring_attention --method zeppelin --lengths lengths.txt --cluster c --nodes 2
//                       --gpus-per-node 4 --heads 4 --kv-heads 2 --head-dim 16 --seed 1
//                       [--slack S] [--fp32] [--record FILE]
// Flow per rank: random Q|K|V and dO rows in a data loader's layout are dispatched to the
// layout the linear modules see (the token-balanced one of each micro-batch the program
// remaps, else the plan's attention layout); the program's remap_in moves Q|K|V to the
// attention layout, the engine runs the forward, remap_out brings O back; backward: dO in,
// the engine's backward, dQ|dK|dV out; everything returns to the loader layout and is
// compared with the reference. The plan and the execution program are exactly those
// `zeppelin simulate --method M` prices for the same batch, cluster, shape and slack:
// --record writes this run's execution record (every transfer every rank sent and every
// launch it ran, program/record.hpp), which equals the one `zeppelin simulate --record`
// writes (the shape and element type given to both: --dtype fp64, or fp32 with --fp32).
// Prints the plan, timings, and as its LAST line
//   max_abs_err_out=<O and LSE> max_abs_err_grad=<dQ, dK, dV>
// Exit status 1 when an error exceeds the tolerance (1e-10 in fp64, 1e-4 in fp32), 2 on bad input.
#include <zeppelin/comm.hpp>
#include <zeppelin/core/output_file.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology_presets.hpp>
#include <zeppelin/data/length_file.hpp>
#include <zeppelin/exec.hpp>
#include <zeppelin/exec/linear_layout.hpp>
#include <zeppelin/planner/methods.hpp>
#include <zeppelin/program.hpp>

#include "../common/cli_integers.hpp"
#include "../common/priced_model.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

using namespace zeppelin;

namespace {

struct options {
  std::string method = "zeppelin";
  std::string lengths;
  std::string cluster = "c";
  int nodes = 1;
  int gpus_per_node = 0;  // 0: the preset's
  int heads = 4;
  int kv_heads = 4;
  int head_dim = 16;
  std::uint64_t seed = 1;
  double slack = method_setup{}.capacity_slack;
  bool fp32 = false;
  std::string record_file;
};

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// rows of a tensor of width w, laid out as `pl` (shards in buffer order), from the packed stream
template <class T>
std::vector<T> rows_of(const std::vector<T>& global, const placement& pl, const batch& b, std::int64_t w) {
  std::vector<T> out;
  for (const shard& s : pl.shards)
    out.insert(out.end(), global.begin() + (b.offset(s.seq) + s.range.begin) * w, global.begin() + (b.offset(s.seq) + s.range.end) * w);
  return out;
}

template <class T>
int run(const options& o, const batch& b, const plan& p, const topology& t, const program_options& po) {
  const attention_dims dims{.heads = o.heads, .kv_heads = o.kv_heads, .head_dim = o.head_dim};
  const std::int64_t qw = dims.q_row(), kw = dims.kv_row(), qkv = qw + 2 * kw;
  const auto T_ = static_cast<std::size_t>(b.total_tokens());
  random_generator rng(o.seed, 1);
  const auto fill = [&](std::size_t n) {
    std::vector<T> x(n);
    for (auto& e : x) e = static_cast<T>(2 * rng.uniform() - 1);
    return x;
  };
  const auto q = fill(T_ * qw), k = fill(T_ * kw), v = fill(T_ * kw), d_o = fill(T_ * qw);

  // dense reference, one sequence at a time, spread over the hardware threads
  auto t0 = clock_type::now();
  std::vector<T> ro(q.size()), rl(T_ * dims.heads), rdq(q.size()), rdk(k.size()), rdv(v.size());
  {
    std::vector<std::thread> pool;
    const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned w = 0; w < workers; ++w)
      pool.emplace_back([&, w] {
        for (sequence_index s = static_cast<sequence_index>(w); s < b.size(); s += static_cast<sequence_index>(workers)) {
          const token_count off = b.offset(s), len = b.length(s);
          T* lse = rl.data() + off * dims.heads;
          reference_forward(dims, len, q.data() + off * qw, k.data() + off * kw, v.data() + off * kw, ro.data() + off * qw, lse);
          reference_backward(dims, len, q.data() + off * qw, k.data() + off * kw, v.data() + off * kw, ro.data() + off * qw,
                             d_o.data() + off * qw, lse, rdq.data() + off * qw, rdk.data() + off * kw, rdv.data() + off * kw);
        }
      });
    for (auto& th : pool) th.join();
  }
  const double reference_s = seconds_since(t0);
  // Q|K|V of one token as one row (what the QKV projection produces), packed stream order
  std::vector<T> qkv_rows(T_ * static_cast<std::size_t>(qkv));
  for (std::size_t i = 0; i < T_; ++i) {
    std::copy_n(q.begin() + static_cast<std::ptrdiff_t>(i * qw), qw, qkv_rows.begin() + static_cast<std::ptrdiff_t>(i * qkv));
    std::copy_n(k.begin() + static_cast<std::ptrdiff_t>(i * kw), kw, qkv_rows.begin() + static_cast<std::ptrdiff_t>(i * qkv + qw));
    std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(i * kw), kw, qkv_rows.begin() + static_cast<std::ptrdiff_t>(i * qkv + qw + kw));
  }

  t0 = clock_type::now();
  const attention_engine<T> engine(p, b, t, dims, po);
  const execution_program& prog = engine.program();
  const auto loader = loader_layout(b, p.num_ranks());
  const auto linear = linear_layout(p, prog);
  const relayout_plan disp = make_dispatch_plan(loader, linear), back = inverse(disp);
  const double setup_s = seconds_since(t0);

  std::vector<T> o_out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  double lse_err = 0, forward_s = 0, backward_s = 0;
  execution_record record;
  std::mutex m;
  t0 = clock_type::now();
  host_loopback_world world{.ranks = p.num_ranks(), .gpus_per_node = p.gpus_per_node, .timeout = std::chrono::seconds(600)};
  world.run([&](host_loopback_comm& c) {
    const rank_index me = c.rank();
    const auto ri = static_cast<std::size_t>(me);
    const token_count n = engine.rows(me);
    execution_record mine;
    // loader layout -> the linear modules' layout (rows of width w)
    const auto dispatch = [&](const std::vector<T>& global, std::int64_t w) {
      const auto src = rows_of(global, loader[ri], b, w);
      std::vector<T> dst(static_cast<std::size_t>(disp.ranks[ri].target_tokens * w));
      execute_relayout(c, disp, std::span<const T>(src), std::span<T>(dst), w, "dispatch");
      return dst;
    };
    // the linear layout <-> the attention layout (exec/linear_layout.hpp)
    const auto move = [&](pass_kind pass, segment_kind kind, std::span<const T> from, std::span<T> to, std::int64_t w) {
      if (kind == segment_kind::remap_in) to_attention_layout(engine, c, p, pass, from, to, w, &mine);
      else to_linear_layout(engine, c, p, pass, from, to, w, &mine);
    };
    const token_count lin_rows = disp.ranks[ri].target_tokens;
    const auto in_qkv = dispatch(qkv_rows, qkv), in_do = dispatch(d_o, qw);
    // forward: Q|K|V into the attention layout, attention, O out
    std::vector<T> a_qkv(static_cast<std::size_t>(n * qkv));
    move(pass_kind::forward, segment_kind::remap_in, in_qkv, a_qkv, qkv);
    std::vector<T> lq(static_cast<std::size_t>(n * qw)), lk(static_cast<std::size_t>(n * kw)), lv(lk.size());
    for (token_count r = 0; r < n; ++r) {
      const auto row = a_qkv.begin() + r * qkv;
      std::copy_n(row, qw, lq.begin() + r * qw);
      std::copy_n(row + qw, kw, lk.begin() + r * kw);
      std::copy_n(row + qw + kw, kw, lv.begin() + r * kw);
    }
    std::vector<T> lo(lq.size()), ll(static_cast<std::size_t>(n * dims.heads));
    auto f0 = clock_type::now();
    engine.forward(c, std::span<const T>(lq), std::span<const T>(lk), std::span<const T>(lv), std::span<T>(lo), std::span<T>(ll), &mine);
    const double fs = seconds_since(f0);
    std::vector<T> out_o(static_cast<std::size_t>(lin_rows * qw));
    move(pass_kind::forward, segment_kind::remap_out, lo, out_o, qw);
    // backward: dO into the attention layout, attention, dQ|dK|dV out
    std::vector<T> a_do(lq.size());
    move(pass_kind::backward, segment_kind::remap_in, in_do, a_do, qw);
    std::vector<T> gq(lq.size()), gk(lk.size()), gv(lv.size());
    f0 = clock_type::now();
    engine.backward(c, std::span<const T>(lq), std::span<const T>(lk), std::span<const T>(lv), std::span<const T>(lo),
                    std::span<const T>(a_do), std::span<const T>(ll), std::span<T>(gq), std::span<T>(gk), std::span<T>(gv), &mine);
    const double bs = seconds_since(f0);
    std::vector<T> a_grad(a_qkv.size()), out_grad(static_cast<std::size_t>(lin_rows * qkv));
    for (token_count r = 0; r < n; ++r) {
      const auto row = a_grad.begin() + r * qkv;
      std::copy_n(gq.begin() + r * qw, qw, row);
      std::copy_n(gk.begin() + r * kw, kw, row + qw);
      std::copy_n(gv.begin() + r * kw, kw, row + qw + kw);
    }
    move(pass_kind::backward, segment_kind::remap_out, a_grad, out_grad, qkv);
    // LSE, in the attention layout
    double le = 0;
    token_count row = 0;
    for (const shard& s : p.placements[ri].shards)
      for (token_count pos = s.range.begin; pos < s.range.end; ++pos, ++row)
        for (int h = 0; h < dims.heads; ++h)
          le = std::max(le, std::abs(double(ll[static_cast<std::size_t>(h * n + row)]) -
                                     double(rl[static_cast<std::size_t>(b.offset(s.seq) * dims.heads + h * b.length(s.seq) + pos)])));
    // back to the loader layout, into the global tensors
    const auto undispatch = [&](const std::vector<T>& local, std::int64_t w) {
      std::vector<T> dst(static_cast<std::size_t>(back.ranks[ri].target_tokens * w));
      execute_relayout(c, back, std::span<const T>(local), std::span<T>(dst), w, "undispatch");
      return dst;
    };
    const auto lo_back = undispatch(out_o, qw), grad_back = undispatch(out_grad, qkv);
    std::lock_guard lock(m);
    std::size_t at = 0;
    for (const shard& s : loader[ri].shards)
      for (token_count pos = s.range.begin; pos < s.range.end; ++pos, ++at) {
        const auto g = static_cast<std::size_t>(b.offset(s.seq) + pos);
        std::copy_n(lo_back.begin() + static_cast<std::ptrdiff_t>(at * qw), qw, o_out.begin() + static_cast<std::ptrdiff_t>(g * qw));
        const auto gr = grad_back.begin() + static_cast<std::ptrdiff_t>(at * qkv);
        std::copy_n(gr, qw, dq.begin() + static_cast<std::ptrdiff_t>(g * qw));
        std::copy_n(gr + qw, kw, dk.begin() + static_cast<std::ptrdiff_t>(g * kw));
        std::copy_n(gr + qw + kw, kw, dv.begin() + static_cast<std::ptrdiff_t>(g * kw));
      }
    lse_err = std::max(lse_err, le);
    forward_s = std::max(forward_s, fs);
    backward_s = std::max(backward_s, bs);
    record.merge(mine);
  });
  const double distributed_s = seconds_since(t0);
  if (!o.record_file.empty()) {
    write_output_file(o.record_file, [&](std::ostream& out) { write_record_json(out, record); }, "--record");
  }
  const auto diff = [](const std::vector<T>& a, const std::vector<T>& r) {
    double x = 0;
    for (std::size_t i = 0; i < a.size(); ++i) x = std::max(x, std::abs(double(a[i]) - double(r[i])));
    return x;
  };
  const double err_out = std::max(diff(o_out, ro), lse_err);
  const double err_grad = std::max({diff(dq, rdq), diff(dk, rdk), diff(dv, rdv)});
  const double tol = o.fp32 ? 1e-4 : 1e-10;
  std::printf("program: %zu levels, %zu phases, %zu launches; %s launches, %s engine%s\n", prog.levels.size(), prog.phases.size(),
              prog.launches.size(), std::string(to_string(po.launch)).c_str(), std::string(to_string(po.engine)).c_str(),
              prog.linear_layout.empty() ? "" : ", remapped");
  std::printf("timing: reference %.3f s, plan+program %.3f s, distributed (dispatch, layer fwd + bwd, undispatch) %.3f s "
              "[slowest rank: attention forward %.3f s, backward %.3f s]\n",
              reference_s, setup_s, distributed_s, forward_s, backward_s);
  std::printf("max_abs_err_out=%.3e max_abs_err_grad=%.3e\n", err_out, err_grad);
  return err_out <= tol && err_grad <= tol ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  CLI::App app{"One attention layer of a method on host thread ranks, checked against a dense reference"};
  std::vector<std::string> method_names;
  for (const method_spec& s : method_specs) method_names.emplace_back(s.name);
  app.add_option("--method", o.method, "a method of zeppelin simulate (default zeppelin)")
      ->check(CLI::IsMember(method_names));
  app.add_option("--lengths", o.lengths, "file of sequence lengths, one per line")->required()->check(CLI::ExistingFile);
  app.add_option("--cluster", o.cluster, "cluster preset: a, b, c, wlb, hydraulis, infinipipe")->check(CLI::IsMember({"a", "b", "c", "wlb", "hydraulis", "infinipipe"}));
  using example_cli::add_integer_option;
  add_integer_option(&app, "--nodes", o.nodes, "nodes N")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--gpus-per-node", o.gpus_per_node, "ranks per node P (default: the preset's)")->check(CLI::Range(1, 64));
  add_integer_option(&app, "--heads", o.heads, "query heads")->check(CLI::Range(1, 1024));
  add_integer_option(&app, "--kv-heads", o.kv_heads, "key/value heads (divides heads)")->check(CLI::Range(1, 1024));
  add_integer_option(&app, "--head-dim", o.head_dim, "head dimension")->check(CLI::Range(1, 1024));
  add_integer_option(&app, "--seed", o.seed, "seed of the random tensors");
  app.add_option("--slack", o.slack, "capacity headroom over the average tokens per GPU (as zeppelin simulate)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_flag("--fp32", o.fp32, "run in fp32 (default fp64)");
  app.add_option("--record", o.record_file, "write the execution record (JSON) of this run");
  CLI11_PARSE(app, argc, argv);
  try {
    const batch b(read_lengths_file(o.lengths));
    const topology t = cluster_by_name(o.cluster, o.nodes, o.gpus_per_node);
    // the plan and options `zeppelin simulate --method M` uses (TP 1)
    const method_spec& spec = method_by_name(o.method);
    method_setup setup;
    setup.tokens_per_gpu = (b.total_tokens() + t.num_ranks() - 1) / t.num_ranks();
    setup.capacity_slack = o.slack;
    const attention_dims dims{.heads = o.heads, .kv_heads = o.kv_heads, .head_dim = o.head_dim};
    validate(dims);
    // zeppelin chooses its layout and execution by cost: priced as `zeppelin simulate` prices
    // it by default (LLaMA-7B with this attention shape and element type)
    const model_config priced = example_cli::priced_model(o.heads, o.kv_heads, o.head_dim, o.fp32 ? 4 : 8);
    const auto [executed, p] = plan_method(spec, b, t, priced, setup);
    const program_options po =
        to_program_options(options_for(executed, setup), wire_format::for_shape(o.heads, o.kv_heads, o.head_dim, o.fp32 ? 4 : 8));
    std::printf("batch: %d sequences, %lld tokens (longest %lld); method %s (%s): plan %s on %dx%d ranks, capacity %lld, %zu groups, "
                "%d micro-batch(es), %s\n",
                static_cast<int>(b.size()), static_cast<long long>(b.total_tokens()), static_cast<long long>(b.max_length()),
                o.method.c_str(), std::string(executed.name).c_str(), p.method.c_str(), t.nodes(), t.gpus_per_node(), static_cast<long long>(p.capacity),
                p.groups.size(), p.micro_batches(), o.fp32 ? "fp32" : "fp64");
    for (const auto& note : p.notes) std::printf("note: %s\n", note.text.c_str());
    return o.fp32 ? run<float>(o, b, p, t, po) : run<double>(o, b, p, t, po);
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory: every rank's Q, K, V and the dense reference of this batch do not fit in this "
                 "machine's memory\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 2;
  }
}
