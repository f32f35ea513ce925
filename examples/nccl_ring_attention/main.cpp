// examples/nccl_ring_attention/main.cpp
// Zeppelin's attention engine on real GPUs: one MPI process per GPU, any number of nodes.
//   mpirun -np 16 --map-by slot ./nccl_ring_attention --tokens-per-gpu 16384 --heads 32
//          --kv-heads 8 --head-dim 128 --iters 10   (one line)
// Ranks must be node-major (mpirun's default slot mapping): rank = node * gpus_per_node + local.
// Steps (every rank): MPI gives the node layout and broadcasts the NCCL unique id from rank 0
// (nccl/bootstrap.hpp) -> one nccl_communicator for the whole job -> the same batch and plan
// on every rank (a seeded sampler, the hierarchical partitioner; fingerprints cross-checked
// with MPI_Allreduce) -> the rank's rows in the loader layout -> device dispatch
// (execute_remap_device) -> device attention engine forward + backward (the plan's execution
// program: ring rounds overlapped with NCCL on the communication stream, fused launches,
// prioritised queues, proxy routing) -> inverse dispatch.
// Out: rank 0 prints the plan summary and the slowest rank's median forward / backward time;
// every rank prints a checksum of its returned O and dQ rows. Errors (NCCL, CUDA, bad
// arguments) print on the failing rank and abort the MPI job (never a hang: the NCCL
// communicator aborts itself after --timeout-s).
#include <zeppelin/core/batch.hpp>
#include <zeppelin/core/fingerprint.hpp>
#include <zeppelin/core/random.hpp>
#include <zeppelin/core/topology.hpp>
#include <zeppelin/cuda/error.hpp>
#include <zeppelin/cuda/executor/attention_engine.hpp>
#include <zeppelin/cuda/executor/remap.hpp>
#include <zeppelin/cuda/stream_set.hpp>
#include <zeppelin/exec/relayout.hpp>
#include <zeppelin/nccl.hpp>
#include <zeppelin/partition/hierarchical.hpp>
#include <zeppelin/program/options.hpp>

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

using namespace zeppelin;

namespace {

struct options {
  long tokens_per_gpu = 16384;
  int heads = 32, kv_heads = 8, head_dim = 128, iters = 10, timeout_s = 300;
  std::uint64_t seed = 1;
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (k == "--tokens-per-gpu") o.tokens_per_gpu = v;
    else if (k == "--heads") o.heads = static_cast<int>(v);
    else if (k == "--kv-heads") o.kv_heads = static_cast<int>(v);
    else if (k == "--head-dim") o.head_dim = static_cast<int>(v);
    else if (k == "--iters") o.iters = static_cast<int>(v);
    else if (k == "--timeout-s") o.timeout_s = static_cast<int>(v);
    else if (k == "--seed") o.seed = static_cast<std::uint64_t>(v);
    else ZEPPELIN_THROW(invalid_argument, "unknown option " + k, {});
  }
  return o;
}

// the value of element i of a tensor, the same on every rank: deterministic in the global index
std::uint16_t value_bits(std::uint64_t tensor, std::uint64_t i) {
  std::uint64_t x = (tensor + 1) * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  const auto mantissa = static_cast<std::uint16_t>(x & 0x7f);
  return static_cast<std::uint16_t>(((x >> 8) & 1u) << 15 | 0x3e80u | mantissa);  // bf16 in +-[0.25, 0.5)
}

// the rank's loader-layout rows of a [T][w] tensor
std::vector<std::uint16_t> loader_rows(const placement& pl, const batch& b, std::int64_t w, std::uint64_t tensor) {
  std::vector<std::uint16_t> out;
  for (const shard& s : pl.shards)
    for (token_count t = s.range.begin; t < s.range.end; ++t)
      for (std::int64_t x = 0; x < w; ++x) out.push_back(value_bits(tensor, static_cast<std::uint64_t>((b.offset(s.seq) + t) * w + x)));
  return out;
}

double checksum(const std::vector<std::uint16_t>& bits) {
  double s = 0;
  for (const std::uint16_t u : bits) {
    const std::uint32_t f = std::uint32_t{u} << 16;
    float x;
    std::memcpy(&x, &f, sizeof(x));
    s += std::isfinite(x) ? double(x) : 1e30;
  }
  return s;
}

