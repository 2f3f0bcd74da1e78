"""SimplifyAlgebra's gather_nd_of_iotas: a GatherND by ranges along output axes is a reshape."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.ir import parse
from relaxpack.runtime import VirtualMachine
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

PARAMS = 'mask: R.Tensor(("b", "s"), "float32")'


def _mask_gather(batch_range: str = "R.range(R.prim_value(0), R.prim_value(b), R.prim_value(1), dtype=\"int64\")",
                 order: str = "(i4, j4)") -> str:
    """torch.onnx's SDPA mask: mask[arange(b)[:, None, None, None], arange(s)[None, None, None, :]]."""
    return f"""
i = {batch_range}
j = R.range(R.prim_value(0), R.prim_value(s), R.prim_value(1), dtype="int64")
i1 = R.expand_dims(i, axis=(1, 2))
i2 = R.expand_dims(i1, axis=(3,))
j1 = R.expand_dims(j, axis=(0, 1))
j2 = R.expand_dims(j1, axis=(2,))
i3 = R.broadcast_to(i2, R.shape([b, 1, 1, s]))
j3 = R.broadcast_to(j2, R.shape([b, 1, 1, s]))
i4 = R.expand_dims(i3, axis=(4,))
j4 = R.expand_dims(j3, axis=(4,))
idx = R.concat({order}, axis=-1)
out = R.gather_nd(mask, idx, batch_dims=0)
return out
"""


def test_the_sdpa_mask_gather_is_a_reshape():
    before = program(PARAMS, '("b", 1, 1, "s")', _mask_gather(), dims=("b", "s"))
    expected = program(PARAMS, '("b", 1, 1, "s")', """
out = R.reshape(mask, R.shape([b, 1, 1, s]))
return out
""", dims=("b", "s"))
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"b": 1, "s": 5}, {"b": 3, "s": 1}, {"b": 2, "s": 0}])


def test_iotas_broadcast_along_other_axes_become_a_broadcast():
    """Components varying along output axes 0 and 2 of (b, 3, s): the reshaped data broadcasts."""
    body = """
i = R.range(R.prim_value(0), R.prim_value(b), R.prim_value(1), dtype="int64")
j = R.range(R.prim_value(0), R.prim_value(s), R.prim_value(1), dtype="int64")
i1 = R.expand_dims(i, axis=(1, 2))
j1 = R.expand_dims(j, axis=(0, 1))
i2 = R.broadcast_to(i1, R.shape([b, 3, s]))
j2 = R.broadcast_to(j1, R.shape([b, 3, s]))
i3 = R.expand_dims(i2, axis=(-1,))
j3 = R.expand_dims(j2, axis=(3,))
idx = R.concat((i3, j3), axis=3)
out = R.gather_nd(mask, idx)
return out
"""
    before = program(PARAMS, '("b", 3, "s")', body, dims=("b", "s"))
    expected = program(PARAMS, '("b", 3, "s")', """
lv = R.reshape(mask, R.shape([b, 1, s]))
out = R.broadcast_to(lv, R.shape([b, 3, s]))
return out
""", dims=("b", "s"))
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"b": 2, "s": 4}, {"b": 1, "s": 1}])


def test_gathers_that_are_not_reshapes_stay():
    """Components in the other order (a transpose; or not matching the data's axes), a range
    from 1: the gather stays, and why."""
    swapped = program(PARAMS.replace('("b", "s")', '("s", "b")'), '("b", 1, 1, "s")',
                      _mask_gather(order="(j4, i4)"), dims=("b", "s"))
    assert_unchanged(simplify_algebra, swapped)
    assert dict(explain(parse(swapped), "gather_nd_of_iotas")) == {
        "out": "the components vary along output axes [3, 0], not increasing"}
    mismatched = program(PARAMS, '("b", 1, 1, "s")', _mask_gather(order="(j4, i4)"), dims=("b", "s"))
    assert dict(explain(parse(mismatched), "gather_nd_of_iotas")) == {
        "out": "the components vary along output axes [3, 0], not increasing"}
    shifted = program(PARAMS, '("b", 1, 1, "s")', _mask_gather(
        batch_range='R.range(R.prim_value(1), R.prim_value(b + 1), R.prim_value(1), dtype="int64")'),
        dims=("b", "s"))
    assert_unchanged(simplify_algebra, shifted)
    assert dict(explain(parse(shifted), "gather_nd_of_iotas")) == {
        "out": "index component 0 is not a range(0, n) along one axis"}


def test_a_range_shorter_than_its_axis_takes_that_prefix():
    """llama's mask: range(0, p + s) over an attention mask of t columns (t == p + s in practice,
    not provably): take the first p + s columns, then the reshape; an index past the end fails
    as the gather does."""
    params = 'mask: R.Tensor(("b", "t"), "bool")'
    body = """
i = R.range(R.prim_value(0), R.prim_value(b), R.prim_value(1), dtype="int64")
j = R.range(R.prim_value(0), R.prim_value(p + s), R.prim_value(1), dtype="int64")
i1 = R.expand_dims(i, axis=(1, 2, 3))
j1 = R.expand_dims(j, axis=(0, 1, 2))
i3 = R.broadcast_to(i1, R.shape([b, 1, 1, p + s]))
j3 = R.broadcast_to(j1, R.shape([b, 1, 1, p + s]))
i4 = R.expand_dims(i3, axis=(4,))
j4 = R.expand_dims(j3, axis=(4,))
idx = R.concat((i4, j4), axis=-1)
out = R.gather_nd(mask, idx, batch_dims=0)
return out
"""
    before = program(params + ', x: R.Tensor(("p", "s"), "float32")', '("b", 1, 1, "p + s")', body,
                     dtype="bool", dims=("b", "t", "p", "s"))
    expected = program(params + ', x: R.Tensor(("p", "s"), "float32")', '("b", 1, 1, "p + s")', """
j = R.range(R.prim_value(0), R.prim_value(p + s), R.prim_value(1), dtype="int64")
lv = R.take(mask, j, axis=1)
out = R.reshape(lv, R.shape([b, 1, 1, p + s]))
return out
""", dtype="bool", dims=("b", "t", "p", "s"))
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"b": 2, "t": 5, "p": 2, "s": 3}, {"b": 1, "t": 7, "p": 0, "s": 4},
                                   {"b": 3, "t": 1, "p": 0, "s": 1}, {"b": 0, "t": 2, "p": 1, "s": 1}])
    vm = VirtualMachine(relaxpack.build(out))
    with pytest.raises(RelaxpackError, match="index"):
        vm.run({"mask": np.ones((2, 3), bool), "x": np.zeros((2, 2), np.float32)})
