"""The packed kernels of runtime shape-like operands (kernels/dynamic_shape.py).

Their numerics are checked end to end against onnxruntime by the converter
tests (tests/importers/onnx/test_convert_*.py, "at_run_time"); here: what
the VM relies on. A result never aliases an input (the memory planner does
not know about it), and an operand of the wrong kind is a clear ShapeError.
"""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.runtime.kernels import KERNELS

from .kernel_calls import call_kernel


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def i64(*values):
    return np.array(values, np.int64)


#: (kernel, inputs, attrs) whose result could be a view of X
CALLS = [
    ("dyn.reshape", (X, i64(4, 6)), {}),
    ("dyn.reshape", (X, i64(0, 3, 4)), {}),
    ("dyn.expand", (X, i64(2, 3, 4)), {}),
    ("dyn.slice", (X, i64(0), i64(9)), {}),
    ("dyn.slice", (X, i64(0), i64(2), i64(2), i64(1)), {"parts": ("axes", "steps")}),
    ("dyn.split", (X, i64(1, 2)), {"axis": 1, "count": 2}),
    ("dyn.squeeze", (X[:1], i64(0)), {}),
    ("dyn.unsqueeze", (X, i64(0)), {}),
    ("dyn.tile", (X, i64(1, 1, 1)), {}),
    ("dyn.pad", (X, i64(0, 0, 0, 0, 0, 0)), {}),
]


@pytest.mark.parametrize("name, inputs, attrs", CALLS, ids=[c[0] for c in CALLS])
def test_a_result_never_aliases_an_input(name, inputs, attrs):
    results = call_kernel(name, *inputs, **attrs)
    for result in results if isinstance(results, tuple) else (results,):
        assert not np.may_share_memory(result, inputs[0]), name


def test_packed_kernels_are_registered_as_packed():
    names = {"dyn.reshape", "dyn.expand", "dyn.full", "dyn.slice", "dyn.split", "dyn.squeeze", "dyn.unsqueeze",
             "dyn.pad", "dyn.tile", "dyn.topk", "dyn.one_hot", "dyn.range"}
    assert all(not KERNELS[n].dps for n in names)


@pytest.mark.parametrize("name, inputs, message", [
    ("dyn.reshape", (X, np.array([4.0, 6.0], np.float32)), r"reshape: the target shape must be integers, got float32"),
    ("dyn.reshape", (X, i64(4, 6).reshape(1, 2)), r"reshape: the target shape must be 1-D, got shape \(1, 2\)"),
    ("dyn.topk", (X, i64(1, 2)), r"topk: K must hold one value, got \(1, 2\)"),
    ("dyn.full", (i64(2, -3), np.float32(0)), r"constant_of_shape: negative dim in the shape \(2, -3\)"),
    ("dyn.tile", (X, i64(1, 2)), r"tile: repeats \(1, 2\) must be 3 non-negative counts for shape \(2, 3, 4\)"),
    ("dyn.range", (np.int64(0), np.int64(3), np.int64(0)), r"range: delta must not be 0"),
])
def test_invalid_operands_are_clear_shape_errors(name, inputs, message):
    with pytest.raises(ShapeError, match=message):
        call_kernel(name, *inputs)


def test_onnx_slice_clamps_a_negative_step_start_to_the_first_element():
    # ONNX clamps a start below -dim to 0 ("through the first element"); Python's slice gives nothing
    x = np.arange(5)
    np.testing.assert_array_equal(call_kernel("dyn.slice", x, i64(-100), i64(-2 ** 63), i64(0), i64(-1),
                                                          parts=("axes", "steps")), [0])
    np.testing.assert_array_equal(call_kernel("dyn.slice", x, i64(2), i64(2 ** 63 - 1), i64(0), i64(-1),
                                                          parts=("axes", "steps")), np.empty(0, np.int64))


