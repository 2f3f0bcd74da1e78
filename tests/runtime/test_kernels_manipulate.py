"""Shape manipulation kernels against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from relaxpack.runtime.kernels import get_kernel

from .test_kernels_registry import Shape, assert_close, rand, run_graph, run_kernel, run_onnx

DTYPES = ["float16", "float32", "int8", "int64", "bool"]


@pytest.mark.parametrize("shape, target", [
    ((3, 5, 7), (5, 21)), ((3, 5, 7), (-1, 7)), ((3, 5, 7), (105,)), ((2, 6), (3, 1, 4)),
    ((0, 4), (2, 0, 2)), ((1,), ()), ((3, 5, 7), (3, -1)),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape(dtype, shape, target):
    rng = np.random.default_rng(0)
    x = rand(rng, shape, dtype)
    # onnx's reference evaluator cannot reshape an empty tensor with a -1 or 0 dim
    expected, = run_onnx("Reshape", [x, np.array(target, np.int64)], {"allowzero": 1}, out_dtypes=[x.dtype],
                         backend="ort" if x.size == 0 else "ref")
    assert_close(run_kernel("reshape", x, Shape(target)), expected)


def test_reshape_of_a_strided_input():
    x = np.arange(60, dtype=np.float32).reshape(6, 10)[::2, ::3].T      # (4, 3), strided
    assert_close(run_kernel("reshape", x, Shape((2, 6))), x.reshape(2, 6))


@pytest.mark.parametrize("shape, axes", [
    ((3, 5, 7), (2, 0, 1)), ((3, 5, 7), None), ((2, 3, 4, 5), (0, 2, 1, 3)), ((0, 3), (1, 0)), ((4,), (0,)),
    # a channel shuffle ending in its groups (copied per group from 64 values a group), and around the bars
    ((1, 2, 16, 8, 12), (0, 3, 4, 2, 1)), ((2, 3, 5, 9), (0, 2, 3, 1)), ((1, 4, 8, 9), (0, 2, 3, 1)),
    ((1, 5, 8, 9), (0, 2, 3, 1)), ((2, 63), (1, 0)), ((2, 64), (1, 0)), ((0, 2, 40), (0, 2, 1)),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_permute_dims(dtype, shape, axes):
    rng = np.random.default_rng(1)
    x = rand(rng, shape, dtype)
    expected, = run_onnx("Transpose", [x], {} if axes is None else {"perm": list(axes)})
    assert_close(run_kernel("permute_dims", x, axes=axes), expected)


@pytest.mark.parametrize("shapes, axis", [
    (((3, 5), (3, 2), (3, 1)), 1), (((3, 5), (4, 5)), 0), (((2, 0, 3), (2, 4, 3)), -2),
    (((0, 3), (0, 3)), 1), (((7,),), 0),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_concat(dtype, shapes, axis):
    rng = np.random.default_rng(2)
    xs = tuple(rand(rng, s, dtype) for s in shapes)
    expected, = run_onnx("Concat", list(xs), {"axis": axis})
    assert_close(run_kernel("concat", xs, axis=axis), expected)


@pytest.mark.parametrize("shape, spec, axis, onnx_split", [
    ((6, 4), 3, 0, [2, 2, 2]), ((7, 4), 3, 0, [3, 3, 1]), ((3, 10), (2, 5), 1, [2, 3, 5]),
    ((3, 10), (0, 4, 4), -1, [0, 4, 0, 6]), ((3, 5), 1, 1, [5]), ((0, 4), 2, 1, [2, 2]),
    ((5, 3), (2, 9), 0, [2, 3, 0]),
])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_split(dtype, shape, spec, axis, onnx_split):
    rng = np.random.default_rng(3)
    x = rand(rng, shape, dtype)
    n = len(onnx_split)
    expected = run_onnx("Split", [x, np.array(onnx_split, np.int64)], {"axis": axis}, n_outputs=n)
    got = run_kernel("split", x, indices_or_sections=spec, axis=axis)
    assert isinstance(got, tuple) and len(got) == n
    for g, e in zip(got, expected):
        assert_close(g, e)


@pytest.mark.parametrize("src, dst", [
    ("float32", "float16"), ("float32", "int32"), ("float32", "bool"), ("float64", "float32"),
    ("int64", "float32"), ("int32", "int8"), ("bool", "float32"), ("uint8", "int64"), ("float16", "float64"),
])
@pytest.mark.parametrize("shape", [(3, 5, 7), (0, 2)])
def test_astype(src, dst, shape):
    rng = np.random.default_rng(4)
    x = (rand(rng, shape, "float64") * 50).astype(src) if np.dtype(src).kind == "f" else rand(rng, shape, src)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    expected, = run_onnx("Cast", [x], {"to": to}, out_dtypes=[np.dtype(dst)])
    assert_close(run_kernel("astype", x, dtype=dst), expected)


def test_astype_to_bfloat16_rounds_to_nearest():
    x = np.array([1.0, 1.00390625, 1.01171875, 3.14159, -2.5e-3], np.float32)
    out = run_kernel("astype", x, dtype="bfloat16")
    np.testing.assert_array_equal(out.astype(np.float32), [1.0, 1.0, 1.015625, 3.140625, -0.00250244140625])


def test_astype_between_numbers_and_strings():
    x = np.array([1.5, -2.0, 0.25])
    assert run_kernel("astype", x, dtype="string").tolist() == ["1.5", "-2", "0.25"]   # as onnxruntime: %.8g
    s = np.array(["1.5", "-2", "7"], dtype=object)
    np.testing.assert_array_equal(run_kernel("astype", s, dtype="float32"), np.array([1.5, -2, 7], np.float32))


@pytest.mark.parametrize("shape, target", [
    ((5, 1), (3, 5, 4)), ((1,), (2, 3)), ((3, 1, 7), (3, 5, 7)), ((), (4,)), ((0, 1), (0, 3)), ((4,), (0, 4)),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_to(dtype, shape, target):
    rng = np.random.default_rng(5)
    x = rand(rng, shape, dtype)
    expected, = run_onnx("Expand", [x, np.array(target, np.int64)])
    assert_close(run_kernel("broadcast_to", x, Shape(target)), expected)


@pytest.mark.parametrize("shape, axis", [((3, 5), (0,)), ((3, 5), (1, -1)), ((3, 5), 2), ((0, 2), (0, 3)), ((), (0,))])
@pytest.mark.parametrize("dtype", DTYPES)
def test_expand_dims(dtype, shape, axis):
    rng = np.random.default_rng(6)
    x = rand(rng, shape, dtype)
    axes = np.array([axis] if isinstance(axis, int) else axis, np.int64)
    expected, = run_onnx("Unsqueeze", [x, axes])
    assert_close(run_kernel("expand_dims", x, axis=axis), expected)


@pytest.mark.parametrize("shape, axis", [((3, 1, 5, 1), (1,)), ((3, 1, 5, 1), None), ((1, 0, 1), (0, -1)),
                                         ((1,), None), ((1, 1), 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_squeeze(dtype, shape, axis):
    rng = np.random.default_rng(7)
    x = rand(rng, shape, dtype)
    axes = None if axis is None else np.array([axis] if isinstance(axis, int) else axis, np.int64)
    expected, = run_onnx("Squeeze", [x, axes])
    assert_close(run_kernel("squeeze", x, axis=axis), expected)


@pytest.mark.parametrize("shape, axis", [((3, 5, 7), 1), ((3, 5, 7), 0), ((3, 5, 7), 3), ((3, 5, 7), -1), ((0, 4, 2), 2)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_flatten(dtype, shape, axis):
    rng = np.random.default_rng(8)
    x = rand(rng, shape, dtype)
    expected, = run_onnx("Flatten", [x], {"axis": axis}, backend="ort" if x.size == 0 else "ref")
    assert_close(run_kernel("flatten", x, axis=axis), expected)


@pytest.mark.parametrize("dims, scalar", [((3, 5, 7), False), ((4,), True), ((), False)])
def test_shape_to_tensor(dims, scalar):
    x = np.zeros(dims, np.float32)
    nodes = [helper.make_node("Shape", ["i0"], ["s"])]
    nodes.append(helper.make_node("Squeeze", ["s"], ["o0"]) if scalar else helper.make_node("Identity", ["s"], ["o0"]))
    expected, = run_graph(nodes, [x], [np.int64])
    assert_close(run_kernel("shape_to_tensor", Shape(dims), scalar=scalar), expected)


@pytest.mark.parametrize("shape", [(2, 3, 8), (1, 2), (4, 0, 6), (5, 0), (3, 1, 64)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_rotate_half_is_the_slices_negated_and_joined(dtype, shape):
    """rotate_half is concat(-x[..., h:], x[..., :h]) exactly (signed zeros and NaN too), into a
    fresh output and into ``x`` itself (a copy of x is read)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal(shape).astype(dtype)
    if x.size:
        x.reshape(-1)[:3] = [0.0, np.nan, -0.0][: min(3, x.size)]
    h = shape[-1] // 2
    want = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    got = run_kernel("rotate_half", x)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    inplace = x.copy()
    get_kernel("rotate_half").fn(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, want)


