// bench/gpu/attention_bench.cpp
// GPU bench driver (host C++, links zeppelin::kernels; needs a CUDA device).
// In:  --datasets arxiv,github,prolong64k  --totals 1024,...,65536  --heads 32 --kv-heads 8
//      --head-dim 128 --dtype bf16 --reps 20 [--shapes FILE] [--csv FILE] [--dump DIR]
// Out: one table row per (dataset, total): sequences, causal pairs, forward and backward
//      TFLOP/s (FlashAttention's FLOP convention, cost/attention_flops.hpp; median of --reps
//      timed runs after 3 warm-ups, CUDA events); then gather / scatter GB/s of a zigzag-like
//      token-run plan (CUB batched memcpy, vectorised kernel) next to one cudaMemcpy of the
//      same bytes (bytes read + written).
//   --shapes FILE  writes "dataset total heads kv_heads head_dim len,len,..." per row for
//                  torch_attention.py bench (PyTorch's flash attention on the same shapes)
//   --dump DIR     writes the inputs and outputs of the first dataset's row with total
//                  --dump-total (default 16384) as raw files for torch_attention.py check
//                  (bf16/fp16 bits, fp32 LSE)
// Backward time covers zeroing dQ, the delta preprocess, the kernel and the dQ cast.
// Inputs are a 16 MB random block tiled over each tensor (random, never zeros).
#include <zeppelin/cost/attention_flops.hpp>
#include <zeppelin/cost/causal_pairs.hpp>
#include <zeppelin/cuda.hpp>
#include <zeppelin/data/datasets.hpp>
#include <zeppelin/data/sampler.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace dev = zeppelin::device;

namespace {

struct options {
  std::vector<std::string> datasets{"arxiv", "github", "prolong64k"};
  std::vector<std::int64_t> totals{1024, 4096, 16384, 32768, 65536};
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  dev::dtype type = dev::dtype::bf16;
  int reps = 20;
  std::string shapes_file, csv_file, dump_dir;
  std::int64_t dump_total = 16384;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--datasets") o.datasets = split(value);
    else if (key == "--totals") {
      o.totals.clear();
      for (const auto& t : split(value)) o.totals.push_back(std::stoll(t));
    } else if (key == "--heads") o.heads = std::stoi(value);
    else if (key == "--kv-heads") o.kv_heads = std::stoi(value);
    else if (key == "--head-dim") o.head_dim = std::stoi(value);
    else if (key == "--dtype") o.type = value == "fp16" ? dev::dtype::fp16 : dev::dtype::bf16;
    else if (key == "--reps") o.reps = std::stoi(value);
    else if (key == "--shapes") o.shapes_file = value;
    else if (key == "--csv") o.csv_file = value;
    else if (key == "--dump") o.dump_dir = value;
    else if (key == "--dump-total") o.dump_total = std::stoll(value);
    else throw std::runtime_error("unknown option " + key);
  }
  return o;
}

struct raw_buffer {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  explicit raw_buffer(std::size_t n) : bytes(n) { ZEPPELIN_CUDA_CHECK(cudaMalloc(&ptr, std::max<std::size_t>(n, 16))); }
  raw_buffer(const raw_buffer&) = delete;
  raw_buffer& operator=(const raw_buffer&) = delete;
  ~raw_buffer() { (void)cudaFree(ptr); }
  template <class T>
  T* as() const { return static_cast<T*>(ptr); }
};

// Fills a 16-bit tensor with small random values (16 MB block tiled over the buffer).
void fill_random16(raw_buffer& b, zeppelin::random_generator& rng, dev::dtype t) {
  const std::size_t block = std::min<std::size_t>(b.bytes, std::size_t{16} << 20) / 2;
  std::vector<std::uint16_t> host(block);
  for (auto& x : host) {
    const float f = static_cast<float>(rng.uniform() * 2.0 - 1.0);
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    // bf16: the top half of the fp32 bits; fp16: a value in [-1, 1) from exponent/mantissa bits.
    x = t == dev::dtype::bf16 ? static_cast<std::uint16_t>(bits >> 16)
                              : static_cast<std::uint16_t>((bits >> 16 & 0x8000u) | (0x3800u + (rng.below(0x800))));
  }
  for (std::size_t off = 0; off < b.bytes; off += block * 2)
    ZEPPELIN_CUDA_CHECK(cudaMemcpy(b.as<char>() + off, host.data(), std::min(block * 2, b.bytes - off), cudaMemcpyHostToDevice));
}

