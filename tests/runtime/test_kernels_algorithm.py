"""Kernels of einsum, topk, cumsum, one_hot, trilu, range, tile and the packed
nonzero against onnx's reference evaluator and onnxruntime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.ir import BlockBuilder, PrimValue
from relaxpack.ops import make_call
from relaxpack.runtime.kernels import get_kernel
from relaxpack.runtime.kernels.algorithm import range_length

from .kernel_calls import call_kernel
from .test_kernels_registry import assert_close, rand, run_kernel, run_onnx

INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "float32", "float64"]
NUMERIC = INTS + FLOATS
#: what onnxruntime's CPU provider implements (the reference evaluator does the rest)
ORT_TOPK = {"uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64"}
ORT_MATH = {"int32", "int64", "float16", "float32", "float64"}


def reference(op, inputs, attrs=None, dtype=None, ort=(), **kwargs):
    """The reference evaluator's outputs; onnxruntime's too when ``dtype`` is in ``ort``."""
    refs = [run_onnx(op, inputs, attrs, **kwargs)]
    if dtype in ort:
        refs.append(run_onnx(op, inputs, attrs, backend="ort", **kwargs))
    return refs


def check(got, refs, **tol):
    got = got if isinstance(got, tuple) else (got,)
    for ref in refs:
        for g, want in zip(got, ref):
            assert_close(g, want, **tol)


def low_tol(dtype):
    return dict(rtol=1e-2, atol=1e-2) if dtype in ("float16", "bfloat16") else {}


# ---------------------------------------------------------------- einsum

@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 5), (5, 2)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
    ("...ii->...i", [(3, 5, 5)]), ("ij->ji", [(3, 7)]), ("i,i", [(7,)] * 2), ("ij->", [(3, 4)]),
    ("...ij,...jk", [(2, 1, 3, 4), (1, 5, 4, 2)]), ("i,j->ij", [(3,), (0,)]), ("ij,jk->ik", [(3, 0), (0, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("i...->...", [(4, 2, 3)]), ("->", [()]),
])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "float64", "float16"])
def test_einsum(equation, shapes, dtype):
    rng = np.random.default_rng(0)
    xs = [rand(rng, s, dtype) for s in shapes]
    refs = reference("Einsum", xs, {"equation": equation}, dtype, ORT_MATH)
    check(run_kernel("einsum", tuple(xs), equation=equation), refs, **low_tol(dtype))


@pytest.mark.parametrize("dtype", INTS + ["bfloat16"])
def test_einsum_other_dtypes(dtype):
    rng = np.random.default_rng(1)
    x, y = (rand(rng, s, "float32" if dtype == "bfloat16" else dtype, 0, 4) for s in ((3, 4), (4, 2)))
    if dtype == "bfloat16":
        x, y = x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16)
    got = run_kernel("einsum", (x, y), equation="ij,jk->ik")
    want = (x.astype(np.float64) @ y.astype(np.float64)).astype(got.dtype)
    assert got.dtype == x.dtype
    assert_close(got, want, **low_tol(dtype))


def test_einsum_broadcasts_ellipsis_dims_of_different_ranks():
    # onnxruntime rejects this; the reference evaluator (numpy) broadcasts
    rng = np.random.default_rng(2)
    x, y = rand(rng, (2, 1, 3, 4), "float32"), rand(rng, (5, 4, 2), "float32")
    refs = reference("Einsum", [x, y], {"equation": "...ij,...jk"})
    check(run_kernel("einsum", (x, y), equation="...ij,...jk"), refs)


def test_einsum_broadcasts_a_size_one_label():
    x, y = np.ones(1, np.float32), np.arange(3, dtype=np.float32)
    assert_close(run_kernel("einsum", (x, y), equation="i,i->i"), y)


# ---------------------------------------------------------------- topk

@pytest.mark.parametrize("shape, k, axis", [((5, 7), 3, -1), ((5, 7), 5, 0), ((4, 6, 3), 2, 1), ((9,), 9, 0),
                                            ((5, 7), 0, 1), ((0, 4), 2, 1), ((3, 0), 0, 1), ((1,), 1, 0)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_shapes(shape, k, axis, largest):
    x = rand(np.random.default_rng(2), shape, "float32")
    refs = reference("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": int(largest)},
                     "float32", ORT_TOPK, n_outputs=2, out_dtypes=[x.dtype, np.int64])
    check(run_kernel("topk", x, k=k, axis=axis, largest=largest), refs)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("largest", [True, False])
def test_topk_ties_take_the_lower_index_first(dtype, largest):
    # few distinct values: many ties, which onnxruntime breaks by index
    x = rand(np.random.default_rng(3), (6, 11), dtype, 0, 4)
    refs = reference("TopK", [x, np.array([5], np.int64)], {"largest": int(largest)}, dtype, ORT_TOPK,
                     n_outputs=2, out_dtypes=[x.dtype, np.int64])
    check(run_kernel("topk", x, k=5, largest=largest), refs)


def test_topk_bfloat16_and_unsorted():
    x = rand(np.random.default_rng(4), (4, 9), "float32").astype(ml_dtypes.bfloat16)
    values, indices = run_kernel("topk", x, k=3, sorted=False)
    order = np.argsort(-x.astype(np.float32), axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, 1))


def test_topk_k_larger_than_the_dim_is_a_shape_error():
    with pytest.raises(ShapeError, match=r"topk: k=4 is larger than dim 0 \(of size 3\)"):
        call_kernel("topk", np.zeros(3), out=(np.empty(4), np.empty(4, np.int64)), k=4)


# ---------------------------------------------------------------- cumsum

@pytest.mark.parametrize("shape, axis", [((7,), 0), ((4, 5), 0), ((4, 5), -1), ((2, 3, 4), 1), ((0, 3), 0),
                                         ((3, 0), 1), ((1,), 0)])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(shape, axis, exclusive, reverse):
    x = rand(np.random.default_rng(5), shape, "float32")
    refs = reference("CumSum", [x, np.array(axis, np.int64)], {"exclusive": int(exclusive), "reverse": int(reverse)},
                     "float32", ORT_MATH)
    check(run_kernel("cumsum", x, axis=axis, exclusive=exclusive, reverse=reverse), refs)


@pytest.mark.parametrize("dtype", ["uint32", "uint64", "int32", "int64", *FLOATS])
def test_cumsum_dtypes(dtype):
    x = rand(np.random.default_rng(6), (3, 6), dtype)
    refs = reference("CumSum", [x, np.array(1, np.int64)], {"exclusive": 1, "reverse": 1}, dtype, ORT_MATH)
    check(run_kernel("cumsum", x, axis=1, exclusive=True, reverse=True), refs, **low_tol(dtype))


def test_cumsum_bfloat16_rounds_once():
    x = rand(np.random.default_rng(7), (5, 8), "float32").astype(ml_dtypes.bfloat16)
    got = run_kernel("cumsum", x, axis=1)
    np.testing.assert_array_equal(got, np.cumsum(x.astype(np.float32), axis=1).astype(ml_dtypes.bfloat16))


# ---------------------------------------------------------------- one_hot

@pytest.mark.parametrize("shape, depth, axis", [((3,), 5, -1), ((2, 3), 4, 0), ((2, 3), 4, 1), ((2, 3), 4, -2),
                                                ((), 3, -1), ((0, 2), 3, -1), ((3,), 0, -1)])
def test_one_hot(shape, depth, axis):
    rng = np.random.default_rng(8)
    indices = rng.integers(-depth - 2, depth + 2, size=shape) if depth else np.zeros(shape, np.int64)
    values = np.array([-1.5, 2.0], np.float32)
    # onnxruntime rejects 0-d indices and depth 0; the reference evaluator takes them
    refs = reference("OneHot", [indices, np.array(depth, np.int64), values], {"axis": axis}, "float32",
                     {"float32"} if shape and depth else (), out_dtypes=[values.dtype])
    check(run_kernel("one_hot", indices, values, depth=depth, axis=axis), refs)


@pytest.mark.parametrize("idtype", NUMERIC)
@pytest.mark.parametrize("vdtype", ["int64", "float16", "bool", "uint8"])
def test_one_hot_dtypes(idtype, vdtype):
    rng = np.random.default_rng(9)
    indices = rng.integers(-6 if idtype.startswith("int") else 0, 6, size=(2, 4)).astype(idtype)
    values = np.array([1, 0] if vdtype == "bool" else [3, 7], vdtype)
    # the reference evaluator computes in the values' dtype, which fails for bool: ask it in int64
    ref_values = values.astype(np.int64) if vdtype == "bool" else values
    want, = run_onnx("OneHot", [indices, np.array(5, np.int64), ref_values], out_dtypes=[ref_values.dtype])
    assert_close(run_kernel("one_hot", indices, values, depth=5), want.astype(values.dtype))


def test_one_hot_float_indices_are_truncated():
    indices = np.array([1.7, -1.2, 3.0], np.float32)
    got = run_kernel("one_hot", indices, np.array([0, 1], np.int64), depth=4)
    np.testing.assert_array_equal(got, np.eye(4, dtype=np.int64)[[1, 3, 3]])


# ---------------------------------------------------------------- trilu

@pytest.mark.parametrize("shape", [(4, 5), (5, 4), (2, 3, 3), (1, 5), (0, 3), (3, 0)])
@pytest.mark.parametrize("k", [-7, -1, 0, 2, 6])
@pytest.mark.parametrize("upper", [True, False])
def test_trilu(shape, k, upper):
    x = rand(np.random.default_rng(10), shape, "float32")
    refs = reference("Trilu", [x, np.array(k, np.int64)], {"upper": int(upper)}, "float32", ORT_MATH)
    check(run_kernel("trilu", x, upper=upper, k=k), refs)


@pytest.mark.parametrize("dtype", NUMERIC + ["bool", "bfloat16"])
def test_trilu_dtypes(dtype):
    x = rand(np.random.default_rng(11), (3, 4), "float32" if dtype == "bfloat16" else dtype)
    x = x.astype(ml_dtypes.bfloat16) if dtype == "bfloat16" else x
    np.testing.assert_array_equal(run_kernel("trilu", x, upper=False, k=1), np.tril(x, 1))
    np.testing.assert_array_equal(run_kernel("trilu", x, upper=True, k=0), np.triu(x, 0))


# ---------------------------------------------------------------- tile

@pytest.mark.parametrize("shape, repeats", [((2, 3), (2, 2)), ((3,), (4,)), ((2, 1, 3), (1, 3, 2)), ((), ()),
                                            ((2, 3), (0, 2)), ((0, 3), (2, 2)), ((1, 1), (3, 5))])
@pytest.mark.parametrize("dtype", NUMERIC + ["bool"])
def test_tile(shape, repeats, dtype):
    x = rand(np.random.default_rng(12), shape, dtype)
    want, = run_onnx("Tile", [x, np.array(repeats, np.int64)])
    assert_close(run_kernel("tile", x, repeats=repeats), want)


def test_tile_into_a_strided_output():
    x = np.arange(6).reshape(2, 3)
    out = np.empty((4, 12), np.int64)[:, ::2]
    get_kernel("tile").fn(x, out=out, repeats=(2, 2))
    np.testing.assert_array_equal(out, np.tile(x, (2, 2)))


# ---------------------------------------------------------------- range

def run_range(start, limit, delta, dtype):
    """The range kernel as the VM runs it: Python numbers in, out from the op's inference."""
    prim = "int64" if isinstance(start, int) else "float64"
    call = make_call("range", *(PrimValue(v, prim) for v in (start, limit, delta)), dtype=dtype)
    sinfo = BlockBuilder().infer_call(call)
    out = np.empty(tuple(sinfo.shape), np.dtype(getattr(ml_dtypes, dtype, dtype)))
    get_kernel("range").fn(start, limit, delta, out=out, dtype=dtype)
    return out