@pytest.mark.parametrize("shape", [(2, 3, 8), (1, 2), (4, 0, 6), (3, 1, 64)])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_specialized_rotate_half_on_kept_views_is_the_kernel(dtype, shape):
    """The specialized rotate_half keeps the halves of views apart: the kernel's bits over new
    values in the same views, owning arrays, the same views again, in place (never kept)."""
    rng = np.random.default_rng(10)
    kernel = get_kernel("rotate_half").fn
    call = kernel.specialize_attrs({}, (False,))
    x, out = _view(shape, dtype), _view(shape, dtype)
    for a, o in ((x, out), (x, out), (x.copy(), np.empty(shape, dtype)), (x, out), (x, x), (x, x), (x, out)):
        a[...] = rng.standard_normal(shape).astype(dtype)
        want = np.empty(shape, dtype)
        kernel(a.copy(), out=want)
        call(a, out=o)
        np.testing.assert_array_equal(o, want)
        assert np.array_equal(np.signbit(o), np.signbit(want))


def test_rotate_half_of_an_odd_axis_is_a_shape_error():
    from relaxpack.errors import ShapeError
    with pytest.raises(ShapeError, match="odd length"):
        get_kernel("rotate_half").fn(np.ones((2, 3), np.float32), out=np.empty((2, 3), np.float32))


