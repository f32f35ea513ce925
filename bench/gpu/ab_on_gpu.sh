#!/usr/bin/env bash
# One call on a GPU machine that checks a new build and compares it with an old one, most
# important first, within one deadline: the [gpu] tests of the new build; the device engine's
# host time per pass (bench_gpu_engine_host), new then old; the attention kernels, new bench
# (dumping its outputs), old bench and PyTorch's flash varlen on the same shapes, and the dump
# check against PyTorch; train_gpt's GPU training loop (--world device, several methods, loss
# parity with the one-rank run, tokens/s) when the new build holds train_gpt; the binding's CUDA
# tests; both attention benches again (a second pair shows the run's noise); last, memcheck of
# the attention, engine and graph cases (the slowest step: it gets what time is left). Steps
# that would pass the deadline are skipped, and say so.
# Usage (repository root): bench/gpu/ab_on_gpu.sh NEW_BUILD OLD [OUT_DIR]
#   NEW_BUILD  a build directory holding tests/gpu/test_gpu, bench/gpu/bench_gpu_attention,
#              bench/gpu/bench_gpu_engine_host, python/zeppelin_torch and, optionally,
#              train_gpt, for this GPU (configured with -DCMAKE_CUDA_ARCHITECTURES=90 and the
#              examples on, on another machine, say)
#   OLD        the old build's bench_gpu_attention binary, or a directory holding it and,
#              optionally, its bench_gpu_engine_host
# Environment: ZEPPELIN_GPU_DEADLINE_S (default 330): seconds the whole call may take.
set -u
new="$1"; old="$2"; out="${3:-${OUT:-/tmp/zeppelin-ab}}"
deadline="${ZEPPELIN_GPU_DEADLINE_S:-330}"
if [[ -d "$old" ]]; then old_attention="$old/bench_gpu_attention"; old_engine="$old/bench_gpu_engine_host"
else old_attention="$old"; old_engine=""; fi
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
  if (( limit < 10 )); then echo "$(basename "$log"): skipped, deadline" | tee -a "$scratch/steps.log"; return; fi
  local start=$SECONDS
  echo "== $*" >> "$log"
  timeout "$limit" "$@" >> "$log" 2>&1
  local rc=$?
  echo "$(basename "$log") ($(basename "$1") ${2:-} ${3:-}): exit $rc in $((SECONDS - start)) s" | tee -a "$scratch/steps.log"
}
step 90 "$out/test_gpu.log" "$new/tests/gpu/test_gpu" "[gpu]" --durations yes
grep -E "test cases|FAILED|failed" "$out/test_gpu.log" | tail -n 4
step 45 "$out/engine.log" "$new/bench/gpu/bench_gpu_engine_host"
[[ -x "$old_engine" ]] && step 45 "$out/engine_old.log" "$old_engine"
step 60 "$out/new1.log" "$new/bench/gpu/bench_gpu_attention" --shapes "$scratch/shapes.txt" --dump "$scratch/dump"
step 60 "$out/old1.log" "$old_attention"
step 70 "$out/torch.log" python3 bench/gpu/torch_attention.py bench "$scratch/shapes.txt"
step 40 "$out/check.log" python3 bench/gpu/torch_attention.py check "$scratch/dump"
tail -n 5 "$out/check.log"
if [[ -x "$new/train_gpt" ]]; then  # examples/train_gpt/CMakeLists.txt: the gpu-labelled cases
  model=(--dim 256 --heads 4 --kv-heads 2 --hidden 256 --tokens 512 --steps 20)
  step 60 "$out/train_gpt.log" "$new/train_gpt" --world device --method zeppelin --cluster a --nodes 2 --gpus-per-node 2 "${model[@]}"
  step 60 "$out/train_gpt.log" "$new/train_gpt" --world device --method te_cp --nodes 1 --gpus-per-node 4 "${model[@]}"
  step 60 "$out/train_gpt.log" "$new/train_gpt" --world device --method ulysses --nodes 1 --gpus-per-node 2 --checkpoint full "${model[@]}"
  step 60 "$out/train_gpt.log" "$new/train_gpt" --world device --method hybrid_dp --nodes 2 --gpus-per-node 2 "${model[@]}"
  grep -E "^loss|skipped" "$out/train_gpt.log"
fi
step 45 "$out/python_cuda.log" env PYTHONPATH="$new/python" PYTHONDONTWRITEBYTECODE=1 \
  python3 -m pytest -q -p no:cacheprovider python/tests/test_cuda.py
tail -n 1 "$out/python_cuda.log"
step 60 "$out/new2.log" "$new/bench/gpu/bench_gpu_attention"
step 60 "$out/old2.log" "$old_attention"
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
step 240 "$out/memcheck.log" "$sanitizer" --tool memcheck --leak-check full --error-exitcode 1 "$new/tests/gpu/test_gpu" \
  "[attention]~[nccl],[graph],device engine: passes repeated*"
grep -E "ERROR SUMMARY|LEAK SUMMARY|test cases" "$out/memcheck.log"
nvidia-smi --query-gpu=clocks.sm,power.draw,pstate,temperature.gpu --format=csv >> "$out/env.log" 2>&1
echo "== steps"; cat "$scratch/steps.log"
for log in engine engine_old; do [[ -f "$out/$log.log" ]] && { echo "== $log"; grep -vE "^== " "$out/$log.log" | tail -n 14; }; done
for log in new1 old1 torch; do echo "== $log"; grep -vE "^(==|gather|scatter|cudaMemcpy|cub_|vectorized)" "$out/$log.log" | head -n 20; done
