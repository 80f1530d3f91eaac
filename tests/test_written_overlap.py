# SPDX-License-Identifier: Apache-2.0
"""Tensors an op writes may not have elements that share memory (API.md 1.4: a clear error,
no silent wrong answer): a dimension of size > 1 with stride 0 (``expand``) in a written tensor
is refused by name before any launch, as torch's own in-place ops refuse it. Each case is a
valid call but for one written argument expanded over its rows; the same call with that
argument materialised runs (the refusal is the overlap, nothing else)."""

from __future__ import annotations

import pytest
import torch

import sgl_kernel  # noqa: F401  (registers torch.ops.sgl_kernel)
from tests.helpers import raises_op_error

pytestmark = pytest.mark.gpu

OPS = torch.ops.sgl_kernel
BF16, FP8 = torch.bfloat16, torch.float8_e4m3fn


def _rows(shape, dtype=BF16):
    return torch.randn(shape, device="cuda").to(dtype)


def _expanded(t: torch.Tensor) -> torch.Tensor:
    """``t``'s first row repeated over dim 0 with stride 0 (one row of memory)."""
    return t[:1].expand(t.shape)


def _norm(which):
    x, r, w = _rows((8, 256)), _rows((8, 256)), _rows((256,))
    out = torch.empty_like(x)
    if which == "output":
        return OPS.rmsnorm.default, "rmsnorm", "output", [out, x, w, 1e-6, False], 0
    if which == "input":
        return OPS.fused_add_rmsnorm.default, "fused_add_rmsnorm", "input", [x, r, w, 1e-6, False], 0
    return OPS.gemma_fused_add_rmsnorm.default, "gemma_fused_add_rmsnorm", "residual", [x, r, w, 1e-6, False], 1


def _rope(which):
    nnz, d = 4, 128
    q, k = _rows((nnz, 2, d)), _rows((nnz, 1, d))
    cache = torch.randn(16, d, device="cuda")
    pos = torch.arange(nnz, device="cuda")
    slots = 8
    kb, vb = _rows((slots, 1, d)), _rows((slots, 1, d))
    loc = torch.arange(nnz, device="cuda")
    args = [q, k, torch.empty_like(q), torch.empty_like(k), cache, pos, False, False, k.clone(), kb, vb, loc]
    index = {"q_rope": 2, "k_rope": 3, "k_buffer": 9, "v_buffer": 10}[which]
    return OPS.apply_rope_pos_ids_cos_sin_cache.default, "apply_rope_pos_ids_cos_sin_cache", which, args, index


def _concat(which):
    t, h = 4, 128
    if which == "k":
        k = _rows((t, h, 576))
        return OPS.concat_mla_k.default, "concat_mla_k", "k", [k, _rows((t, h, 512)), _rows((t, 1, 64))], 0
    a, b = _rows((t, h, 512)), _rows((t, h, 64))
    return OPS.concat_mla_absorb_q.default, "concat_mla_absorb_q", "out", [a, b, _rows((t, h, 576))], 2


def _store_kv(which):
    """Both caches expanded (v_cache must share k_cache's layout, a check that comes first)."""
    slots, n, row = 16, 4, 256
    kc, vc = _rows((slots, row)), _rows((slots, row))
    loc = torch.arange(n, device="cuda")
    args = [kc, vc, loc, _rows((n, row)), _rows((n, row))]
    return OPS.store_kv_cache.default, "store_kv_cache", which, args, (0, 1)


