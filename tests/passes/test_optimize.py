"""The core optimization passes together (relaxpack.passes.pipeline), end to
end on real models."""

from pathlib import Path

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples import transformer_block
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.ir.equality import structural_equal
from relaxpack.ir.printer import module_metadata
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.passes import PassContext, Sequential
from relaxpack.passes.pipeline import core_passes
from relaxpack.runtime import VirtualMachine

from .helpers import assert_same_results, count_bindings, ops_used

MODELS = Path(__file__).resolve().parents[1] / "models"


# ---------------------------------------------------------------- end to end
def optimize(mod):
    with PassContext(opt_level=1, check_well_formed=True) as ctx:
        out = Sequential(core_passes(), name="Optimize", opt_level=1)(mod)
    assert ctx.history == [p.name for p in core_passes()]
    return out


def check_against_onnxruntime(model, mod, feeds_list):
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    vm = VirtualMachine(relaxpack.build(mod))
    for feeds in feeds_list:
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-4, 1e-4)
        assert all(d.passed for d in diffs), diffs


def test_core_passes_order_and_stages():
    passes = core_passes()
    assert [p.name for p in passes] == ["CanonicalizeBindings", "FoldConstant", "SimplifyShapes",
                                        "EliminateCommonSubexpr", "CanonicalizeBindings", "DeadCodeElimination"]
    for p in passes:
        assert p.info.opt_level == 1
        assert p.info.requires == ("import", "optimize") and p.info.produces == "optimize"


def test_gpt_small_end_to_end():
    model = onnx.load(str(MODELS / "gpt_small.onnx"))
    mod = relaxpack.from_onnx(model)
    out = optimize(mod)
    check_well_formed(out)
    assert out.stage == "optimize"
    # the second causal mask goes (Gather indices reach the kernel as they are: no index normalization)
    assert count_bindings(mod) == 80 and count_bindings(out) == 77
    ops = ops_used(out)
    assert ops.count("trilu") == 1 and ops.count("where") == 2   # the two masks
    assert "shape_to_tensor" not in ops and "concat" not in ops
    text = out.script(show_meta=False)
    assert "R.reshape(lv_7, R.shape([batch, seq, 4, 8]))" in text
    assert "R.take(metadata[\"c1\"], lv_1, axis=0, in_bounds=False)" in text   # R.range(0, seq) indexes directly
    assert structural_equal(optimize(out), out.with_attrs(stage="optimize"))   # one round is a fixed point
    rng = np.random.default_rng(1)
    check_against_onnxruntime(model, out, [{"ids": rng.integers(0, 128, (b, s)).astype(np.int64)}
                                           for b, s in [(1, 3), (2, 17)]])
    assert relaxpack.build(out, opt_level=0).kernel_call_count() < relaxpack.build(mod, opt_level=0).kernel_call_count()


def test_small_cnn_end_to_end():
    model = small_cnn()
    mod = relaxpack.from_onnx(model)
    out = optimize(mod)
    check_well_formed(out)
    # the importer already folded what is constant; nothing is left to remove
    assert count_bindings(out) == count_bindings(mod) == 14
    rng = np.random.default_rng(2)
    check_against_onnxruntime(model, out, [{"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)}
                                           for b in (1, 3)])


def test_transformer_examples_share_equal_weights_and_keep_output_names():
    model = transformer_block_onnx()
    mod = relaxpack.from_onnx(model)
    out = optimize(mod)
    # the layer norms' scales and shifts are equal arrays: one constant each
    assert len(module_metadata(out)) == len(module_metadata(mod)) - 2
    rng = np.random.default_rng(4)
    check_against_onnxruntime(model, out, [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)}
                                           for b, s in [(1, 1), (2, 9)]])
    built = transformer_block()
    cleaned = optimize(built)
    assert count_bindings(cleaned) == count_bindings(built) - 1   # out = ln2 went; "out" stays
    assert cleaned["main"].body.body.name_hint == "out"
    assert_same_results(built, cleaned, [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}])


@pytest.mark.parametrize("name", ["resnet_small.onnx"])
def test_torch_models_keep_their_numerics(name):
    model = onnx.load(str(MODELS / name))
    out = optimize(relaxpack.from_onnx(model))
    rng = np.random.default_rng(3)
    check_against_onnxruntime(model, out, [{"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)}
                                           for b in (1, 2)])
