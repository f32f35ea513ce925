"""zeppelin's attention kernels as a torch autograd function: causal attention over whole
sequences packed back to back (cu_seqlens), with GQA, on the CPU (host kernels, float32 /
float64) or a GPU (CUDA kernels, bfloat16 / float16, head dim 64 or 128).
Layouts: q, o [rows, heads, dim]; k, v [rows, kv_heads, dim]; lse [heads, rows] (natural log).
"""
import torch

from . import _checks
from .kernels import kernels_for


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bounds, scale, kernels):
        o, lse = kernels.varlen_forward(q, k, v, bounds, scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.bounds, ctx.scale, ctx.kernels = bounds, scale, kernels
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = ctx.kernels.varlen_backward(q, k, v, o, d_o.contiguous(), lse, ctx.bounds, ctx.scale)
        return dq, dk, dv, None, None, None


def check_scale(scale):
    """The softmax scale: a finite number >= 0 (0: 1 / sqrt(head_dim))."""
    return _checks.non_negative_number("scale", scale)


def varlen_attention(q, k, v, cu_seqlens, *, scale=0.0, return_lse=False):
    """Causal attention of each sequence packed in q, k, v (rows [cu_seqlens[i], cu_seqlens[i+1])
    are sequence i, positions from 0), with GQA; scale 0 means 1/sqrt(head_dim). Returns O
    [rows, heads, dim] (and LSE [heads, rows] when return_lse). Contiguous tensors; differentiable
    in q, k, v."""
    _checks.qkv(q, k, v)
    kernels = kernels_for(q)
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point:
        raise TypeError("cu_seqlens must be a 1-D integer tensor")
    cu = [int(x) for x in cu_seqlens.tolist()]
    if len(cu) < 1 or cu[0] != 0 or cu[-1] != q.shape[0] or any(b > e for b, e in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must rise from 0 to q's {q.shape[0]} rows, got {cu[:8]}{'...' if len(cu) > 8 else ''}")
    bounds = [(b, e) for b, e in zip(cu, cu[1:]) if e > b]
    o, lse = _VarlenAttention.apply(q, k, v, bounds, check_scale(scale), kernels)
    return (o, lse) if return_lse else o
