# SPDX-License-Identifier: Apache-2.0
"""Package surface (API.md sections 1 and 3.5): import, build_info, op schemas, Python
signatures, utils, fake implementations, host-side errors, the load-time torch check and
``python -m sgl_kernel``. Runs without a GPU; the few GPU-only checks are marked ``gpu``."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import sgl_kernel
from sgl_kernel import _loader, info
from tests.helpers import raises_op_error

# ---------------------------------------------------------------------------------------
# The contract tables. Add every new op and public function here, copied from API.md.

# op name -> schema exactly as API.md writes it after "op: " (without the namespace)
OP_SCHEMAS = {
    # 2.1.1
    "rmsnorm": "rmsnorm(Tensor! output, Tensor input, Tensor weight, float eps, bool enable_pdl) -> ()",
    "fused_add_rmsnorm": "fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()",
    "gemma_rmsnorm": "gemma_rmsnorm(Tensor! output, Tensor input, Tensor weight, float eps, bool enable_pdl) -> ()",
    "gemma_fused_add_rmsnorm": "gemma_fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()",
    # 2.1.2
    "silu_and_mul": "silu_and_mul(Tensor! out, Tensor input) -> ()",
    "gelu_and_mul": "gelu_and_mul(Tensor! out, Tensor input) -> ()",
    "gelu_tanh_and_mul": "gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()",
    # 2.1.4
    "copy_to_gpu_no_ce": "copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()",
    "downcast_fp8": "downcast_fp8(Tensor k, Tensor v, Tensor! k_out, Tensor! v_out, Tensor k_scale, Tensor v_scale, Tensor loc, int mult, int offset) -> ()",
    "concat_mla_k": "concat_mla_k(Tensor! k, Tensor k_nope, Tensor k_rope) -> ()",
    "concat_mla_absorb_q": "concat_mla_absorb_q(Tensor a, Tensor b, Tensor! out) -> ()",
    # 2.1.3
    "apply_rope_pos_ids_cos_sin_cache": (
        "apply_rope_pos_ids_cos_sin_cache(Tensor q, Tensor k, Tensor! q_rope, Tensor! k_rope, "
        "Tensor cos_sin_cache, Tensor pos_ids, bool interleave, bool enable_pdl, "
        "Tensor? v, Tensor!? k_buffer, Tensor!? v_buffer, Tensor? kv_cache_loc) -> ()"
    ),
    # 2.1.5 (API.md omits the write marks; 1.2: ours add them)
    "fast_topk": "fast_topk(Tensor score, Tensor! indices, Tensor lengths, Tensor? row_starts) -> ()",
    "fast_topk_transform_fused": "fast_topk_transform_fused(Tensor score, Tensor lengths, Tensor! dst_page_table, Tensor src_page_table, Tensor cu_seqlens_q, Tensor? row_starts) -> ()",
    "fast_topk_transform_ragged_fused": "fast_topk_transform_ragged_fused(Tensor score, Tensor lengths, Tensor! topk_indices_ragged, Tensor topk_indices_offset, Tensor ? row_starts) -> ()",
    # 2.2 (API.md omits the write marks on output_q/output_s; 1.2: ours add them)
    "sgl_per_token_quant_fp8": "sgl_per_token_quant_fp8(Tensor input, Tensor! output_q, Tensor! output_s) -> ()",
    "sgl_per_tensor_quant_fp8": "sgl_per_tensor_quant_fp8(Tensor input, Tensor! output_q, Tensor! output_s, bool is_static) -> ()",
    "sgl_per_token_group_quant_8bit": (
        "sgl_per_token_group_quant_8bit(Tensor input, Tensor! output_q, Tensor! output_s, "
        "int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0) -> ()"
    ),
    "sgl_per_token_group_quant_8bit_v2": (
        "sgl_per_token_group_quant_8bit_v2(Tensor input, Tensor! output_q, Tensor! output_s, "
        "int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0, "
        "bool fuse_silu_and_mul, Tensor? masked_m) -> ()"
    ),
    "sgl_per_token_quant_int8": "sgl_per_token_quant_int8(Tensor input, Tensor! output_q, Tensor! output_s) -> ()",
    "fused_rmsnorm_quant": (
        "fused_rmsnorm_quant(Tensor! input, Tensor! output_q, Tensor! output_s, Tensor weight, "
        "int group_size, float rms_eps, float quant_eps, float fp8_min, float fp8_max, "
        "bool scale_ue8m0, bool enable_pdl) -> ()"
    ),
    "fused_add_rmsnorm_quant": (
        "fused_add_rmsnorm_quant(Tensor! input, Tensor! residual, Tensor! output_q, "
        "Tensor! output_s, Tensor weight, int group_size, float rms_eps, float quant_eps, "
        "float fp8_min, float fp8_max, bool scale_ue8m0, bool enable_pdl) -> ()"
    ),
    # 2.3
    "int8_scaled_mm": (
        "int8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, "
        "ScalarType out_dtype, Tensor? bias) -> Tensor"
    ),
    "fp8_scaled_mm": (
        "fp8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, "
        "ScalarType out_dtype, Tensor? bias) -> Tensor"
    ),
    "fp8_blockwise_scaled_mm": (
        "fp8_blockwise_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, "
        "ScalarType out_dtype) -> Tensor"
    ),
    # (API.md omits the write mark on the workspace cuBLASLt writes; 1.2: ours adds it)
    "bmm_fp8": (
        "bmm_fp8(Tensor A, Tensor B, Tensor! D, Tensor A_scale, Tensor B_scale, "
        "Tensor! workspace_buffer, int cublas_handle) -> ()"
    ),
    "awq_dequantize": "awq_dequantize(Tensor qweight, Tensor scales, Tensor qzeros) -> Tensor",
    "dsv3_router_gemm": "dsv3_router_gemm(Tensor! output, Tensor mat_a, Tensor mat_b) -> ()",
    "dsv3_fused_a_gemm": "dsv3_fused_a_gemm(Tensor! output, Tensor mat_a, Tensor mat_b) -> ()",
    # (API.md omits the write mark on output; 1.2: ours adds it)
    "shuffle_rows": "shuffle_rows(Tensor input, Tensor dst2src_map, Tensor! output) -> ()",
    # 2.4 (API.md omits the write mark on moe_sum_reduce's output; 1.2: ours adds it)
    "topk_softmax": (
        "topk_softmax(Tensor! topk_weights, Tensor! topk_indices, Tensor gating_output, bool renormalize, "
        "float moe_softcapping, Tensor? correction_bias) -> ()"
    ),
    "topk_sigmoid": (
        "topk_sigmoid(Tensor! topk_weights, Tensor! topk_indices, Tensor gating_output, bool renormalize, "
        "Tensor? correction_bias) -> ()"
    ),
    "moe_fused_gate": (
        "moe_fused_gate(Tensor input, Tensor bias, int num_expert_group, int topk_group, int topk, "
        "int num_fused_shared_experts, float routed_scaling_factor, bool apply_routed_scaling_factor_on_output) "
        "-> Tensor[]"
    ),
    "kimi_k2_moe_fused_gate": (
        "kimi_k2_moe_fused_gate(Tensor input, Tensor bias, int topk, bool renormalize, "
        "float routed_scaling_factor, bool apply_routed_scaling_factor_on_output) -> Tensor[]"
    ),
    "moe_align_block_size": (
        "moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, Tensor! sorted_token_ids, "
        "Tensor! experts_ids, Tensor! num_tokens_post_pad, Tensor! cumsum_buffer, bool pad_sorted_token_ids) -> ()"
    ),
    "moe_sum": "moe_sum(Tensor input, Tensor! output) -> ()",
    "moe_sum_reduce": "moe_sum_reduce(Tensor input, Tensor! output, float routed_scaling_factor) -> ()",
    # (API.md omits the write marks of prepare_moe_input's outputs and apply_shuffle_mul_sum's
    # output; 1.2: ours adds them)
    "prepare_moe_input": (
        "prepare_moe_input(Tensor topk_ids, Tensor! expert_offsets, Tensor!? blockscale_offsets, "
        "Tensor! problem_sizes1, Tensor! problem_sizes2, Tensor! input_permutation, Tensor! output_permutation, "
        "int num_experts, int n, int k) -> ()"
    ),
    "apply_shuffle_mul_sum": (
        "apply_shuffle_mul_sum(Tensor input, Tensor! output, Tensor permutation, Tensor? factors) -> ()"
    ),
    # (API.md omits the write marks of the output and the scratch arguments; 1.2: ours adds them)
    "fp8_blockwise_scaled_grouped_mm": (
        "fp8_blockwise_scaled_grouped_mm(Tensor! output, Tensor! a_ptrs, Tensor! b_ptrs, Tensor! out_ptrs, "
        "Tensor! a_scales_ptrs, Tensor! b_scales_ptrs, Tensor a, Tensor b, Tensor scales_a, Tensor scales_b, "
        "Tensor stride_a, Tensor stride_b, Tensor stride_c, Tensor! layout_sfa, Tensor! layout_sfb, "
        "Tensor problem_sizes, Tensor expert_offsets, Tensor! workspace) -> ()"
    ),
    "fused_qk_norm_rope": (
        "fused_qk_norm_rope(Tensor! qkv, int num_heads_q, int num_heads_k, int num_heads_v, int head_dim, "
        "float eps, Tensor q_weight, Tensor k_weight, float base, bool is_neox, Tensor position_ids, "
        "float factor, float low, float high, float attention_factor, int? rotary_dim=None) -> ()"
    ),
    # 2.5
    "merge_state": (
        "merge_state(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b, Tensor! v_merged, Tensor! s_merged) -> ()"
    ),
    "merge_state_v2": (
        "merge_state_v2(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b, Tensor! v_merged, Tensor! s_merged) -> ()"
    ),
    "lightning_attention_decode": (
        "lightning_attention_decode(Tensor q, Tensor k, Tensor v, Tensor past_kv, Tensor slope, Tensor! output, "
        "Tensor! new_kv) -> ()"
    ),
    # 2.6 (dispose, get_graph_buffer_ipc_meta, register_buffer, register_graph_buffers and
    # meta_size are inferred from the C++ function type: arguments _0, _1, ...)
    "init_custom_ar": "init_custom_ar(int[] ipc_tensors, Tensor rank_data, int rank, bool full_nvlink) -> int",
    "dispose": "dispose(int _0) -> ()",
    "all_reduce": "all_reduce(int fa, Tensor inp, Tensor! out, int reg_buffer, int reg_buffer_sz_bytes) -> ()",
    "get_graph_buffer_ipc_meta": "get_graph_buffer_ipc_meta(int _0) -> (int[], int[])",
    "register_buffer": "register_buffer(int _0, int[] _1) -> ()",
    "register_graph_buffers": "register_graph_buffers(int _0, int[][] _1, int[][] _2) -> ()",
    "meta_size": "meta_size() -> int",
    # 3.1
    "custom_relu": "custom_relu(Tensor input) -> Tensor",
    "fused_add_relu": "fused_add_relu(Tensor input, Tensor bias) -> Tensor",
    # 3.2 (sgl-kernel's op; our schema marks the written caches)
    "store_kv_cache": "store_kv_cache(Tensor! k_cache, Tensor! v_cache, Tensor out_loc, Tensor k, Tensor v) -> ()",
    # 3.3
    "embedding_lookup": "embedding_lookup(Tensor! out, Tensor weight, Tensor indices, int vocab_start, int vocab_length) -> ()",
    # 3.4
    "fast_compare_key": "fast_compare_key(Tensor x, Tensor y) -> int",
    # section 4's list (sgl-kernel's schema: the alias of the input is not declared)
    "weak_ref_tensor": "weak_ref_tensor(Tensor tensor) -> Tensor",
}

# Ops that work without a GPU (API.md: fast_compare_key, meta_size); build_info() reports
# them available everywhere. Every other op needs a CUDA kernel, and build_info() reports it
# unavailable without a GPU.
CPU_OPS: set = {"fast_compare_key", "meta_size"}

# public name -> (module it lives in, parameter list exactly as API.md writes it after "py: ")
PUBLIC_FUNCTIONS = {
    "rmsnorm": ("sgl_kernel.elementwise", "input, weight, eps=1e-6, out=None, enable_pdl=None"),
    # 2.2
    "sgl_per_token_quant_fp8": ("sgl_kernel.gemm", "input, output_q, output_s"),
    "sgl_per_tensor_quant_fp8": ("sgl_kernel.gemm", "input, output_q, output_s, is_static"),
    "sgl_per_token_group_quant_8bit": (
        "sgl_kernel.gemm",
        "input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0=False, "
        "fuse_silu_and_mul=False, masked_m=None, enable_v2=None",
    ),
    "sgl_per_token_group_quant_fp8": (
        "sgl_kernel.gemm",
        "input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0=False, "
        "fuse_silu_and_mul=False, masked_m=None, enable_v2=None",
    ),
    "sgl_per_token_group_quant_int8": (
        "sgl_kernel.gemm",
        "input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0=False, "
        "fuse_silu_and_mul=False, masked_m=None, enable_v2=None",
    ),
    "sgl_per_token_quant_int8": ("sgl_kernel.gemm", "input, output_q, output_s"),
    # 2.3
    "fp8_scaled_mm": ("sgl_kernel.gemm", "mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None"),
    "int8_scaled_mm": ("sgl_kernel.gemm", "mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None"),
    "fp8_blockwise_scaled_mm": ("sgl_kernel.gemm", "mat_a, mat_b, scales_a, scales_b, out_dtype"),
    "bmm_fp8": ("sgl_kernel.gemm", "A, B, A_scale, B_scale, dtype, out=None"),
    "awq_dequantize": ("sgl_kernel.gemm", "qweight, scales, qzeros"),
    "dsv3_router_gemm": ("sgl_kernel.gemm", "hidden_states, router_weights, out_dtype=torch.bfloat16"),
    "dsv3_fused_a_gemm": ("sgl_kernel.gemm", "mat_a, mat_b, output=None"),
    "shuffle_rows": ("sgl_kernel.gemm", "input_tensor, dst2src_map, output_tensor_shape"),
    # 2.4
    "topk_softmax": (
        "sgl_kernel.moe",
        "topk_weights, topk_ids, gating_output, renormalize=False, moe_softcapping=0.0, correction_bias=None",
    ),
    "topk_sigmoid": (
        "sgl_kernel.moe",
        "topk_weights, topk_ids, gating_output, renormalize=False, correction_bias=None",
    ),
    "moe_fused_gate": (
        "sgl_kernel.moe",
        "input_tensor, bias, num_expert_group, topk_group, topk, num_fused_shared_experts=0, "
        "routed_scaling_factor=0, apply_routed_scaling_factor_on_output=False",
    ),
    "kimi_k2_moe_fused_gate": (
        "sgl_kernel.moe",
        "input_tensor, bias, topk, renormalize=True, routed_scaling_factor=1.0, "
        "apply_routed_scaling_factor_on_output=False",
    ),
    "moe_align_block_size": (
        "sgl_kernel.moe",
        "topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad, cumsum_buffer, "
        "pad_sorted_token_ids=False",
    ),
    "moe_sum": ("sgl_kernel.moe", "input_tensor, output_tensor"),
    "moe_sum_reduce": ("sgl_kernel.moe", "input_tensor, output_tensor, routed_scaling_factor=0"),
    "prepare_moe_input": (
        "sgl_kernel.moe",
        "topk_ids, expert_offsets, problem_sizes1, problem_sizes2, input_permutation, output_permutation, "
        "num_experts, n, k, blockscale_offsets=None",
    ),
    "apply_shuffle_mul_sum": ("sgl_kernel.moe", "input, output, permutation, factors"),
    "fp8_blockwise_scaled_grouped_mm": (
        "sgl_kernel.moe",
        "output, a_ptrs, b_ptrs, out_ptrs, a_scales_ptrs, b_scales_ptrs, a, b, scales_a, scales_b, stride_a, "
        "stride_b, stride_c, layout_sfa, layout_sfb, problem_sizes, expert_offsets, workspace",
    ),
    "fused_qk_norm_rope": (
        "sgl_kernel.moe",
        "qkv, num_heads_q, num_heads_k, num_heads_v, head_dim, eps, q_weight, k_weight, base, is_neox, "
        "position_ids, factor, low, high, attention_factor, rotary_dim=None",
    ),
    "merge_state": ("sgl_kernel.attention", "v_a, s_a, v_b, s_b, v_merged=None, s_merged=None"),
    "merge_state_v2": ("sgl_kernel.attention", "v_a, s_a, v_b, s_b, v_merged=None, s_merged=None"),
    "lightning_attention_decode": ("sgl_kernel.attention", "q, k, v, past_kv, slope, output, new_kv"),
    "fused_rmsnorm_quant": (
        "sgl_kernel.elementwise",
        "input, output_q, output_s, weight, group_size, quant_eps, fp8_min, fp8_max, "
        "scale_ue8m0, rms_eps=1e-6, enable_pdl=None",
    ),
    "fused_add_rmsnorm_quant": (
        "sgl_kernel.elementwise",
        "input, residual, output_q, output_s, weight, group_size, quant_eps, fp8_min, "
        "fp8_max, scale_ue8m0, rms_eps=1e-6, enable_pdl=None",
    ),
    "fused_add_rmsnorm": ("sgl_kernel.elementwise", "input, residual, weight, eps=1e-6, enable_pdl=None"),
    "gemma_rmsnorm": ("sgl_kernel.elementwise", "input, weight, eps=1e-6, out=None, enable_pdl=None"),
    "gemma_fused_add_rmsnorm": ("sgl_kernel.elementwise", "input, residual, weight, eps=1e-6, enable_pdl=None"),
    "silu_and_mul": ("sgl_kernel.elementwise", "input, out=None"),
    "gelu_and_mul": ("sgl_kernel.elementwise", "input, out=None"),
    "gelu_tanh_and_mul": ("sgl_kernel.elementwise", "input, out=None"),
    "copy_to_gpu_no_ce": ("sgl_kernel.elementwise", "input, output"),
    "downcast_fp8": ("sgl_kernel.elementwise", "k, v, k_out, v_out, k_scale, v_scale, loc, mult=1, offset=0"),
    "concat_mla_k": ("sgl_kernel.elementwise", "k, k_nope, k_rope"),
    "concat_mla_absorb_q": ("sgl_kernel.elementwise", "a, b"),
    "FusedSetKVBufferArg": ("sgl_kernel.elementwise", "value, k_buffer, v_buffer, k_scale, v_scale, cache_loc"),
    "apply_rope_with_cos_sin_cache_inplace": (
        "sgl_kernel.elementwise",
        "positions, query, key, head_size, cos_sin_cache, is_neox=True, fused_set_kv_buffer_arg=None, "
        "enable_pdl=None",
    ),
    "fast_topk": ("sgl_kernel.top_k", "values, topk, dim"),
    "fast_topk_v2": ("sgl_kernel.top_k", "score, lengths, topk, row_starts=None"),
    "fast_topk_transform_fused": (
        "sgl_kernel.top_k",
        "score, lengths, page_table_size_1, cu_seqlens_q, topk, row_starts=None",
    ),
    "fast_topk_transform_ragged_fused": ("sgl_kernel.top_k", "score, lengths, topk_indices_offset, topk, row_starts=None"),
    # 2.6
    "init_custom_ar": ("sgl_kernel.allreduce", "ipc_tensors, rank_data, rank, full_nvlink"),
    "dispose": ("sgl_kernel.allreduce", "fa"),
    "all_reduce": ("sgl_kernel.allreduce", "fa, inp, out, reg_buffer, reg_buffer_sz_bytes"),
    "get_graph_buffer_ipc_meta": ("sgl_kernel.allreduce", "fa"),
    "register_buffer": ("sgl_kernel.allreduce", "fa, fake_ipc_ptrs"),
    "register_graph_buffers": ("sgl_kernel.allreduce", "fa, handles, offsets"),
    "meta_size": ("sgl_kernel.allreduce", ""),
    "custom_relu": ("sgl_kernel.project", "input"),
    "fused_add_relu": ("sgl_kernel.project", "input, bias"),
    "embedding_lookup": ("sgl_kernel.project", "weight, indices, *, vocab_range=None, out=None"),
    "fast_compare_key": ("sgl_kernel.project", "x, y"),
    "set_kv_buffer_kernel": ("sgl_kernel.memory", "k_cache, v_cache, loc, k, v, fallback=False"),
    "weak_ref_tensor": ("sgl_kernel.memory", "tensor"),
    "build_info": ("sgl_kernel.info", ""),
    "is_arch_support_pdl": ("sgl_kernel.utils", ""),
    "is_hopper_or_later_arch": ("sgl_kernel.utils", ""),
    "get_cuda_stream": ("sgl_kernel.utils", ""),
    "_get_cache_buf": ("sgl_kernel.utils", "name, bytes, device"),
    "_to_tensor_scalar_tuple": ("sgl_kernel.utils", "x"),
}

# API.md 3.5
BUILD_INFO_TYPES = {
    "version": str,
    "compat_version": str,
    "torch_version": str,
    "torch_runtime_version": str,
    "cuda_version": str,
    "arch_list": list,
    "families": dict,
    "device": (dict, type(None)),
    "ops": dict,
}
REQUIRED_FAMILIES = ("elementwise", "quantization", "gemm", "moe", "attention", "allreduce", "project")
BUILT_FAMILIES = ("elementwise", "project", "top_k", "allreduce", "moe", "attention")  # implemented so far: always compiled in

ACT_OPS = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")
ROPE_OP = "apply_rope_pos_ids_cos_sin_cache"


def _registered_ops() -> set:
    return {
        name.split("::", 1)[1]
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("sgl_kernel::")
    }


# ---------------------------------------------------------------------------------------
# Import and build_info


def test_version_is_str():
    assert isinstance(sgl_kernel.__version__, str)
    assert re.match(r"^\d+\.\d+", sgl_kernel.__version__), sgl_kernel.__version__


def test_build_info_keys_and_types():
    data = sgl_kernel.build_info()
    for key, typ in BUILD_INFO_TYPES.items():
        assert key in data, f"build_info() lacks {key!r}"
        assert isinstance(data[key], typ), f"build_info()[{key!r}] is {type(data[key]).__name__}"
    assert data["version"] == sgl_kernel.__version__
    assert re.match(r"^\d+\.\d+\.\d+", data["compat_version"]), data["compat_version"]
    assert data["torch_runtime_version"] == str(torch.__version__)
    assert re.match(r"^\d+\.\d+", data["torch_version"]), data["torch_version"]
    assert re.match(r"^\d+\.\d+", data["cuda_version"]), data["cuda_version"]


def test_build_info_is_json_serialisable():
    data = sgl_kernel.build_info()
    # Round trip without loss: no tuples, sets, torch objects or non-str keys.
    assert json.loads(json.dumps(data)) == data


def test_build_info_arch_list():
    arch_list = sgl_kernel.build_info()["arch_list"]
    assert arch_list, "no compiled targets"
    for a in arch_list:
        assert isinstance(a, str) and re.fullmatch(r"(sm|compute)_\d{2,3}[af]?", a), a


def test_build_info_families():
    families = sgl_kernel.build_info()["families"]
    for fam in REQUIRED_FAMILIES:
        assert fam in families, f"families lacks {fam!r}"
    for fam, built in families.items():
        assert isinstance(fam, str) and isinstance(built, bool), (fam, built)
    for fam in BUILT_FAMILIES:
        assert families[fam] is True, f"family {fam} not compiled in"


def test_build_info_ops_cover_every_registered_op():
    ops = sgl_kernel.build_info()["ops"]
    assert set(ops) == _registered_ops()
    for name, available in ops.items():
        assert isinstance(available, bool), (name, available)
    for name in CPU_OPS:
        assert ops[name] is True, name


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the GPU-less answer")
def test_build_info_without_gpu():
    data = sgl_kernel.build_info()
    assert data["device"] is None
    for name, available in data["ops"].items():
        if name not in CPU_OPS:
            assert available is False, f"{name} reported available without a GPU"


@pytest.mark.gpu
def test_build_info_with_gpu():
    data = sgl_kernel.build_info()
    dev = data["device"]
    assert isinstance(dev, dict)
    assert dev["name"] == torch.cuda.get_device_name()
    assert dev["capability"] == list(torch.cuda.get_device_capability())
    major, minor = dev["capability"]
    cc = 10 * major + minor
    cfg = _loader.build_config()
    for mod in info.family_modules():
        for name, min_arch in mod.OPS.items():
            fams = getattr(mod, "OP_FAMILIES", {}).get(name, (mod.FAMILY,))
            archs = [cfg.family_archs.get(f, []) for f in fams]
            expected = min_arch == 0 or (cc >= min_arch and any(info.archs_cover(a, cc) for a in archs))
            assert data["ops"][name] is expected, (name, cc, fams, archs)


# ---------------------------------------------------------------------------------------
# Op registration: every op of API.md with exactly its schema


def _arg_key(a) -> tuple:
    alias = a.alias_info
    return (
        a.name,
        str(a.type),
        a.has_default_value(),
        a.default_value,
        a.kwarg_only,
        alias is not None,
        alias is not None and alias.is_write,
    )


def _ret_key(r) -> tuple:
    alias = r.alias_info
    return (str(r.type), alias is not None, alias is not None and alias.is_write)


def test_no_unlisted_ops():
    """Every op registered under sgl_kernel has its API.md schema in OP_SCHEMAS."""
    assert _registered_ops() == set(OP_SCHEMAS)


@pytest.mark.parametrize("op", sorted(OP_SCHEMAS))
def test_op_schema(op):
    expected = torch._C.parse_schema("sgl_kernel::" + OP_SCHEMAS[op])
    packet = getattr(torch.ops.sgl_kernel, op)
    assert packet.overloads() == ["default"]
    actual = packet.default._schema
    assert actual.name == expected.name == f"sgl_kernel::{op}"
    assert actual.overload_name == expected.overload_name == ""
    mismatch = f"registered {actual} != API.md {expected}"
    assert [a.name for a in actual.arguments] == [a.name for a in expected.arguments], mismatch
    for got, want in zip(actual.arguments, expected.arguments):
        assert _arg_key(got) == _arg_key(want), f"argument {want.name}: {mismatch}"
    assert [_ret_key(r) for r in actual.returns] == [_ret_key(r) for r in expected.returns], mismatch


def _takes_tensors(op: str) -> bool:
    schema = torch._C.parse_schema("sgl_kernel::" + OP_SCHEMAS[op])
    return any("Tensor" in str(a.type) for a in schema.arguments)


# Ops without tensor arguments (allreduce's handle bookkeeping and meta_size): the dispatcher
# has no device to dispatch on, so they are registered for every backend
# (CompositeExplicitAutograd or a catch-all), not for the CUDA key.
NO_TENSOR_OPS = {op for op in OP_SCHEMAS if not _takes_tensors(op)}


@pytest.mark.parametrize("op", sorted(set(OP_SCHEMAS) - CPU_OPS - NO_TENSOR_OPS))
def test_op_has_cuda_kernel(op):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"sgl_kernel::{op}", "CUDA")


@pytest.mark.parametrize("op", sorted(NO_TENSOR_OPS))
def test_op_without_tensors_is_callable(op):
    """Called with no tensor the dispatcher picks the Undefined key's kernel: a backend-only
    registration (CUDA, CPU) would fail to dispatch."""
    name = f"sgl_kernel::{op}"
    assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "Undefined"), name
    assert torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CUDA"), name


# ---------------------------------------------------------------------------------------
# Python functions: names, modules, signatures


def _params(sig: inspect.Signature) -> list:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


@pytest.mark.parametrize("name", sorted(PUBLIC_FUNCTIONS))
def test_public_function_signature(name):
    module_name, params = PUBLIC_FUNCTIONS[name]
    module = importlib.import_module(module_name)
    fn = getattr(sgl_kernel, name)
    assert getattr(module, name) is fn, f"sgl_kernel.{name} is not {module_name}.{name}"
    expected = inspect.signature(eval(f"lambda {params}: None"))  # noqa: S307 - literal table
    assert _params(inspect.signature(fn)) == _params(expected), f"{name}{inspect.signature(fn)} != {name}({params})"


@pytest.mark.parametrize("name", sorted(n for n, (m, _) in PUBLIC_FUNCTIONS.items() if m != "sgl_kernel.info"))
def test_star_import_exports(name):
    module_name, _ = PUBLIC_FUNCTIONS[name]
    namespace: dict = {}
    exec(f"from {module_name} import *", namespace)  # noqa: S102
    assert namespace.get(name) is getattr(sgl_kernel, name)


# ---------------------------------------------------------------------------------------
# sgl_kernel.utils (API.md 1.1)


def test_pdl_and_hopper_helpers():
    expected = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    assert sgl_kernel.is_arch_support_pdl() is expected
    assert sgl_kernel.is_hopper_or_later_arch() is expected
    assert callable(sgl_kernel.is_arch_support_pdl.cache_clear)  # still an lru_cache


def test_pdl_helpers_under_torch_compile():
    """The helpers and the enable_pdl=None rule traced by Dynamo (fullgraph): the same
    answers as eager, and no warning about tracing through their cache (every op with
    enable_pdl=None calls one)."""
    from sgl_kernel.utils import _resolve_pdl

    def fn(x):
        pdl = _resolve_pdl(None)
        hopper = sgl_kernel.is_hopper_or_later_arch()
        return x + (1 if pdl else 2) + (10 if hopper else 20)

    expected = fn(torch.zeros(3))
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(fn, fullgraph=True, backend="eager")(torch.zeros(3))
    assert torch.equal(got, expected)
    cache_warnings = [str(w.message) for w in caught if "lru_cache" in str(w.message)]
    assert not cache_warnings, cache_warnings


@pytest.mark.gpu
def test_get_cuda_stream():
    assert sgl_kernel.get_cuda_stream() == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert sgl_kernel.get_cuda_stream() == side.cuda_stream
    assert isinstance(sgl_kernel.get_cuda_stream(), int)


def test_to_tensor_scalar_tuple():
    t = torch.ones(3)
    pair = sgl_kernel._to_tensor_scalar_tuple(t)
    assert isinstance(pair, tuple) and len(pair) == 2
    assert pair[0] is t and pair[1] == 0
    assert sgl_kernel._to_tensor_scalar_tuple(1.5) == (None, 1.5)
    assert sgl_kernel._to_tensor_scalar_tuple(3) == (None, 3)


def test_get_cache_buf_cpu():
    name = "test_get_cache_buf_cpu"
    buf = sgl_kernel._get_cache_buf(name, 100, torch.device("cpu"))
    assert buf.dtype == torch.uint8 and buf.device.type == "cpu" and buf.numel() >= 100
    # Cached per (name, device): a smaller or equal request returns the same tensor.
    assert sgl_kernel._get_cache_buf(name, 100, torch.device("cpu")) is buf
    assert sgl_kernel._get_cache_buf(name, 10, "cpu") is buf
    # Another name is another buffer.
    other = sgl_kernel._get_cache_buf(name + "_other", 100, torch.device("cpu"))
    assert other is not buf
    # A larger request grows it, and the grown buffer is then the cached one.
    big = sgl_kernel._get_cache_buf(name, 1000, torch.device("cpu"))
    assert big.numel() >= 1000 and big.dtype == torch.uint8
    assert sgl_kernel._get_cache_buf(name, 50, torch.device("cpu")) is big


# ---------------------------------------------------------------------------------------
# Fake implementations (DESIGN.md 7: FakeTensorMode makes fake cuda tensors without a GPU)


@pytest.mark.parametrize("op", ACT_OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fake_act_and_mul(op, dtype):
    fn = getattr(sgl_kernel, op)
    with FakeTensorMode():
        x = torch.empty(3, 5, 64, dtype=dtype, device="cuda")
        y = fn(x)
        assert y.shape == (3, 5, 32) and y.dtype == dtype and y.device.type == "cuda"
        out = torch.empty(3, 5, 32, dtype=dtype, device="cuda")
        assert fn(x, out=out) is out
        assert getattr(torch.ops.sgl_kernel, op).default(out, x) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "scalar"])
def test_fake_relu(dtype, layout):
    with FakeTensorMode():
        if layout == "scalar":
            x = torch.empty((), dtype=dtype, device="cuda")
        elif layout == "transposed":
            x = torch.empty(40, 6, 7, dtype=dtype, device="cuda").transpose(0, 2)
        else:
            x = torch.empty(7, 6, 40, dtype=dtype, device="cuda")
        for y in (sgl_kernel.custom_relu(x), torch.ops.sgl_kernel.custom_relu.default(x)):
            assert y.shape == x.shape and y.dtype == dtype and y.device.type == "cuda"
            assert y.is_contiguous()
        if x.dim() > 0:
            bias = torch.empty(x.shape[-1], dtype=dtype, device="cuda")
            for y in (sgl_kernel.fused_add_relu(x, bias), torch.ops.sgl_kernel.fused_add_relu.default(x, bias)):
                assert y.shape == x.shape and y.dtype == dtype and y.device.type == "cuda"
                assert y.is_contiguous()


def _rope_inputs(device, nnz=6, hq=4, hk=2, d=64, dtype=torch.bfloat16, fused=False):
    """(positions, query, key, cos_sin_cache, FusedSetKVBufferArg or None); q/k/v are slices of
    one qkv tensor."""
    qkv = torch.empty(nnz, (hq + 2 * hk) * d, dtype=dtype, device=device)
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    pos = torch.zeros(nnz, dtype=torch.int32, device=device)
    cache = torch.empty(32, d, dtype=torch.float32, device=device)
    arg = None
    if fused:
        kb = torch.empty(10, hk * d, dtype=dtype, device=device)
        loc = torch.zeros(nnz, dtype=torch.int64, device=device)
        arg = sgl_kernel.FusedSetKVBufferArg(v, kb, torch.empty_like(kb), None, None, loc)
    return pos, q, k, cache, arg


def test_fused_set_kv_buffer_arg_fields():
    """API.md 2.1.3: the field order is binding (callers construct it positionally)."""
    import dataclasses

    fields = [f.name for f in dataclasses.fields(sgl_kernel.FusedSetKVBufferArg)]
    assert fields == ["value", "k_buffer", "v_buffer", "k_scale", "v_scale", "cache_loc"]
    a = sgl_kernel.FusedSetKVBufferArg(1, 2, 3, None, None, 6)
    assert (a.value, a.k_buffer, a.v_buffer, a.k_scale, a.v_scale, a.cache_loc) == (1, 2, 3, None, None, 6)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fake_rope(fused, dtype):
    """Under FakeTensorMode the wrapper and the op run (the op mutates and returns ())."""
    with FakeTensorMode():
        pos, q, k, cache, arg = _rope_inputs("cuda", dtype=dtype, fused=fused)
        assert sgl_kernel.apply_rope_with_cos_sin_cache_inplace(pos, q, k, 64, cache, False, arg) is None
        assert q.shape == (6, 256) and q.dtype == dtype and q.device.type == "cuda"
        q3, k3 = q.view(6, -1, 64), k.view(6, -1, 64)
        kv = (None,) * 4
        if fused:
            kv = (arg.value.view(6, -1, 64), arg.k_buffer.view(10, -1, 64), arg.v_buffer.view(10, -1, 64),
                  arg.cache_loc)
        assert getattr(torch.ops.sgl_kernel, ROPE_OP).default(q3, k3, q3, k3, cache, pos.long(), True, False,
                                                              *kv) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(), (7,), (3, 5)])
def test_fake_embedding_lookup(dtype, shape):
    with FakeTensorMode():
        weight = torch.empty(100, 24, dtype=dtype, device="cuda")
        indices = torch.empty(shape, dtype=torch.int64, device="cuda")
        for vocab_range in (None, (10, 50)):
            out = sgl_kernel.embedding_lookup(weight, indices, vocab_range=vocab_range)
            assert out.shape == (*shape, 24) and out.dtype == dtype and out.device.type == "cuda"
            assert out.is_contiguous()
        given = torch.empty((*shape, 24), dtype=dtype, device="cuda")
        assert sgl_kernel.embedding_lookup(weight, indices, out=given) is given
        assert torch.ops.sgl_kernel.embedding_lookup.default(given, weight, indices, 0, -1) is None


def test_fake_store_kv_cache():
    with FakeTensorMode():
        pool = torch.empty(64, 2, 8, 128, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(5, 8, 128, dtype=torch.bfloat16, device="cuda")
        loc = torch.empty(5, dtype=torch.int64, device="cuda")
        assert torch.ops.sgl_kernel.store_kv_cache.default(pool[:, 0], pool[:, 1], loc, k, k) is None
        assert sgl_kernel.set_kv_buffer_kernel(pool[:, 0], pool[:, 1], loc, k, k) is None


def _topk_wrappers(score, lengths):
    """The three top-k wrappers with valid extra arguments, as (name, callable(topk))."""
    table = torch.zeros(score.shape[0], 4096, dtype=torch.int32, device=score.device)
    cu = torch.arange(score.shape[0] + 1, dtype=torch.int32, device=score.device)
    return [
        ("fast_topk_v2", lambda k: sgl_kernel.fast_topk_v2(score, lengths, k)),
        ("fast_topk_transform_fused", lambda k: sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, k)),
        ("fast_topk_transform_ragged_fused", lambda k: sgl_kernel.fast_topk_transform_ragged_fused(score, lengths, lengths, k)),
    ]


def test_fake_topk():
    with FakeTensorMode():
        score = torch.empty(5, 4096, device="cuda")
        lengths = torch.empty(5, dtype=torch.int32, device="cuda")
        for name, fn in _topk_wrappers(score, lengths):
            out = fn(2048)
            assert out.shape == (5, 2048) and out.dtype == torch.int32 and out.device.type == "cuda", name
        out = torch.empty(5, 2048, dtype=torch.int32, device="cuda")
        assert torch.ops.sgl_kernel.fast_topk.default(score, out, lengths, None) is None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fake_awq_dequantize(dtype):
    with FakeTensorMode():
        qweight = torch.empty(256, 16, dtype=torch.int32, device="cuda")
        scales = torch.empty(2, 128, dtype=dtype, device="cuda")
        qzeros = torch.empty(2, 16, dtype=torch.int32, device="cuda")
        for out in (sgl_kernel.awq_dequantize(qweight, scales, qzeros),
                    torch.ops.sgl_kernel.awq_dequantize.default(qweight, scales, qzeros)):
            assert out.shape == (256, 128) and out.dtype == dtype and out.device.type == "cuda"


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_fake_dsv3_gemm(out_dtype):
    """The wrappers allocate under FakeTensorMode; the ops mutate and return ()."""
    with FakeTensorMode():
        a = torch.empty(5, 7168, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(384, 7168, dtype=torch.bfloat16, device="cuda")
        out = sgl_kernel.dsv3_router_gemm(a, w, out_dtype)
        assert out.shape == (5, 384) and out.dtype == out_dtype and out.device.type == "cuda"
        assert torch.ops.sgl_kernel.dsv3_router_gemm.default(out, a, w) is None
        wf = torch.empty(2112, 7168, dtype=torch.bfloat16, device="cuda")
        out = sgl_kernel.dsv3_fused_a_gemm(a, wf.t())
        assert out.shape == (5, 2112) and out.dtype == torch.bfloat16 and out.device.type == "cuda"
        assert sgl_kernel.dsv3_fused_a_gemm(a, wf.t(), out) is out
        assert torch.ops.sgl_kernel.dsv3_fused_a_gemm.default(out, a, wf.t()) is None


# ---------------------------------------------------------------------------------------
# fast_topk: pure torch (API.md 2.1.5)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_fast_topk_pure_torch(dim):
    x = torch.randn(6, 9, generator=torch.Generator().manual_seed(dim + 7))
    values, indices = sgl_kernel.fast_topk(x, 1, dim)
    want = torch.max(x, dim=dim, keepdim=True)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)
    values, indices = sgl_kernel.fast_topk(x, 3, dim)
    want = torch.topk(x, 3, dim=dim)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices)


# ---------------------------------------------------------------------------------------
# Bad inputs that need no GPU


@pytest.mark.parametrize("op", ACT_OPS)
def test_act_cpu_tensor_rejected(op):
    x = torch.randn(4, 32)
    out = torch.empty(4, 16)
    with raises_op_error(op, "input", "CUDA tensor"):
        getattr(sgl_kernel, op)(x)
    with raises_op_error(op, "input", "CUDA tensor"):
        getattr(sgl_kernel, op)(x, out=out)
    with raises_op_error(op, "input", "CUDA tensor"):
        getattr(torch.ops.sgl_kernel, op).default(out, x)


def test_topk_cpu_tensor_rejected():
    score = torch.randn(3, 4096)
    lengths = torch.full((3,), 4096, dtype=torch.int32)
    for name, fn in _topk_wrappers(score, lengths):
        op = "fast_topk" if name == "fast_topk_v2" else name
        with raises_op_error(op, "score", "CUDA tensor"):
            fn(2048)


@pytest.mark.parametrize("topk", [1, 1024, 2047, 2049, 4096])
def test_topk_wrapper_requires_2048(topk):
    """API.md 2.1.5: the wrappers assert topk == 2048 (AssertionError, before any kernel)."""
    score = torch.randn(3, 4096)
    lengths = torch.full((3,), 4096, dtype=torch.int32)
    for name, fn in _topk_wrappers(score, lengths):
        with pytest.raises(AssertionError, match=f"{name}: topk must be 2048"):
            fn(topk)


@pytest.mark.parametrize("shape", [(4096,), (2, 3, 4096), ()])
def test_topk_v2_wrapper_requires_2d(shape):
    score = torch.randn(shape)
    with pytest.raises(AssertionError, match="fast_topk_v2: score must be 2-D"):
        sgl_kernel.fast_topk_v2(score, torch.zeros(3, dtype=torch.int32), 2048)


def test_awq_dsv3_cpu_tensor_rejected():
    with raises_op_error("awq_dequantize", "qweight", "CUDA tensor"):
        sgl_kernel.awq_dequantize(torch.zeros(64, 4, dtype=torch.int32), torch.ones(2, 32, dtype=torch.float16),
                                  torch.zeros(2, 4, dtype=torch.int32))
    a = torch.zeros(2, 7168, dtype=torch.bfloat16)
    with raises_op_error("dsv3_router_gemm", "mat_a", "CUDA tensor"):
        sgl_kernel.dsv3_router_gemm(a, torch.zeros(256, 7168, dtype=torch.bfloat16))
    with raises_op_error("dsv3_fused_a_gemm", "mat_a", "CUDA tensor"):
        sgl_kernel.dsv3_fused_a_gemm(a, torch.zeros(2112, 7168, dtype=torch.bfloat16).t())


def test_shuffle_rows_cpu_tensor_rejected():
    x = torch.zeros(8, 16, dtype=torch.bfloat16)
    idx = torch.zeros(3, dtype=torch.int32)
    with raises_op_error("shuffle_rows", "input", "CUDA tensor"):
        sgl_kernel.shuffle_rows(x, idx, (3, 16))
    with raises_op_error("shuffle_rows", "input", "CUDA tensor"):
        torch.ops.sgl_kernel.shuffle_rows.default(x, idx, torch.empty(3, 16, dtype=torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float32])
def test_fake_shuffle_rows(dtype):
    """The wrapper allocates the output of the given shape under FakeTensorMode."""
    with FakeTensorMode():
        x = torch.empty(40, 128, dtype=dtype, device="cuda")
        idx = torch.empty(70, dtype=torch.int32, device="cuda")
        out = sgl_kernel.shuffle_rows(x, idx, (70, 128))
        assert out.shape == (70, 128) and out.dtype == dtype and out.device.type == "cuda"
        assert torch.ops.sgl_kernel.shuffle_rows.default(x, idx, out) is None


def _moe_cpu_calls():
    """(op, name of the first checked tensor, call) for every MoE op with CPU tensors."""
    g = torch.randn(5, 16)
    w = torch.empty(5, 2)
    ids = torch.empty(5, 2, dtype=torch.int32)
    x = torch.randn(5, 2, 32)
    out = torch.empty(5, 32)
    sorted_ids = torch.empty(10 + 17 * 3, dtype=torch.int32)
    return [
        ("topk_softmax", "gating_output", lambda: sgl_kernel.topk_softmax(w, ids, g)),
        ("topk_sigmoid", "gating_output", lambda: sgl_kernel.topk_sigmoid(w, ids, g)),
        ("moe_fused_gate", "input", lambda: sgl_kernel.moe_fused_gate(g, g[0], 2, 1, 2)),
        ("kimi_k2_moe_fused_gate", "input", lambda: sgl_kernel.kimi_k2_moe_fused_gate(g, g[0], 2)),
        ("moe_align_block_size", "topk_ids", lambda: sgl_kernel.moe_align_block_size(
            ids, 17, 4, sorted_ids, torch.empty(16, dtype=torch.int32), torch.empty(1, dtype=torch.int32),
            torch.empty(18, dtype=torch.int32))),
        ("moe_sum", "input", lambda: sgl_kernel.moe_sum(x, out)),
        ("moe_sum_reduce", "input", lambda: sgl_kernel.moe_sum_reduce(x, out, 2.0)),
        ("prepare_moe_input", "topk_ids", lambda: sgl_kernel.prepare_moe_input(
            ids, torch.empty(17, dtype=torch.int32), torch.empty(16, 3, dtype=torch.int32),
            torch.empty(16, 3, dtype=torch.int32), torch.empty(10, dtype=torch.int32),
            torch.empty(10, dtype=torch.int32), 16, 64, 32)),
        ("apply_shuffle_mul_sum", "input", lambda: sgl_kernel.apply_shuffle_mul_sum(
            x.view(10, 32), out, torch.arange(10, dtype=torch.int32), None)),
        ("fused_qk_norm_rope", "qkv", lambda: sgl_kernel.fused_qk_norm_rope(
            torch.empty(5, 3 * 64, dtype=torch.bfloat16), 1, 1, 1, 64, 1e-6, torch.ones(64, dtype=torch.bfloat16),
            torch.ones(64, dtype=torch.bfloat16), 10000.0, True, torch.zeros(5, dtype=torch.int32), 1.0, 0.0, 0.0,
            1.0)),
        ("merge_state", "v_a", lambda: sgl_kernel.merge_state(x, g[:, :2], x, g[:, :2])),
        ("merge_state_v2", "v_a", lambda: sgl_kernel.merge_state_v2(x, g[:, :2], x, g[:, :2])),
        ("fp8_blockwise_scaled_grouped_mm", "a", lambda: sgl_kernel.fp8_blockwise_scaled_grouped_mm(
            *_grouped_mm_args("cpu"))),
        ("lightning_attention_decode", "q", lambda: sgl_kernel.lightning_attention_decode(
            *_lightning_args("cpu"))),
    ]


def _lightning_args(device):
    """Arguments of lightning_attention_decode for b = 2, h = 3, d = 16, e = 8."""
    q = torch.empty(2, 3, 1, 16, dtype=torch.bfloat16, device=device)
    v = torch.empty(2, 3, 1, 8, dtype=torch.bfloat16, device=device)
    kv = torch.empty(2, 3, 16, 8, device=device)
    return q, q.clone(), v, kv, torch.empty(3, 1, 1, device=device), torch.empty_like(v), torch.empty_like(kv)


def _grouped_mm_args(device):
    """Arguments of fp8_blockwise_scaled_grouped_mm for 2 experts of 3 rows, N = K = 128."""
    e, r, n, k = 2, 6, 128, 128
    i64 = dict(dtype=torch.int64, device=device)
    i32 = dict(dtype=torch.int32, device=device)
    fp8 = dict(dtype=torch.float8_e4m3fn, device=device)
    return (torch.empty(r, n, dtype=torch.bfloat16, device=device), *[torch.empty(e, **i64) for _ in range(5)],
            torch.empty(r, k, **fp8), torch.empty(e, n, k, **fp8).transpose(1, 2),
            torch.empty(r, k // 128, device=device), torch.empty(e, n // 128, k // 128, device=device).transpose(1, 2),
            torch.full((e,), k, **i64), torch.full((e,), k, **i64), torch.full((e,), n, **i64),
            torch.empty(e, 5, **i32), torch.empty(e, 5, **i32), torch.empty(e, 3, **i32), torch.empty(e, **i32),
            torch.empty(1 << 16, dtype=torch.uint8, device=device))


@pytest.mark.parametrize("case", range(14))
def test_moe_cpu_tensor_rejected(case):
    op, name, call = _moe_cpu_calls()[case]
    with raises_op_error(op, name, "CUDA tensor"):
        call()


@pytest.mark.parametrize("op", ["moe_fused_gate", "kimi_k2_moe_fused_gate"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fake_moe_fused_gate(op, dtype):
    """The gate ops return [weights fp32 [T, topk], ids int32 [T, topk]] under FakeTensorMode."""
    with FakeTensorMode():
        x = torch.empty(37, 256, dtype=dtype, device="cuda")
        bias = torch.empty(256, dtype=dtype, device="cuda")
        if op == "moe_fused_gate":
            out = sgl_kernel.moe_fused_gate(x, bias, 8, 4, 9, 1, 2.5, True)
        else:
            out = sgl_kernel.kimi_k2_moe_fused_gate(x, bias, 9)
        assert isinstance(out, list) and len(out) == 2
        w, ids = out
        assert w.shape == (37, 9) and w.dtype == torch.float32 and w.device.type == "cuda"
        assert ids.shape == (37, 9) and ids.dtype == torch.int32 and ids.device.type == "cuda"


def test_fake_moe_inplace_ops():
    """The ops that write their arguments run under FakeTensorMode (PyTorch's trivial fake)."""
    with FakeTensorMode():
        g = torch.empty(9, 64, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(9, 4, device="cuda")
        ids = torch.empty(9, 4, dtype=torch.int32, device="cuda")
        assert sgl_kernel.topk_softmax(w, ids, g, True) is None
        assert sgl_kernel.topk_sigmoid(w, ids, g, True) is None
        x = torch.empty(9, 4, 128, dtype=torch.float16, device="cuda")
        out = torch.empty(9, 128, dtype=torch.float16, device="cuda")
        assert sgl_kernel.moe_sum(x, out) is None
        assert sgl_kernel.moe_sum_reduce(x, out, 2.5) is None
        i32 = dict(dtype=torch.int32, device="cuda")
        assert sgl_kernel.moe_align_block_size(
            ids, 65, 16, torch.empty(36 + 65 * 15, **i32), torch.empty(64, **i32), torch.empty(1, **i32),
            torch.empty(66, **i32), True) is None
        assert sgl_kernel.prepare_moe_input(
            ids, torch.empty(17, **i32), torch.empty(16, 3, **i32), torch.empty(16, 3, **i32), torch.empty(36, **i32),
            torch.empty(36, **i32), 16, 64, 32, blockscale_offsets=torch.empty(17, **i32)) is None
        assert sgl_kernel.apply_shuffle_mul_sum(x.view(36, 128), out, torch.empty(36, **i32), None) is None
        qkv = torch.empty(9, 6 * 128, dtype=torch.bfloat16, device="cuda")
        wq = torch.empty(128, dtype=torch.bfloat16, device="cuda")
        assert sgl_kernel.fused_qk_norm_rope(
            qkv, 4, 1, 1, 128, 1e-6, wq, wq, 1e6, False, torch.empty(9, **i32), 1.0, 0.0, 0.0, 1.0, 64) is None
        v = torch.empty(9, 4, 128, dtype=torch.bfloat16, device="cuda")
        s = torch.empty(9, 4, device="cuda")
        for fn in (sgl_kernel.merge_state, sgl_kernel.merge_state_v2):
            vm, sm = fn(v, s, v, s)
            assert vm.shape == v.shape and vm.dtype == v.dtype and sm.shape == s.shape and sm.dtype == torch.float32
        assert sgl_kernel.fp8_blockwise_scaled_grouped_mm(*_grouped_mm_args("cuda")) is None
        assert sgl_kernel.lightning_attention_decode(*_lightning_args("cuda")) is None


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "scalar", "empty"])
def test_fake_weak_ref_tensor(layout):
    with FakeTensorMode():
        base = torch.empty(40, 6, 7, dtype=torch.bfloat16, device="cuda")
        x = {"contiguous": base[1:], "transposed": base.transpose(0, 2), "scalar": base[0, 0, 0],
             "empty": base[:0]}[layout]
        for y in (sgl_kernel.weak_ref_tensor(x), torch.ops.sgl_kernel.weak_ref_tensor.default(x)):
            assert y.shape == x.shape and y.stride() == x.stride() and y.dtype == x.dtype
            assert y.device.type == "cuda"


