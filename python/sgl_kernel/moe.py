# SPDX-License-Identifier: Apache-2.0
"""MoE family (API.md 2.4): expert routing, the token -> expert block layout of the fused MoE
GEMMs, and the sum of each token's expert outputs."""

from __future__ import annotations

from typing import Callable, Dict, List, Optional

import torch

__all__ = [
    "topk_softmax",
    "topk_sigmoid",
    "moe_fused_gate",
    "kimi_k2_moe_fused_gate",
    "moe_align_block_size",
    "moe_sum",
    "moe_sum_reduce",
    "prepare_moe_input",
    "apply_shuffle_mul_sum",
    "fp8_blockwise_scaled_grouped_mm",
    "fused_qk_norm_rope",
]

FAMILY = "moe"
# op name -> lowest arch with a kernel (API.md)
OPS = {
    "topk_softmax": 80,
    "topk_sigmoid": 80,
    "moe_fused_gate": 80,
    "kimi_k2_moe_fused_gate": 80,
    "moe_align_block_size": 80,
    "moe_sum": 80,
    "moe_sum_reduce": 80,
    "prepare_moe_input": 80,
    "apply_shuffle_mul_sum": 80,
    "fp8_blockwise_scaled_grouped_mm": 90,
    "fused_qk_norm_rope": 80,
}
# the grouped GEMM is a CUTLASS 3.x sm90a kernel of the GEMM family (csrc/gemm/sm90/)
OP_FAMILIES = {"fp8_blockwise_scaled_grouped_mm": ("gemm_sm90",)}

_topk_softmax = torch.ops.sgl_kernel.topk_softmax.default
_topk_sigmoid = torch.ops.sgl_kernel.topk_sigmoid.default
_moe_fused_gate = torch.ops.sgl_kernel.moe_fused_gate.default
_kimi_k2_moe_fused_gate = torch.ops.sgl_kernel.kimi_k2_moe_fused_gate.default
_moe_align_block_size = torch.ops.sgl_kernel.moe_align_block_size.default
_moe_sum = torch.ops.sgl_kernel.moe_sum.default
_moe_sum_reduce = torch.ops.sgl_kernel.moe_sum_reduce.default
_prepare_moe_input = torch.ops.sgl_kernel.prepare_moe_input.default
_apply_shuffle_mul_sum = torch.ops.sgl_kernel.apply_shuffle_mul_sum.default
_fused_qk_norm_rope = torch.ops.sgl_kernel.fused_qk_norm_rope.default
_fp8_blockwise_scaled_grouped_mm = torch.ops.sgl_kernel.fp8_blockwise_scaled_grouped_mm.default


def _gate_outputs(input: torch.Tensor, topk: int) -> List[torch.Tensor]:
    rows = input.shape[0] if input.dim() > 0 else 0
    return [
        torch.empty((rows, topk), dtype=torch.float32, device=input.device),
        torch.empty((rows, topk), dtype=torch.int32, device=input.device),
    ]


@torch.library.register_fake("sgl_kernel::moe_fused_gate")
def _moe_fused_gate_fake(input, bias, num_expert_group, topk_group, topk, num_fused_shared_experts,
                         routed_scaling_factor, apply_routed_scaling_factor_on_output) -> List[torch.Tensor]:
    return _gate_outputs(input, topk)


@torch.library.register_fake("sgl_kernel::kimi_k2_moe_fused_gate")
def _kimi_k2_moe_fused_gate_fake(input, bias, topk, renormalize, routed_scaling_factor,
                                 apply_routed_scaling_factor_on_output) -> List[torch.Tensor]:
    return _gate_outputs(input, topk)


def topk_softmax(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool = False,
    moe_softcapping: float = 0.0,
    correction_bias: Optional[torch.Tensor] = None,
) -> None:
    r"""Top-k experts of the softmax of each token's router logits (Mixtral, Qwen-MoE routing).

    Per token ``t`` in fp32: ``z = gating_output[t]``; if ``moe_softcapping != 0``,
    ``z = tanh(z / c) * c``; if ``correction_bias`` is given, ``z = z + bias``;
    ``p = softmax(z)``. The k experts with the largest ``p`` are written to ``topk_ids[t]``
    and their ``p`` to ``topk_weights[t]``; with ``renormalize`` the k weights are divided by
    their sum.

    Ties between equal keys go to the lower expert index, and the k experts are written in
    descending key order, so the result is deterministic. A NaN key ranks below every number
    (``-inf`` included): a NaN-gated expert is chosen only when fewer than k others are left.

    Parameters
    ----------
    topk_weights : torch.Tensor
        ``[T, k]`` fp32, written. Rows may have a pitch (last dim contiguous).
    topk_ids : torch.Tensor
        ``[T, k]`` int32 (int64 accepted), written. ``k`` is taken from these shapes,
        ``1 <= k <= min(E, 128)``.
    gating_output : torch.Tensor
        ``[T, E]`` fp32/fp16/bf16, last dim contiguous, ``1 <= E <= 65536``.
    renormalize : bool
        Divide the k weights of a token by their sum.
    moe_softcapping : float
        ``c`` of the tanh soft cap; 0 turns it off.
    correction_bias : torch.Tensor, optional
        ``[E]`` fp32, added to the logits before the softmax.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable; no host sync.
    """
    _topk_softmax(topk_weights, topk_ids, gating_output, renormalize, moe_softcapping, correction_bias)


