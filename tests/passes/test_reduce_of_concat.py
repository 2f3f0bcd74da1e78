"""SimplifyAlgebra's reduce_of_one_element_concat: max / min over a concat of (1,) tensors is their
elementwise maximum / minimum (torch.onnx's Python max(a, b) of tensors)."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_unchanged, program, with_dce


def _text(body: str, dtype: str, ret: str = "()") -> str:
    params = f'a: R.Tensor((), "{dtype}"), b: R.Tensor((1,), "{dtype}"), c: R.Tensor((1,), "{dtype}")'
    return program(params, ret, body, dtype=dtype, dims=())


@pytest.mark.parametrize("dtype", ["int64", "float32"])
@pytest.mark.parametrize("reduce, elementwise", [("max", "maximum"), ("min", "minimum")])
def test_reduce_of_one_element_parts_is_elementwise(dtype, reduce, elementwise):
    before = _text(f"""
lv = R.expand_dims(a, axis=(0,))
lv1 = R.concat((lv, b, c), axis=0)
lv2 = R.{reduce}(lv1, axis=None, keepdims=False)
return lv2
""", dtype)
    expected = _text(f"""
lv = R.expand_dims(a, axis=(0,))
lv2 = R.{elementwise}(R.{elementwise}(lv, b), c)
lv3 = R.reshape(lv2, R.shape([]))
return lv3
""", dtype)
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    feeds = [{"a": np.array(x, dtype), "b": np.array([y], dtype), "c": np.array([z], dtype)}
             for x, y, z in ((1, 2, 3), (3, -2, 1), (-5, -5, -7))]
    if dtype == "float32":    # NaN propagates and -0.0 / 0.0 come out in the same order as the reduction
        feeds += [{"a": np.array(v, dtype), "b": np.array([w], dtype), "c": np.array([0.0], dtype)}
                  for v, w in ((np.nan, 1.0), (-0.0, 0.0), (0.0, -0.0), (1.0, np.nan))]
    _assert_same_bits(mod, out, feeds)


def _assert_same_bits(before, after, feeds):
    """``before`` and ``after`` at -O0 give the same bytes (NaN and the sign of zero included)."""
    vm_before, vm_after = (VirtualMachine(relaxpack.build(m, opt_level=0)) for m in (before, after))
    for inputs in feeds:
        want, got = vm_before.run(inputs), vm_after.run(inputs)
        for name in want:
            w, g = np.asarray(want[name]), np.asarray(got[name])
            assert w.shape == g.shape and w.dtype == g.dtype
            assert w.tobytes() == g.tobytes(), (inputs, w, g)


def test_keepdims_keeps_the_vector():
    before = _text("""
lv1 = R.concat((b, c), axis=0)
lv2 = R.max(lv1, axis=[0], keepdims=True)
return lv2
""", "int64", "(1,)")
    expected = _text("""
lv2 = R.maximum(b, c)
return lv2
""", "int64", "(1,)")
    assert_rewrites(with_dce(simplify_algebra), before, expected)


def test_longer_parts_and_other_axes_stay():
    params = 'b: R.Tensor((1,), "int64"), d: R.Tensor((2,), "int64"), e: R.Tensor((1, 2), "int64")'
    text = program(params, "()", """
lv = R.concat((b, d), axis=0)
lv1 = R.max(lv, axis=None, keepdims=False)
lv2 = R.concat((e, e), axis=0)
lv3 = R.max(lv2, axis=[1], keepdims=False)
lv4 = R.concat((b,), axis=0)
lv5 = R.min(lv4, axis=None, keepdims=False)
lv6 = R.sum(lv3, axis=None, keepdims=False)
lv7 = R.add(lv1, lv6)
lv8 = R.add(lv7, lv5)
return lv8
""", dtype="int64", dims=())
    assert_unchanged(simplify_algebra, text)
    reasons = dict(explain(parse(text), "reduce_of_one_element_concat"))
    assert reasons["lv1"] == "a part of the concat is not a tensor of shape (1,)"
    assert reasons["lv3"] == "a part of the concat is not a tensor of shape (1,)"
    assert reasons["lv5"] == "the concat's operand is not a tuple of two or more tensors"
