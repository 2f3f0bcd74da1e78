"""The zoo: every committed real-architecture model converts once (symbolic dims), builds at -O0
and -O2, and matches its reference at every tested shape (judge.py says how and within what).

A model that relaxpack cannot convert or that mismatches today is a strict
xfail, listed in XFAIL with the first line of its error (refresh the table
with ``python -m tests.models.zoo.status --xfail``): when a fix makes it
pass, the test turns red until its line is removed. Nothing is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from .judge import HERE, JUDGES, LEVELS, MODELS, check

#: model (at every level) or (model, opt level) -> the first line of the error it fails with today
XFAIL: dict = {}

MAX_BYTES = 2 * 1024 * 1024
MAX_TOTAL_BYTES = 30 * 1024 * 1024


def cases():
    for name in sorted(MODELS):
        for level in LEVELS:
            reason = XFAIL.get((name, level)) or XFAIL.get(name)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(name, level, id=f"{name}-O{level}", marks=marks)


@pytest.mark.parametrize("name, level", cases())
def test_zoo_model_matches_reference(name, level, tmp_path):
    check(name, level, tmp_path)


def test_xfail_table_names_only_zoo_models():
    keys = [key if isinstance(key, tuple) else (key, LEVELS[0]) for key in XFAIL]
    assert not [key for key in keys if key[0] not in MODELS or key[1] not in LEVELS]


def test_zoo_has_fifty_models_within_size():
    files = {e["file"] for e in MODELS.values()}
    on_disk = {p.name for p in HERE.glob("*.onnx")}
    assert len(MODELS) >= 50
    assert files == on_disk, "every .onnx file in the zoo is in the manifest and the other way round"
    sizes = [(HERE / f).stat().st_size for f in files]
    assert max(sizes) <= MAX_BYTES and sum(sizes) <= MAX_TOTAL_BYTES


@pytest.mark.parametrize("name", sorted(MODELS))
def test_manifest_entry_is_complete(name):
    """Each dynamic dim takes two values or more, unless the entry says why the export was run at
    one shape only; every judge is one of JUDGES, and QDQ models carry a step per output."""
    entry = MODELS[name]
    assert entry["judge"] in JUDGES
    if "baked_shape" not in entry:
        for dim in entry["dynamic_dims"]:
            assert len({dims[dim] for dims in entry["shapes"]}) >= 2, f"{dim} is tested at one value"
    if entry["judge"] == "qdq-one-step":
        assert set(entry["output_steps"]) == set(entry["outputs"])
    for spec in entry["inputs"]:
        assert spec.get("values", "normal") in ("normal", "tokens", "mask", "positions", "dim")



def test_the_judge_holds_map_outputs_to_their_structure():
    """ZipMap's list of dicts: the same keys in the same order and as many maps, values within the
    judge's tolerance; anything else is named."""
    from .judge import judge_output
    entry = {"judge": "float32"}
    want = [{0: 0.25, 1: 0.75}, {0: 1.0, 1: 0.0}]
    assert judge_output(entry, "p", [{0: 0.25, 1: 0.75 + 1e-6}, {0: 1.0, 1: 0.0}], want) is None
    assert "keys" in judge_output(entry, "p", [{1: 0.75, 0: 0.25}, {0: 1.0, 1: 0.0}], want)
    assert "1 maps" in judge_output(entry, "p", want[:1], want)
    assert "differs by 0.01" in judge_output(entry, "p", [{0: 0.26, 1: 0.75}, {0: 1.0, 1: 0.0}], want)


def test_the_qdq_judge_allows_one_step_as_float32_measures_it():
    """Two float32 dequantized values one step apart differ by the scale up to their own rounding
    (resnet_qdq_channel's logits: 0.0029677749 against a step of 0.0029677583); two steps, or a
    NaN against a number, do not pass; the same NaN does."""
    from .judge import judge_output
    step = np.float32(0.002967758337035775)
    entry = {"judge": "qdq-one-step", "output_steps": {"y": float(step)}}
    q = np.array([337.0, -12.0, 0.0, 1000.0], np.float32)
    want = q * step
    assert judge_output(entry, "y", (q + np.float32(1)) * step, want) is None
    assert judge_output(entry, "y", (q - np.float32(1)) * step, want) is None
    assert "over one quantization step" in judge_output(entry, "y", (q + np.float32(2)) * step, want)
    assert "over one quantization step" in judge_output(entry, "y", want + np.float32(1.01) * step, want)
    nan = np.array([np.nan, 1.0], np.float32)
    assert judge_output(entry, "y", nan, nan) is None
    assert judge_output(entry, "y", np.array([1.0, 1.0], np.float32), nan) is not None