def topk_sigmoid(
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    gating_output: torch.Tensor,
    renormalize: bool = False,
    correction_bias: Optional[torch.Tensor] = None,
) -> None:
    r"""Top-k experts of the sigmoid of each token's router logits.

    Per token ``t`` in fp32: ``p = sigmoid(gating_output[t])``; the selection key is
    ``p + correction_bias`` (``p`` without a bias); the k experts with the largest key are
    written to ``topk_ids[t]`` and their ``p`` (without the bias) to ``topk_weights[t]``;
    with ``renormalize`` the k weights are divided by their sum.

    Ties between equal keys go to the lower expert index, and the k experts are written in
    descending key order, so the result is deterministic. A NaN key ranks below every number
    (``-inf`` included): a NaN-gated expert is chosen only when fewer than k others are left.

    Parameters
    ----------
    topk_weights : torch.Tensor
        ``[T, k]`` fp32, written. Rows may have a pitch (last dim contiguous).
    topk_ids : torch.Tensor
        ``[T, k]`` int32 (int64 accepted), written; ``1 <= k <= min(E, 128)``.
    gating_output : torch.Tensor
        ``[T, E]`` fp32/fp16/bf16, last dim contiguous, ``1 <= E <= 65536``.
    renormalize : bool
        Divide the k weights of a token by their sum.
    correction_bias : torch.Tensor, optional
        ``[E]`` fp32, added to the selection key only.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable; no host sync.
    """
    _topk_sigmoid(topk_weights, topk_ids, gating_output, renormalize, correction_bias)


def moe_fused_gate(
    input_tensor: torch.Tensor,
    bias: torch.Tensor,
    num_expert_group: int,
    topk_group: int,
    topk: int,
    num_fused_shared_experts: int = 0,
    routed_scaling_factor: float = 0,
    apply_routed_scaling_factor_on_output: bool = False,
) -> List[torch.Tensor]:
    r"""DeepSeek-V3 grouped routing: ``[weights, ids]`` of each token's experts.

    Per token, in fp32: ``s = sigmoid(input)``, ``b = s + bias``. The E experts form
    ``num_expert_group`` contiguous groups; a group's score is the sum of its two largest ``b``;
    the ``topk_group`` best groups are kept (ties: lower group). Among their experts
    ``kr = topk - num_fused_shared_experts`` are chosen by ``b`` (ties: lower index; written in
    descending ``b`` order); their weights are ``s``, ``S = sum(s)``. Shared expert ``j`` gets
    id ``E + j`` at position ``kr + j`` and weight ``S / routed_scaling_factor``. Every weight
    is then divided by ``S``, and multiplied by ``routed_scaling_factor`` when
    ``apply_routed_scaling_factor_on_output``. The factor is used literally: the default 0
    gives shared weights of ``inf``.

    Parameters
    ----------
    input_tensor : torch.Tensor
        ``[T, E]`` fp32/fp16/bf16, contiguous; E a power of two, at most 1024.
    bias : torch.Tensor
        ``[E]``, dtype of ``input_tensor``, contiguous.
    num_expert_group : int
        Divides E into groups of at most 32 experts (1: no group step, any E).
    topk_group : int
        ``1 <= topk_group <= num_expert_group``.
    topk : int
        Experts per token including the shared ones, at most 32.
    num_fused_shared_experts : int
        ``0 <= num_fused_shared_experts < topk``.
    routed_scaling_factor : float
    apply_routed_scaling_factor_on_output : bool

    Returns
    -------
    list of torch.Tensor
        ``[weights fp32 [T, topk], ids int32 [T, topk]]``, new tensors.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable; no host sync.
    """
    return _moe_fused_gate(input_tensor, bias, num_expert_group, topk_group, topk, num_fused_shared_experts,
                           routed_scaling_factor, apply_routed_scaling_factor_on_output)