def test_weak_ref_tensor_cpu_rejected_and_non_tensors_pass():
    with raises_op_error("weak_ref_tensor", "tensor", "CUDA tensor"):
        sgl_kernel.weak_ref_tensor(torch.randn(4, 32))
    for obj in (None, 3, 2.5, "x", [torch.randn(2)]):
        assert sgl_kernel.weak_ref_tensor(obj) is obj


def test_relu_cpu_tensor_rejected():
    x = torch.randn(4, 32)
    with raises_op_error("custom_relu", "input", "CUDA tensor"):
        sgl_kernel.custom_relu(x)
    with raises_op_error("fused_add_relu", "input", "CUDA tensor"):
        sgl_kernel.fused_add_relu(x, torch.randn(32))


@pytest.mark.parametrize("fused", [False, True])
def test_rope_cpu_tensor_rejected(fused):
    pos, q, k, cache, arg = _rope_inputs("cpu", fused=fused)
    with raises_op_error(ROPE_OP, "q", "CUDA tensor"):
        sgl_kernel.apply_rope_with_cos_sin_cache_inplace(pos, q, k, 64, cache, True, arg)
    q3, k3 = q.view(6, -1, 64), k.view(6, -1, 64)
    with raises_op_error(ROPE_OP, "q", "CUDA tensor"):
        getattr(torch.ops.sgl_kernel, ROPE_OP).default(q3, k3, q3, k3, cache, pos, False, False, None, None, None,
                                                       None)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("fused", [False, True])