@pytest.mark.parametrize("start, limit, delta", [(0, 5, 1), (10, 1, -3), (1, 1, 1), (5, 0, 1), (3, 10, 4),
                                                 (-4, 9, 2), (7, -8, -5)])
@pytest.mark.parametrize("dtype", ["int16", "int32", "int64", "float32", "float64"])
def test_range(start, limit, delta, dtype):
    inputs = [np.array(v, dtype) for v in (start, limit, delta)]
    refs = reference("Range", inputs, None, dtype, {"int16", "int32", "int64", "float32", "float64"})
    bounds = (start, limit, delta) if dtype.startswith("int") else (float(start), float(limit), float(delta))
    check(run_range(*bounds, dtype), refs)


@pytest.mark.parametrize("start, limit, delta", [(0.5, 3.2, 0.7), (-2.0, 2.0, 0.5), (1.0, -1.0, -0.3),
                                                 (0.0, 1.0, 0.1), (2.0, 2.0, 1.0)])
@pytest.mark.parametrize("dtype", FLOATS + ["bfloat16"])
def test_range_float(start, limit, delta, dtype):
    np_dtype = np.dtype(getattr(ml_dtypes, dtype, dtype))
    inputs = [np.array(v, np_dtype) for v in (start, limit, delta)]
    refs = reference("Range", inputs, None, dtype, {"float32", "float64"}, opset=11)
    exact = [float(a) for a in inputs]        # the values the converter passes: the inputs' own
    check(run_range(*exact, dtype), refs, **low_tol(dtype))