def test_tensor_to_shape_returns_the_chosen_elements_and_rejects_negative_ones():
    from relaxpack.runtime.kernels.shape import tensor_to_shape
    assert tensor_to_shape(np.array([2, -1, 4], np.int64), indices=(0, 2), what="n") == (2, 4)
    assert tensor_to_shape(np.array(5, np.int32), indices=(0,), what="n") == (5,)
    with pytest.raises(ShapeError, match="Expand node: element 1 is -1, but the model uses it as a dim"):
        tensor_to_shape(np.array([2, -1]), indices=(1,), what="Expand node")
    with pytest.raises(ShapeError, match="expected a 0-d or 1-D integer tensor"):
        tensor_to_shape(np.array([2.0]), indices=(0,), what="n")
    with pytest.raises(ShapeError, match="has 2 elements"):
        tensor_to_shape(np.array([2, 3]), indices=(2,), what="n")


def test_squeeze_ones_drops_every_one_and_checks_the_rank():
    from relaxpack.runtime.kernels.dynamic_shape import squeeze_ones
    x = np.arange(6.0).reshape(2, 1, 3)
    out = squeeze_ones(x, rank=2, what="Squeeze node")
    assert out.shape == (2, 3) and not np.shares_memory(out, x)
    with pytest.raises(ShapeError, match="Squeeze node: .* leaves rank 1, but the model was imported for rank 2"):
        squeeze_ones(np.zeros((1, 1, 3)), rank=2, what="Squeeze node")


# ---------------------------------------------------------------- per-instruction specializations


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 1, 4), (0, 5)])
@pytest.mark.parametrize("axes", [(0,), (-1,), (0, 2), (1, -1), (3,)])
def test_unsqueeze_specialized_on_constant_axes_equals_the_kernel(shape, axes):
    fn = KERNELS["dyn.unsqueeze"].fn
    call = fn.specialize_attrs({}, (False, True))
    a = i64(*axes)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    for _ in range(2):              # the plan made, then kept
        try:
            want = fn(x, a)
        except ShapeError as err:
            with pytest.raises(ShapeError, match=str(err).split(":")[0]):
                call(x, a)
            continue
        got = call(x, a)
        assert got.shape == want.shape and np.array_equal(got, want) and not np.shares_memory(got, x)
    # another axes array (a register operand would be one): planned anew
    y = np.zeros((2, 2), np.float32)
    assert call(y, i64(1)).shape == (2, 1, 2) and call(y, i64(0)).shape == (1, 2, 2)


def test_unsqueeze_specialized_on_a_register_takes_the_kernel():
    call = KERNELS["dyn.unsqueeze"].fn.specialize_attrs({}, (False, False))
    assert call(X, i64(0)).shape == (1, 2, 3, 4)
    with pytest.raises(ShapeError, match="repeat"):
        call(X, i64(0, 0))


@pytest.mark.parametrize("kernel,args,attrs", [
    ("nn.relu", (np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32),), ()),
    ("add", (np.ones((2, 1), np.float32), np.arange(3, dtype=np.float32)), ()),
    ("add", (np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32).reshape(1, 3)), ()),
    ("concat", ((np.ones((1, 2, 3), np.float32), np.zeros((2, 2, 3), np.float32)),), (("axis", 0),)),
])
def test_apply_specialized_equals_the_packed_kernel(kernel, args, attrs):
    fn = KERNELS["dyn.apply"].fn
    options = {"kernel": kernel, "dtype": "float32", "attrs": attrs}
    call = fn.specialize_attrs(options, (False,) * len(args))
    want = fn(*args, **options)
    for _ in range(2):
        got = call(*args)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_apply_specialized_keeps_the_kernels_errors():
    fn = KERNELS["dyn.apply"].fn
    call = fn.specialize_attrs({"kernel": "add", "dtype": "float32", "attrs": ()}, (False, False))
    with pytest.raises(ShapeError, match="do not broadcast"):
        call(np.ones((2, 3), np.float32), np.ones((4,), np.float32))
    concat = fn.specialize_attrs({"kernel": "concat", "dtype": "float32", "attrs": (("axis", 0),)}, (False,))
    with pytest.raises(ShapeError, match=r"cannot concatenate \(1, 2\), \(1, 3\) along axis 0"):
        concat((np.ones((1, 2), np.float32), np.ones((1, 3), np.float32)))
    missing = fn.specialize_attrs({"kernel": "no.such.kernel", "dtype": "float32", "attrs": ()}, (False,))
    with pytest.raises(Exception) as raised:
        missing(np.ones(2, np.float32))
    with pytest.raises(type(raised.value)):
        fn(np.ones(2, np.float32), kernel="no.such.kernel", dtype="float32", attrs=())