def test_rope_wrapper_cache_dtype(dtype, fused):
    """ValueError for a cos_sin_cache that is not float32, checked before anything else
    (API.md 2.1.3)."""
    pos, q, k, cache, arg = _rope_inputs("cpu", fused=fused)
    if fused:
        arg.k_scale = 1.0  # would be an AssertionError: the cache dtype comes first
    with pytest.raises(ValueError, match="cos_sin_cache"):
        sgl_kernel.apply_rope_with_cos_sin_cache_inplace(pos, q, k, 64, cache.to(dtype), True, arg)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("k_scale", 1.0, "k_scale"),
        ("v_scale", 0.5, "v_scale"),
        ("cache_loc", torch.zeros(6, dtype=torch.int32), "cache_loc"),
        ("cache_loc", torch.zeros(6, dtype=torch.float32), "cache_loc"),
    ],
)
def test_rope_wrapper_fused_asserts(field, value, match):
    """AssertionError where sgl-kernel's wrapper asserts: k_scale / v_scale not None, cache_loc
    not int64; raised before the op (which would reject the CPU tensors)."""
    pos, q, k, cache, arg = _rope_inputs("cpu", fused=True)
    setattr(arg, field, value)
    with pytest.raises(AssertionError, match=match):
        sgl_kernel.apply_rope_with_cos_sin_cache_inplace(pos, q, k, 64, cache, True, arg)


