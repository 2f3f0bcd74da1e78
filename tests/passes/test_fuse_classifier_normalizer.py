"""FuseClassifierNormalizer (passes/fuse_classifier_normalizer.py): a Normalizer of a linear
classifier's scores becomes the classifier's ``norm`` and its result the classifier's item;
lookalikes (the scores read elsewhere too, the tuple read as a whole, a normalizer of something
else, a classifier already normalized) stay. Each is run before and after: the same bits."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes import Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.fuse_classifier_normalizer import fuse_classifier_normalizer
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, ops_of, run_pass

PASS = Sequential([fuse_classifier_normalizer, dead_code_elimination], name="FuseClassifierNormalizer+DCE")
COEF = 'R.const([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.25]], "float32")'
BIAS = 'R.const([0.125, -0.5, 2.0], "float32")'
LABELS, PROBS = 'R.Tensor(("n",), "int64")', 'R.Tensor(("n", 3), "float32")'


def _module(body: str, returns: str = f"R.Tuple({LABELS}, {PROBS})") -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return f'''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 2), "float32")) -> {returns}:
        n = T.int64()
{lines}
'''


def _classifier(transform: str = "SOFTMAX", norm: str = "L1", tail: str = "", ret: str = "(c, y)",
                attrs: str = "") -> str:
    return f"""
lv = R.linear_classifier(x, {COEF}, {BIAS}, post_transform="{transform}"{attrs})
c = lv[0]
p = lv[1]
y = R.ml_normalizer(p, norm="{norm}")
{tail}
return {ret}
"""


def _run(mod, x):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"x": x})
    flat = [w for v in result.values() for w in (v if isinstance(v, tuple) else (v,))]
    return [np.asarray(v) for v in flat]


def _assert_same_bits(before, after):
    rng = np.random.default_rng(3)
    for x in (rng.normal(0, 3, (7, 2)).astype(np.float32), rng.normal(0, 30, (1, 2)).astype(np.float32),
              rng.normal(0, 3, (64, 2)).astype(np.float32), np.zeros((0, 2), np.float32),
              np.array([[np.nan, 1.0], [0.5, -0.0], [np.inf, 2.0], [-np.inf, 0.0]], np.float32),
              np.array([[np.inf, 1.0]], np.float32)):
        for want, got in zip(_run(before, x), _run(after, x), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("transform, norm", [("SOFTMAX", "L1"), ("LOGISTIC", "L1"), ("NONE", "L2"), ("SOFTMAX", "MAX")])
def test_the_normalizer_becomes_the_classifiers_norm(transform, norm):
    before = _module(_classifier(transform, norm))
    expected = _module(f"""
lv = R.linear_classifier(x, {COEF}, {BIAS}, post_transform="{transform}", norm="{norm}")
c = lv[0]
y = lv[1]
return (c, y)
""")
    mod, out = assert_rewrites(PASS, before, expected)
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case, kwargs, returns", [
    ("the scores returned too", dict(ret="(c, y, p)"), f"R.Tuple({LABELS}, {PROBS}, {PROBS})"),
    ("the scores read by another op", dict(tail="z = R.add(p, y)", ret="(c, z)"), None),
    ("the tuple returned whole", dict(ret="(lv, y)"), f"R.Tuple(R.Tuple({LABELS}, {PROBS}), {PROBS})"),
    ("the scores read by a second item", dict(tail="q = lv[1]\nz = R.add(q, y)", ret="(c, z)"), None),
    ("already normalized", dict(attrs=', norm="L2"'), None),
])
def test_lookalikes_stay(case, kwargs, returns):
    mod = parse(_module(_classifier(**kwargs), returns or f"R.Tuple({LABELS}, {PROBS})"))
    out = run_pass(PASS, mod)
    assert "ml_normalizer" in ops_of(out), case
    _assert_same_bits(mod, out)


def test_a_normalizer_of_the_labels_stays():
    """Only the scores (item 1) fuse: a normalizer of anything else stays a call."""
    mod = parse(_module(f"""
lv = R.linear_classifier(x, {COEF}, {BIAS}, post_transform="SOFTMAX")
c = lv[0]
f = R.astype(c, dtype="float32")
g = R.reshape(f, R.shape([n, 1]))
y = R.ml_normalizer(g, norm="L1")
return (c, y)
""", f'R.Tuple({LABELS}, R.Tensor(("n", 1), "float32"))'))
    out = run_pass(PASS, mod)
    assert "ml_normalizer" in ops_of(out)
    _assert_same_bits(mod, out)


def test_logistic_regression_at_o2_makes_one_kernel_call():
    """An imported LinearClassifier + Normalizer (skl2onnx's LogisticRegression) builds to one
    kernel call at -O2 and gives -O0's bits."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
                              coefficients=[1.0, -2.0, 0.5, 3.0, -1.0, 0.25], intercepts=[0.125, -0.5, 2.0],
                              classlabels_ints=[0, 1, 2], post_transform="SOFTMAX", multi_class=1),
             helper.make_node("Normalizer", ["scores"], ["probabilities"], domain="ai.onnx.ml", norm="L1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, ["n"]),
                               helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    fused, plain = (relaxpack.build(relaxpack.from_onnx(model), opt_level=level) for level in (2, 0))
    assert fused.kernel_call_count() == 1 and plain.kernel_call_count() == 2
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 64):
        x = rng.normal(0, 4, (n, 2)).astype(np.float32)
        got, want = VirtualMachine(fused).run({"x": x}), VirtualMachine(plain).run({"x": x})
        for name in ("label", "probabilities"):
            assert got[name].tobytes() == want[name].tobytes()