def _apply_pair(kernel, attrs=()):
    fn = KERNELS["dyn.apply"].fn
    options = {"kernel": kernel, "dtype": "float32", "attrs": attrs}
    return fn.specialize_attrs(options, (False,)), (lambda *args: fn(*args, **options))


@pytest.mark.parametrize("kernel,attrs,calls", [
    # alternating shapes re-key the kept output shape; empty tensors; non-contiguous operands
    ("concat", (("axis", -1),), [
        ((np.ones((2, 3), np.float32), np.zeros((2, 1), np.float32)),),
        ((np.ones((4, 3), np.float32), np.zeros((4, 5), np.float32)),),
        ((np.ones((2, 3), np.float32), np.zeros((2, 1), np.float32)),),
        ((np.ones((2, 0), np.float32), np.zeros((2, 1), np.float32)),),
        ((np.ones((0, 3), np.float32), np.zeros((0, 2), np.float32)),),
        ((np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2], np.zeros((4, 5), np.float32).T.copy().T),),
        ((np.ones((2, 3), np.float32),),),
    ]),
    ("nn.relu", (), [
        (np.arange(-3, 3, dtype=np.float32).reshape(2, 3),),
        (np.arange(-3, 3, dtype=np.float32).reshape(3, 2),),
        (np.zeros((0, 4), np.float32),),
        (np.arange(-6, 6, dtype=np.float32).reshape(3, 4).T,),
        (np.arange(-3, 3, dtype=np.float32).reshape(2, 3),),
    ]),
])
def test_apply_specialized_keeps_shapes_per_operand_shapes(kernel, attrs, calls):
    call, packed = _apply_pair(kernel, attrs)
    results = []
    for args in calls * 2:
        got, want = call(*args), packed(*args)
        assert got.shape == want.shape and got.dtype == want.dtype and np.array_equal(got, want)
        assert all(got is not r and not np.shares_memory(got, r) for r in results)   # a new array each call
        results.append(got)


def test_apply_specialized_broadcast_rekeys_and_raises_after_a_kept_shape():
    call, packed = _apply_pair("add")
    a, b = np.ones((2, 1), np.float32), np.arange(3, dtype=np.float32)
    assert call(a, b).shape == (2, 3)
    assert call(b, a).shape == (2, 3)
    assert call(a, a).shape == (2, 1)
    with pytest.raises(ShapeError, match="do not broadcast"):       # a misfit is never kept
        call(np.ones((2, 3), np.float32), np.ones((4,), np.float32))
    with pytest.raises(ShapeError, match="do not broadcast"):
        call(np.ones((2, 3), np.float32), np.ones((4,), np.float32))
    assert np.array_equal(call(a, 2.0), packed(a, 2.0))               # a scalar operand: not kept, still right


def test_apply_shapes_key_tells_a_tuple_of_arrays_from_an_array():
    from relaxpack.runtime.kernels.dynamic_apply import shapes_key
    assert shapes_key((np.zeros(()),)) != shapes_key(((),))
    assert shapes_key(((np.zeros(2), np.zeros(3)),)) == ((None, (2,), (3,)),)
    assert shapes_key((np.zeros(2), [np.zeros(2)])) is None
    assert shapes_key((np.zeros(2).view(np.matrix),)) is None


def test_apply_specialized_keeps_a_bounded_number_of_shapes():
    from relaxpack.runtime.kernels import dynamic_apply
    call, packed = _apply_pair("concat", (("axis", 0),))
    for n in range(1, 3 * dynamic_apply._SHAPES_KEPT):
        parts = (np.full((n, 2), n, np.float32), np.zeros((1, 2), np.float32))
        assert np.array_equal(call(parts), packed(parts))
    kept = [c.cell_contents for c in call.__closure__ if isinstance(c.cell_contents, dict) and
            all(type(k) is tuple for k in c.cell_contents)]
    assert kept and all(len(d) <= dynamic_apply._SHAPES_KEPT for d in kept)


