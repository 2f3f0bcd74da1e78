"""RoundFloat16InFloat32: a float16 rounding every reader widens again is ``round_to_float16`` of the
float32 value (before/after texts), the same bits as the program it rewrites (run at sizes on both
sides of the kernel's size bar, with values past float16's range, subnormal and rounding to zero);
roundings something else reads stay."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.passes.canonicalize_bindings import canonicalize_bindings
from relaxpack.passes.core.infra import Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.passes.eliminate_common_subexpr import eliminate_common_subexpr
from relaxpack.passes.round_float16_in_float32 import round_float16_in_float32
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.kernels.half_cast import ROUND_MIN_SIZE

from .helpers import assert_rewrites, assert_unchanged, program

#: the pass, then the core round's CSE and alias folding (one rounding of a value read through
#: several moves) and DCE
ROUNDS = Sequential([round_float16_in_float32, eliminate_common_subexpr, canonicalize_bindings, dead_code_elimination],
                    name="Round+CSE+DCE")

RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 6)).astype(np.float32)
W2 = RNG.standard_normal((6, 4)).astype(np.float16)
G = (RNG.standard_normal(6) + 1).astype(np.float16)
B = RNG.standard_normal(6).astype(np.float16)
W3 = RNG.standard_normal((2, 8, 4)).astype(np.float16)        # two merged projections


def c(values, dtype) -> str:
    return f'R.const({np.asarray(values).astype(dtype).tolist()}, "{dtype}")'


X = 'x: R.Tensor(("n", 8), "float32")'
PRODUCT = f'''lv = R.matmul(x, {c(W, "float32")}, out_dtype=None)
lv1 = R.astype(lv, dtype="float16")'''
NORM = f'R.nn.layer_norm(lv1, {c(G, "float16")}, {c(B, "float16")}, axes=(1,), epsilon=1e-05)'

CASES = {
    # ConvNeXt float16's block: a rounding read by a float16 layer norm read by a product writing
    # float32: the norm computes in float32 on the kept rounding, its result is kept rounded too
    "norm_between_products": ('("n", 4)', f"""
{PRODUCT}
lv2 = {NORM}
lv3 = R.matmul(lv2, {c(W2, "float16")}, out_dtype="float32")
return lv3
""", f"""
lv = R.matmul(x, {c(W, "float32")}, out_dtype=None)
lv1 = R.round_to_float16(lv)
lv2 = {NORM.replace('"float16"', '"float32"')}
lv3 = R.round_to_float16(lv2)
lv4 = R.matmul(lv3, {c(W2, "float32")}, out_dtype=None)
return lv4
"""),
    # GPT-2 float16's layer_norm -> view -> Gemm: the view of the norm's rounding reads the norm
    # rounded in float32 (once, above the view: the same values), which the product reads
    "norm_view_product": ('("n", 2, 4)', f"""
{PRODUCT}
lv2 = {NORM}
lv3 = R.reshape(lv2, R.shape([n, 2, 3]))
lv4 = R.astype(lv3, dtype="float32")
lv5 = R.matmul(lv4, {c(W2[:3], "float32")}, out_dtype=None)
return lv5
""", f"""
lv = R.matmul(x, {c(W, "float32")}, out_dtype=None)
lv1 = R.round_to_float16(lv)
lv2 = {NORM.replace('"float16"', '"float32"')}
lv3 = R.round_to_float16(lv2)
lv4 = R.reshape(lv3, R.shape([n, 2, 3]))
lv5 = R.matmul(lv4, {c(W2[:3], "float32")}, out_dtype=None)
return lv5
"""),
    # attention's merged projections: a float16-writing product read through takes and reshapes
    # by products writing float32 is the float32 product rounded once, which the takes read
    "projections_taken": ('("n", 2, 2)', f"""
