"""The kernel table's contract, and the harness the kernel tests share.

The harness runs a kernel the way the VM does: the output struct info comes
from the op's own inference, ``out`` is preallocated (filled with garbage),
inputs are read-only, every attribute is passed with defaults filled in.
The reference is onnx's ReferenceEvaluator or onnxruntime on a small model
built with ``onnx.helper``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from relaxpack.errors import RelaxpackError, UnsupportedOpError
from relaxpack.ir import BlockBuilder, ShapeExpr, TensorStructInfo, Tuple, TupleStructInfo, Var
from relaxpack.ops import make_call, registered_ops
from relaxpack.runtime.kernels import KERNELS, Kernel, get_kernel, register_packed

INTRINSICS = {"call_tir", "call_dps_packed", "call_packed", "call_pure_packed"}
CONTROL_FLOW = {"loop"}  # the VM runs it (vm.builtin.loop), no kernel
MEMORY = {"memory.alloc_tensor", "memory.kill_tensor"}  # a plan's allocations: codegen's, no kernel
OPSET = 21

# ---------------------------------------------------------------- harness


class Shape(tuple):
    """Marks a kernel argument that is a shape value (``R.shape([...])``)."""


def rand(rng: np.random.Generator, shape, dtype, low=None, high=None) -> np.ndarray:
    """Seeded random data of ``dtype``: normal floats, small ints, fair bools."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = (0 if dtype.kind == "u" else -9) if low is None else low
        return rng.integers(lo, 10 if high is None else high, size=shape).astype(dtype)
    if low is not None:
        return rng.uniform(low, high, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _expr(i: int, arg):
    if isinstance(arg, Shape):
        return ShapeExpr(tuple(arg))
    if isinstance(arg, tuple):
        return Tuple(tuple(_expr(f"{i}_{j}", a) for j, a in enumerate(arg)))
    dtype = "string" if arg.dtype == object else str(arg.dtype)
    return Var(f"x{i}", struct_info=TensorStructInfo(arg.shape, dtype))


def _alloc(sinfo):
    if isinstance(sinfo, TupleStructInfo):
        return tuple(_alloc(f) for f in sinfo.fields)
    assert isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None, sinfo
    dtype = np.dtype(object) if sinfo.dtype == "string" else np.dtype(getattr(ml_dtypes, sinfo.dtype, sinfo.dtype))
    out = np.empty(tuple(int(d) for d in sinfo.shape), dtype)
    if dtype != object:
        out.reshape(-1).view(np.uint8).fill(0x7F)   # garbage: the kernel must write every element
    return out


def _frozen(arg):
    if isinstance(arg, Shape):
        return tuple(int(v) for v in arg)
    if isinstance(arg, tuple):
        return tuple(_frozen(a) for a in arg)
    arg = np.array(arg, copy=True)
    arg.setflags(write=False)
    return arg


def run_kernel(name: str, *args, **attrs):
    """Run kernel ``name`` like the VM: ``out`` from the op's inference."""
    call = make_call(name, *(_expr(i, a) for i, a in enumerate(args)), **attrs)
    out = _alloc(BlockBuilder().infer_call(call))
    kernel_args = tuple(_frozen(a) for a in args)
    kernel = get_kernel(name)
    assert kernel.dps
    assert kernel.fn(*kernel_args, out=out, **call.attrs) is None
    for before, after in zip(args, kernel_args):       # inputs are never written
        if isinstance(before, np.ndarray):
            np.testing.assert_array_equal(before, after)
    return out


def run_graph(nodes, inputs, out_dtypes, *, backend: str = "ref", opset: int = OPSET):
    """Run ONNX ``nodes`` on graph inputs ``i0, i1, ...`` (None: an omitted
    optional input, named ""), returning outputs ``o0, o1, ...``."""
    graph_inputs, feeds = [], {}
    for i, x in enumerate(inputs):
        if x is None:
            continue
        graph_inputs.append(helper.make_tensor_value_info(
            f"i{i}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
        feeds[f"i{i}"] = x
    outputs = [helper.make_tensor_value_info(f"o{j}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
               for j, d in enumerate(out_dtypes)]
    graph = helper.make_graph(nodes, "g", graph_inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    if backend == "ort":
        session = onnxruntime.InferenceSession(model.SerializeToString(),
                                               providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def run_onnx(op_type: str, inputs, attrs=None, *, out_dtypes=None, n_outputs: int = 1,
             backend: str = "ref", opset: int = OPSET):
    """Run one ONNX node; outputs have the first input's dtype unless given."""
    names = ["" if x is None else f"i{i}" for i, x in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, [f"o{j}" for j in range(n_outputs)], **(attrs or {}))
    if out_dtypes is None:
        out_dtypes = [next(x for x in inputs if x is not None).dtype] * n_outputs
    return run_graph([node], inputs, out_dtypes, backend=backend, opset=opset)


def tolerance(dtype) -> dict:
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return dict(rtol=1e-3, atol=1e-3)
    if dtype == np.float32:
        return dict(rtol=1e-5, atol=1e-6)
    if dtype == np.float64:
        return dict(rtol=1e-12, atol=1e-14)
    return dict(rtol=0, atol=0)


def assert_close(actual, expected, **tol):
    """Same shape and dtype, values within the dtype's tolerance (NaNs equal)."""
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    tol = tol or tolerance(actual.dtype)
    if actual.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   equal_nan=True, **tol)


# ---------------------------------------------------------------- the table's contract


def test_every_registered_op_has_a_kernel():
    missing = set(registered_ops()) - INTRINSICS - CONTROL_FLOW - MEMORY - set(KERNELS)
    assert not missing, f"ops without a kernel: {sorted(missing)}"


def test_kernels_are_named_after_their_ops():
    # packed kernels of data-dependent ONNX operands (packed_call) have no op: "dyn.<name>";
    # kernels that tests register (test_packed_call.py) are not the library's
    ops = set(registered_ops()) - INTRINSICS - MEMORY
    library = {n: k for n, k in KERNELS.items() if k.fn.__module__.startswith("relaxpack.")}
    assert {n for n, k in library.items() if k.dps} <= ops
    assert all(n in ops or n.startswith("dyn.") for n, k in library.items() if not k.dps)
    for name, kernel in KERNELS.items():
        assert isinstance(kernel, Kernel) and kernel.name == name and callable(kernel.fn)


def test_get_kernel_of_an_unknown_name_is_a_relaxpack_error():
    with pytest.raises(UnsupportedOpError, match="no_such_op"):
        get_kernel("no_such_op")
    assert issubclass(UnsupportedOpError, RelaxpackError)


def test_register_packed_kernel():
    @register_packed("test.nonzero")
    def nonzero(x):
        return np.stack(np.nonzero(x)).astype(np.int64)
    try:
        kernel = get_kernel("test.nonzero")
        assert not kernel.dps and kernel.fn is nonzero
        np.testing.assert_array_equal(kernel.fn(np.array([0, 3, 0, 4])), [[1, 3]])
        with pytest.raises(ValueError, match="twice"):
            register_packed("test.nonzero")(nonzero)
    finally:
        del KERNELS["test.nonzero"]


def test_out_is_written_in_place():
    rng = np.random.default_rng(0)
    x = rand(rng, (3, 5), "float32")
    out = np.empty((3, 5), np.float32)
    address = out.__array_interface__["data"][0]
    assert get_kernel("nn.softmax").fn(x, out=out, axis=-1) is None
    assert out.__array_interface__["data"][0] == address
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    assert_close(out, e / e.sum(axis=-1, keepdims=True))
    parts = (np.empty((3, 2), np.float32), np.empty((3, 3), np.float32))
    assert get_kernel("split").fn(x, out=parts, indices_or_sections=(2,), axis=1) is None
    np.testing.assert_array_equal(parts[0], x[:, :2])
    np.testing.assert_array_equal(parts[1], x[:, 2:])


def _alias_cases():
    rng = np.random.default_rng(1)
    f = lambda *shape: rand(rng, shape, "float32")               # noqa: E731
    i = lambda *shape, lo=-9, hi=10: rand(rng, shape, "int32", lo, hi)   # noqa: E731
    cond = rng.random((4, 6)) < 0.5
    return [
        ("add", (f(4, 6), f(4, 6)), {}),
        ("divide", (i(4, 6), i(4, 6, lo=1, hi=4)), {}),
        ("mod", (i(4, 6), i(4, 6, lo=1, hi=4)), {"fmod": False}),
        ("power", (i(4, 6, lo=-3, hi=4), i(4, 6, lo=-2, hi=3)), {}),
        ("where", (cond, f(4, 6), f(4, 6)), {}),
        ("nn.prelu", (f(4, 6), f(6)), {}),
        ("nn.gelu", (f(4, 6),), {"approximate": "none"}),
        ("nn.elu", (f(4, 6),), {"alpha": 1.0}),
        ("nn.mish", (f(4, 6),), {}),
        ("rsqrt", (np.abs(f(4, 6)),), {}),
        ("nn.softmax", (f(4, 6),), {"axis": 0}),
        ("nn.layer_norm", (f(4, 6), f(6), f(6)), {"axes": (-1,), "epsilon": 1e-5}),
        ("nn.batch_norm", (f(4, 6), f(6), f(6), f(6), np.abs(f(6))), {"axis": 1, "epsilon": 1e-5}),
    ]


@pytest.mark.parametrize("name, args, attrs", _alias_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_out_may_alias_the_data_input(name, args, attrs):
    # The memory planner lets an elementwise kernel write into an input that
    # dies there: the result must not change.
    data = 1 if name == "where" else 0
    fn = get_kernel(name).fn
    expected = np.empty(args[data].shape, args[data].dtype)
    fn(*args, out=expected, **attrs)
    buf = args[data].copy()
    fn(*args[:data], buf, *args[data + 1:], out=buf, **attrs)
    np.testing.assert_array_equal(buf, expected)


def _bfloat16_cases():
    rng = np.random.default_rng(2)
    f = lambda *shape: rand(rng, shape, "float32")                       # noqa: E731
    return [
        ("exp", (f(3, 5),), {}), ("sigmoid", (f(3, 5),), {}), ("erf", (f(3, 5),), {}),
        ("nn.gelu", (f(3, 5),), {}), ("nn.silu", (f(3, 5),), {}), ("nn.softmax", (f(3, 5),), {}),
        ("add", (f(3, 5), f(5)), {}), ("matmul", (f(3, 5), f(5, 4)), {}),
        ("nn.layer_norm", (f(3, 5), f(5), f(5)), {}), ("sum", (f(3, 5),), {"axis": 1}),
        ("nn.conv", (f(1, 2, 6, 6), f(3, 2, 3, 3)), {"padding": 1}),
        ("nn.avg_pool", (f(1, 2, 6, 6),), {"pool_size": 2, "strides": 2}),
        ("nn.max_pool", (f(1, 2, 6, 6),), {"pool_size": 3}),
    ]


@pytest.mark.parametrize("name, args, attrs", _bfloat16_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_bfloat16_computes_in_float32_and_rounds_once(name, args, attrs):
    # The low floats take the float32 code path: given bfloat16 inputs, the
    # result is the float32 kernel's result on those inputs, rounded once.
    bf16 = tuple(a.astype(ml_dtypes.bfloat16) for a in args)
    expected = run_kernel(name, *(a.astype(np.float32) for a in bf16), **attrs)
    got = run_kernel(name, *bf16, **attrs)
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, expected.astype(ml_dtypes.bfloat16))
