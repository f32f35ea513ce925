#!/usr/bin/env python3
"""PyTorch side of the GPU bench (run on the GPU machine, next to bench_gpu_attention).

  torch_attention.py bench SHAPES   times PyTorch's varlen flash attention (forward, and
                                    forward + backward minus forward) on the shapes that
                                    `bench_gpu_attention --shapes SHAPES` wrote; prints TFLOP/s
                                    with the same FLOP convention (4 * causal pairs * heads * D
                                    forward, 2.5x that backward)
  torch_attention.py check DIR      compares `bench_gpu_attention --dump DIR` outputs (O, LSE,
                                    dQ, dK, dV) with an fp32 PyTorch reference (SDPA per
                                    sequence, GQA by repeating K/V heads); exits 1 past tolerance

Varlen flash: torch.ops.aten._flash_attention_forward/_backward with cu_seqlens (the kernel
behind SDPA's flash path); where that op is missing, SDPA per sequence with the flash backend.
"""
import sys

import torch
import torch.nn.functional as F


def causal_pairs(n):
    return n * (n + 1) // 2


def varlen_inputs(lengths, heads, kv_heads, dim, dtype):
    total = sum(lengths)
    q = torch.randn(total, heads, dim, device="cuda", dtype=dtype)
    k = torch.randn(total, kv_heads, dim, device="cuda", dtype=dtype)
    v = torch.randn(total, kv_heads, dim, device="cuda", dtype=dtype)
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32, device="cuda")
    cu[1:] = torch.tensor(lengths, device="cuda").cumsum(0)
    return q, k, v, cu


def flash_varlen(q, k, v, cu, max_len, scale):
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, True, False, scale=scale)
    return out[0], out


def sdpa_per_sequence(q, k, v, lengths, scale, backend=None):
    outs, start = [], 0
    group = q.shape[1] // k.shape[1]
    for n in lengths:
        qs = q[start:start + n].transpose(0, 1).unsqueeze(0)
        ks = k[start:start + n].repeat_interleave(group, 1).transpose(0, 1).unsqueeze(0)
        vs = v[start:start + n].repeat_interleave(group, 1).transpose(0, 1).unsqueeze(0)
        if backend is None:
            o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)
        else:
            with torch.nn.attention.sdpa_kernel(backend):
                o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)
        outs.append(o.squeeze(0).transpose(0, 1))
        start += n
    return torch.cat(outs, 0)


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def bench(shapes_file):
    print(f"{'dataset':11s} {'total':>7s} {'seqs':>6s} {'fwd TF/s':>10s} {'bwd TF/s':>10s}  path")
    for line in open(shapes_file):
        name, total, heads, kv_heads, dim, lens = line.split()
        heads, kv_heads, dim = int(heads), int(kv_heads), int(dim)
        lengths = [int(x) for x in lens.split(",")]
        q, k, v, cu = varlen_inputs(lengths, heads, kv_heads, dim, torch.bfloat16)
        scale = dim ** -0.5
        max_len = max(lengths)
        pairs = sum(causal_pairs(n) for n in lengths)
        fwd_flops = 4.0 * pairs * heads * dim
        try:
            flash_varlen(q, k, v, cu, max_len, scale)
            path = "flash varlen"
            fwd = lambda: flash_varlen(q, k, v, cu, max_len, scale)
        except (RuntimeError, AttributeError):
            path = "sdpa per sequence"
            fwd = lambda: sdpa_per_sequence(q, k, v, lengths, scale, torch.nn.attention.SDPBackend.FLASH_ATTENTION)
        fwd_ms = median_ms(fwd)
        qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
        do = torch.randn_like(q)

        def fwd_bwd():
            if path == "flash varlen":
                o, _ = flash_varlen(qg, kg, vg, cu, max_len, scale)
            else:
                o = sdpa_per_sequence(qg, kg, vg, lengths, scale, torch.nn.attention.SDPBackend.FLASH_ATTENTION)
            torch.autograd.grad(o, (qg, kg, vg), do)

        try:
            bwd_ms = max(median_ms(fwd_bwd) - fwd_ms, 1e-6)
            bwd_tf = 2.5 * fwd_flops / (bwd_ms * 1e-3) / 1e12
        except RuntimeError as e:  # an op without autograd support on this torch build
            print(f"  backward unavailable: {e}", file=sys.stderr)
            bwd_tf = float("nan")
        print(f"{name:11s} {int(total):7d} {len(lengths):6d} {fwd_flops / (fwd_ms * 1e-3) / 1e12:10.1f} {bwd_tf:10.1f}  {path}")
        del q, k, v, qg, kg, vg, do
        torch.cuda.empty_cache()


def check(dump_dir):
    meta = open(f"{dump_dir}/meta.txt").read().split()
    dtype = torch.bfloat16 if meta[0] == "bf16" else torch.float16
    heads, kv_heads, dim = int(meta[1]), int(meta[2]), int(meta[3])
    lengths = [int(x) for x in meta[4].split(",")]
    total = sum(lengths)

    def load(name, shape, dt):
        raw = torch.from_file(f"{dump_dir}/{name}.bin", size=torch.Size(shape).numel(), dtype=dt)
        return raw.reshape(shape).cuda()

    q, o, do, dq = (load(n, (total, heads, dim), dtype) for n in ("q", "o", "do", "dq"))
    k, v, dk, dv = (load(n, (total, kv_heads, dim), dtype) for n in ("k", "v", "dk", "dv"))
    lse = load("lse", (heads, total), torch.float32)
    scale = dim ** -0.5
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    ref_o = sdpa_per_sequence(qf, kf, vf, lengths, scale)
    ref_dq, ref_dk, ref_dv = torch.autograd.grad(ref_o, (qf, kf, vf), do.float())
    ref_lse, start = torch.empty(heads, total, device="cuda"), 0
    group = heads // kv_heads
    with torch.no_grad():
        for n in lengths:
            causal = torch.ones(n, n, device="cuda", dtype=torch.bool).triu(1)
            for h in range(heads):  # one head at a time bounds the n x n scores
                s = (qf[start:start + n, h] @ kf[start:start + n, h // group].T) * scale
                ref_lse[h, start:start + n] = torch.logsumexp(s.masked_fill(causal, float("-inf")), -1)
            start += n

    def rel(a, b):
        return ((a.float() - b.float()).norm() / b.float().norm()).item()

    tol_fwd, tol_bwd = (2e-2, 5e-2) if dtype == torch.bfloat16 else (5e-3, 1.5e-2)
    results = {"O": (rel(o, ref_o), tol_fwd), "LSE": (rel(lse, ref_lse), 1e-3), "dQ": (rel(dq, ref_dq), tol_bwd),
               "dK": (rel(dk, ref_dk), tol_bwd), "dV": (rel(dv, ref_dv), tol_bwd)}
    ok = True
    for name, (err, tol) in results.items():
        print(f"{name:4s} relative L2 error {err:.3e} (tolerance {tol:.0e}) {'ok' if err < tol else 'FAIL'}")
        ok = ok and err < tol
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("bench", "check"):
        print(__doc__)
        sys.exit(2)
    sys.exit(bench(sys.argv[2]) if sys.argv[1] == "bench" else check(sys.argv[2]))
