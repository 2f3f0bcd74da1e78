"""A BERT optimized by onnxruntime's transformer optimizer (its com.microsoft
fusions: EmbedLayerNormalization, Attention, SkipLayerNormalization,
BiasGelu) converts, builds once and matches onnxruntime at several batch
sizes and sequence lengths, with padded rows.

The model is tests/models/bert_small.onnx (exported from torch by
tests/models/generate.py); the optimizer runs here, so the fused model is
whatever the installed onnxruntime makes of it.
"""

from __future__ import annotations

import collections
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.runtime import VirtualMachine

BERT = Path(__file__).resolve().parents[2] / "models" / "bert_small.onnx"
FUSED = {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"}


@pytest.fixture(scope="module")
def optimized() -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    # opt_level=0: the optimizer's Python fusions only (its onnxruntime pre-pass imports torch,
    # which CI does not install); the fusions are the ones this test is about
    return optimize_model(str(BERT), model_type="bert", num_heads=4, hidden_size=32, opt_level=0).model


def _feeds(batch: int, seq: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq // 2:] = 0          # a padded row
    return {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64), "attention_mask": mask,
            "token_type_ids": (rng.random((batch, seq)) < 0.5).astype(np.int64)}


def test_the_optimizer_emits_com_microsoft_fusions(optimized):
    ops = collections.Counter(n.op_type for n in optimized.graph.node if n.domain == "com.microsoft")
    assert FUSED <= set(ops), ops
    assert ops["Attention"] == 2 and ops["SkipLayerNormalization"] == 4


def test_the_optimized_bert_matches_onnxruntime(optimized):
    mod = relaxpack.from_onnx(optimized, dims={"batch": (1, 8), "seq": (1, 64)})
    vm = VirtualMachine(relaxpack.build(mod))
    session = onnxruntime_session(optimized)
    names = [o.name for o in session.get_outputs()]
    for batch, seq, seed in [(1, 1, 0), (2, 7, 1), (3, 16, 2)]:
        feeds = _feeds(batch, seq, seed)
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-4, 1e-4)
        assert all(d.passed for d in diffs), (batch, seq, diffs)


def test_onnxruntime_graph_optimizations_match_onnxruntime(tmp_path):
    """onnxruntime's own graph optimizer (ORT_ENABLE_EXTENDED) fuses the
    exported BERT into FusedMatMul, BiasGelu and FusedGemm; the saved model
    converts and matches."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "bert_ort.onnx")
    ort.InferenceSession(str(BERT), options, providers=["CPUExecutionProvider"])
    model = onnx.load(options.optimized_model_filepath)
    ops = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert {"FusedMatMul", "BiasGelu", "FusedGemm"} <= ops, ops
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model, dims={"batch": (1, 8), "seq": (1, 64)})))
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    for batch, seq, seed in [(1, 3, 0), (2, 9, 1)]:
        feeds = _feeds(batch, seq, seed)
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-4, 1e-4)
        assert all(d.passed for d in diffs), (batch, seq, diffs)
