# SPDX-License-Identifier: Apache-2.0
"""awq_dequantize (API.md 2.3) on the GPU against the reference of ref_awq.py.

Tolerance: none. ``w - z`` is an exact small integer and ``(w - z) * s`` has at most 15 (fp16)
/ 12 (bf16) significant bits before rounding, so the kernel's packed fp16/bf16 multiply and the
fp32 reference rounded once agree bit for bit; the tests compare with ``torch.equal``.

Random words (all 16 values in every field), scales of both signs over two decades, fp16 and
bf16, group sizes 32/64/128 and odd ones (2, 10, 102: group boundaries inside a thread's rows),
one word per row, odd word counts, row strides and a misaligned scales view (the scalar scales
path), empty inputs, opcheck, CUDA-graph replay and the argument errors.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.gemm.ref_awq import awq_dequantize_ref, awq_pack, awq_unpack, random_awq
from tests.helpers import fake_extent, raises_op_error

pytestmark = pytest.mark.gpu

OP = "awq_dequantize"
DTYPES = (torch.float16, torch.bfloat16)

# (K, N, G)
SHAPES = [
    (128, 64, 32),
    (256, 8, 32),  # one word per row
    (384, 8 * 37, 64),  # odd word count
    (1024, 8 * 129, 128),
    (4096, 4096, 128),
    (7168, 2112, 64),
    (4096, 11008, 128),
    (512, 512, 512),  # one group
    (102, 40, 102),  # K not a multiple of the 4 rows of a thread
    (200, 56, 10),  # group boundaries inside a thread's rows (G = 10)
    (64, 24, 2),  # two groups per thread
    (8, 8, 8),
    (1, 16, 1),
]


def _op():
    return torch.ops.sgl_kernel.awq_dequantize.default


def _ids(shapes):
    return [f"K{k}-N{n}-G{g}" for k, n, g in shapes]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("k, n, g", SHAPES, ids=_ids(SHAPES))
def test_awq_dequantize(k, n, g, dtype, gen):
    qweight, scales, qzeros = random_awq(k, n, g, dtype, gen)
    out = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    assert out.shape == (k, n) and out.dtype == dtype and out.is_contiguous()
    assert torch.equal(out, awq_dequantize_ref(qweight, scales, qzeros))
    # through the op as well
    assert torch.equal(_op()(qweight, scales, qzeros), out)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nibble_order_from_values(dtype, gen):
    """Pack known 4-bit values with the API's bit offsets (ref_awq.awq_pack) and compare with
    the dequantization computed from the values themselves."""
    k, n, g = 256, 8 * 21, 32
    w = torch.randint(0, 16, (k, n), device="cuda", generator=gen)
    z = torch.randint(0, 16, (k // g, n), device="cuda", generator=gen)
    scales = (torch.rand(k // g, n, device="cuda", generator=gen) + 0.5).to(dtype)
    qweight, qzeros = awq_pack(w), awq_pack(z)
    assert torch.equal(awq_unpack(qweight), w.to(torch.int32))
    out = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    expected = ((w - z.repeat_interleave(g, 0)).float() * scales.float().repeat_interleave(g, 0)).to(dtype)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_strides(dtype, gen):
    """Every input a view with a row stride larger than its width."""
    k, n, g = 512, 8 * 45, 64
    qw_full, sc_full, qz_full = random_awq(k, n + 64, g, dtype, gen)
    qweight, scales, qzeros = qw_full[:, 3 : 3 + n // 8], sc_full[:, 16 : 16 + n], qz_full[:, 5 : 5 + n // 8]
    assert qweight.stride(0) == (n + 64) // 8 and scales.stride(0) == n + 64
    assert scales.data_ptr() % 16 == 0  # the 16-byte scales path
    out = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    assert torch.equal(out, awq_dequantize_ref(qweight, scales, qzeros))


@pytest.mark.parametrize("offset", [1, 3], ids=["off1", "off3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned_scales(offset, dtype, gen):
    """scales not 16-byte aligned: the scalar scales path."""
    k, n, g = 256, 8 * 19, 32
    qweight, sc_full, qzeros = random_awq(k, n + 8, g, dtype, gen)
    qweight, qzeros = qweight[:, : n // 8].contiguous(), qzeros[:, : n // 8].contiguous()
    scales = sc_full[:, offset : offset + n]
    assert scales.data_ptr() % 16 != 0
    out = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    assert torch.equal(out, awq_dequantize_ref(qweight, scales, qzeros))


def test_empty(gen):
    qweight, scales, qzeros = random_awq(0, 64, 1, torch.float16, gen)
    scales = torch.empty(0, 64, dtype=torch.float16, device="cuda")
    qzeros = torch.empty(0, 8, dtype=torch.int32, device="cuda")
    out = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    assert out.shape == (0, 64) and out.dtype == torch.float16
    qweight = torch.zeros(32, 0, dtype=torch.int32, device="cuda")
    out = sgl_kernel.awq_dequantize(qweight, torch.empty(1, 0, dtype=torch.bfloat16, device="cuda"),
                                    torch.empty(1, 0, dtype=torch.int32, device="cuda"))
    assert out.shape == (32, 0) and out.dtype == torch.bfloat16


def test_deterministic(gen):
    qweight, scales, qzeros = random_awq(2048, 2048, 128, torch.bfloat16, gen)
    first = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    assert torch.equal(sgl_kernel.awq_dequantize(qweight, scales, qzeros), first)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(dtype, gen):
    qweight, scales, qzeros = random_awq(256, 8 * 13, 64, dtype, gen)
    torch.library.opcheck(_op(), (qweight, scales, qzeros))


def test_torch_compile(gen):
    qweight, scales, qzeros = random_awq(256, 256, 64, torch.float16, gen)
    fn = torch.compile(sgl_kernel.awq_dequantize, fullgraph=True)
    assert torch.equal(fn(qweight, scales, qzeros), awq_dequantize_ref(qweight, scales, qzeros))


def test_cuda_graph(gen):
    """Capture with static inputs, replay on new words, zeros and scales."""
    k, n, g = 1024, 8 * 77, 128
    qweight, scales, qzeros = random_awq(k, n, g, torch.float16, gen)
    sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
    for _ in range(3):
        new = random_awq(k, n, g, torch.float16, gen)
        for dst, src in zip((qweight, scales, qzeros), new):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, awq_dequantize_ref(qweight, scales, qzeros))


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops and the wrapper: the C++ checks protect both)


def _valid():
    qweight = torch.zeros(256, 16, dtype=torch.int32, device="cuda")
    scales = torch.ones(2, 128, dtype=torch.float16, device="cuda")
    qzeros = torch.zeros(2, 16, dtype=torch.int32, device="cuda")
    return qweight, scales, qzeros


BAD_CASES = {
    "qweight_dtype": (lambda q, s, z: (q.long(), s, z), "qweight", ("dtype", "torch.int32", "torch.int64")),
    "qweight_rank": (lambda q, s, z: (q[None], s, z), "qweight", ("2-D",)),
    "qweight_strided": (lambda q, s, z: (q.t().contiguous().t(), s, z), "qweight", ("contiguous",)),
    "scales_dtype": (lambda q, s, z: (q, s.float(), z), "scales", ("dtype", "torch.float32")),
    "scales_width": (lambda q, s, z: (q, s[:, :120], z), "scales", ("128",)),
    "scales_groups": (lambda q, s, z: (q, torch.ones(3, 128, dtype=torch.float16, device="cuda"), z), "scales",
                      ("divide",)),
    "qzeros_dtype": (lambda q, s, z: (q, s, z.to(torch.int16)), "qzeros", ("dtype",)),
    "qzeros_rows": (lambda q, s, z: (q, s, torch.zeros(4, 16, dtype=torch.int32, device="cuda")), "qzeros",
                    ("shape[0]",)),
    "qzeros_words": (lambda q, s, z: (q, s, z[:, :8]), "qzeros", ("shape[1]",)),
    "scales_device": (lambda q, s, z: (q, s.cpu(), z), "scales", ("device",)),
    "qweight_cpu": (lambda q, s, z: (q.cpu(), s.cpu(), z.cpu()), "qweight", ("CUDA tensor",)),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_inputs(case):
    make, arg, fragments = BAD_CASES[case]
    args = make(*_valid())
    with raises_op_error(OP, arg, *fragments):
        _op()(*args)
    with raises_op_error(OP, arg, *fragments):
        sgl_kernel.awq_dequantize(*args)


def test_size_limit_messages():
    """Rows of 2^31 words (N = 2^34) or more are refused before the output is allocated or a
    kernel runs. The rows must be dense, so the tensors claim 8-32 GiB over 4 KiB each
    (fake_extent): nothing reads them."""
    words = 2**31
    qweight = fake_extent((1, words), torch.int32)
    scales = fake_extent((1, 8 * words), torch.float16)
    qzeros = fake_extent((1, words), torch.int32)
    with raises_op_error(OP, "qweight", f"(N / 8) must be at most {2**31 - 1}", f"got {words}"):
        _op()(qweight, scales, qzeros)