def test_store_kv_cache_cpu_tensor_rejected():
    cache = torch.zeros(8, 64)
    with raises_op_error("store_kv_cache", "k_cache", "CUDA tensor"):
        torch.ops.sgl_kernel.store_kv_cache.default(cache, cache.clone(), torch.tensor([1]), torch.ones(1, 64), torch.ones(1, 64))


def test_embedding_lookup_cpu_tensor_rejected():
    with raises_op_error("embedding_lookup", "weight", "CUDA tensor"):
        sgl_kernel.embedding_lookup(torch.randn(10, 4), torch.tensor([1, 2]))
    with raises_op_error("embedding_lookup", "weight", "CUDA tensor"):
        torch.ops.sgl_kernel.embedding_lookup.default(torch.empty(2, 4), torch.randn(10, 4), torch.tensor([1, 2]), 0, -1)


@pytest.mark.parametrize("vocab_range", [(0, 0), (-1, 4), (2, -1), (1,), (1, 2, 3), "ab", (1.5, 2), 7])
def test_embedding_lookup_bad_vocab_range(vocab_range):
    """The wrapper refuses a malformed vocab_range with ValueError before the op (a negative
    length would otherwise select the plain gather)."""
    with pytest.raises(ValueError, match="sgl_kernel.embedding_lookup: vocab_range"):
        sgl_kernel.embedding_lookup(torch.randn(10, 4), torch.tensor([1, 2]), vocab_range=vocab_range)