def _view(shape, dtype="float32"):
    """An array that is a view (as an arena's tensors are)."""
    size = int(np.prod(shape))
    return np.empty(size + 3, dtype)[3:].reshape(shape)


def test_permute_dims_and_split_per_instruction_read_every_calls_values():
    """Per instruction permute_dims and split keep their views of an input (and pieces) that are
    views, the same objects run after run with new values; other arrays go the kernels' way."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(7)
    permute = get_kernel("permute_dims").fn.specialize_attrs({"axes": (0, 3, 1, 2)}, (False,))
    split = get_kernel("split").fn.specialize_attrs({"indices_or_sections": [2, 5], "axis": 1}, (False,))
    x, t = _view((2, 7, 3, 4)), _view((2, 4, 7, 3))
    pieces = (_view((2, 2, 3, 4)), _view((2, 3, 3, 4)), _view((2, 2, 3, 4)))
    for round_ in range(4):
        x[...] = rng.standard_normal(x.shape)
        source = x if round_ < 3 else x.copy()      # last: an array of its own
        out = pieces if round_ != 2 else (pieces[0], _view((2, 3, 3, 4)), pieces[2])    # another piece
        permute(source, out=t)
        np.testing.assert_array_equal(t, x.transpose(0, 3, 1, 2))
        split(source, out=tuple(out))                # (the VM makes the tuple anew each run)
        for piece, want in zip(out, np.split(x, [2, 5], axis=1)):
            np.testing.assert_array_equal(piece, want)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "bool"])
@pytest.mark.parametrize("sections", [[3, 8], [1, 9], 2])
def test_split_and_slice_of_channels_last_runs_per_instruction(dtype, sections):
    """A split (and a strided_slice) along the last axis of views: each piece's runs copied as void
    items (as_item_runs) where at least two values long, a piece of one channel as it is; the
    values every call's, as np.split's and the slice's, for several dtypes, and after an input
    that is an array of its own."""
    from relaxpack.runtime.kernels.manipulate import as_item_runs
    rng = np.random.default_rng(13)
    split = get_kernel("split").fn.specialize_attrs({"indices_or_sections": sections, "axis": -1}, (False,))
    slice_ = get_kernel("strided_slice").fn.specialize_attrs(
        {"axes": (3,), "begin": (2,), "end": (9,), "strides": (1,)}, (False,))
    x = _view((2, 3, 4, 10), dtype)
    wants = np.split(x, sections, axis=-1)
    pieces = tuple(_view(w.shape, dtype) for w in wants)
    sliced = _view((2, 3, 4, 7), dtype)
    runs = [as_item_runs(p, w)[1].dtype.kind for p, w in zip(pieces, wants)]
    assert runs == ["V" if w.shape[-1] >= 2 else x.dtype.kind for w in wants]
    for round_ in range(4):
        x[...] = rand(rng, x.shape, dtype)
        source = x if round_ != 2 else x.copy()
        split(source, out=pieces)
        for piece, want in zip(pieces, np.split(x, sections, axis=-1)):
            np.testing.assert_array_equal(piece, want)
        slice_(source, out=sliced)
        np.testing.assert_array_equal(sliced, x[..., 2:9])


@pytest.mark.parametrize("axis, shapes", [
    (4, [(1, 3, 4, 5, 1), (1, 3, 4, 5, 1)]),        # ShuffleNet's interleaving concat of unit axes
    (-1, [(2, 3, 4), (2, 3, 1), (2, 3, 0), (2, 3, 6)]),   # uneven parts, an empty one, a negative axis
    (0, [(1, 5), (3, 5)]),
])
def test_concat_per_instruction_reads_every_calls_values(axis, shapes):
    """Per instruction concat keeps the output's slices for parts and an output that are views (the
    same objects run after run with new values; the VM makes the parts' tuple anew each run): each
    call as np.concatenate's; a part or an output that is another array, or of its own memory,
    goes the kernel's way (and the next call of the kept views still reads them)."""
    rng = np.random.default_rng(11)
    call = get_kernel("concat").fn.specialize_attrs({"axis": axis}, (False,))
    parts = [_view(shape) for shape in shapes]
    ax = axis % len(shapes[0])
    out_shape = list(shapes[0])
    out_shape[ax] = sum(shape[ax] for shape in shapes)
    out, other = _view(tuple(out_shape)), _view(tuple(out_shape))
    for round_ in range(6):
        for p in parts:
            p[...] = rng.standard_normal(p.shape)
        given = list(parts)
        if round_ == 2:
            given[0] = _view(shapes[0])                  # another part
            given[0][...] = rng.standard_normal(shapes[0])
        if round_ == 3:
            given[-1] = parts[-1].copy()                 # a part of its own memory
        target = other if round_ == 4 else (np.empty(out.shape, out.dtype) if round_ == 5 else out)
        call(tuple(given), out=target)
        np.testing.assert_array_equal(target, np.concatenate(given, axis=axis))


