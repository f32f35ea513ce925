"""Runs a function on N forked CPU processes joined by torch.distributed (gloo) and returns
what each rank returned. Fork (not spawn): the function may be a test module's, and no CUDA
is involved. A rank that raises fails the whole run with its traceback."""
import os
import pickle
import tempfile
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _rank_main(rank, world, store_dir, fn, args):
    out = os.path.join(store_dir, f"rank{rank}.pkl")
    try:
        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{store_dir}/store", rank=rank, world_size=world)
        result = ("ok", fn(rank, world, *args))
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:  # noqa: BLE001 - report everything to the parent
        result = ("error", traceback.format_exc())
    with open(out, "wb") as f:
        pickle.dump(result, f)


def run_world(world, fn, *args, timeout=300):
    with tempfile.TemporaryDirectory() as store_dir:
        ctx = mp.start_processes(_rank_main, args=(world, store_dir, fn, args), nprocs=world, join=False, start_method="fork")
        if not ctx.join(timeout) and not all(p.exitcode is not None for p in ctx.processes):
            while not ctx.join(timeout):
                pass
        results = []
        for rank in range(world):
            path = os.path.join(store_dir, f"rank{rank}.pkl")
            if not os.path.exists(path):
                raise RuntimeError(f"rank {rank} left no result (exit code {ctx.processes[rank].exitcode})")
            with open(path, "rb") as f:
                status, value = pickle.load(f)
            if status != "ok":
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            results.append(value)
        return results