def _kv_case():
    k_cache, v_cache = torch.zeros(8, 2, 32), torch.zeros(8, 2, 32)
    loc = torch.tensor([6, 1, 3])
    k, v = torch.randn(3, 2, 32), torch.randn(3, 2, 32)
    expected_k, expected_v = k_cache.clone(), v_cache.clone()
    expected_k[loc], expected_v[loc] = k, v
    return (k_cache, v_cache, loc, k, v), (expected_k, expected_v)


def test_set_kv_buffer_kernel_falls_back_on_runtime_error():
    """The op refuses CPU tensors with RuntimeError; the wrapper then indexes (API.md 3.2)."""
    args, (expected_k, expected_v) = _kv_case()
    assert sgl_kernel.set_kv_buffer_kernel(*args) is None
    assert torch.equal(args[0], expected_k) and torch.equal(args[1], expected_v)


def test_set_kv_buffer_kernel_fallback_flag_skips_the_op(monkeypatch):
    from sgl_kernel import memory

    def never(*args):
        raise AssertionError("the op must not run with fallback=True")

    monkeypatch.setattr(memory, "_store_kv_cache", never)
    args, (expected_k, expected_v) = _kv_case()
    sgl_kernel.set_kv_buffer_kernel(*args, fallback=True)
    assert torch.equal(args[0], expected_k) and torch.equal(args[1], expected_v)