def test_unsqueeze_specialized_alternating_shapes_and_strided_inputs():
    fn = KERNELS["dyn.unsqueeze"].fn
    call, a = fn.specialize_attrs({}, (False, True)), i64(0, -1)
    base = np.arange(24, dtype=np.float32)
    inputs = [base[:6].reshape(2, 3), base.reshape(4, 6)[:, ::2], base[:6].reshape(3, 2).T, base[:0].reshape(0, 3),
              base[:4], base[:6].reshape(2, 3)]
    results = []
    for x in inputs * 2:
        got, want = call(x, a), fn(x, a)
        assert got.shape == want.shape and np.array_equal(got, want) and not np.shares_memory(got, x)
        assert all(not np.shares_memory(got, r) for r in results if r.size)
        results.append(got)
    with pytest.raises(ShapeError):              # a rank the axes do not fit, after kept shapes
        fn.specialize_attrs({}, (False, True))(np.zeros(()), i64(0, 2))


@pytest.mark.parametrize("start,end", [(0, None), (1, None), (-1, None), (0, -1), (5, None), (-9, 1)])
def test_shape_specialized_equals_the_kernel_and_returns_a_new_array(start, end):
    fn = KERNELS["dyn.shape"].fn
    call = fn.specialize_attrs({"start": start, "end": end}, (False,))
    inputs = [np.zeros((2, 3, 4)), np.zeros((5,)), np.zeros((2, 3, 4)).transpose(2, 0, 1), np.zeros((0, 7)),
              np.zeros(()), np.zeros((2, 3, 4))]
    seen = []
    for x in inputs * 2:
        got, want = call(x), fn(x, start=start, end=end)
        assert got.dtype == want.dtype == np.int64 and np.array_equal(got, want)
        assert all(got is not s for s in seen)
        got[...] = -1                            # a caller writing into a result changes no later one
        seen.append(got)
    nested = [[1.0, 2.0, 3.0]]                   # not an array: the kernel's own path, not kept
    assert np.array_equal(call(nested), fn(nested, start=start, end=end))


# ---------------------------------------------------------------- dyn.slice per instruction


def specialized_slice(axes, steps, parts=("axes", "steps")):
    """``dyn.slice`` specialized as the VM does for an instruction whose ``parts`` are bound values."""
    from relaxpack.runtime.kernels._registry import BoundFlags
    bound = {"axes": axes, "steps": steps}
    values = tuple(bound[p] for p in parts)
    return KERNELS["dyn.slice"].fn.specialize_attrs(
        {"parts": parts}, BoundFlags((None, None, None, *values), (False, False, False, *(True,) * len(parts))))


SLICES = [   # (shape, starts, ends, axes, steps)
    ((40, 60), (3,), (35,), (0,), (1,)),                     # Mask R-CNN's crop of a resized mask
    ((40, 60), (0,), (2 ** 63 - 1,), (1,), (1,)),
    ((40, 60), (-5,), (-1,), (-1,), (1,)),                   # negative axis and bounds
    ((2, 3, 4), (2, -100), (-2 ** 63, 9), (2, 0), (-1, 2)),   # a negative step, clamped starts
    ((5,), (4,), (0,), (0,), (-2,)),
    ((3, 0, 4), (0,), (1,), (1,), (1,)),                     # an empty dim
    ((6, 7), (5,), (2,), (0,), (1,)),                        # empty result
    ((2, 3, 4), (), (), (), ()),                             # no axes: a copy
]


@pytest.mark.parametrize("shape, starts, ends, axes, steps", SLICES, ids=str)
def test_slice_specialized_on_bound_axes_and_steps_equals_the_kernel(shape, starts, ends, axes, steps):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    call = specialized_slice(i64(*axes), i64(*steps))
    for dtype in (np.int64, np.int32):
        info = np.iinfo(dtype)
        b, e = (np.array([min(max(v, info.min), info.max) for v in bounds], dtype) for bounds in (starts, ends))
        want = call_kernel("dyn.slice", x, b, e, i64(*axes), i64(*steps), parts=("axes", "steps"))
        got = call(x, b, e, i64(*axes), i64(*steps))
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
        assert not np.may_share_memory(got, x)


