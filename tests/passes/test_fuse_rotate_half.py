"""FuseRotateHalf: rotary embeddings' slice / negate / concat chain becomes one rotate_half,
with the same results; and what does not fuse, with its reason."""

from __future__ import annotations

import pytest

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.fuse_rotate_half import fuse_rotate_half

from .helpers import assert_rewrites, assert_same_results, ops_of, program, run_pass, with_dce

DIMS = ("n", "s")


def _chain(k: int, x: str, lower: str = "begin=(0,), end=(4,)", upper: str = "begin=(4,), end=(2147483647,)",
           axis: str = "-1", slice_axis: str = "3") -> str:
    """The exporters' rotate_half of ``x`` (last axis 8) binding lv{k} .. lv{k + 3} (the result)."""
    return f"""
lv{k} = R.strided_slice({x}, axes=({slice_axis},), {lower}, strides=(1,))
lv{k + 1} = R.strided_slice({x}, axes=({slice_axis},), {upper}, strides=(1,))
lv{k + 2} = R.negative(lv{k + 1})
lv{k + 3} = R.concat((lv{k + 2}, lv{k}), axis={axis})"""


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("lower, upper", [
    ("begin=(0,), end=(4,)", "begin=(4,), end=(2147483647,)"),       # as torch.onnx writes it
    ("begin=(0,), end=(-4,)", "begin=(-4,), end=(8,)"),               # the same halves, counted from the end
], ids=["dynamo", "negative_bounds"])
def test_the_chain_becomes_one_call_with_the_same_values(dtype, lower, upper):
    params = f'x: R.Tensor(("n", 2, "s", 8), "{dtype}")'
    mod, out = assert_rewrites(with_dce(fuse_rotate_half),
                               program(params, '("n", 2, "s", 8)', _chain(0, "x", lower, upper) + "\nreturn lv3",
                                       dtype, DIMS),
                               program(params, '("n", 2, "s", 8)', "lv3 = R.rotate_half(x)\nreturn lv3", dtype, DIMS))
    assert ops_of(out) == ["rotate_half"]
    # negation and copies are exact: the same values, for one row, odd lengths and empty batches
    assert_same_results(mod, out, [{"n": 1, "s": 1}, {"n": 3, "s": 7}, {"n": 0, "s": 5}], rtol=0, atol=0)


def test_what_does_not_fuse_and_why():
    params = ('x: R.Tensor(("n", 2, "s", 8), "float32"), y: R.Tensor(("n", 2, "s", 8), "float32"), '
              'z: R.Tensor(("n", 2, "s", 6), "float32"), i: R.Tensor(("n", 2, "s", 8), "int32")')
    body = (_chain(0, "x") + _chain(10, "x", lower="begin=(0,), end=(3,)", upper="begin=(3,), end=(6,)")
            + _chain(20, "y", slice_axis="1", lower="begin=(0,), end=(1,)", upper="begin=(1,), end=(2,)")
            + _chain(30, "x", axis="2")
            + """
lv40 = R.strided_slice(x, axes=(3,), begin=(0,), end=(4,), strides=(1,))
lv41 = R.strided_slice(y, axes=(3,), begin=(4,), end=(8,), strides=(1,))
lv42 = R.negative(lv41)
lv43 = R.concat((lv42, lv40), axis=-1)""" + _chain(50, "i") + """
lv60 = R.multiply(lv0, R.const(2.0, "float32"))
lv61 = R.astype(lv53, dtype="float32")
lv62 = R.concat((lv3, lv43, lv61), axis=-1)
lv63 = R.sum(lv62, axis=(3,), keepdims=True)
lv64 = R.sum(lv13, axis=(3,), keepdims=True)
lv65 = R.sum(lv23, axis=(3,), keepdims=True)
lv66 = R.sum(lv33, axis=(2, 3), keepdims=True)
lv67 = R.sum(lv60, axis=(3,), keepdims=True)
lv68 = R.add(lv63, lv64)
lv69 = R.add(lv68, lv65)
lv70 = R.add(lv69, lv66)
lv71 = R.add(lv70, lv67)
return lv71
""")
    mod = parse(program(params, '("n", 2, "s", 1)', body, dims=DIMS))
    out = run_pass(with_dce(fuse_rotate_half), mod)
    assert "rotate_half" not in ops_of(out)
    reasons = dict(explain(mod, "fuse_rotate_half"))
    assert reasons["lv3"] == "the parts are not slices used only here"
    assert reasons["lv13"] == "the slices are not the upper and the lower half of the last axis"
    assert reasons["lv23"] == "the slices are not the upper and the lower half of the last axis"
    assert reasons["lv33"] == "the concat is along axis 2, not the last"
    assert reasons["lv43"] == "the parts are slices of different tensors"
    assert reasons["lv53"] == "the sliced tensor is not a float tensor of known shape"
    assert reasons["lv62"] == "the concat does not join two tensors"
    assert_same_results(mod, out, [{"n": 1, "s": 2}, {"n": 2, "s": 3}])
