#!/usr/bin/env bash
# One call on a GPU machine that compares two builds of the attention kernels: the [gpu] tests
# of the new build, then the new bench, the old bench and PyTorch's flash varlen on the same
# shapes, the check of the new build's dumped outputs against PyTorch, the binding's CUDA
# tests, both benches again (a second pair shows the run's noise), and memcheck of the
# attention cases. Steps that would pass the call's own deadline are skipped, and say so.
# Usage (repository root): bench/gpu/ab_on_gpu.sh NEW_BUILD OLD_BENCH [OUT_DIR]
#   NEW_BUILD  a build directory holding tests/gpu/test_gpu, bench/gpu/bench_gpu_attention and
#              python/zeppelin_torch for this GPU (configured with -DCMAKE_CUDA_ARCHITECTURES=90
#              on another machine, say)
#   OLD_BENCH  the bench_gpu_attention binary of the build to compare with
# Environment: ZEPPELIN_GPU_DEADLINE_S (default 330): seconds the whole call may take.
set -u
new="$1"; old="$2"; out="${3:-${OUT:-/tmp/zeppelin-ab}}"
deadline="${ZEPPELIN_GPU_DEADLINE_S:-330}"
mkdir -p "$out"; scratch=$(mktemp -d); mkdir -p "$scratch/dump"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,pstate --format=csv > "$out/env.log" 2>&1
python3 -c 'import torch; print("torch", torch.__version__)' >> "$out/env.log" 2>&1
if ! ldconfig -p | grep -q libnccl.so.2; then  # the NCCL the tests link: the first one found
  nccl=$(find /usr/local/cuda* /opt /usr/lib -name 'libnccl.so.2' 2>/dev/null | head -1)
  [[ -n "$nccl" ]] && export LD_LIBRARY_PATH="$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
step() {  # step LIMIT LOG COMMAND...: COMMAND under min(LIMIT, time left), output appended to LOG
  local limit=$1 log=$2; shift 2
  (( SECONDS + limit > deadline )) && limit=$((deadline - SECONDS))
  if (( limit < 10 )); then echo "$(basename "$log"): skipped, deadline"; return; fi
  local start=$SECONDS
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "$(basename "$log"): exit $rc in $((SECONDS - start)) s"
}
step 60 "$out/test_gpu.log" "$new/tests/gpu/test_gpu" "[gpu]"
tail -n 2 "$out/test_gpu.log"
step 60 "$out/new1.log" "$new/bench/gpu/bench_gpu_attention" --shapes "$scratch/shapes.txt" --dump "$scratch/dump"
step 60 "$out/old1.log" "$old"
step 70 "$out/torch.log" python3 bench/gpu/torch_attention.py bench "$scratch/shapes.txt"
step 40 "$out/check.log" python3 bench/gpu/torch_attention.py check "$scratch/dump"
tail -n 5 "$out/check.log"
step 45 "$out/python_cuda.log" env PYTHONPATH="$new/python" PYTHONDONTWRITEBYTECODE=1 \
  python3 -m pytest -q -p no:cacheprovider python/tests/test_cuda.py
step 60 "$out/new2.log" "$new/bench/gpu/bench_gpu_attention"
step 60 "$out/old2.log" "$old"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step 100 "$out/memcheck.log" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$new/tests/gpu/test_gpu" "[attention]~[nccl]"
grep -E "ERROR SUMMARY|LEAK SUMMARY" "$out/memcheck.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,pstate,temperature.gpu --format=csv >> "$out/env.log" 2>&1
for log in new1 old1 torch; do echo "== $log"; grep -vE "^(gather|scatter|cudaMemcpy|cub_|vectorized)" "$out/$log.log" | head -n 20; done