struct device_array {
  void* ptr = nullptr;
  explicit device_array(std::size_t bytes) {
    if (bytes > 0) ZEPPELIN_CUDA_CHECK(cudaMalloc(&ptr, bytes));
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() {
    if (ptr != nullptr) (void)cudaFree(ptr);
  }
};

int run(int argc, char** argv) {
  const options o = parse(argc, argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // node layout: ranks sharing memory are one node; every node must hold the same count
  MPI_Comm node_comm;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node_comm, &local_rank);
  MPI_Comm_size(node_comm, &local_size);
  MPI_Comm_free(&node_comm);
  int min_local = 0, max_local = 0;
  MPI_Allreduce(&local_size, &min_local, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&local_size, &max_local, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  ZEPPELIN_EXPECTS(min_local == max_local && rank / local_size * local_size + local_rank == rank,
                   "every node needs the same number of ranks, mapped node-major",
                   {{"min_per_node", double(min_local)}, {"max_per_node", double(max_local)}, {"rank", double(rank)}});
  int devices = 0;
  ZEPPELIN_CUDA_CHECK(cudaGetDeviceCount(&devices));
  ZEPPELIN_EXPECTS(devices >= 1, "no CUDA device", {{"rank", double(rank)}});

  // NCCL bootstrap: the unique id from rank 0 over MPI
  ncclUniqueId id{};
  if (rank == 0) id = nccl::make_unique_id();
  auto bytes = nccl::to_bytes(id);
  MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, MPI_COMM_WORLD);
  id = nccl::from_bytes(bytes);
  nccl_communicator comm(id, size, rank,
                         {.device = local_rank % devices, .gpus_per_node = local_size, .timeout = std::chrono::seconds(o.timeout_s)});

  // the same batch and plan on every rank
  topology_config tc;
  tc.nodes = size / local_size;
  tc.gpus_per_node = local_size;
  tc.nics_per_node = local_size;
  tc.intra_node = {300e9, 3e-6};
  tc.nic = {25e9, 5e-6};
  tc.gpu = {"gpu", 989e12, 80e9, 3.35e12};
  const topology topo(tc);
  random_generator rng(o.seed, 0);
  std::vector<token_count> lengths;
  token_count total = 0;
  while (total < o.tokens_per_gpu * size) {
    const token_count len = std::min<token_count>(rng.between(1, 4 * o.tokens_per_gpu), o.tokens_per_gpu * size - total);
    lengths.push_back(len);
    total += len;
  }
  const batch b(lengths);
  plan p;
  for (token_count capacity = o.tokens_per_gpu;; capacity += capacity / 8 + 1) {
    try {
      p = hierarchical<>{.capacity = capacity}.partition(b, topo);
      break;
    } catch (const infeasible&) {
      if (capacity > total) throw;
    }
  }
  const auto fp = static_cast<unsigned long long>(fingerprint(p));
  unsigned long long fp_min = 0, fp_max = 0;
  MPI_Allreduce(&fp, &fp_min, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&fp, &fp_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  ZEPPELIN_EXPECTS(fp_min == fp_max, "ranks planned differently (fingerprints differ)", {{"rank", double(rank)}});

  const attention_dims dims{.heads = o.heads, .kv_heads = o.kv_heads, .head_dim = o.head_dim};
  // Zeppelin's engine: a level's groups fused into one launch per round, prioritised queues,
  // inter-node payloads routed over every NIC (program/options.hpp)
  program_options options;
  options.launch = launch_policy::fused_round;
  options.engine = engine_policy::prioritized;
  options.router.policy = proxy_router{};
  const device_attention_engine engine(p, b, topo, dims, device::dtype::bf16, options);
  const auto loader = loader_layout(b, size);
  const relayout_plan disp = make_dispatch_plan(loader, p.placements);
  const relayout_plan back = inverse(disp);
  const auto me = static_cast<std::size_t>(rank);
  const auto nl = static_cast<std::size_t>(disp.ranks[me].source_tokens);
  const auto n = static_cast<std::size_t>(engine.rows(rank));
  const auto qw = static_cast<std::size_t>(dims.q_row()), kw = static_cast<std::size_t>(dims.kv_row());
  const std::size_t e = 2;
  if (rank == 0)
    std::printf("ranks %d (%d nodes x %d), sequences %d, tokens %lld, plan %s: %zu groups, %d micro-batches, capacity %lld\n", size,
                size / local_size, local_size, b.size(), static_cast<long long>(total), p.method.c_str(), p.groups.size(),
                p.micro_batches(), static_cast<long long>(p.capacity));

  const device::cuda_stream stream(device::stream_priorities().least);
  device_array lq(nl * qw * e), lk(nl * kw * e), lv(nl * kw * e), ldo(nl * qw * e);
  const auto upload = [&](const device_array& d, const std::vector<std::uint16_t>& h) {
    if (!h.empty()) ZEPPELIN_CUDA_CHECK(cudaMemcpy(d.ptr, h.data(), h.size() * e, cudaMemcpyHostToDevice));
  };
  upload(lq, loader_rows(loader[me], b, dims.q_row(), 0));
  upload(lk, loader_rows(loader[me], b, dims.kv_row(), 1));
  upload(lv, loader_rows(loader[me], b, dims.kv_row(), 2));
  upload(ldo, loader_rows(loader[me], b, dims.q_row(), 3));
  device_array q(n * qw * e), k(n * kw * e), v(n * kw * e), d_o(n * qw * e), out(n * qw * e), dq(n * qw * e), dk(n * kw * e),
      dv(n * kw * e), lse(n * static_cast<std::size_t>(dims.heads) * sizeof(float)), bo(nl * qw * e), bdq(nl * qw * e);
  execute_remap_device(comm, disp, lq.ptr, q.ptr, qw * e, stream, "dispatch q");
  execute_remap_device(comm, disp, lk.ptr, k.ptr, kw * e, stream, "dispatch k");
  execute_remap_device(comm, disp, lv.ptr, v.ptr, kw * e, stream, "dispatch v");
  execute_remap_device(comm, disp, ldo.ptr, d_o.ptr, qw * e, stream, "dispatch do");
  const device_forward_io fio{q.ptr, k.ptr, v.ptr, out.ptr, static_cast<float*>(lse.ptr)};
  const device_backward_io bio{q.ptr, k.ptr, v.ptr, out.ptr, d_o.ptr, static_cast<const float*>(lse.ptr), dq.ptr, dk.ptr, dv.ptr};
  std::vector<double> fwd_ms, bwd_ms;
  for (int it = 0; it < o.iters + 2; ++it) {
    const device::cuda_event a(true), m(true), z(true);
    MPI_Barrier(MPI_COMM_WORLD);
    a.record(stream);
    engine.forward(comm, fio, stream);
    m.record(stream);
    engine.backward(comm, bio, stream);
    z.record(stream);
    z.synchronize();
    comm.synchronize("iteration " + std::to_string(it));
    double t[2] = {device::cuda_event::elapsed_ms(a, m), device::cuda_event::elapsed_ms(m, z)}, slowest[2] = {0, 0};
    MPI_Allreduce(t, slowest, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= 2) fwd_ms.push_back(slowest[0]), bwd_ms.push_back(slowest[1]);
  }
  execute_remap_device(comm, back, out.ptr, bo.ptr, qw * e, stream, "return o");
  execute_remap_device(comm, back, dq.ptr, bdq.ptr, qw * e, stream, "return dq");
  stream.synchronize();
  comm.synchronize("return");
  std::vector<std::uint16_t> ho(nl * qw), hdq(nl * qw);
  if (nl > 0) {
    ZEPPELIN_CUDA_CHECK(cudaMemcpy(ho.data(), bo.ptr, ho.size() * e, cudaMemcpyDeviceToHost));
    ZEPPELIN_CUDA_CHECK(cudaMemcpy(hdq.data(), bdq.ptr, hdq.size() * e, cudaMemcpyDeviceToHost));
  }
  std::sort(fwd_ms.begin(), fwd_ms.end());
  std::sort(bwd_ms.begin(), bwd_ms.end());
  if (rank == 0 && !fwd_ms.empty())
    std::printf("forward %.3f ms, backward %.3f ms (median of %d, slowest rank)\n", fwd_ms[fwd_ms.size() / 2],
                bwd_ms[bwd_ms.size() / 2], o.iters);
  std::printf("rank %d: rows %zu, checksum O %.6e dQ %.6e\n", rank, n, checksum(ho), checksum(hdq));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    code = run(argc, argv);
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}