double median_ms(int reps, const std::function<void()>& launch) {
  cudaEvent_t start, stop;
  ZEPPELIN_CUDA_CHECK(cudaEventCreate(&start));
  ZEPPELIN_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) launch();
  ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    ZEPPELIN_CUDA_CHECK(cudaEventRecord(start));
    launch();
    ZEPPELIN_CUDA_CHECK(cudaEventRecord(stop));
    ZEPPELIN_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    ZEPPELIN_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  ZEPPELIN_CUDA_CHECK(cudaEventDestroy(start));
  ZEPPELIN_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void dump(const std::string& dir, const std::string& name, const raw_buffer& b) {
  std::vector<char> host(b.bytes);
  ZEPPELIN_CUDA_CHECK(cudaMemcpy(host.data(), b.ptr, b.bytes, cudaMemcpyDeviceToHost));
  std::ofstream(dir + "/" + name + ".bin", std::ios::binary).write(host.data(), static_cast<std::streamsize>(host.size()));
}

}  // namespace

int main(int argc, char** argv) try {
  const options opt = parse(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::cerr << "bench_gpu_attention: no CUDA device\n";
    return 1;
  }
  cudaDeviceProp prop{};
  ZEPPELIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; heads %d, kv_heads %d, head_dim %d, %s\n", prop.name, prop.multiProcessorCount, opt.heads,
              opt.kv_heads, opt.head_dim, std::string(to_string(opt.type)).c_str());
  std::ofstream shapes, csv;
  if (!opt.shapes_file.empty()) shapes.open(opt.shapes_file);
  if (!opt.csv_file.empty()) {
    csv.open(opt.csv_file);
    csv << "dataset,total,sequences,fwd_ms,fwd_tflops,bwd_ms,bwd_tflops\n";
  }
  std::printf("%-11s %7s %6s %10s %10s %10s %10s\n", "dataset", "total", "seqs", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s");
  zeppelin::random_generator rng(2024);
  bool dumped = false;
  const std::size_t elem = 2;

  for (const auto& name : opt.datasets) {
    const auto distribution = zeppelin::dataset_by_name(name);
    for (const auto total : opt.totals) {
      const auto lengths = zeppelin::sample_lengths(distribution, total, 7, {.max_length = std::min<std::int64_t>(total, 65536)});
      std::vector<std::int32_t> cu{0};
      std::int64_t pairs = 0;
      std::int32_t max_len = 0;
      for (auto len : lengths) {
        cu.push_back(cu.back() + static_cast<std::int32_t>(len));
        pairs += zeppelin::causal_pairs(len);
        max_len = std::max(max_len, static_cast<std::int32_t>(len));
      }
      if (shapes.is_open()) {
        shapes << name << ' ' << total << ' ' << opt.heads << ' ' << opt.kv_heads << ' ' << opt.head_dim << ' ';
        for (std::size_t i = 0; i < lengths.size(); ++i) shapes << (i ? "," : "") << lengths[i];
        shapes << '\n';
      }
      const auto n = static_cast<std::size_t>(total);
      const std::size_t q_elems = n * opt.heads * opt.head_dim, kv_elems = n * opt.kv_heads * opt.head_dim;
      raw_buffer q(q_elems * elem), k(kv_elems * elem), v(kv_elems * elem), o(q_elems * elem), d_o(q_elems * elem),
          dq(q_elems * elem), dk(kv_elems * elem), dv(kv_elems * elem), dq_accum(q_elems * 4),
          lse(n * opt.heads * 4), delta(n * opt.heads * 4), cu_d(cu.size() * 4);
      fill_random16(q, rng, opt.type);
      fill_random16(k, rng, opt.type);
      fill_random16(v, rng, opt.type);
      fill_random16(d_o, rng, opt.type);
      ZEPPELIN_CUDA_CHECK(cudaMemcpy(cu_d.ptr, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
      const float scale = 1.0f / std::sqrt(static_cast<float>(opt.head_dim));

      dev::attention_forward_params f;
      f.q = q.ptr;
      f.k = k.ptr;
      f.v = v.ptr;
      f.o = o.ptr;
      f.lse = lse.as<float>();
      f.cu_seqlens_q = f.cu_seqlens_k = cu_d.as<std::int32_t>();
      f.mask = zeppelin::block_mask::causal;
      f.num_blocks = static_cast<std::int32_t>(lengths.size());
      f.heads = opt.heads;
      f.kv_heads = opt.kv_heads;
      f.head_dim = opt.head_dim;
      f.max_seqlen_q = max_len;
      f.total_q = total;
      f.softmax_scale = scale;
      f.type = opt.type;
      dev::validate(f);
      const double fwd_ms = median_ms(opt.reps, [&] { ZEPPELIN_CUDA_CHECK(dev::attention_forward(f, nullptr)); });

      dev::attention_preprocess_params pre;
      pre.o = o.ptr;
      pre.dout = d_o.ptr;
      pre.delta = delta.as<float>();
      pre.rows = total;
      pre.heads = opt.heads;
      pre.head_dim = opt.head_dim;
      pre.type = opt.type;
      dev::attention_backward_params b;
      static_cast<dev::attention_blocks&>(b) = f;  // same inputs and block list as the forward
      b.dout = d_o.ptr;
      b.lse = lse.as<float>();
      b.delta = delta.as<float>();
      b.dq_accum = dq_accum.as<float>();
      b.dk = dk.ptr;
      b.dv = dv.ptr;
      b.max_seqlen_k = max_len;
      dev::validate(pre);
      dev::validate(b);
      const auto backward = [&] {
        ZEPPELIN_CUDA_CHECK(cudaMemsetAsync(dq_accum.ptr, 0, dq_accum.bytes, nullptr));
        ZEPPELIN_CUDA_CHECK(dev::attention_backward_preprocess(pre, nullptr));
        ZEPPELIN_CUDA_CHECK(dev::attention_backward(b, nullptr));
        ZEPPELIN_CUDA_CHECK(dev::cast_from_f32(dq.ptr, dq_accum.as<float>(), static_cast<std::int64_t>(q_elems), opt.type, nullptr));
      };
      const double bwd_ms = median_ms(opt.reps, backward);
      const double fwd_tf = zeppelin::attention_forward_flops(pairs, opt.heads, opt.head_dim) / (fwd_ms * 1e-3) / 1e12;
      const double bwd_tf = zeppelin::attention_backward_flops(pairs, opt.heads, opt.head_dim) / (bwd_ms * 1e-3) / 1e12;
      std::printf("%-11s %7lld %6zu %10.3f %10.1f %10.3f %10.1f\n", name.c_str(), static_cast<long long>(total), lengths.size(),
                  fwd_ms, fwd_tf, bwd_ms, bwd_tf);
      if (csv.is_open())
        csv << name << ',' << total << ',' << lengths.size() << ',' << fwd_ms << ',' << fwd_tf << ',' << bwd_ms << ',' << bwd_tf << '\n';

      if (!opt.dump_dir.empty() && !dumped && total == opt.dump_total) {
        ZEPPELIN_CUDA_CHECK(dev::attention_forward(f, nullptr));
        backward();
        ZEPPELIN_CUDA_CHECK(cudaDeviceSynchronize());
        for (const auto& [file, buffer] : {std::pair<const char*, const raw_buffer*>{"q", &q}, {"k", &k}, {"v", &v}, {"o", &o},
                                           {"do", &d_o}, {"lse", &lse}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}})
          dump(opt.dump_dir, file, *buffer);
        std::ofstream meta(opt.dump_dir + "/meta.txt");
        meta << std::string(to_string(opt.type)) << ' ' << opt.heads << ' ' << opt.kv_heads << ' ' << opt.head_dim << ' ';
        for (std::size_t i = 0; i < lengths.size(); ++i) meta << (i ? "," : "") << lengths[i];
        meta << '\n';
        dumped = true;
      }
    }
  }

  // Gather / scatter: every sequence of a 64K-token prolong64k batch cut into 8 chunks,
  // chunks dealt zigzag-style (chunk c of every sequence, then chunk 7 - c, ...).
  {
    const std::int64_t total = opt.totals.empty() ? 65536 : *std::max_element(opt.totals.begin(), opt.totals.end());
    const auto lengths = zeppelin::sample_lengths(zeppelin::dataset_by_name("prolong64k"), total, 11, {.max_length = total});
    std::vector<std::int64_t> starts{0};
    for (auto len : lengths) starts.push_back(starts.back() + len);
    starts.pop_back();
    std::vector<dev::sequence_segment> segments;
    for (int c = 0; c < 8; ++c) {
      const int chunk = c % 2 == 0 ? c / 2 : 7 - c / 2;
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        const std::int64_t len = lengths[s];
        segments.push_back({static_cast<zeppelin::sequence_index>(s), {len * chunk / 8, len * (chunk + 1) / 8}});
      }
    }
    const auto gather = dev::gather_runs(starts, segments);
    const auto scatter = dev::scatter_runs(starts, segments);
    const std::size_t row_bytes = static_cast<std::size_t>(opt.heads) * opt.head_dim * elem;
    raw_buffer src(static_cast<std::size_t>(total) * row_bytes), dst(static_cast<std::size_t>(total) * row_bytes);
    fill_random16(src, rng, opt.type);
    raw_buffer gather_runs_d(gather.size() * sizeof(dev::token_run)), scatter_runs_d(scatter.size() * sizeof(dev::token_run));
    ZEPPELIN_CUDA_CHECK(cudaMemcpy(gather_runs_d.ptr, gather.data(), gather_runs_d.bytes, cudaMemcpyHostToDevice));
    ZEPPELIN_CUDA_CHECK(cudaMemcpy(scatter_runs_d.ptr, scatter.data(), scatter_runs_d.bytes, cudaMemcpyHostToDevice));
    const double bytes = 2.0 * static_cast<double>(total) * static_cast<double>(row_bytes);
    std::printf("\ngather/scatter of %lld tokens x %zu bytes (%zu / %zu runs), GB/s (read + write)\n",
                static_cast<long long>(total), row_bytes, gather.size(), scatter.size());
    const double memcpy_ms = median_ms(opt.reps, [&] {
      ZEPPELIN_CUDA_CHECK(cudaMemcpyAsync(dst.ptr, src.ptr, src.bytes, cudaMemcpyDeviceToDevice, nullptr));
    });
    std::printf("%-24s %10.1f\n", "cudaMemcpy", bytes / (memcpy_ms * 1e-3) / 1e9);
    for (const auto algorithm : {dev::copy_algorithm::cub_batched, dev::copy_algorithm::vectorized}) {
      for (const auto* plan : {&gather, &scatter}) {
        dev::token_copy_params p;
        p.runs = (plan == &gather ? gather_runs_d : scatter_runs_d).as<dev::token_run>();
        p.num_runs = static_cast<std::int64_t>(plan->size());
        p.dst = dst.ptr;
        p.src = src.ptr;
        p.row_bytes = row_bytes;
        p.longest_run = dev::longest_run(*plan);
        p.algorithm = algorithm;
        std::size_t temp_bytes = 0;
        ZEPPELIN_CUDA_CHECK(dev::copy_token_runs_temp_bytes(p, temp_bytes));
        raw_buffer temp(temp_bytes);
        p.temp = temp.ptr;
        p.temp_bytes = temp_bytes;
        const double ms = median_ms(opt.reps, [&] { ZEPPELIN_CUDA_CHECK(dev::copy_token_runs(p, nullptr)); });
        std::printf("%-24s %10.1f\n",
                    (std::string(algorithm == dev::copy_algorithm::cub_batched ? "cub_batched" : "vectorized") +
                     (plan == &gather ? " gather" : " scatter")).c_str(),
                    bytes / (ms * 1e-3) / 1e9);
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "bench_gpu_attention: " << e.what() << '\n';
  return 1;
}