@pytest.mark.parametrize("shape, axes", [((1, 2, 16, 8, 12), (0, 3, 4, 2, 1)), ((2, 3, 5, 9), (0, 2, 3, 1)),
                                         ((3, 5, 7), (2, 0, 1))])
def test_permute_dims_per_instruction_with_per_position_copies(shape, axes):
    from relaxpack.runtime.kernels import get_kernel
    from relaxpack.runtime.kernels.manipulate import _permute_copies
    rng = np.random.default_rng(3)
    permute = get_kernel("permute_dims").fn.specialize_attrs({"axes": axes}, (False,))
    x = _view(shape)
    out_shape = tuple(shape[a] for a in axes)
    outs = (_view(out_shape), _view(out_shape))
    assert len(_permute_copies(x.transpose(axes), outs[0])) == (out_shape[-1] if out_shape[-1] <= 4 else 1)
    for round_ in range(4):
        x[...] = rng.standard_normal(shape)
        out = outs[round_ == 2]
        permute(x, out=out)
        np.testing.assert_array_equal(out, x.transpose(axes))


@pytest.mark.parametrize("name,attrs,extra", [
    ("squeeze", {"axis": None}, ()), ("expand_dims", {"axis": (0,)}, ()),
    ("flatten", {"axis": 1}, ()), ("reshape", {}, ((-1,),)),
])
def test_reshaping_kernels_per_instruction_equal_the_kernel(name, attrs, extra):
    """The kept view of ``out`` (an arena's view) is re-made when the input's shape or ``out``
    changes: alternating shapes, non-contiguous inputs, empty tensors, an ``out`` owning its memory."""
    fn = get_kernel(name).fn
    call = fn.specialize_attrs(attrs, (False,) * (1 + len(extra)))
    arena = np.zeros(64, np.float32)
    base = np.arange(48, dtype=np.float32)
    inputs = [base[:12].reshape(3, 4), base[:12].reshape(4, 3), base[:24].reshape(4, 6)[:, ::2],
              base[:12].reshape(2, 6).T, base[:0].reshape(0, 3)]
    for x in inputs * 2:
        for out in (arena[:x.size].reshape(x.size, 1) if name != "reshape" else arena[:x.size],
                    np.full(x.size if name == "reshape" else (x.size, 1), -1, np.float32)):
            want = np.full(out.shape, np.nan, np.float32)
            fn(x, *extra, out=want, **attrs)
            got = call(x, *extra, out=out)
            assert got is None and np.array_equal(out, want) and np.array_equal(out.reshape(-1), x.reshape(-1))


