#!/bin/sh
# launch_nccl.sh RANKS TRAIN_GPT [ARG...]
# Starts the RANKS processes of `train_gpt --world nccl` on this node (rank r on GPU r), with a
# fresh --id-file in a temporary directory, and waits for all of them. On several nodes, start
# each node's processes the same way with --rank node * gpus-per-node + r and one --id-file
# that every node sees (a shared file system), which must not exist before the run.
# Exit status: 0 when every rank exited 0; else the first non-zero status in rank order (77:
# the machine lacks the GPUs).
set -u
ranks=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
pids=""
r=0
while [ "$r" -lt "$ranks" ]; do
  "$@" --world nccl --rank "$r" --id-file "$dir/nccl_id" &
  pids="$pids $!"
  r=$((r + 1))
done
status=0
for pid in $pids; do
  wait "$pid"
  s=$?
  if [ "$status" -eq 0 ] && [ "$s" -ne 0 ]; then status=$s; fi
done
exit "$status"
