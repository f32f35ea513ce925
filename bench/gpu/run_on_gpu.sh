#!/usr/bin/env bash
# One call on a GPU machine: build the kernels, the [gpu] tests and the bench for sm_90, run
# the tests (plain, then under compute-sanitizer memcheck), the benches, PyTorch's flash
# attention on the same shapes, and the check of dumped outputs against PyTorch.
# Usage (repository root): bench/gpu/run_on_gpu.sh [OUT_DIR]   (logs and tables land there)
set -uo pipefail
out="${1:-${OUT:-/tmp/zeppelin-gpu}}"
mkdir -p "$out"
build=build/gpu
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEPPELIN_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DZEPPELIN_BUILD_EXAMPLES=OFF > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" --target test_gpu bench_gpu_attention bench_gpu_ring_overlap -j16 > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
"$build/tests/gpu/test_gpu" "[gpu]" 2>&1 | tee "$out/test_gpu.log" | tail -5
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$build/tests/gpu/test_gpu" "[gpu]" > "$out/memcheck.log" 2>&1
echo "memcheck exit code: $?"; tail -3 "$out/memcheck.log"
mkdir -p "$out/dump"
"$build/bench/gpu/bench_gpu_attention" --shapes "$out/shapes.txt" --csv "$out/zeppelin.csv" --dump "$out/dump" 2>&1 | tee "$out/bench.log"
python3 bench/gpu/torch_attention.py bench "$out/shapes.txt" 2>&1 | tee "$out/torch_bench.log"
python3 bench/gpu/torch_attention.py check "$out/dump" 2>&1 | tee "$out/torch_check.log"
"$build/bench/gpu/bench_gpu_ring_overlap" --ranks 4 --tokens 32768 2>&1 | tee "$out/ring_overlap.log"