lv = R.matmul(x, {c(W3, "float16")}, out_dtype="float16")
lv1 = R.take(lv, R.const(0, "int64"), axis=0)
lv2 = R.reshape(lv1, R.shape([n, 2, 2]))
lv3 = R.take(lv, R.const(1, "int64"), axis=0)
lv4 = R.reshape(lv3, R.shape([n, 2, 2]))
lv5 = R.permute_matmul(lv2, lv4, lhs_axes=None, rhs_axes=(0, 2, 1), out_axes=None, out_dtype="float32")
return lv5
""", f"""
lv = R.matmul(x, {c(W3, "float16")}, out_dtype="float32")
lv_1 = R.round_to_float16(lv)
lv1 = R.take(lv_1, R.const(0, "int64"), axis=0)
lv2 = R.reshape(lv1, R.shape([n, 2, 2]))
lv3 = R.take(lv_1, R.const(1, "int64"), axis=0)
lv4 = R.reshape(lv3, R.shape([n, 2, 2]))
lv5 = R.permute_matmul(lv2, lv4, lhs_axes=None, rhs_axes=(0, 2, 1), out_axes=None, out_dtype=None)
return lv5
"""),
    # a product writing float16 whose result is widened: the float32 product, rounded once
    "product_writing_float16": ('("n", 4)', f"""
{PRODUCT}
lv2 = R.matmul(lv1, {c(W2, "float16")}, out_dtype=None)
lv3 = R.astype(lv2, dtype="float32")
return lv3
""", f"""
lv = R.matmul(x, {c(W, "float32")}, out_dtype=None)
lv1 = R.round_to_float16(lv)
lv2 = R.matmul(lv1, {c(W2, "float32")}, out_dtype=None)
lv3 = R.round_to_float16(lv2)
return lv3
"""),
    # a rounding widened twice (a conv and a residual add read the widening)
    "widened": ('("n", 6)', f"""
{PRODUCT}
lv2 = R.astype(lv1, dtype="float32")
lv3 = R.multiply(lv2, lv2)
return lv3
""", f"""
lv = R.matmul(x, {c(W, "float32")}, out_dtype=None)
lv1 = R.round_to_float16(lv)
lv3 = R.multiply(lv1, lv1)
return lv3
"""),
}


def _inputs(n: int, scale: float) -> dict:
    x = (RNG.standard_normal((n, 8)) * scale).astype(np.float32)
    x[0] = [1e4, -3e4, 2e-6, -1e-8, 0.0, -0.0, 1e-30, 5.0]      # past 65504, subnormal, to zero
    return {"x": x}


def _run(mod, feeds: dict) -> np.ndarray:
    return next(iter(VirtualMachine(relaxpack.build(mod, opt_level=0)).run(feeds).values()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_float16_in_float32(name):
    ret, before, expected = CASES[name]
    mod, out = assert_rewrites(ROUNDS, program(X, ret, before),
                               program(X, ret, expected))
    for n in (5, ROUND_MIN_SIZE // 6 + 3):            # numpy's casts; the kernel's ufuncs
        for scale in (1.0, 3e3):
            feeds = _inputs(n, scale)
            with np.errstate(all="ignore"):
                want, got = _run(mod, feeds), _run(out, feeds)
            assert want.dtype == got.dtype and np.array_equal(want.view(np.uint8), got.view(np.uint8))


UNCHANGED = {
    # a float16 op reads the rounding (besides the widening)
    "rounding_read_as_float16": ('("n", 6)', f"""
{PRODUCT}
lv2 = R.astype(lv1, dtype="float32")
lv3 = R.negative(lv1)
lv4 = R.astype(lv3, dtype="float32")
lv5 = R.add(lv2, lv4)
return lv5
"""),
    # the layer norm's result is read as float16 (an add): the norm keeps its float16 kernel
    "norm_read_as_float16": ('("n", 6)', f"""
{PRODUCT}
lv2 = {NORM}
lv3 = R.add(lv2, lv2)
lv4 = R.astype(lv3, dtype="float32")
return lv4
"""),
    # the rounding is the result
    "returned": ('("n", 6)', f"""
{PRODUCT}
lv2 = R.astype(lv1, dtype="float32")
lv3 = R.astype(lv2, dtype="float16")
return lv1
"""),
    # a move whose result is read as float16
    "move_read_as_float16": ('("n", 2, 3)', f"""
{PRODUCT}
lv2 = R.reshape(lv1, R.shape([n, 2, 3]))
lv3 = R.negative(lv2)
lv4 = R.astype(lv3, dtype="float32")
return lv4
"""),
    # a product writing float16 that a float16 op reads rounds in its kernel
    "product_writing_float16": ('("n", 4)', f"""
{PRODUCT}
lv2 = R.matmul(lv1, {c(W2, "float16")}, out_dtype=None)
lv3 = R.negative(lv2)
lv4 = R.astype(lv3, dtype="float32")
return lv4
"""),
    # a take of a rounding whose result is read as float16
    "take_read_as_float16": ('(2, 6)', f"""
{PRODUCT}
lv2 = R.take(lv1, R.const([0, 0], "int64"), axis=0)
lv3 = R.negative(lv2)
lv4 = R.astype(lv3, dtype="float32")
return lv4
"""),
}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_round_float16_in_float32_keeps(name):
    ret, body = UNCHANGED[name]
    dtype = "float16" if name == "returned" else "float32"
    assert_unchanged(round_float16_in_float32, program(X, ret, body, dtype))