def _group_quant_masked(which):
    e, t, k, g = 3, 8, 256, 128
    x = _rows((e, t, k))
    q = torch.empty((e, t, k), dtype=FP8, device="cuda")
    s = torch.empty((e, t, k // g), device="cuda")
    mm = torch.full((e,), t, dtype=torch.int32, device="cuda")
    args = [x, q, s, g, 1e-10, -448.0, 448.0, False, False, mm]
    return OPS.sgl_per_token_group_quant_8bit_v2.default, "sgl_per_token_group_quant_8bit_v2", "output_s", args, 2


def _norm_quant(which):
    m, k, g = 8, 256, 128
    x, r, w = _rows((m, k)), _rows((m, k)), _rows((k,))
    q = torch.empty((m, k), dtype=FP8, device="cuda")
    s = torch.empty((m, k // g), device="cuda")
    args = [x, r, q, s, w, g, 1e-6, 1e-10, -448.0, 448.0, False, False]
    index = {"residual": 1, "output_s": 3}[which]
    return OPS.fused_add_rmsnorm_quant.default, "fused_add_rmsnorm_quant", which, args, index


def _dsv3(which):
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("dsv3_router_gemm needs sm90")
    m = 4
    a, wt = _rows((m, 7168)), _rows((256, 7168))
    out = torch.empty((m, 256), device="cuda")
    return OPS.dsv3_router_gemm.default, "dsv3_router_gemm", "output", [out, a, wt], 0


def _topk_gating(which):
    g = _rows((8, 64))
    w = torch.empty((8, 4), device="cuda")
    ids = torch.empty((8, 4), dtype=torch.int32, device="cuda")
    index = {"topk_weights": 0, "topk_indices": 1}[which]
    return OPS.topk_softmax.default, "topk_softmax", which, [w, ids, g, False, 0.0, None], index


def _moe_sum(which):
    x = _rows((8, 4, 256))
    out = _rows((8, 256))
    return OPS.moe_sum_reduce.default, "moe_sum_reduce", "output", [x, out, 2.5], 1


def _grouped_mm(which):
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fp8_blockwise_scaled_grouped_mm needs sm90a")
    e, r, n, k = 2, 8, 128, 128
    i64 = dict(dtype=torch.int64, device="cuda")
    i32 = dict(dtype=torch.int32, device="cuda")
    w = _rows((e, n, k), FP8)
    sb = torch.rand((e, n // 128, k // 128), device="cuda")
    sizes = torch.tensor([[4, n, k], [4, n, k]], **i32)
    args = [_rows((r, n)), *[torch.empty(e, **i64) for _ in range(5)], _rows((r, k), FP8), w.transpose(1, 2),
            torch.rand((r, k // 128), device="cuda"), sb.transpose(1, 2), torch.full((e,), k, **i64),
            torch.full((e,), k, **i64), torch.full((e,), n, **i64), torch.empty((e, 5), **i32),
            torch.empty((e, 5), **i32), sizes, torch.tensor([0, 4], **i32),
            torch.empty(1 << 20, dtype=torch.uint8, device="cuda")]
    return OPS.fp8_blockwise_scaled_grouped_mm.default, "fp8_blockwise_scaled_grouped_mm", "output", args, 0


CASES = {
    "rmsnorm-output": (_norm, "output"),
    "fused_add_rmsnorm-input": (_norm, "input"),
    "gemma_fused_add_rmsnorm-residual": (_norm, "residual"),
    "rope-q_rope": (_rope, "q_rope"),
    "rope-k_rope": (_rope, "k_rope"),
    "rope-k_buffer": (_rope, "k_buffer"),
    "rope-v_buffer": (_rope, "v_buffer"),
    "concat_mla_k-k": (_concat, "k"),
    "concat_mla_absorb_q-out": (_concat, "out"),
    "store_kv_cache-caches": (_store_kv, "k_cache"),
    "group_quant_masked-output_s": (_group_quant_masked, "output_s"),
    "fused_add_rmsnorm_quant-residual": (_norm_quant, "residual"),
    "fused_add_rmsnorm_quant-output_s": (_norm_quant, "output_s"),
    "dsv3_router_gemm-output": (_dsv3, "output"),
    "topk_softmax-topk_weights": (_topk_gating, "topk_weights"),
    "topk_softmax-topk_indices": (_topk_gating, "topk_indices"),
    "moe_sum_reduce-output": (_moe_sum, "output"),
    "fp8_blockwise_scaled_grouped_mm-output": (_grouped_mm, "output"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_expanded_written_tensor_is_refused(case):
    make, which = CASES[case]
    op, name, arg, args, index = make(which)
    good = list(args)
    op(*good)  # the valid call runs
    torch.cuda.synchronize()
    bad = list(args)
    for i in index if isinstance(index, tuple) else (index,):
        bad[i] = _expanded(args[i])
    with raises_op_error(name, arg, "share memory", "stride 0"):
        op(*bad)
