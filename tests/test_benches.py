# SPDX-License-Identifier: Apache-2.0
"""The bench scripts' plumbing, without a GPU: every ``benchmark/*/bench_*.py`` runs with
``--dry-run`` (fake timings) and writes its table; the scripts with a model-size list
(``--models``, benchmark/models.py) run it and time other shapes than their default list;
the others refuse the flag. Timings are not checked here (they need the GPU host)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted((ROOT / "benchmark").glob("*/bench_*.py"))
MODELS = {"bench_norm", "bench_activation", "bench_rope", "bench_group_quant", "bench_per_token_quant",
          "bench_fused_norm_quant", "bench_embedding_lookup", "bench_store_kv_cache"}


def _load(path: Path):
    name = f"_bench_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _shapes(out: Path):
    """(op, shape) of every sgl_kernel row the run wrote, and the row count."""
    files = list(out.glob("*.json"))
    assert files, f"no JSON written under {out}"
    rows = json.loads(files[0].read_text())["rows"]
    ours = [r for r in rows if r.get("provider") == "sgl_kernel"]
    return {(r["op"], r["shape"]) for r in ours}, len(ours)


def test_every_bench_is_listed():
    assert len(BENCHES) >= 14
    names = {p.stem for p in BENCHES}
    assert MODELS <= names, f"model-size benches missing: {sorted(MODELS - names)}"


@pytest.mark.parametrize("path", [p for p in BENCHES if p.stem != "bench_allreduce"], ids=lambda p: p.stem)
def test_dry_run(path, tmp_path):
    module = _load(path)
    default = tmp_path / "default"
    assert module.main(["--dry-run", "--no-compile", "--out", str(default)]) == 0
    shapes, count = _shapes(default)
    assert count > 0
    if path.stem in MODELS:
        models = tmp_path / "models"
        assert module.main(["--dry-run", "--no-compile", "--models", "--out", str(models)]) == 0
        model_shapes, model_count = _shapes(models)
        assert model_count > 0
        assert model_shapes - shapes, "--models timed no shape that the default list lacks"
    else:
        with pytest.raises(SystemExit) as exc:
            module.main(["--dry-run", "--models", "--out", str(tmp_path / "refused")])
        assert exc.value.code == 2


def test_models_and_quick_exclusive(tmp_path):
    module = _load(ROOT / "benchmark" / "elementwise" / "bench_norm.py")
    with pytest.raises(SystemExit) as exc:
        module.main(["--dry-run", "--models", "--quick", "--out", str(tmp_path)])
    assert exc.value.code == 2


def test_model_sizes():
    """The size lists cover what the sweep is for: the 512-misaligned hidden sizes, TP-8
    shards and single-kv-head layouts."""
    sys.path.insert(0, str(ROOT))
    from benchmark.models import hidden_sizes, kv_layouts, mlp_widths, rope_layouts

    hs = hidden_sizes()
    assert hs == sorted(set(hs)) and {1152, 2304, 3840, 5376, 12288} <= set(hs)
    assert 4096 not in hidden_sizes(skip=(4096,))
    widths = mlp_widths()
    assert all(w % 128 == 0 for w in widths) and {3584, 768, 18944} <= set(widths)  # 28672 / 8, Qwen3 MoE
    layouts = rope_layouts()
    assert (8, 1, 128, 128) in layouts and (16, 1, 64, 64) in layouts  # Llama-70B / DeepSeek-V3 at TP 8
    assert all(hq % hk == 0 for hq, hk, _, _ in layouts)
    assert (1, 576) in kv_layouts()
