"""zeppelin's host attention kernels as torch autograd functions.

block_forward / block_backward run one block (query positions x key positions of one
sequence, causal by position, GQA) through the C ABI; varlen_attention is causal attention
over whole sequences packed back to back (cu_seqlens), differentiable.
Layouts: q, o [rows, heads, dim]; k, v [rows, kv_heads, dim]; lse [heads, rows] (natural log).
"""
import torch

from . import _capi, _checks


def _ptr(t, row=0, row_elems=None):
    """Address of row `row` of a contiguous tensor (row = first dimension)."""
    step = row_elems if row_elems is not None else (t[0].numel() if t.dim() > 1 else 1)
    return t.data_ptr() + row * step * t.element_size()


def block_forward(q, k, v, o, lse, lse_stride, q_range, k_range, scale=0.0):
    """O and LSE of one block, overwritten: q, o are the block's query rows, k, v its key rows
    (contiguous views); lse the address's [heads][lse_stride] slice as (tensor, first column)."""
    lse_t, col = lse
    _capi.call(
        _capi.lib.zeppelin_attention_forward,
        _checks.FLOAT_DTYPES[q.dtype], q.shape[1], k.shape[1], q.shape[2], float(scale),
        q_range[0], q_range[1], k_range[0], k_range[1],
        q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), _ptr(lse_t, col, 1), lse_stride,
    )


def block_backward(q, k, v, o, d_o, lse, lse_stride, dq, dk, dv, q_range, k_range, scale=0.0):
    """Adds one block's gradients into dq, dk, dv (contiguous views), from the GLOBAL o, d_o, lse."""
    lse_t, col = lse
    _capi.call(
        _capi.lib.zeppelin_attention_backward,
        _checks.FLOAT_DTYPES[q.dtype], q.shape[1], k.shape[1], q.shape[2], float(scale),
        q_range[0], q_range[1], k_range[0], k_range[1],
        q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), d_o.data_ptr(), _ptr(lse_t, col, 1), lse_stride,
        dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
    )


def merge(o_acc, lse_acc, col, o_blk, lse_blk):
    """Merges a block's (o_blk [rows, H, D], lse_blk [H, rows]) into o_acc (the same rows) and
    the columns [col, col + rows) of lse_acc [H, n] by log-sum-exp."""
    _capi.call(
        _capi.lib.zeppelin_lse_merge,
        _checks.FLOAT_DTYPES[o_acc.dtype], o_blk.shape[0], o_blk.shape[1], o_blk.shape[2],
        o_acc.data_ptr(), _ptr(lse_acc, col, 1), lse_acc.shape[1], o_blk.data_ptr(), lse_blk.data_ptr(), lse_blk.shape[1],
    )


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bounds, scale):
        n, heads = q.shape[0], q.shape[1]
        o = torch.zeros_like(q)
        lse = torch.full((heads, n), float("-inf"), dtype=q.dtype)
        for b, e in bounds:
            block_forward(q[b:e], k[b:e], v[b:e], o[b:e], (lse, b), n, (0, e - b), (0, e - b), scale)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.bounds, ctx.scale = bounds, scale
        ctx.mark_non_differentiable(lse)
        return o, lse

    @staticmethod
    def backward(ctx, d_o, _dlse):
        q, k, v, o, lse = ctx.saved_tensors
        d_o = d_o.contiguous()
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        n = q.shape[0]
        for b, e in ctx.bounds:
            block_backward(q[b:e], k[b:e], v[b:e], o[b:e], d_o[b:e], (lse, b), n, dq[b:e], dk[b:e], dv[b:e],
                           (0, e - b), (0, e - b), ctx.scale)
        return dq, dk, dv, None, None


def varlen_attention(q, k, v, cu_seqlens, *, scale=0.0, return_lse=False):
    """Causal attention of each sequence packed in q, k, v (rows [cu_seqlens[i], cu_seqlens[i+1])
    are sequence i, positions from 0), with GQA; scale 0 means 1/sqrt(head_dim). Returns O
    [rows, heads, dim] (and LSE [heads, rows] when return_lse). CPU float32 / float64,
    contiguous tensors; differentiable in q, k, v."""
    _checks.qkv(q, k, v)
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.dtype.is_floating_point:
        raise TypeError("cu_seqlens must be a 1-D integer tensor")
    cu = [int(x) for x in cu_seqlens.tolist()]
    if len(cu) < 1 or cu[0] != 0 or cu[-1] != q.shape[0] or any(b > e for b, e in zip(cu, cu[1:])):
        raise ValueError(f"cu_seqlens must rise from 0 to q's {q.shape[0]} rows, got {cu[:8]}{'...' if len(cu) > 8 else ''}")
    if not (isinstance(scale, (int, float)) and scale >= 0 and scale == scale and scale != float("inf")):
        raise ValueError(f"scale must be a finite float >= 0 (0: 1/sqrt(head_dim)), got {scale}")
    bounds = [(b, e) for b, e in zip(cu, cu[1:]) if e > b]
    o, lse = _VarlenAttention.apply(q, k, v, bounds, float(scale))
    return (o, lse) if return_lse else o