def test_slice_specialized_without_axes_or_steps_equals_the_kernel():
    call = specialized_slice(None, i64(1, 2), parts=("steps",))
    got = call(X, i64(0, 1), i64(2, 9), i64(1, 2))
    np.testing.assert_array_equal(got, X[0:2, 1:9:2])
    call = specialized_slice(i64(2), None, parts=("axes",))
    np.testing.assert_array_equal(call(X, i64(1), i64(3), i64(2)), X[:, :, 1:3])


@pytest.mark.parametrize("axes, steps, starts, ends, message", [
    ((3,), (1,), (0,), (1,), r"axis 3 is out of range for rank 3"),
    ((0, 0), (1, 1), (0, 0), (1, 1), r"repeat an axis"),
    ((0,), (0,), (0,), (1,), r"must not be 0"),
    ((0,), (1,), (0, 1), (1, 2), r"must have one length"),           # bounds longer than the axes
    ((0,), (1,), (0,), (1, 2), r"must have one length"),
])
def test_slice_specialized_keeps_the_kernels_errors(axes, steps, starts, ends, message):
    call = specialized_slice(i64(*axes), i64(*steps))
    for _ in range(2):              # the plan kept for the rank raises again
        with pytest.raises(ShapeError, match=message):
            call(X, i64(*starts), i64(*ends), i64(*axes), i64(*steps))


def test_slice_specialized_takes_the_kernel_for_other_bounds():
    call = specialized_slice(i64(0), i64(1))
    np.testing.assert_array_equal(call(X, np.int64(1), np.int64(2), i64(0), i64(1)), X[1:2])   # 0-d bounds
    with pytest.raises(ShapeError, match=r"starts must be integers"):
        call(X, np.array([0.0]), i64(1), i64(0), i64(1))
    # axes or steps from a register: the kernel on every call
    from relaxpack.runtime.kernels._registry import BoundFlags
    general = KERNELS["dyn.slice"].fn.specialize_attrs(
        {"parts": ("axes", "steps")}, BoundFlags((None,) * 5, (False,) * 5))
    np.testing.assert_array_equal(general(X, i64(1), i64(3), i64(1), i64(1)), X[:, 1:3])


# ---------------------------------------------------------------- dyn.tensor_to_shape per instruction


@pytest.mark.parametrize("x, index", [
    (np.array(5, np.int64), 0), (np.array(0, np.int32), 0), (np.array([7], np.uint8), 0),
    (np.array([2, 3, 4], np.int64), 2), (np.array([2 ** 63 - 1], np.int64), 0), (np.array(2 ** 64 - 1, np.uint64), 0),
])
def test_tensor_to_shape_specialized_equals_the_kernel(x, index):
    from relaxpack.runtime.kernels.shape import tensor_to_shape
    call = tensor_to_shape.specialize_attrs({"indices": (index,), "what": "n"}, (False,))
    got, want = call(x), tensor_to_shape(x, indices=(index,), what="n")
    assert got == want and all(type(d) is int for d in got)


@pytest.mark.parametrize("x, message", [
    (np.array(-1, np.int64), r"n: element 0 is -1, but the model uses it as a dim"),
    (np.array([2.0]), r"n: expected a 0-d or 1-D integer tensor"),
    (np.array([[2]]), r"n: expected a 0-d or 1-D integer tensor"),
    (np.array([], np.int64), r"n: has 0 elements, the model uses element\(s\) \(0,\)"),
    (np.array(True), r"n: expected a 0-d or 1-D integer tensor"),
])
def test_tensor_to_shape_specialized_keeps_the_kernels_errors(x, message):
    from relaxpack.runtime.kernels.shape import tensor_to_shape
    call = tensor_to_shape.specialize_attrs({"indices": (0,), "what": "n"}, (False,))
    with pytest.raises(ShapeError, match=message):
        call(x)


def test_tensor_to_shape_specialized_on_several_indices_is_the_kernel():
    from relaxpack.runtime.kernels.shape import tensor_to_shape
    call = tensor_to_shape.specialize_attrs({"indices": (0, 2), "what": "n"}, (False,))
    assert call(np.array([2, 9, 4], np.int64)) == (2, 4)
    with pytest.raises(ShapeError, match=r"element 2 is -4"):
        call(np.array([2, 9, -4], np.int64))
