#!/usr/bin/env python3
"""A small GPT trained with torch.distributed (gloo, CPU processes) on zeppelin's plans.

Each step: sample documents of random lengths from a synthetic token stream; plan them with a
zeppelin partitioner or the cost-driven planner (the same plan on every rank: the fingerprints
are compared); dispatch
each rank's tokens to its token-balanced (linear) layout; per layer, project Q, K, V there,
move them to the attention layout (zeppelin_torch.relayout, inverse), run zeppelin's
distributed causal attention (ring_attention: rotary positions per document, GQA), move O back;
sum the cross-entropy of every rank's tokens, all-reduce the gradients and step AdamW.
The same loop on one process is the reference: the loss curves must agree (fp64: 1e-10 per
step). Prints one line per step (a progress line on a terminal) and, last,
`loss parity: max |loss - reference| = X over S steps`; exits 1 when X breaks the tolerance.

    PYTHONPATH=<build>/python python3 examples/torch_train.py --world 4 --nodes 2 --steps 20
"""
import argparse
import math
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

import zeppelin_torch as zt


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wkv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x, step):
        n = x.shape[0]
        q = self.wq(x).view(n, self.heads, self.head_dim)
        k, v = self.wkv(x).view(n, 2, self.kv_heads, self.head_dim).unbind(1)
        q, k = rotary(q, step.positions), rotary(k, step.positions)
        # linear layout -> attention layout, distributed attention, and back
        q, k, v = (zt.relayout(t.contiguous(), step.relayout, inverse=True) for t in (q, k, v))
        o = zt.ring_attention(q, k, v, step.schedule)
        o = zt.relayout(o, step.relayout)
        return self.wo(o.reshape(n, -1))


def rotary(x, positions, base=10000.0):
    """Rotary position embedding by each token's position in its own document."""
    half = x.shape[-1] // 2
    freqs = base ** (-torch.arange(half, dtype=x.dtype) / half)
    angles = positions.to(x.dtype)[:, None, None] * freqs
    cos, sin = angles.cos(), angles.sin()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(dim), RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim, bias=False), nn.GELU(), nn.Linear(4 * dim, dim, bias=False))

    def forward(self, x, step):
        x = x + self.attn(self.norm1(x), step)
        return x + self.mlp(self.norm2(x))


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, kv_heads, layers):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, kv_heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens, step):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, step)
        return self.head(self.norm(x))


class Step:
    """What one rank needs of a step's plan: its attention schedule and the relayout between
    its attention layout and its token-balanced (linear) layout."""

    def __init__(self, plan, rank):
        self.schedule = zt.RankSchedule(plan, rank)
        self.relayout = plan.relayout().rank(rank)
        self.positions = self.relayout.target.positions


def sample_batch(step, args):
    """Documents of a synthetic language: each continues a random start by a fixed rule
    (next = (3 * token + doc) mod vocab, with noise), so the loss can fall."""
    g = torch.Generator().manual_seed(args.seed * 1000 + step)
    docs = int(torch.randint(args.min_docs, args.max_docs + 1, (1,), generator=g))
    lengths = torch.randint(8, args.max_length + 1, (docs,), generator=g)
    tokens, targets = [], []
    for d, n in enumerate(lengths.tolist()):
        t = torch.empty(n + 1, dtype=torch.int64)
        t[0] = torch.randint(args.vocab, (1,), generator=g)
        noise = torch.rand(n, generator=g) < 0.1
        for i in range(n):
            t[i + 1] = int(torch.randint(args.vocab, (1,), generator=g)) if noise[i] else (3 * int(t[i]) + d) % args.vocab
        tokens.append(t[:-1])
        targets.append(t[1:])
    return lengths, torch.cat(tokens), torch.cat(targets)


def train(rank, world, args, out_path):
    torch.manual_seed(args.seed)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    model = GPT(args.vocab, args.dim, args.heads, args.kv_heads, args.layers).to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    losses = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        lengths, tokens, targets = sample_batch(step, args)
        nodes = args.nodes if world > 1 else 1
        if args.partitioner == "cost-driven":  # Zeppelin's planner: every candidate layout priced by the simulator
            plan = zt.plan_by_cost(lengths, nodes=nodes, gpus_per_node=world // nodes, model="7b")
        else:
            plan = zt.plan(lengths, nodes=nodes, gpus_per_node=world // nodes, partitioner=args.partitioner)
        fingerprints = [None] * world
        dist.all_gather_object(fingerprints, plan.fingerprint)
        if len(set(fingerprints)) != 1:
            raise RuntimeError(f"ranks planned differently: fingerprints {fingerprints}")
        s = Step(plan, rank)
        logits = model(s.relayout.target.dispatch(tokens), s)
        local = F.cross_entropy(logits, s.relayout.target.dispatch(targets), reduction="sum")
        (local / tokens.numel()).backward()
        total = local.detach().clone()
        dist.all_reduce(total)
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = total.item() / tokens.numel()
        losses.append(loss)
        if rank == 0 and args.verbose:
            rate = tokens.numel() / (time.perf_counter() - t0)
            line = f"step {step + 1:3d}/{args.steps}  loss {loss:.6f}  {rate:8.0f} tokens/s  ({world} rank(s), {plan.partitioner})"
            print(("\r" + line) if sys.stdout.isatty() else line, end="" if sys.stdout.isatty() else "\n", flush=True)
    if rank == 0 and args.verbose and sys.stdout.isatty():
        print()
    if rank == 0:
        torch.save(losses, out_path)


def _process(rank, world, store, args, out_path):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        train(rank, world, args, out_path)
    finally:
        dist.destroy_process_group()


def run(world, args, verbose):
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "losses.pt")
        args.verbose = verbose
        mp.start_processes(_process, args=(world, os.path.join(tmp, "store"), args, out_path), nprocs=world,
                           start_method="fork")
        return torch.load(out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=4, help="processes (ranks), at least 1")
    ap.add_argument("--nodes", type=int, default=2, help="nodes of the plan's cluster; divides --world")
    ap.add_argument("--partitioner", default="hierarchical",
                    help="a partitioner (hierarchical, even_split, allgather, hybrid_dp, per_document, ulysses) or "
                    "cost-driven (zeppelin_torch.plan_by_cost)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--min-docs", type=int, default=2)
    ap.add_argument("--max-docs", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=160)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    for name in ("world", "nodes", "steps", "vocab", "dim", "heads", "kv_heads", "layers", "min_docs", "max_length"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.world % args.nodes:
        ap.error(f"--nodes ({args.nodes}) must divide --world ({args.world})")
    if args.dim % args.heads or args.heads % args.kv_heads or (args.dim // args.heads) % 2:
        ap.error("--heads must divide --dim into even head sizes, and --kv-heads must divide --heads")
    if args.max_docs < args.min_docs:
        ap.error("--max-docs must be >= --min-docs")
    reference = run(1, args, verbose=False)
    losses = run(args.world, args, verbose=True)
    worst = max(abs(a - b) for a, b in zip(losses, reference))
    print(f"loss: first {losses[0]:.6f}, last {losses[-1]:.6f}")
    print(f"loss parity: max |loss - reference| = {worst:.3e} over {args.steps} steps")
    tolerance = 1e-10 if args.dtype == "float64" else 1e-4
    if not worst <= tolerance:
        print(f"torch_train: loss parity broken: {worst:.3e} > {tolerance:.0e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
