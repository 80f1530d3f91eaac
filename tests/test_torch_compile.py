# SPDX-License-Identifier: Apache-2.0
"""The hot-path ops inside ``torch.compile(fullgraph=True)`` (the default Inductor backend), as
a serving engine compiles a model around them: no graph break, and every output and in-place
update equal, bit for bit, to the same calls made eagerly on copies of the same inputs.

RoPE, fast_topk and the GEMMs have their own compile tests next to their other tests; this
file covers the norms, the gated activations, the quantization family, the norm + quant ops,
embedding_lookup and set_kv_buffer_kernel. Each compiled function also does some torch work
after the op, so Inductor fuses code around it and must order it after the op's writes.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel

pytestmark = pytest.mark.gpu

FP8 = torch.float8_e4m3fn
BF16 = torch.bfloat16


def _randn(shape, gen, dtype=BF16, scale=1.0):
    return (torch.randn(shape, device="cuda", generator=gen) * scale).to(dtype)


def _same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: {a.shape}/{a.dtype} against {b.shape}/{b.dtype}"
    if a.dtype.is_floating_point and a.element_size() == 1:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    assert torch.equal(a, b), f"{what}: compiled and eager results differ"


def _compare(fn, inputs, names) -> None:
    """Run ``fn`` compiled (fullgraph) and eagerly, each on its own copies of ``inputs``.
    ``fn`` returns ``(outputs, derived)``: the op outputs and every input afterwards (in-place
    updates) must match bit for bit; ``derived``, torch work after the op that Inductor may
    reduce in another order, to fp32 rounding."""
    torch._dynamo.reset()
    eager_in = [t.clone() for t in inputs]
    comp_in = [t.clone() for t in inputs]
    want, want_derived = fn(*eager_in)
    got, got_derived = torch.compile(fn, fullgraph=True)(*comp_in)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _same(g, w, f"output {i}")
    for name, g, w in zip(names, comp_in, eager_in):
        _same(g, w, f"input {name} after the call")
    torch.testing.assert_close(got_derived, want_derived, rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("op", ["rmsnorm", "gemma_rmsnorm"])
def test_norm(op, gen):
    norm = getattr(sgl_kernel, op)

    def fn(x, w):
        y = norm(x, w, 1e-6)
        return (y,), (y.float() * 2).sum(dim=-1)

    _compare(fn, [_randn((37, 4096), gen), _randn((4096,), gen)], ["x", "w"])


@pytest.mark.parametrize("op", ["fused_add_rmsnorm", "gemma_fused_add_rmsnorm"])
def test_fused_add_norm(op, gen):
    norm = getattr(sgl_kernel, op)

    def fn(x, r, w):
        x2 = x * 1  # a buffer the graph owns, updated in place by the op
        norm(x2, r, w, 1e-6)
        return (x2,), x2.float().sum(dim=-1) + r.float().sum(dim=-1)

    _compare(fn, [_randn((19, 3584), gen), _randn((19, 3584), gen), _randn((3584,), gen)], ["x", "r", "w"])


@pytest.mark.parametrize("op", ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"])
def test_gated_activation(op, gen):
    act = getattr(sgl_kernel, op)

    def fn(x):
        y = act(x)
        return (y,), y.float().abs().amax(dim=-1)

    _compare(fn, [_randn((29, 2 * 1408), gen)], ["x"])


def test_per_token_and_per_tensor_quant(gen):
    def fn(x):
        q1 = torch.empty(x.shape, dtype=FP8, device=x.device)
        s1 = torch.empty(x.shape[0], 1, dtype=torch.float32, device=x.device)
        sgl_kernel.sgl_per_token_quant_fp8(x, q1, s1)
        q2 = torch.empty(x.shape, dtype=torch.int8, device=x.device)
        s2 = torch.empty(x.shape[0], 1, dtype=torch.float32, device=x.device)
        sgl_kernel.sgl_per_token_quant_int8(x, q2, s2)
        q3 = torch.empty(x.shape, dtype=FP8, device=x.device)
        s3 = torch.zeros(1, dtype=torch.float32, device=x.device)
        sgl_kernel.sgl_per_tensor_quant_fp8(x, q3, s3, False)
        return (q1, s1, q2, s2, q3, s3), (q1.float() * s1).sum()

    _compare(fn, [_randn((23, 2048), gen, scale=3.0)], ["x"])


@pytest.mark.parametrize("ue8m0", [False, True])
def test_group_quant(ue8m0, gen):
    g = 128

    def fn(x):
        m, k = x.shape
        q = torch.empty(x.shape, dtype=FP8, device=x.device)
        if ue8m0:  # column-major packed int32 exponents
            s = torch.empty(((k // g + 3) // 4, m), dtype=torch.int32, device=x.device).t()
        else:
            s = torch.empty((m, k // g), dtype=torch.float32, device=x.device)
        sgl_kernel.sgl_per_token_group_quant_fp8(x, q, s, g, 1e-10, -448.0, 448.0, scale_ue8m0=ue8m0)
        return (q, s.contiguous()), q.float().sum(dim=-1)

    _compare(fn, [_randn((41, 7168), gen, scale=2.0)], ["x"])


def test_norm_quant(gen):
    g = 128

    def fn(x, r, w):
        m, k = x.shape
        q1 = torch.empty(x.shape, dtype=FP8, device=x.device)
        s1 = torch.empty((m, k // g), dtype=torch.float32, device=x.device)
        sgl_kernel.fused_rmsnorm_quant(x, q1, s1, w, g, 1e-10, -448.0, 448.0, False)
        r2 = r * 1
        q2 = torch.empty(x.shape, dtype=FP8, device=x.device)
        s2 = torch.empty((m, k // g), dtype=torch.float32, device=x.device)
        sgl_kernel.fused_add_rmsnorm_quant(x, r2, q2, s2, w, g, 1e-10, -448.0, 448.0, False)
        return (q1, s1, q2, s2, r2), (q2.float() * s2.repeat_interleave(g, dim=1)).sum(dim=-1)

    _compare(fn, [_randn((17, 4096), gen), _randn((17, 4096), gen), _randn((4096,), gen)], ["x", "r", "w"])


def test_embedding_lookup_and_kv_store(gen):
    vocab, d, slots = 1000, 1024, 300

    def fn(weight, idx, k, v, k_cache, v_cache, loc):
        rows = sgl_kernel.embedding_lookup(weight, idx)
        shard = sgl_kernel.embedding_lookup(weight, idx, vocab_range=(200, vocab // 2))
        sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v)
        return (rows, shard), rows.float().sum(dim=-1) + k_cache.float().sum()

    weight = _randn((vocab, d), gen)
    idx = torch.randperm(vocab, device="cuda", generator=gen)[:64]
    k, v = _randn((64, 8, 128), gen), _randn((64, 8, 128), gen)
    k_cache, v_cache = _randn((slots, 8, 128), gen), _randn((slots, 8, 128), gen)
    loc = torch.randperm(slots, device="cuda", generator=gen)[:64]
    _compare(fn, [weight, idx, k, v, k_cache, v_cache, loc],
             ["weight", "indices", "k", "v", "k_cache", "v_cache", "loc"])