def test_range_with_a_wrong_output_length_is_a_shape_error():
    with pytest.raises(ShapeError, match="range: start 0, limit 5, delta 1 give 5 values, but the output has 4"):
        get_kernel("range").fn(0, 5, 1, out=np.empty(4, np.int64), dtype="int64")


def test_range_per_instruction_is_the_generic_kernel():
    """The specialized range keeps small ranges' values by their bounds and types: over calls that
    repeat, change the bounds, pass the same values as floats, run past the kept count, and give a
    wrong output length, each result (and error) is the generic kernel's."""
    kernel = get_kernel("range").fn
    spec = kernel.specialize_attrs({"dtype": "float32"}, (True, True, True))
    calls = [(0, 5, 1), (0, 5, 1), (0, 7, 1), (0.5, 3.2, 0.7), (0, 5, 1), (0.0, 5.0, 1.0), (10, 1, -3),
             *[(0, n, 1) for n in range(1, 20)], (0, 5, 1), (1, 1, 1), (0, 5000, 1), (0, 5000, 1)]
    for bounds in calls:
        want = np.full(max(range_length(*bounds), 0), np.nan, np.float32)
        kernel(*bounds, out=want, dtype="float32")
        got = np.full(want.shape, np.nan, np.float32)
        spec(*bounds, out=got)
        np.testing.assert_array_equal(got, want, err_msg=str(bounds))
    for _ in range(2):          # kept or not, a wrong length is the kernel's error
        with pytest.raises(ShapeError, match="give 5 values, but the output has 4"):
            spec(0, 5, 1, out=np.empty(4, np.float32))