def test_set_kv_buffer_kernel_passes_debug_errors_on(monkeypatch):
    """An out-of-range location found under SGL_KERNEL_DEBUG=1 is raised, not indexed."""
    from sgl_kernel import memory

    msg = "sgl_kernel.store_kv_cache: out_loc[0] = -1 is out of range [0, 8) (k_cache.shape[0]) (SGL_KERNEL_DEBUG=1)"

    def debug_error(*args):
        raise RuntimeError(msg)

    monkeypatch.setattr(memory, "_store_kv_cache", debug_error)
    args, _ = _kv_case()
    snapshot = args[0].clone()
    with pytest.raises(RuntimeError, match="out of range"):
        sgl_kernel.set_kv_buffer_kernel(*args)
    assert torch.equal(args[0], snapshot)


def test_set_kv_buffer_kernel_other_exceptions_propagate(monkeypatch):
    """Only RuntimeError means "unsupported, fall back"; anything else is a bug to surface."""
    from sgl_kernel import memory

    def type_error(*args):
        raise TypeError("boom")

    monkeypatch.setattr(memory, "_store_kv_cache", type_error)
    args, _ = _kv_case()
    with pytest.raises(TypeError, match="boom"):
        sgl_kernel.set_kv_buffer_kernel(*args)


@pytest.mark.parametrize("op", ACT_OPS)
@pytest.mark.parametrize(
    "dtype, last_dim, ok",
    [
        (torch.float32, 4, True),  # 16 bytes
        (torch.float32, 6, False),  # 24 bytes
        (torch.float32, 2, False),  # 8 bytes
        (torch.float16, 8, True),  # 16 bytes
        (torch.float16, 4, False),  # 8 bytes
        (torch.bfloat16, 12, False),  # 24 bytes
        (torch.bfloat16, 24, True),  # 48 bytes
        (torch.float16, 14, False),  # odd d, 28 bytes
    ],
)
def test_act_wrapper_row_alignment(op, dtype, last_dim, ok):
    """ValueError when input.shape[-1] * element_size is not a multiple of 16 bytes,
    checked before anything about out (API.md 2.1.2)."""
    fn = getattr(sgl_kernel, op)
    x = torch.ones(3, last_dim, dtype=dtype)
    bad_out = torch.empty(2, 1, dtype=dtype)  # wrong in every way
    if ok:
        # Passes the wrapper's row check: fails later, in the out check.
        with pytest.raises(AssertionError):
            fn(x, out=bad_out)
    else:
        with pytest.raises(ValueError, match=op):
            fn(x)
        with pytest.raises(ValueError, match=op):
            fn(x, out=bad_out)


