"""[gpu] zeppelin's CUDA kernels through torch: bfloat16 / float16 varlen attention and the
plan-driven attention on one GPU against a float32 dense reference. Skipped without a GPU or
with a libzeppelin_capi built without CUDA."""
import pytest
import torch

import zeppelin_torch as zt
from zeppelin_torch import _capi
from test_attention import dense_reference

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not _capi.lib.zeppelin_capi_has_cuda(),
    reason="needs a GPU and a libzeppelin_capi built with CUDA",
)


def random_qkv(seed, rows, heads, kv_heads, dim, dtype):
    g = torch.Generator().manual_seed(seed)
    make = lambda h: torch.randn(rows, h, dim, generator=g).to("cuda", dtype).requires_grad_()  # noqa: E731
    return make(heads), make(kv_heads), make(kv_heads)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_varlen_matches_dense_reference(dtype, head_dim):
    cu = torch.tensor([0, 100, 101, 612, 700], dtype=torch.int32)
    q, k, v = random_qkv(1, 700, 8, 2, head_dim, dtype)
    o = zt.varlen_attention(q, k, v, cu.cuda())
    ref = dense_reference(*(t.float() for t in (q, k, v)), cu)
    assert (o.float() - ref).abs().max() < 2e-2
    d_o = torch.randn_like(o)
    grads = torch.autograd.grad(o, (q, k, v), d_o)
    ref_grads = torch.autograd.grad(ref, (q, k, v), d_o.float())
    for a, b in zip(grads, ref_grads):
        assert (a.float() - b).abs().max() < 5e-2 * max(1.0, b.abs().max().item())


def test_plan_driven_attention_on_one_gpu():
    lengths = [300, 40, 900]
    p = zt.plan(lengths, gpus_per_node=1)
    sched = zt.RankSchedule(p, 0)
    q, k, v = random_qkv(2, sum(lengths), 8, 8, 64, torch.bfloat16)
    # the rank's rows are in the plan's layout (here the longest sequence first), not batch order
    o = zt.ring_attention(*(sched.layout.dispatch(t) for t in (q, k, v)), sched)
    cu = torch.tensor([0, 300, 340, 1240])
    ref = sched.layout.dispatch(zt.varlen_attention(q, k, v, cu.cuda()))
    assert (o.float() - ref.float()).abs().max() < 1e-2


def test_cpu_only_dtypes_are_refused_on_gpu():
    q, k, v = (t.detach().float() for t in random_qkv(3, 10, 2, 2, 64, torch.bfloat16))
    with pytest.raises(TypeError, match="q must be bfloat16 or float16 on a GPU, got torch.float32"):
        zt.varlen_attention(q, k, v, torch.tensor([0, 10]))
    q, k, v = random_qkv(3, 10, 2, 2, 32, torch.bfloat16)
    with pytest.raises(ValueError, match="q must have head_dim 64 or 128 on a GPU, got 32"):
        zt.varlen_attention(q, k, v, torch.tensor([0, 10]))
