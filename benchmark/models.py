# SPDX-License-Identifier: Apache-2.0
"""Layer sizes of widely served open models, for the benches' ``--models`` sweep.

The default shape lists of the bench scripts hold the goal shapes of DESIGN.md 9 (mostly
Llama-3-8B's H=4096 / I=14336 / 32 q + 8 kv heads). ``--models`` replaces them with the sizes
below, so that "never slower than torch.compile" is checked at the hidden sizes, MLP widths
and head layouts an engine actually sends, including tensor-parallel shards (each rank of a
TP-N engine sees 1/N of the MLP width and of the heads).

Sizes are those of the models' public configuration files (hidden_size, intermediate_size or
moe_intermediate_size, num_attention_heads, num_key_value_heads, head_dim).
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Sequence, Tuple


class Model(NamedTuple):
    hidden: int
    inter: int  # the dense MLP width (MoE models: the experts')
    heads: int
    kv_heads: int
    head_dim: int


MODELS: Dict[str, Model] = {
    "Qwen2.5-0.5B": Model(896, 4864, 14, 2, 64),
    "Qwen2.5-1.5B": Model(1536, 8960, 12, 2, 128),
    "Gemma-3-1B": Model(1152, 6912, 4, 1, 256),
    "Llama-3.2-1B": Model(2048, 8192, 32, 8, 64),
    "Qwen3-30B-A3B": Model(2048, 768, 32, 4, 128),
    "Gemma-2-2B": Model(2304, 9216, 8, 4, 256),
    "Qwen3-4B": Model(2560, 9728, 32, 8, 128),
    "Llama-3.2-3B": Model(3072, 8192, 24, 8, 128),
    "Qwen2.5-7B": Model(3584, 18944, 28, 4, 128),
    "Llama-3.1-8B": Model(4096, 14336, 32, 8, 128),
    "Qwen3-235B-A22B": Model(4096, 1536, 64, 4, 128),
    "Gemma-3-12B": Model(3840, 15360, 16, 8, 256),
    "Gemma-2-27B": Model(4608, 36864, 32, 16, 128),
    "Qwen2.5-32B": Model(5120, 27648, 40, 8, 128),
    "Gemma-3-27B": Model(5376, 21504, 32, 16, 128),
    "Mixtral-8x22B": Model(6144, 16384, 48, 8, 128),
    "DeepSeek-V3": Model(7168, 2048, 128, 128, 128),  # MLA; rope on 64 of each head (below)
    "Llama-3.1-70B": Model(8192, 28672, 64, 8, 128),
    "Mistral-Large-2": Model(12288, 28672, 96, 8, 128),
    "Llama-3.1-405B": Model(16384, 53248, 128, 8, 128),
}

# Token counts of the sweep: decode (graph-hot), a mid-size prefill chunk, a large one.
MODEL_T: Tuple[int, ...] = (16, 128, 2048, 16384)
TP: Tuple[int, ...] = (1, 8)


def hidden_sizes(skip: Sequence[int] = ()) -> List[int]:
    """Every model's hidden size once, ascending, less ``skip`` (sizes the default list has)."""
    return sorted({m.hidden for m in MODELS.values()} - set(skip))


def mlp_widths(skip: Sequence[int] = ()) -> List[int]:
    """MLP widths one rank sees (gate/up halves of silu_and_mul, or a group-quant row): each
    model's width at TP 1 and TP 8 where it divides, ascending, less ``skip``."""
    out = set()
    for m in MODELS.values():
        for tp in TP:
            if m.inter % tp == 0 and (m.inter // tp) % 128 == 0:
                out.add(m.inter // tp)
    return sorted(out - set(skip))


def rope_layouts() -> List[Tuple[int, int, int, int]]:
    """(q heads, k heads, head_dim, rotary_dim) one rank sees, at TP 1 and TP 8 (kv heads
    replicated when fewer than the ranks), DeepSeek-V3's MLA rope part (64 of 192 q dims in
    the op's view: q_pe [T, heads, 64], k_pe [T, 1, 64]) included."""
    out = set()
    for name, m in MODELS.items():
        for tp in TP:
            if m.heads % tp:
                continue
            if name == "DeepSeek-V3":
                out.add((m.heads // tp, 1, 64, 64))
                continue
            out.add((m.heads // tp, max(1, m.kv_heads // tp), m.head_dim, m.head_dim))
    return sorted(out)


def kv_layouts() -> List[Tuple[int, int]]:
    """(kv heads, head_dim) of the KV-cache rows one rank writes (rope_layouts' k side, with
    DeepSeek-V3's MLA cache row, 512 latent + 64 rope dims, as one 576-wide head)."""
    out = {(hk, d) for _, hk, d, _ in rope_layouts() if d != 64 or hk != 1}
    out.add((1, 576))
    return sorted(out)