@pytest.mark.parametrize("op", ACT_OPS)
@pytest.mark.parametrize(
    "out_shape",
    [
        (4, 3, 16),  # rank
        (5, 16),  # leading dims
        (4, 15),  # last dim
        (4, 32),  # last dim not halved
    ],
)
def test_act_wrapper_out_shape(op, out_shape):
    x = torch.ones(4, 32)
    out = torch.empty(out_shape)
    with pytest.raises(AssertionError, match=op):
        getattr(sgl_kernel, op)(x, out=out)


# A wrapper call that must raise AssertionError, per wrapper.
ASSERTING_CALLS = {
    "silu_and_mul": "sgl_kernel.silu_and_mul(torch.ones(2, 8), out=torch.empty(2, 3))",
    "apply_rope_with_cos_sin_cache_inplace": (
        "sgl_kernel.apply_rope_with_cos_sin_cache_inplace(torch.zeros(2, dtype=torch.int64), torch.empty(2, 128), "
        "torch.empty(2, 64), 64, torch.empty(8, 64), True, sgl_kernel.FusedSetKVBufferArg(torch.empty(2, 64), "
        "torch.empty(4, 64), torch.empty(4, 64), 1.0, None, torch.zeros(2, dtype=torch.int64)))"
    ),
    "fast_topk_v2": "sgl_kernel.fast_topk_v2(torch.ones(2, 4096), torch.ones(2, dtype=torch.int32), 1024)",
}


