"""The pipelines as a whole: -O2 a fixed point, fewer kernel calls, same
numbers; every stage is one the importer or some pass produces."""

from pathlib import Path

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.ir.module import STAGES
from relaxpack.passes import PassContext, Sequential
from relaxpack.passes.pipeline import lower_pipeline, optimize_pipeline
from relaxpack.runtime import VirtualMachine

MODELS = Path(__file__).resolve().parents[1] / "models"
CASES = {
    "resnet_small": (lambda: onnx.load(str(MODELS / "resnet_small.onnx")),
                     lambda rng, b: {"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)}),
    "gpt_small": (lambda: onnx.load(str(MODELS / "gpt_small.onnx")),
                  lambda rng, b: {"ids": rng.integers(0, 128, (b, 5 + 4 * b)).astype(np.int64)}),
    "small_cnn": (small_cnn, lambda rng, b: {"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)}),
    "transformer_block": (transformer_block_onnx,
                          lambda rng, b: {"x": rng.standard_normal((b, 3 + b, 32)).astype(np.float32)}),
}


def passes_of(pipeline):
    stack, found = [pipeline], []
    while stack:
        p = stack.pop()
        if isinstance(p, Sequential):
            stack.extend(p.passes)
        else:
            found.append(p)
    return found


def test_every_stage_is_produced_in_order():
    passes = passes_of(optimize_pipeline()) + passes_of(lower_pipeline())
    produced = {p.info.produces for p in passes if p.info.produces}
    assert STAGES[0] == "import" and relaxpack.from_onnx(small_cnn()).stage == "import"
    assert set(STAGES[1:]) == produced
    for p in passes:        # a pass needs only stages at or before the one it produces
        if p.info.produces:
            assert all(STAGES.index(s) <= STAGES.index(p.info.produces) for s in p.info.requires), p.info


def test_the_context_opt_level_alone_decides_what_runs():
    core = ["CanonicalizeBindings", "FoldConstant", "SimplifyShapes", "EliminateCommonSubexpr",
            "CanonicalizeBindings", "DeadCodeElimination"]
    o2 = ["ExactIntegerMatmul", "FoldBatchNorm", "ScaleShiftBatchNorm", "SimplifyAlgebra", "FuseRMSNorm", "FuseRotateHalf",
          "WidenFloat16Regions", "MergeProjections", "FuseBiasActivation", "DepthwiseTokensChannelsLast", "FoldPermuteMatmul",
          "SinkResize", "ConvertLayout",
          "Conv1dChannelsLast",
          "SimplifyAlgebra",
          "ConcatOfSplit", "FuseSqueezeExcite", "FoldActivationScales", "DropZeroSignRoundTrips", "PackRecurrentWeights",
          "FuseClassifierNormalizer", "CanonicalizeBindings", "DeadCodeElimination", "RoundFloat16InFloat32", *core,
          "HoistMaxPool", "TabulateIntegerFunctions", "FuseDynamicQuantize", "DeadCodeElimination", "MergeQuantizedProducts",
          "ShareLookUps",
          "WidenLookUpTables", "NarrowIndexCasts", "DropNaNSaturation", "FuseAttention", "DeadCodeElimination",
          "FuseOps"]
    mod = relaxpack.from_onnx(small_cnn())
    for level, ran in ((0, []), (1, core), (2, core + o2), (3, core + o2)):
        with PassContext(opt_level=level) as ctx:
            optimize_pipeline()(mod)
        assert ctx.history == ran, level


@pytest.mark.parametrize("name", sorted(CASES))
def test_o2_twice_is_structurally_equal(name):
    mod = relaxpack.from_onnx(CASES[name][0]())
    with PassContext(opt_level=2):
        once = optimize_pipeline()(mod)
        twice = optimize_pipeline()(once)
    check_well_formed(once)
    assert_structural_equal(twice, once)


@pytest.mark.parametrize("name", ["resnet_small", "gpt_small"])
def test_o2_runs_at_least_30_percent_fewer_kernel_calls_and_matches_onnxruntime(name):
    make, feeds = CASES[name]
    model = make()
    mod = relaxpack.from_onnx(model)
    o0, o2 = relaxpack.build(mod, opt_level=0), relaxpack.build(mod, opt_level=2)
    assert o2.kernel_call_count() <= 0.7 * o0.kernel_call_count(), (o0.kernel_call_count(), o2.kernel_call_count())
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    rng = np.random.default_rng(0)
    for b in (1, 2):
        inputs = feeds(rng, b)
        want = session.run(None, inputs)
        for exe in (o0, o2):
            diffs = compare_outputs(names, VirtualMachine(exe).run(inputs), want, 1e-4, 1e-4)
            assert all(d.passed for d in diffs), diffs
