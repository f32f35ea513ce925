"""Argument checks of the public calls: each failure names the argument and what was expected."""
import numbers

import torch

FLOAT_DTYPES = {torch.float32: 0, torch.float64: 1}


INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1


def _int_in(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def positive_int(name, value, high=INT32_MAX):
    return _int_in(name, value, 1, high)


def non_negative_int(name, value, high=INT32_MAX):
    return _int_in(name, value, 0, high)


def name_str(name, value):
    """A name argument (a partitioner, packer, model or cluster preset): a str."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value.encode()


def non_negative_number(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def lengths_tensor(lengths):
    """A 1-D int64 CPU tensor of positive lengths from a list, tuple or integer tensor."""
    if isinstance(lengths, torch.Tensor):
        if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or lengths.is_complex():
            raise TypeError(f"lengths must hold integers, got dtype {lengths.dtype}")
        if lengths.dim() != 1:
            raise ValueError(f"lengths must be 1-D, got shape {tuple(lengths.shape)}")
        out = lengths.detach().to("cpu", torch.int64).contiguous()
    elif isinstance(lengths, (list, tuple)):
        for i, x in enumerate(lengths):
            if isinstance(x, bool) or not isinstance(x, numbers.Integral):
                raise TypeError(f"lengths[{i}] must be an int, got {type(x).__name__}")
        for i, x in enumerate(lengths):
            if not 1 <= x <= INT64_MAX:
                raise ValueError(f"lengths[{i}] must be in [1, {INT64_MAX}], got {x}")
        out = torch.tensor(list(lengths), dtype=torch.int64)
    else:
        raise TypeError(f"lengths must be a list, tuple or 1-D integer tensor, got {type(lengths).__name__}")
    if out.numel() == 0:
        raise ValueError("lengths must hold at least one sequence")
    bad = (out < 1).nonzero()
    if bad.numel():
        i = int(bad[0, 0])
        raise ValueError(f"lengths[{i}] must be >= 1, got {int(out[i])}")
    return out


def attention_tensor(name, t, *, like=None, heads=None, head_dim=None, rows=None):
    """A 3-D [rows, heads, head_dim] contiguous tensor (on the device and of the dtype of `like`)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if like is not None and t.device != like.device:
        raise ValueError(f"{name} must be on q's device ({like.device}), got {t.device}")
    if like is not None and t.dtype != like.dtype:
        raise TypeError(f"{name} must have the dtype of q ({like.dtype}), got {t.dtype}")
    if t.dim() != 3:
        raise ValueError(f"{name} must be 3-D [rows, heads, head_dim], got shape {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous()), got strides {t.stride()}")
    if rows is not None and t.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows (the layout's tokens), got {t.shape[0]}")
    if heads is not None and t.shape[1] != heads:
        raise ValueError(f"{name} must have {heads} heads, got {t.shape[1]}")
    if head_dim is not None and t.shape[2] != head_dim:
        raise ValueError(f"{name} must have head_dim {head_dim}, got {t.shape[2]}")
    return t.shape


def qkv(q, k, v, rows=None):
    """Checks q [rows, H, D], k and v [rows, KH, D] (KH divides H) alike in device and dtype;
    returns (H, KH, D)."""
    n, heads, head_dim = attention_tensor("q", q, rows=rows)
    _, kv_heads, _ = attention_tensor("k", k, like=q, rows=n, head_dim=head_dim)
    attention_tensor("v", v, like=q, rows=n, heads=kv_heads, head_dim=head_dim)
    if heads % kv_heads:
        raise ValueError(f"k must have a number of heads dividing q's {heads} (GQA), got {kv_heads}")
    return heads, kv_heads, head_dim