@pytest.mark.parametrize("wrapper", sorted(ASSERTING_CALLS))
def test_wrapper_assertion_survives_python_O(wrapper, tmp_path):
    """API.md 1.4: AssertionError is raised explicitly, so ``python -O`` keeps it."""
    code = (
        "import torch, sgl_kernel\n"
        "try:\n"
        f"    {ASSERTING_CALLS[wrapper]}\n"
        "except AssertionError:\n"
        "    raise SystemExit(0)\n"
        "raise SystemExit(3)\n"
    )
    proc = subprocess.run([sys.executable, "-O", "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------
# The load-time torch check (sgl_kernel._loader)


def test_loader_accepts_this_torch(monkeypatch):
    monkeypatch.delenv(_loader._ALLOW_MISMATCH_ENV, raising=False)
    assert _loader.load() is sgl_kernel.common_ops


def test_loader_ignores_local_version_suffix(monkeypatch):
    cfg = _loader.build_config()
    public = cfg.torch_version.split("+", 1)[0]
    monkeypatch.delenv(_loader._ALLOW_MISMATCH_ENV, raising=False)
    for runtime in (public, public + "+somethingelse"):
        monkeypatch.setattr(torch, "__version__", runtime)
        assert _loader.load() is sgl_kernel.common_ops


def test_loader_refuses_other_torch(monkeypatch):
    cfg = _loader.build_config()
    other = "2.99.0+cu999"
    assert not cfg.torch_version.startswith("2.99.0")
    monkeypatch.delenv("SGL_KERNEL_ALLOW_TORCH_MISMATCH", raising=False)
    monkeypatch.setattr(torch, "__version__", other)
    with pytest.raises(ImportError) as excinfo:
        _loader.load()
    msg = str(excinfo.value)
    assert cfg.torch_version in msg, msg
    assert other in msg, msg
    assert "SGL_KERNEL_ALLOW_TORCH_MISMATCH" in msg, msg

    monkeypatch.setenv("SGL_KERNEL_ALLOW_TORCH_MISMATCH", "1")
    assert _loader.load() is sgl_kernel.common_ops


def test_loader_explains_missing_build(monkeypatch):
    monkeypatch.setitem(sys.modules, "sgl_kernel._build_config", None)
    with pytest.raises(ImportError, match="has not been built"):
        _loader.load()


def test_loader_explains_broken_extension(monkeypatch):
    monkeypatch.setitem(sys.modules, "sgl_kernel.common_ops", None)
    with pytest.raises(ImportError, match="common_ops failed to load"):
        _loader.load()


# ---------------------------------------------------------------------------------------
# sgl_kernel.info.archs_cover (Python twin of the C++ check)

_PORTABLE = ["80", "89", "90a", "100a", "120a"]


@pytest.mark.parametrize(
    "archs, cc, expected",
    [
        # sm_XY SASS runs on X.Z, Z >= Y
        (["80"], 80, True),
        (["80"], 86, True),
        (["80"], 87, True),
        (["80"], 89, True),
        (["80"], 75, False),
        (["80"], 90, False),
        (["80"], 100, False),
        (["86"], 80, False),
        (["86"], 89, True),
        (["90"], 90, True),
        (["120"], 121, True),
        # sm_XYa only on X.Y
        (["90a"], 90, True),
        (["90a"], 89, False),
        (["90a"], 100, False),
        (["100a"], 100, True),
        (["100a"], 103, False),
        (["120a"], 120, True),
        (["120a"], 121, False),
        # sm_XYf: same major, minor >= Y
        (["100f"], 100, True),
        (["100f"], 103, True),
        (["100f"], 90, False),
        (["100f"], 120, False),
        # PTX: JIT-compiled on anything >= X.Y
        (["90+ptx"], 90, True),
        (["90+ptx"], 100, True),
        (["90+ptx"], 120, True),
        (["90+ptx"], 89, False),
        (["80+ptx"], 121, True),
        # lists: any entry
        (_PORTABLE, 80, True),
        (_PORTABLE, 86, True),
        (_PORTABLE, 89, True),
        (_PORTABLE, 90, True),
        (_PORTABLE, 100, True),
        (_PORTABLE, 103, False),
        (_PORTABLE, 120, True),
        (_PORTABLE, 121, False),
        (_PORTABLE, 75, False),
        (["80", "90a", "120+ptx"], 100, False),
        (["80", "90a", "120+ptx"], 121, True),
        ([], 90, False),
    ],
)
def test_archs_cover(archs, cc, expected):
    assert info.archs_cover(archs, cc) is expected


@pytest.mark.parametrize("archs, cc", [(["90a+ptx"], 100), (["100a+ptx"], 120), (["100f+ptx"], 120)])
def test_archs_cover_arch_specific_ptx(archs, cc):
    assert info.archs_cover(archs, cc) is False


# ---------------------------------------------------------------------------------------
# python -m sgl_kernel


def _run_module(tmp_path, *args):
    # Run from an empty directory so the installed package is imported.
    return subprocess.run(
        [sys.executable, "-m", "sgl_kernel", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_text(tmp_path):
    proc = _run_module(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sgl_kernel.__version__ in proc.stdout
    for op in OP_SCHEMAS:
        assert op in proc.stdout, f"{op} missing from the report"
    assert "FAIL " not in proc.stdout, proc.stdout


def test_cli_json(tmp_path):
    proc = _run_module(tmp_path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    expected = sgl_kernel.build_info()
    assert set(data) == set(expected)
    for key in ("version", "compat_version", "torch_version", "cuda_version", "arch_list", "families", "device", "ops"):
        assert data[key] == expected[key], key


def test_group_quant_aliases_are_one_function():
    """API.md 2.2: the fp8 and int8 names are the same object as the 8-bit function."""
    assert sgl_kernel.sgl_per_token_group_quant_fp8 is sgl_kernel.sgl_per_token_group_quant_8bit
    assert sgl_kernel.sgl_per_token_group_quant_int8 is sgl_kernel.sgl_per_token_group_quant_8bit
