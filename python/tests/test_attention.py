"""The host attention kernels through torch: against a dense torch reference (fp64 to 1e-12,
fp32 to 1e-5), gradients by torch.autograd.gradcheck, and bad tensors refused by name."""
import math

import pytest
import torch

import zeppelin_torch as zt


def dense_reference(q, k, v, cu, scale=0.0):
    """Causal attention per packed sequence with plain torch ops (GQA by repeating K/V heads)."""
    heads, kv_heads, dim = q.shape[1], k.shape[1], q.shape[2]
    scale = scale or 1.0 / math.sqrt(dim)
    outs = []
    for b, e in zip(cu.tolist(), cu.tolist()[1:]):
        qs, ks, vs = q[b:e], k[b:e].repeat_interleave(heads // kv_heads, 1), v[b:e].repeat_interleave(heads // kv_heads, 1)
        s = torch.einsum("ihd,jhd->hij", qs, ks) * scale
        mask = torch.ones(e - b, e - b, dtype=torch.bool, device=q.device).triu(1)
        p = s.masked_fill(mask, float("-inf")).softmax(-1)
        outs.append(torch.einsum("hij,jhd->ihd", p, vs))
    return torch.cat(outs)


def random_qkv(seed, rows, heads, kv_heads, dim, dtype):
    g = torch.Generator().manual_seed(seed)
    make = lambda h: torch.randn(rows, h, dim, generator=g, dtype=dtype).requires_grad_()  # noqa: E731
    return make(heads), make(kv_heads), make(kv_heads)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_matches_dense_reference(seed, dtype, tol):
    g = torch.Generator().manual_seed(100 + seed)
    lengths = torch.randint(1, 40, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = lengths.cumsum(0)
    heads, kv_heads = [(4, 4), (4, 2), (8, 1)][seed % 3]
    q, k, v = random_qkv(seed, int(cu[-1]), heads, kv_heads, 16, dtype)
    scale = 0.0 if seed % 2 else 0.3
    o = zt.varlen_attention(q, k, v, cu, scale=scale)
    ref = dense_reference(q, k, v, cu, scale)
    assert (o - ref).abs().max() < tol
    d_o = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    ref_grads = torch.autograd.grad(ref, (q, k, v), d_o)
    for a, b in zip(grads, ref_grads):
        assert (a - b).abs().max() < tol * 10


def test_gradcheck():
    q, k, v = random_qkv(3, 17, 4, 2, 8, torch.float64)
    cu = torch.tensor([0, 5, 17])
    assert torch.autograd.gradcheck(lambda a, b, c: zt.varlen_attention(a, b, c, cu), (q, k, v))


def test_lse_is_the_log_normaliser():
    q, k, v = random_qkv(4, 9, 2, 2, 4, torch.float64)
    _, lse = zt.varlen_attention(q, k, v, torch.tensor([0, 9]), return_lse=True)
    s = torch.einsum("ihd,jhd->hij", q, k) / 2.0
    s = s.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), float("-inf"))
    assert torch.allclose(lse, torch.logsumexp(s, -1), atol=1e-12)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (lambda q, k, v: (q.float(), k, v), TypeError, r"k must have the dtype of q \(torch.float32\), got torch.float64"),
        (lambda q, k, v: (q.half(), k.half(), v.half()), TypeError, "q must be float32 or float64 on the CPU, got torch.float16"),
        (lambda q, k, v: (q[:, :, :1].squeeze(2), k, v), ValueError, r"q must be 3-D \[rows, heads, head_dim\], got shape"),
        (lambda q, k, v: (q.transpose(1, 2), k, v), ValueError, "q must be contiguous"),
        (lambda q, k, v: (q, k[:5], v), ValueError, "k must have 10 rows"),
        (lambda q, k, v: (q, torch.zeros(10, 3, 8, dtype=q.dtype), torch.zeros(10, 3, 8, dtype=q.dtype)), ValueError,
         "k must have a number of heads dividing q's 4"),
        (lambda q, k, v: (q, k, v[:, :, :4].contiguous()), ValueError, "v must have head_dim 8, got 4"),
        (lambda q, k, v: (q, k, "v"), TypeError, "v must be a torch.Tensor, got str"),
        (lambda q, k, v: (q.to("meta"), k, v), ValueError, r"k must be on q's device \(meta\), got cpu"),
        (lambda q, k, v: (q.to("meta"), k.to("meta"), v.to("meta")), ValueError, "q must be on the CPU for the host kernels"),
    ],
)
def test_bad_tensors_are_named(change, error, message):
    q, k, v = (t.detach() for t in random_qkv(0, 10, 4, 2, 8, torch.float64))
    with pytest.raises(error, match=message):
        zt.varlen_attention(*change(q, k, v), torch.tensor([0, 10]))


@pytest.mark.parametrize(
    "cu, message", [([0, 4], "cu_seqlens must rise from 0 to q's 10 rows"), ([0, 6, 3, 10], "cu_seqlens must rise")]
)
def test_bad_cu_seqlens(cu, message):
    q, k, v = (t.detach() for t in random_qkv(0, 10, 2, 2, 4, torch.float64))
    with pytest.raises(ValueError, match=message):
        zt.varlen_attention(q, k, v, torch.tensor(cu))


@pytest.mark.parametrize("seed", range(4))
def test_torch_lse_merge_matches_the_library_merge(seed):
    """The merge the GPU path runs with torch ops equals the library's (exercised here on the
    CPU), -inf rows included."""
    from zeppelin_torch.kernels import HostKernels, merge_by_lse

    g = torch.Generator().manual_seed(seed)
    rows, heads, dim, n, col = 7, 3, 5, 12, 4
    o_acc = torch.randn(rows, heads, dim, generator=g, dtype=torch.float64)
    lse_acc = torch.randn(heads, n, generator=g, dtype=torch.float64)
    o_blk = torch.randn(rows, heads, dim, generator=g, dtype=torch.float64)
    lse_blk = torch.randn(heads, rows, generator=g, dtype=torch.float64)
    lse_acc[0, col + 1] = float("-inf")  # the accumulator saw no key
    lse_blk[1, 2] = float("-inf")  # the block saw no key
    lse_acc[2, col + 3] = lse_blk[2, 3] = float("-inf")  # neither
    a_o, a_lse, b_o, b_lse = o_acc.clone(), lse_acc.clone(), o_acc.clone(), lse_acc.clone()
    HostKernels.merge(a_o, a_lse, col, o_blk, lse_blk)
    merge_by_lse(b_o, b_lse, col, o_blk, lse_blk)
    assert not torch.isnan(b_o).any() and not torch.isnan(b_lse).any()
    assert torch.allclose(a_lse, b_lse, atol=1e-14, rtol=0)
    assert torch.allclose(a_o, b_o, atol=1e-14, rtol=0)