def kimi_k2_moe_fused_gate(
    input_tensor: torch.Tensor,
    bias: torch.Tensor,
    topk: int,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    apply_routed_scaling_factor_on_output: bool = False,
) -> List[torch.Tensor]:
    r"""Kimi-K2 routing (one group of 384 experts): ``[weights, ids]`` of each token's experts.

    Per token, in fp32: ``s = sigmoid(input)``; the ``topk`` experts with the largest
    ``s + bias`` are chosen (ties: lower index; descending order); their weights are ``s``,
    divided by their sum when ``renormalize``, then multiplied by ``routed_scaling_factor``
    when ``apply_routed_scaling_factor_on_output``.

    Parameters
    ----------
    input_tensor : torch.Tensor
        ``[T, E]`` fp32/fp16/bf16, contiguous (E = 384 for Kimi-K2; any E up to 1024 works).
    bias : torch.Tensor
        ``[E]``, dtype of ``input_tensor``, contiguous.
    topk : int
        At most 32 and at most E.
    renormalize : bool
    routed_scaling_factor : float
    apply_routed_scaling_factor_on_output : bool

    Returns
    -------
    list of torch.Tensor
        ``[weights fp32 [T, topk], ids int32 [T, topk]]``, new tensors.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable; no host sync.
    """
    return _kimi_k2_moe_fused_gate(input_tensor, bias, topk, renormalize, routed_scaling_factor,
                                   apply_routed_scaling_factor_on_output)


def moe_align_block_size(
    topk_ids: torch.Tensor,
    num_experts: int,
    block_size: int,
    sorted_token_ids: torch.Tensor,
    experts_ids: torch.Tensor,
    num_tokens_post_pad: torch.Tensor,
    cumsum_buffer: torch.Tensor,
    pad_sorted_token_ids: bool = False,
) -> None:
    r"""Group the flat (token, slot) entries of ``topk_ids`` by expert into blocks of
    ``block_size`` rows, the layout of the fused MoE GEMMs.

    Entry ``i`` of ``topk_ids.flatten()`` belongs to bucket ``e = topk_ids.flat[i] + 1``
    (ids in ``[-1, E)``, -1 marking a token not handled on this rank; callers pass
    ``num_experts = E + 1``). With ``c_e`` entries in bucket ``e``, ``c'_e`` that count rounded
    up to a multiple of ``block_size`` and ``o_e = sum(c'_{e'} for e' < e)``:

    - ``num_tokens_post_pad[0] = sum(c'_e)``;
    - ``sorted_token_ids[o_e : o_e + c_e]`` = the flat indices of bucket ``e``;
    - ``experts_ids[j] = e - 1`` for every block ``j`` of bucket ``e`` (-1: dropped tokens);
    - with ``pad_sorted_token_ids`` every other entry of ``sorted_token_ids`` is set to
      ``topk_ids.numel()``; without it they are left as they were.

    ``cumsum_buffer`` is scratch. An id outside ``[-1, E)`` is dropped (its entry is placed
    nowhere); with ``SGL_KERNEL_DEBUG=1`` it raises ``RuntimeError`` (the op synchronises).

    Parameters
    ----------
    topk_ids : torch.Tensor
        ``[T, k]`` int32 (int64 accepted), contiguous.
    num_experts : int
        Buckets, E + 1; at most 4096.
    block_size : int
    sorted_token_ids : torch.Tensor
        int32, written; at least ``numel + min(numel, num_experts) * (block_size - 1)``
        entries (the largest padded total; API.md asks for ``numel + num_experts *
        (block_size - 1)``, which is never less).
    experts_ids : torch.Tensor
        int32, written; at least ``ceil(P / block_size)`` entries for that minimum ``P``.
    num_tokens_post_pad : torch.Tensor
        int32 ``[1]``, written.
    cumsum_buffer : torch.Tensor
        int32, at least ``num_experts + 1`` entries, scratch (written).
    pad_sorted_token_ids : bool

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable; no host sync (except in debug mode).
    """
    _moe_align_block_size(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
                          cumsum_buffer, pad_sorted_token_ids)


def moe_sum(input_tensor: torch.Tensor, output_tensor: torch.Tensor) -> None:
    r"""``output[t] = sum(input[t, j] for j in range(topk))``: the sum of each token's expert
    outputs, in fp32 in order of ``j``, rounded once.

    Parameters
    ----------
    input_tensor : torch.Tensor
        ``[T, topk, H]`` fp32/fp16/bf16, last dim contiguous (other strides free).
    output_tensor : torch.Tensor
        ``[T, H]``, dtype of the input, last dim contiguous, written.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    _moe_sum(input_tensor, output_tensor)


def moe_sum_reduce(input_tensor: torch.Tensor, output_tensor: torch.Tensor, routed_scaling_factor: float = 0) -> None:
    r"""``output[t] = routed_scaling_factor * sum(input[t, j] for j in range(topk))``, summed in
    fp32 in order of ``j``, one rounding. The factor is used literally (the default 0 gives
    zeros, and NaN or inf where the sum is NaN or inf).

    Parameters
    ----------
    input_tensor : torch.Tensor
        ``[T, topk, H]`` fp32/fp16/bf16, last dim contiguous (other strides free).
    output_tensor : torch.Tensor
        ``[T, H]``, dtype of the input, last dim contiguous, written.
    routed_scaling_factor : float

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    _moe_sum_reduce(input_tensor, output_tensor, float(routed_scaling_factor))