def test_reshaping_kernel_per_instruction_rejects_a_size_mismatch_after_a_kept_view():
    call = get_kernel("squeeze").fn.specialize_attrs({"axis": None}, (False,))
    arena = np.zeros(16, np.float32)
    call(np.ones((1, 6), np.float32), out=arena[:6])
    from relaxpack.errors import ShapeError
    with pytest.raises(ShapeError, match=r"squeeze: cannot reshape \(1, 5\)"):
        call(np.ones((1, 5), np.float32), out=arena[:6])


def test_reshaping_kernel_per_instruction_on_the_same_out_reads_every_calls_values():
    call = get_kernel("expand_dims").fn.specialize_attrs({"axis": (0,)}, (False,))
    arena = np.zeros(32, np.float32)
    out = arena[:12].reshape(1, 12)                   # one arena view, run after run
    shapes = [(3, 4), (12,), (3, 4), (2, 6)[::-1], (3, 4)]
    for k, shape in enumerate(shapes * 2):
        x = np.arange(12, dtype=np.float32).reshape(shape) * (k + 1)
        x = x if k % 3 else x.T.copy().T          # Fortran-ordered on some calls
        call(x, out=out)
        assert np.array_equal(out, x.reshape(1, 12)) and np.shares_memory(out, arena)
