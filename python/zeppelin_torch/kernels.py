"""The attention kernels behind the torch functions, one policy per device.

HostKernels runs zeppelin's host kernels (CPU float32 / float64, any head size) and merges by
the library's LSE merge; CudaKernels runs zeppelin's CUDA kernels (bfloat16 / float16, head
dim 64 or 128; a libzeppelin_capi built with CUDA) and merges with torch ops. Both offer:
    check(q)                             raises naming the dtype or device it cannot run
    acc_dtype(dtype)                     the dtype O, dQ, dK, dV accumulate in
    forward_block(q, k, v, qr, kr, s)    (O block [rows, H, D], LSE [H, rows]) of one block:
                                         q, k, v contiguous row views, qr / kr position ranges
    merge(o_acc, lse_acc, col, o, lse)   o_acc (the block's rows) and lse_acc[:, col:col+rows]
                                         absorb the block by log-sum-exp
    prepare_backward(o, d_o)             per-call state of the backward (CUDA: delta)
    backward_block(...)                  adds one block's dQ, dK, dV into accumulator views
    varlen_forward / varlen_backward     whole packed sequences in one call
"""
import ctypes

import torch

from . import _capi, _checks


def merge_by_lse(o_acc, lse_acc, col, o_blk, lse_blk):
    """LSE merge with torch ops (any device), as the library's merge: a -inf side contributes
    nothing, and a row -inf on both sides keeps the accumulator; never NaN."""
    rows = o_blk.shape[0]
    a = lse_acc[:, col : col + rows]
    m = torch.maximum(a, lse_blk)
    m0 = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    wa, wb = torch.exp(a - m0), torch.exp(lse_blk - m0)
    total = wa + wb
    seen = total > 0
    scale_a = torch.where(seen, wa / torch.where(seen, total, torch.ones_like(total)), torch.ones_like(total))
    scale_b = torch.where(seen, wb / torch.where(seen, total, torch.ones_like(total)), torch.zeros_like(total))
    o_acc.mul_(scale_a.t().unsqueeze(-1)).add_(o_blk * scale_b.t().unsqueeze(-1))
    lse_acc[:, col : col + rows] = torch.where(seen, m0 + torch.log(torch.where(seen, total, torch.ones_like(total))), m)


def _address(t, first_column=0):
    return t.data_ptr() + first_column * t.element_size()


class HostKernels:
    name = "host"

    @staticmethod
    def check(q):
        if q.device.type != "cpu":
            raise ValueError(f"q must be on the CPU for the host kernels, got device {q.device}")
        if q.dtype not in _checks.FLOAT_DTYPES:
            raise TypeError(f"q must be float32 or float64 on the CPU, got {q.dtype}")

    @staticmethod
    def acc_dtype(dtype):
        return dtype

    @staticmethod
    def forward_block(q, k, v, q_range, k_range, scale):
        rows = q.shape[0]
        o = q.new_empty(q.shape)
        lse = q.new_empty((q.shape[1], rows))
        _capi.call(
            _capi.lib.zeppelin_attention_forward,
            _checks.FLOAT_DTYPES[q.dtype], q.shape[1], k.shape[1], q.shape[2], float(scale),
            q_range[0], q_range[1], k_range[0], k_range[1],
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), rows,
        )
        return o, lse

    @staticmethod
    def merge(o_acc, lse_acc, col, o_blk, lse_blk):
        _capi.call(
            _capi.lib.zeppelin_lse_merge,
            _checks.FLOAT_DTYPES[o_acc.dtype], o_blk.shape[0], o_blk.shape[1], o_blk.shape[2],
            o_acc.data_ptr(), _address(lse_acc, col), lse_acc.shape[1], o_blk.data_ptr(), lse_blk.data_ptr(), lse_blk.shape[1],
        )

    @staticmethod
    def prepare_backward(o, d_o):
        return None

    @staticmethod
    def backward_block(q, k, v, o, d_o, lse, col, dq, dk, dv, q_range, k_range, scale, prepared):
        """q, o, d_o, dq: the block's query rows; lse: [H, n] global, its rows from `col`."""
        _capi.call(
            _capi.lib.zeppelin_attention_backward,
            _checks.FLOAT_DTYPES[q.dtype], q.shape[1], k.shape[1], q.shape[2], float(scale),
            q_range[0], q_range[1], k_range[0], k_range[1],
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), d_o.data_ptr(), _address(lse, col), lse.shape[1],
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        )

    @classmethod
    def varlen_forward(cls, q, k, v, bounds, scale):
        n, heads = q.shape[0], q.shape[1]
        o = torch.zeros_like(q)
        lse = torch.full((heads, n), float("-inf"), dtype=q.dtype)
        for b, e in bounds:
            ob, lb = cls.forward_block(q[b:e], k[b:e], v[b:e], (0, e - b), (0, e - b), scale)
            o[b:e] = ob
            lse[:, b:e] = lb
        return o, lse

    @classmethod
    def varlen_backward(cls, q, k, v, o, d_o, lse, bounds, scale):
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for b, e in bounds:
            cls.backward_block(q[b:e], k[b:e], v[b:e], o[b:e], d_o[b:e], lse, b, dq[b:e], dk[b:e], dv[b:e],
                               (0, e - b), (0, e - b), scale, None)
        return dq, dk, dv