def prepare_moe_input(
    topk_ids: torch.Tensor,
    expert_offsets: torch.Tensor,
    problem_sizes1: torch.Tensor,
    problem_sizes2: torch.Tensor,
    input_permutation: torch.Tensor,
    output_permutation: torch.Tensor,
    num_experts: int,
    n: int,
    k: int,
    blockscale_offsets: Optional[torch.Tensor] = None,
) -> None:
    r"""The grouped-GEMM layout of the CUTLASS MoE path: per-expert row counts, offsets and
    problem sizes, and the permutations between token order and expert order.

    With ``c_e`` = the entries of ``topk_ids`` equal to ``e``:
    ``expert_offsets = [0, cumsum(c)]``, ``blockscale_offsets = [0, cumsum(round_up(c, 128))]``,
    ``problem_sizes1[e] = (c_e, 2 n, k)``, ``problem_sizes2[e] = (c_e, k, n)``. Flat entry ``i``
    (token ``i // topk``) of expert ``e`` gets the slot ``q`` in ``[expert_offsets[e],
    expert_offsets[e + 1])``: ``input_permutation[q] = i // topk`` and
    ``output_permutation[i] = q``. Inside an expert the slots follow ascending ``i``
    (deterministic).

    An id outside ``[0, num_experts)`` (e.g. -1 for an expert on another rank) is dropped: it is
    counted nowhere, its ``output_permutation`` entry is -1, and the unused tail
    ``input_permutation[expert_offsets[E]:]`` is -1 (``apply_shuffle_mul_sum`` skips -1). With
    ``SGL_KERNEL_DEBUG=1`` such an id raises ``RuntimeError`` instead (the op synchronises).

    Parameters
    ----------
    topk_ids : torch.Tensor
        ``[T, topk]`` int32, contiguous.
    expert_offsets : torch.Tensor
        int32 ``[num_experts + 1]``, written.
    problem_sizes1, problem_sizes2 : torch.Tensor
        int32 ``[num_experts, 3]``, contiguous, written.
    input_permutation, output_permutation : torch.Tensor
        int32 ``[T * topk]``, written.
    num_experts : int
        At most 4096.
    n, k : int
        The GEMMs' sizes written into the problem sizes.
    blockscale_offsets : torch.Tensor, optional
        int32 ``[num_experts + 1]``, written when given.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable; no host sync (except in debug mode).
    """
    _prepare_moe_input(topk_ids, expert_offsets, blockscale_offsets, problem_sizes1, problem_sizes2,
                       input_permutation, output_permutation, num_experts, n, k)


