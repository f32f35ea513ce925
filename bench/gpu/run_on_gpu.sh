#!/usr/bin/env bash
# One call on a GPU machine: build the kernels, the [gpu] tests, the benches and the C ABI
# library for sm_90 (or use binaries built elsewhere), run the tests (plain, then under
# compute-sanitizer memcheck as ctest's gpu.memcheck and gpu.memcheck.nccl do), the PyTorch
# binding's CUDA tests, the attention bench, PyTorch's flash attention on the same shapes, the
# check of dumped outputs against PyTorch, the ring-overlap bench, the device engine's host time
# per pass (eager and replayed as a CUDA graph), and train_gpt's GPU worlds
# (when the build holds train_gpt: the loss-parity runs of its gpu-labelled ctest cases). Each
# step has a time limit, so one slow step cannot take the others' time.
# Usage (repository root): bench/gpu/run_on_gpu.sh [OUT_DIR]   (eight logs land there)
# Environment:
#   ZEPPELIN_GPU_BUILD  a build directory that already holds tests/gpu/test_gpu,
#                       bench/gpu/bench_gpu_{attention,ring_overlap,engine_host}, python/zeppelin_torch and,
#                       optionally, train_gpt (examples on) for this GPU (configured with -DCMAKE_CUDA_ARCHITECTURES=90 on another
#                       machine, say); default: build here
#   ZEPPELIN_GPU_MEMCHECK_S  seconds for each memcheck run (default 240)
set -uo pipefail
out="${1:-${OUT:-/tmp/zeppelin-gpu}}"
mkdir -p "$out"
scratch=$(mktemp -d)
gpu_state() { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu,pstate --format=csv; }
{
  date -u; gpu_state
  nvcc --version | tail -2; python3 -c 'import torch; print("torch", torch.__version__)'
} > "$out/env.log" 2>&1
# the NCCL the tests link: the system's, else the first one found (PyTorch ships one)
if ! ldconfig -p | grep -q libnccl.so.2; then
  nccl=$(find /usr/local/cuda* /opt /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
  [[ -n "$nccl" ]] && export LD_LIBRARY_PATH="$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "libnccl.so.2: ${nccl:-not found}" >> "$out/env.log"
fi
build="${ZEPPELIN_GPU_BUILD:-}"
if [[ -z "$build" ]] || ! "$build/tests/gpu/test_gpu" --help > /dev/null 2>&1; then
  [[ -n "$build" ]] && echo "prebuilt $build does not run here; building" | tee -a "$out/env.log"
  build=build/gpu
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZEPPELIN_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DZEPPELIN_BUILD_EXAMPLES=OFF -DZEPPELIN_BUILD_BENCH=ON -DZEPPELIN_BUILD_PYTHON=ON > "$scratch/configure.log" 2>&1 \
    || { tail -30 "$scratch/configure.log"; exit 1; }
  cmake --build "$build" --target test_gpu bench_gpu_attention bench_gpu_ring_overlap bench_gpu_engine_host zeppelin_capi -j16 > "$scratch/build.log" 2>&1 \
    || { tail -50 "$scratch/build.log"; exit 1; }
fi
echo "binaries: $build" >> "$out/env.log"
step() {  # step SECONDS LOG COMMAND...: runs COMMAND under a limit, its output appended to LOG
  local limit=$1 log=$2; shift 2
  local start=$SECONDS
  echo "== $*" >> "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "$(basename "$log") ($1 ${2:-}): exit $rc in $((SECONDS - start)) s" | tee -a "$scratch/steps.log"
  return $rc
}
step 180 "$out/test_gpu.log" "$build/tests/gpu/test_gpu" "[gpu]" --durations yes
tail -n 3 "$out/test_gpu.log"
step 120 "$out/python_cuda.log" env PYTHONPATH="$build/python" PYTHONDONTWRITEBYTECODE=1 \
  python3 -m pytest -q -p no:cacheprovider python/tests/test_cuda.py
tail -n 2 "$out/python_cuda.log"
step 90 "$out/ring_overlap.log" "$build/bench/gpu/bench_gpu_ring_overlap" --ranks 4 --tokens 32768
step 90 "$out/ring_overlap.log" "$build/bench/gpu/bench_gpu_ring_overlap" --ranks 2 --tokens 16384
step 90 "$out/ring_overlap.log" "$build/bench/gpu/bench_gpu_ring_overlap" --ranks 8 --tokens 65536
step 90 "$out/engine.log" "$build/bench/gpu/bench_gpu_engine_host"
mkdir -p "$scratch/dump"
step 150 "$out/bench.log" "$build/bench/gpu/bench_gpu_attention" --shapes "$scratch/shapes.txt" --dump "$scratch/dump"
step 150 "$out/torch.log" python3 bench/gpu/torch_attention.py bench "$scratch/shapes.txt"
step 90 "$out/torch.log" python3 bench/gpu/torch_attention.py check "$scratch/dump"
if [[ -x "$build/train_gpt" ]]; then  # examples/train_gpt/CMakeLists.txt: the gpu-labelled cases
  model=(--dim 256 --heads 4 --kv-heads 2 --hidden 256 --tokens 512 --steps 20)
  step 120 "$out/train_gpt.log" "$build/train_gpt" --world device --method zeppelin --cluster a --nodes 2 --gpus-per-node 2 "${model[@]}"
  step 120 "$out/train_gpt.log" "$build/train_gpt" --world device --method te_cp --nodes 1 --gpus-per-node 4 "${model[@]}"
  step 120 "$out/train_gpt.log" "$build/train_gpt" --world device --method ulysses --nodes 1 --gpus-per-node 2 --checkpoint full "${model[@]}"
  step 150 "$out/train_gpt.log" sh examples/train_gpt/launch_nccl.sh 2 "$build/train_gpt" --method hierarchical --nodes 1 \
    --gpus-per-node 2 "${model[@]}"
  grep -E "^loss|skipped" "$out/train_gpt.log"
fi
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
memcheck_s="${ZEPPELIN_GPU_MEMCHECK_S:-240}"
step "$memcheck_s" "$out/memcheck.log" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$build/tests/gpu/test_gpu" "[gpu]~[nccl]"
# NCCL's initialisation probes kernels its build has no image of (tests/gpu/CMakeLists.txt)
step "$memcheck_s" "$out/memcheck.log" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 --report-api-errors no \
  "$build/tests/gpu/test_gpu" "[gpu][nccl]"
grep -E "ERROR SUMMARY|LEAK SUMMARY|test cases" "$out/memcheck.log"
{ echo "== after the runs"; date -u; gpu_state; echo "== steps"; cat "$scratch/steps.log"; } >> "$out/env.log" 2>&1
echo "== summary"; cat "$scratch/steps.log"
grep -A3 "^pass ranks tokens_per_rank" "$out/ring_overlap.log"
cat "$out/bench.log" "$out/torch.log" | grep -vE "^== " | tail -n 45