# ---------------------------------------------------------------- nonzero (packed)

@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0,), (0, 3), ()])
@pytest.mark.parametrize("dtype", ["bool", "float32", "int8", "uint64", "float16"])
def test_nonzero(shape, dtype):
    kernel = get_kernel("nonzero")
    assert not kernel.dps
    x = rand(np.random.default_rng(13), shape, dtype, 0, 3)
    want, = run_onnx("NonZero", [x], out_dtypes=[np.int64])
    got = kernel.fn(x)
    assert got.shape == (x.ndim, np.count_nonzero(x)) and got.dtype == np.int64
    assert_close(got, want)


def test_nonzero_of_a_scalar_follows_the_onnx_reference():
    nonzero = get_kernel("nonzero").fn
    assert nonzero(np.array(3.0)).shape == (0, 1)
    assert nonzero(np.array(0)).shape == (0, 0)


# ---------------------------------------------------------------- strings (object arrays)

def test_string_tensors():
    words = np.array([["a", "bb", "c"], ["", "e", "ff"]], dtype=object)
    np.testing.assert_array_equal(run_kernel("trilu", words, upper=True, k=1),
                                  np.array([["", "bb", "c"], ["", "", "ff"]], dtype=object))
    np.testing.assert_array_equal(run_kernel("tile", words, repeats=(1, 2)), np.tile(words, (1, 2)))
    hot = run_kernel("one_hot", np.array([1, -1]), np.array(["off", "on"], dtype=object), depth=3)
    np.testing.assert_array_equal(hot, np.array([["off", "on", "off"], ["off", "off", "on"]], dtype=object))
    np.testing.assert_array_equal(get_kernel("nonzero").fn(words), [[0, 0, 0, 1, 1], [0, 1, 2, 1, 2]])