def apply_shuffle_mul_sum(
    input: torch.Tensor,
    output: torch.Tensor,
    permutation: torch.Tensor,
    factors: Optional[torch.Tensor],
) -> None:
    r"""``output[i] = sum(factors[i * topk + j] * input[permutation[i * topk + j]] for j in
    range(topk))`` with ``topk = permutation.numel() // output.shape[0]``: the weighted sum of
    each token's expert outputs, gathered from expert order.

    Each product and the sum are computed in fp32, in order of ``j``, rounded once. A
    ``permutation`` entry outside ``[0, input.shape[0])`` (the -1 of a dropped expert id)
    contributes nothing.

    Parameters
    ----------
    input : torch.Tensor
        ``[R, K]`` fp16/bf16, contiguous (``R`` is normally ``m * topk``).
    output : torch.Tensor
        ``[m, K]``, dtype of ``input``, contiguous, written.
    permutation : torch.Tensor
        int32 ``[m * topk]``, contiguous.
    factors : torch.Tensor or None
        ``[m * topk]`` or ``[m, topk]``, dtype of ``output``, contiguous; ``None``: all ones.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    _apply_shuffle_mul_sum(input, output, permutation, factors)


def fp8_blockwise_scaled_grouped_mm(
    output: torch.Tensor,
    a_ptrs: torch.Tensor,
    b_ptrs: torch.Tensor,
    out_ptrs: torch.Tensor,
    a_scales_ptrs: torch.Tensor,
    b_scales_ptrs: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    scales_a: torch.Tensor,
    scales_b: torch.Tensor,
    stride_a: torch.Tensor,
    stride_b: torch.Tensor,
    stride_c: torch.Tensor,
    layout_sfa: torch.Tensor,
    layout_sfb: torch.Tensor,
    problem_sizes: torch.Tensor,
    expert_offsets: torch.Tensor,
    workspace: torch.Tensor,
) -> None:
    r"""The expert GEMMs of a CUTLASS MoE layer in one grouped launch, with DeepSeek-style
    block scales: for each expert ``e`` with ``(M_e, N, K) = problem_sizes[e]`` and
    ``o = expert_offsets[e]``,

    ``output[o:o+M_e] = sum_kb (a[o:o+M_e, kb] @ b[e][kb, :]) * scales_a[o:o+M_e, kb, None]
    * scales_b[e][kb].repeat_interleave(128)``

    over the 128-deep k-blocks ``kb`` (``fp8_blockwise_scaled_mm`` of the expert's rows), with
    fp32 accumulation, rounded once to ``output.dtype``.

    Parameters
    ----------
    output : torch.Tensor
        ``[R, N]`` bf16/fp16, row-major (row stride a multiple of 8), written. Rows no expert
        covers are left as they are.
    a_ptrs, b_ptrs, out_ptrs, a_scales_ptrs, b_scales_ptrs : torch.Tensor
        int64 ``[E]``, contiguous: scratch the op fills with each expert's pointers.
    a : torch.Tensor
        e4m3 ``[R, K]``, row-major, the experts' rows stacked; ``K % 128 == 0``.
    b : torch.Tensor
        e4m3 ``[E, K, N]``, each expert column-major (``w.transpose(1, 2)`` of a contiguous
        ``[E, N, K]`` weight); ``N % 128 == 0``.
    scales_a : torch.Tensor
        fp32 ``[R, K / 128]``: one scale per row and k-block. Read in place when contiguous;
        another layout is copied once into a contiguous buffer.
    scales_b : torch.Tensor
        fp32 ``[E, K / 128, N / 128]``. Read in place when each expert's block is K-major and
        packed (the ``transpose(1, 2)`` of a contiguous ``[E, N / 128, K / 128]`` tensor);
        another layout is copied once.
    stride_a, stride_b, stride_c : torch.Tensor
        int64 ``[E]`` (the leading dimensions K, K, N). Checked for shape and dtype only: the
        op takes the strides from ``a``, ``b`` and ``output`` themselves.
    layout_sfa, layout_sfb : torch.Tensor
        int32 ``[E, 5]``, contiguous: scratch the op fills with each expert's scale layouts.
    problem_sizes : torch.Tensor
        int32 ``[E, 3]`` = ``(M_e, N, K)``, contiguous, on the device.
    expert_offsets : torch.Tensor
        int32 ``[E]``: the first row of each expert in ``a`` and ``output``.
    workspace : torch.Tensor
        uint8, contiguous, written. A few hundred KiB serve any E up to thousands; a smaller
        or unaligned one is replaced by a temporary from the caching allocator.

    Notes
    -----
    ``problem_sizes`` and ``expert_offsets`` are read on the device. An expert whose entry is
    inconsistent (``M_e < 0``, an offset outside ``a``, ``o + M_e > R``, or an ``N`` / ``K``
    other than the tensors') is skipped: its rows are not written, and nothing outside the
    tensors is touched. With ``SGL_KERNEL_DEBUG=1`` such an entry raises instead. Any ``M_e``
    works (it need not be a multiple of 16). Experts' row ranges must not overlap.

    Arch: sm90a (the CUTLASS 3.x kernels of the GEMM family). CUDA-graph capturable; no host
    sync (except in debug mode).
    """
    _fp8_blockwise_scaled_grouped_mm(output, a_ptrs, b_ptrs, out_ptrs, a_scales_ptrs, b_scales_ptrs, a, b,
                                     scales_a, scales_b, stride_a, stride_b, stride_c, layout_sfa, layout_sfb,
                                     problem_sizes, expert_offsets, workspace)

def fused_qk_norm_rope(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    base: float,
    is_neox: bool,
    position_ids: torch.Tensor,
    factor: float,
    low: float,
    high: float,
    attention_factor: float,
    rotary_dim: Optional[int] = None,
) -> None:
    r"""Per-head RMSNorm, then rotary embedding, of the q and k heads of a packed ``qkv``, in
    place (the v heads are untouched).

    For every q head and k head: ``x <- x * rsqrt(mean(x^2) + eps) * w`` (``w`` = ``q_weight``
    or ``k_weight``), then RoPE on the first ``R = rotary_dim`` elements (halves when
    ``is_neox``, else interleaved pairs) with angle ``position * f_i``,
    ``f_i = base^(-2 i / R)``; when ``factor != 1`` (YaRN) ``ramp = clamp((i - low) / (high -
    low), 0, 1)`` and ``f_i <- f_i / factor * ramp + f_i * (1 - ramp)``. Rotated elements are
    multiplied by ``attention_factor``. fp32 arithmetic, one rounding to bf16.

    Parameters
    ----------
    qkv : torch.Tensor
        bf16 ``[T, (num_heads_q + num_heads_k + num_heads_v) * head_dim]``, last dim
        contiguous; modified in place.
    num_heads_q, num_heads_k, num_heads_v : int
    head_dim : int
        64, 128 or 256.
    eps : float
    q_weight, k_weight : torch.Tensor
        bf16 ``[head_dim]``.
    base : float
    is_neox : bool
    position_ids : torch.Tensor
        int32 ``[T]``.
    factor, low, high, attention_factor : float
        YaRN parameters (``factor = 1``: plain RoPE).
    rotary_dim : int, optional
        ``None``: ``head_dim``. A multiple of ``2 * head_dim / 32``, at most ``head_dim``.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    args = (qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight, base, is_neox,
            position_ids, factor, low, high, attention_factor)
    if rotary_dim is None:
        _fused_qk_norm_rope(*args)
    else:
        _fused_qk_norm_rope(*args, rotary_dim)


def self_checks() -> Dict[str, Callable[[], None]]:
    """Small end-to-end checks for ``python -m sgl_kernel`` against torch."""

    def check_topk_softmax() -> None:
        # distinct logits: torch.topk's order among ties is unspecified
        g = torch.randperm(37 * 64, device="cuda").view(37, 64).float() / 256 - 4
        w = torch.empty(37, 6, device="cuda")
        ids = torch.empty(37, 6, device="cuda", dtype=torch.int32)
        topk_softmax(w, ids, g, renormalize=False)
        ref_w, ref_ids = torch.softmax(g, -1).topk(6, dim=-1)
        torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)
        if not torch.equal(ids.long(), ref_ids):
            raise AssertionError("topk_softmax: expert ids differ from torch.topk")

    def check_topk_sigmoid() -> None:
        g = torch.randperm(37 * 128, device="cuda").view(37, 128).float() / 512 - 4
        bias = torch.arange(128, device="cuda").float() * 1e-3
        w = torch.empty(37, 8, device="cuda")
        ids = torch.empty(37, 8, device="cuda", dtype=torch.int32)
        topk_sigmoid(w, ids, g, renormalize=True, correction_bias=bias)
        p = torch.sigmoid(g)
        ref_ids = (p + bias).topk(8, dim=-1).indices
        ref_w = p.gather(1, ref_ids)
        torch.testing.assert_close(w, ref_w / ref_w.sum(-1, keepdim=True), rtol=1e-5, atol=1e-6)
        if not torch.equal(ids.long(), ref_ids):
            raise AssertionError("topk_sigmoid: expert ids differ from torch.topk")

    def check_moe_fused_gate() -> None:
        x = torch.randn(19, 256, device="cuda")
        bias = torch.randn(256, device="cuda") * 0.1
        w, ids = moe_fused_gate(x, bias, 8, 4, 8, 0, 2.5, True)
        s = torch.sigmoid(x)
        b = s + bias
        group_score = b.view(19, 8, 32).topk(2, dim=-1).values.sum(-1)
        keep = torch.zeros(19, 8, device="cuda", dtype=torch.bool)
        keep.scatter_(1, group_score.topk(4, dim=-1).indices, True)
        masked = b.masked_fill(~keep.repeat_interleave(32, dim=1), float("-inf"))
        ref_ids = masked.topk(8, dim=-1).indices
        ref_w = s.gather(1, ref_ids)
        ref_w = ref_w / ref_w.sum(-1, keepdim=True) * 2.5
        if not torch.equal(ids.long(), ref_ids):
            raise AssertionError("moe_fused_gate: expert ids differ from the grouped top-k")
        torch.testing.assert_close(w, ref_w, rtol=1e-5, atol=1e-6)

    def check_kimi_k2_moe_fused_gate() -> None:
        x = torch.randperm(19 * 384, device="cuda").view(19, 384).float() / 1024 - 3
        bias = torch.zeros(384, device="cuda")
        w, ids = kimi_k2_moe_fused_gate(x, bias, 8, True, 2.5, True)
        s = torch.sigmoid(x)
        ref_ids = s.topk(8, dim=-1).indices
        ref_w = s.gather(1, ref_ids)
        if not torch.equal(ids.long(), ref_ids):
            raise AssertionError("kimi_k2_moe_fused_gate: expert ids differ from torch.topk")
        torch.testing.assert_close(w, ref_w / ref_w.sum(-1, keepdim=True) * 2.5, rtol=1e-5, atol=1e-6)

    def check_moe_align_block_size() -> None:
        experts, block = 16, 8
        ids = torch.randint(-1, experts, (45, 4), device="cuda", dtype=torch.int32)
        cap = ids.numel() + (experts + 1) * (block - 1)
        sorted_ids = torch.empty(cap, device="cuda", dtype=torch.int32)
        expert_ids = torch.empty((cap + block - 1) // block, device="cuda", dtype=torch.int32)
        total = torch.empty(1, device="cuda", dtype=torch.int32)
        cumsum = torch.empty(experts + 2, device="cuda", dtype=torch.int32)
        moe_align_block_size(ids, experts + 1, block, sorted_ids, expert_ids, total, cumsum, True)
        counts = torch.bincount(ids.flatten().long() + 1, minlength=experts + 1)
        padded = (counts + block - 1) // block * block
        if int(total) != int(padded.sum()):
            raise AssertionError("moe_align_block_size: wrong padded total")
        start = 0
        flat = ids.flatten()
        for e in range(experts + 1):
            got = sorted_ids[start : start + int(counts[e])].sort().values
            want = (flat == e - 1).nonzero().flatten().to(torch.int32)
            if not torch.equal(got, want) or bool((expert_ids[start // block : (start + int(padded[e])) // block] != e - 1).any()):
                raise AssertionError(f"moe_align_block_size: bucket {e} differs")
            if bool((sorted_ids[start + int(counts[e]) : start + int(padded[e])] != ids.numel()).any()):
                raise AssertionError(f"moe_align_block_size: bucket {e} padding is not numel")
            start += int(padded[e])

    def check_moe_sum() -> None:
        x = torch.randn(33, 8, 2050, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(33, 2050, device="cuda", dtype=torch.bfloat16)
        moe_sum(x, out)
        torch.testing.assert_close(out, x.float().sum(1).bfloat16(), rtol=1e-2, atol=1e-2)
        moe_sum_reduce(x, out, 2.5)
        torch.testing.assert_close(out, (x.float().sum(1) * 2.5).bfloat16(), rtol=1e-2, atol=1e-2)

    def check_prepare_moe_input() -> None:
        experts = 16
        ids = torch.randint(0, experts, (37, 4), device="cuda", dtype=torch.int32)
        offsets = torch.empty(experts + 1, device="cuda", dtype=torch.int32)
        ps1 = torch.empty(experts, 3, device="cuda", dtype=torch.int32)
        ps2 = torch.empty_like(ps1)
        in_perm = torch.empty(ids.numel(), device="cuda", dtype=torch.int32)
        out_perm = torch.empty_like(in_perm)
        prepare_moe_input(ids, offsets, ps1, ps2, in_perm, out_perm, experts, 256, 512)
        counts = torch.bincount(ids.flatten().long(), minlength=experts)
        if not torch.equal(offsets[1:].long(), counts.cumsum(0)) or int(offsets[0]) != 0:
            raise AssertionError("prepare_moe_input: expert offsets differ from the cumulative counts")
        if not torch.equal(ps1[:, 0].long(), counts) or not torch.equal(ps2[:, 0].long(), counts):
            raise AssertionError("prepare_moe_input: problem sizes differ from the counts")
        flat = torch.arange(ids.numel(), device="cuda")
        if not torch.equal(in_perm[out_perm.long()].long(), flat // 4):
            raise AssertionError("prepare_moe_input: input_permutation[output_permutation[i]] != i // topk")
        slot_expert = torch.searchsorted(offsets[1:].long(), out_perm.long(), right=True)
        if not torch.equal(slot_expert, ids.flatten().long()):
            raise AssertionError("prepare_moe_input: an entry's slot is outside its expert's range")

    def check_apply_shuffle_mul_sum() -> None:
        m, topk, hidden = 21, 4, 136
        x = torch.randn(m * topk, hidden, device="cuda", dtype=torch.bfloat16)
        perm = torch.randperm(m * topk, device="cuda").to(torch.int32)
        w = torch.rand(m, topk, device="cuda").to(torch.bfloat16)
        out = torch.empty(m, hidden, device="cuda", dtype=torch.bfloat16)
        apply_shuffle_mul_sum(x, out, perm, w)
        ref = (x[perm.long()].float().view(m, topk, hidden) * w.float().unsqueeze(-1)).sum(1)
        torch.testing.assert_close(out, ref.bfloat16(), rtol=1e-2, atol=1e-2)

    def check_fused_qk_norm_rope() -> None:
        t, hq, hk, hv, d = 9, 4, 2, 2, 128
        qkv = torch.randn(t, (hq + hk + hv) * d, device="cuda", dtype=torch.bfloat16)
        qw = (1 + 0.1 * torch.randn(d, device="cuda")).bfloat16()
        kw = (1 + 0.1 * torch.randn(d, device="cuda")).bfloat16()
        pos = torch.randint(0, 4096, (t,), device="cuda", dtype=torch.int32)
        x = qkv.float().view(t, hq + hk + hv, d)
        out = qkv.clone()
        fused_qk_norm_rope(out, hq, hk, hv, d, 1e-6, qw, kw, 10000.0, True, pos, 1.0, 0.0, 0.0, 1.0)
        w = torch.cat([qw.float().expand(hq, d), kw.float().expand(hk, d)])
        y = x[:, : hq + hk] * torch.rsqrt(x[:, : hq + hk].pow(2).mean(-1, keepdim=True) + 1e-6) * w
        inv = 10000.0 ** (-torch.arange(0, d, 2, device="cuda", dtype=torch.float64) / d)
        ang = pos.double()[:, None] * inv
        cos, sin = ang.cos().float()[:, None], ang.sin().float()[:, None]
        a, b = y[..., : d // 2], y[..., d // 2 :]
        ref = torch.cat([a * cos - b * sin, b * cos + a * sin], -1)
        got = out.float().view(t, hq + hk + hv, d)
        torch.testing.assert_close(got[:, : hq + hk], ref, rtol=2e-2, atol=2e-2)
        if not torch.equal(got[:, hq + hk :], x[:, hq + hk :]):
            raise AssertionError("fused_qk_norm_rope: the v heads changed")

    def check_fp8_blockwise_scaled_grouped_mm() -> None:
        e, n, k = 3, 256, 384
        # expert 2 at rows 1..19, expert 0 at 20..24, expert 1 empty; row 0 is not written
        m, offsets, rows = [5, 0, 19], [20, 0, 1], 25
        fp8 = torch.float8_e4m3fn
        a = torch.randn(rows, k, device="cuda").to(fp8)
        w = torch.randn(e, n, k, device="cuda").to(fp8)
        sa = torch.rand(rows, k // 128, device="cuda") + 0.5
        sb = torch.rand(e, n // 128, k // 128, device="cuda") + 0.5
        out = torch.full((rows, n), 7.0, device="cuda", dtype=torch.bfloat16)
        i64 = dict(dtype=torch.int64, device="cuda")
        sizes = torch.tensor([[mi, n, k] for mi in m], dtype=torch.int32, device="cuda")
        offs = torch.tensor(offsets, dtype=torch.int32, device="cuda")
        fp8_blockwise_scaled_grouped_mm(
            out, *[torch.empty(e, **i64) for _ in range(5)], a, w.transpose(1, 2), sa, sb.transpose(1, 2),
            torch.full((e,), k, **i64), torch.full((e,), k, **i64), torch.full((e,), n, **i64),
            torch.empty(e, 5, dtype=torch.int32, device="cuda"), torch.empty(e, 5, dtype=torch.int32, device="cuda"),
            sizes, offs, torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))
        ref = torch.full((rows, n), 7.0, dtype=torch.float64, device="cuda")
        for x in range(e):
            r0, r1 = offsets[x], offsets[x] + m[x]
            if r0 == r1:
                continue
            acc = torch.zeros(r1 - r0, n, dtype=torch.float64, device="cuda")
            for kb in range(k // 128):
                blk = a[r0:r1, kb * 128:(kb + 1) * 128].double() @ w[x, :, kb * 128:(kb + 1) * 128].double().t()
                acc += blk * sa[r0:r1, kb].double()[:, None] * sb[x, :, kb].double().repeat_interleave(128)[None, :]
            ref[r0:r1] = acc
        torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max()))

    return {
        "topk_softmax": check_topk_softmax,
        "topk_sigmoid": check_topk_sigmoid,
        "moe_fused_gate": check_moe_fused_gate,
        "moe_align_block_size": check_moe_align_block_size,
        "moe_sum": check_moe_sum,
        "moe_sum_reduce": check_moe_sum,
        "kimi_k2_moe_fused_gate": check_kimi_k2_moe_fused_gate,
        "prepare_moe_input": check_prepare_moe_input,
        "apply_shuffle_mul_sum": check_apply_shuffle_mul_sum,
        "fused_qk_norm_rope": check_fused_qk_norm_rope,
        "fp8_blockwise_scaled_grouped_mm": check_fp8_blockwise_scaled_grouped_mm,
    }