CUDA_DTYPES = {torch.bfloat16: 2, torch.float16: 3}
CUDA_HEAD_DIMS = (64, 128)


class CudaKernels:
    name = "cuda"

    @staticmethod
    def check(q):
        if not _capi.lib.zeppelin_capi_has_cuda():
            raise ValueError(f"q is on {q.device}, but this libzeppelin_capi was built without CUDA")
        if q.dtype not in CUDA_DTYPES:
            raise TypeError(f"q must be bfloat16 or float16 on a GPU, got {q.dtype}")
        if q.shape[2] not in CUDA_HEAD_DIMS:
            raise ValueError(f"q must have head_dim 64 or 128 on a GPU, got {q.shape[2]}")

    @staticmethod
    def acc_dtype(dtype):
        return torch.float32

    @staticmethod
    def _stream(t):
        return ctypes.c_void_p(torch.cuda.current_stream(t.device).cuda_stream)

    @staticmethod
    def _csr(device, q_rows, k_rows, q_begin=0, k_begin=0):
        cu = torch.tensor([[0, q_rows], [0, k_rows]], dtype=torch.int32, device=device)
        offsets = torch.tensor([q_begin, k_begin], dtype=torch.int64, device=device)
        return cu, offsets

    @classmethod
    def forward_block(cls, q, k, v, q_range, k_range, scale):
        rows, heads = q.shape[0], q.shape[1]
        o = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        lse = torch.empty((heads, rows), dtype=torch.float32, device=q.device)
        cu, off = cls._csr(q.device, rows, k.shape[0], q_range[0], k_range[0])
        _capi.call(
            _capi.lib.zeppelin_cuda_attention_forward,
            CUDA_DTYPES[q.dtype], heads, k.shape[1], q.shape[2], float(scale), 1,
            cu[0].data_ptr(), cu[1].data_ptr(), off[0:1].data_ptr(), off[1:2].data_ptr(), rows, rows,
            q.data_ptr(), k.data_ptr(), v.data_ptr(), None, o.data_ptr(), lse.data_ptr(), rows, cls._stream(q),
        )
        return o, lse

    merge = staticmethod(merge_by_lse)

    @classmethod
    def prepare_backward(cls, o, d_o):
        delta = torch.empty((o.shape[1], o.shape[0]), dtype=torch.float32, device=o.device)
        _capi.call(
            _capi.lib.zeppelin_cuda_attention_preprocess,
            CUDA_DTYPES[o.dtype], o.shape[0], o.shape[1], o.shape[2], o.data_ptr(), d_o.data_ptr(), delta.data_ptr(),
            o.shape[0], cls._stream(o),
        )
        return delta

    @classmethod
    def backward_block(cls, q, k, v, o, d_o, lse, col, dq, dk, dv, q_range, k_range, scale, delta):
        rows = q.shape[0]
        cu, off = cls._csr(q.device, rows, k.shape[0], q_range[0], k_range[0])
        _capi.call(
            _capi.lib.zeppelin_cuda_attention_backward,
            CUDA_DTYPES[q.dtype], q.shape[1], k.shape[1], q.shape[2], float(scale), 1,
            cu[0].data_ptr(), cu[1].data_ptr(), off[0:1].data_ptr(), off[1:2].data_ptr(), k.shape[0], rows,
            q.data_ptr(), k.data_ptr(), v.data_ptr(), d_o.data_ptr(), _address(lse, col), _address(delta, col), lse.shape[1],
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), cls._stream(q),
        )

    @classmethod
    def varlen_forward(cls, q, k, v, bounds, scale):
        n, heads = q.shape[0], q.shape[1]
        o = torch.zeros_like(q)
        lse = torch.full((heads, n), float("-inf"), dtype=torch.float32, device=q.device)
        if bounds:  # consecutive non-empty sequences: block i is rows [cu[i], cu[i + 1])
            cu = torch.tensor([bounds[0][0]] + [e for _, e in bounds], dtype=torch.int32, device=q.device)
            _capi.call(
                _capi.lib.zeppelin_cuda_attention_forward,
                CUDA_DTYPES[q.dtype], heads, k.shape[1], q.shape[2], float(scale), len(bounds),
                cu.data_ptr(), cu.data_ptr(), None, None, max(e - b for b, e in bounds), n,
                q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), None, lse.data_ptr(), n, cls._stream(q),
            )
        return o, lse

    @classmethod
    def varlen_backward(cls, q, k, v, o, d_o, lse, bounds, scale):
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
        if bounds:
            delta = cls.prepare_backward(o, d_o)
            cu = torch.tensor([bounds[0][0]] + [e for _, e in bounds], dtype=torch.int32, device=q.device)
            _capi.call(
                _capi.lib.zeppelin_cuda_attention_backward,
                CUDA_DTYPES[q.dtype], q.shape[1], k.shape[1], q.shape[2], float(scale), len(bounds),
                cu.data_ptr(), cu.data_ptr(), None, None, max(e - b for b, e in bounds), q.shape[0],
                q.data_ptr(), k.data_ptr(), v.data_ptr(), d_o.data_ptr(), lse.data_ptr(), delta.data_ptr(), q.shape[0],
                dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), cls._stream(q),
            )
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def kernels_for(q):
    """The kernel policy of q's device, after checking it can run q."""
    kernels = CudaKernels if q.device.type == "cuda" else HostKernels
    kernels.check(q)
    return kernels
