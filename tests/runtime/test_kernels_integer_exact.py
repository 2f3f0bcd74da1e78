"""Integer matmul and conv by float BLAS (kernels/integer_exact.py, conv_integer.py):
the same integers as exact integer arithmetic, the float type chosen by the proven
bound, the integer loops kept where no float type is exact or the result would wrap."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir.op import get_op_def
from relaxpack.runtime.kernels import integer_exact
from relaxpack.runtime.kernels.linalg import matmul
from relaxpack.runtime.kernels.nn import conv_bias

from .kernel_calls import op_attrs

I32_MAX = 2**31 - 1


@pytest.fixture(autouse=True)
def every_size(monkeypatch):
    """The tests' products are small: let the float path take them all (see the size test)."""
    monkeypatch.setattr(integer_exact, "MIN_PRODUCTS", 0)


def test_small_products_keep_the_integer_loops(monkeypatch):
    monkeypatch.setattr(integer_exact, "MIN_PRODUCTS", 1 << 14)
    seen = _chosen(monkeypatch)
    a, b = np.full((5, 32), 3, np.int32), np.full((32, 32), 2, np.int32)
    out = np.empty((5, 32), np.int32)
    matmul(a, b, out=out, out_dtype=None)                                   # 5120 multiply-adds
    assert seen == [] and (out == 192).all()
    big = np.full((16, 32), 3, np.int32)
    out = np.empty((16, 32), np.int32)
    matmul(big, b, out=out, out_dtype=None)                                 # 16384
    assert seen == [np.float32] and (out == 192).all()
    x, w = np.ones((1, 4, 8, 8), np.int32), np.ones((4, 4, 3, 3), np.int32)
    conv_bias(x, w, None, out=np.empty((1, 4, 8, 8), np.int32), **op_attrs("nn.conv", padding=1))   # 256 outputs x 36
    assert seen == [np.float32]


def test_exact_dtype_boundaries():
    i32, i64 = np.dtype(np.int32), np.dtype(np.int64)
    assert integer_exact.exact_dtype(0, i32) == np.float32
    assert integer_exact.exact_dtype(2**24, i32) == np.float32
    assert integer_exact.exact_dtype(2**24 + 1, i32) == np.float64
    assert integer_exact.exact_dtype(I32_MAX, i32) == np.float64
    assert integer_exact.exact_dtype(I32_MAX + 1, i32) is None        # the int32 result could wrap
    assert integer_exact.exact_dtype(2**53, i64) == np.float64
    assert integer_exact.exact_dtype(2**53 + 1, i64) is None
    assert integer_exact.exact_dtype(5, np.dtype(np.uint32)) is None   # only signed results


def test_magnitude_and_constant_bound():
    assert integer_exact.magnitude(np.zeros((0, 3), np.int32)) == 0
    assert integer_exact.magnitude(np.array([-2**31, 5], np.int32)) == 2**31
    assert integer_exact.magnitude(np.array([3, 200], np.uint8)) == 200
    w = np.array([[1, -7], [-3, 2], [4, 0]], np.int64)
    w.flags.writeable = False
    assert integer_exact.constant_facts(w, (0,)).bound == 9          # column sums of |w|: 8, 9
    assert integer_exact.constant_facts(np.full((2, 2), -2**63, np.int64).view(), (0,)) is None  # writeable
    big = np.full((2, 2), -2**63, np.int64)
    big.flags.writeable = False
    assert integer_exact.constant_facts(big, (0,)).bound == 2**64    # no int64 overflow


def _chosen(monkeypatch) -> list:
    """Record the float type each exact-path decision takes (None: the integer loops)."""
    seen = []
    original = integer_exact.exact_dtype

    def spy(bound, result):
        seen.append(original(bound, result))
        return seen[-1]
    monkeypatch.setattr(integer_exact, "exact_dtype", spy)
    return seen


def _reference_matmul(a, b, dtype):
    """Exact integer product (Python ints), wrapped to ``dtype`` as the integer kernel wraps."""
    exact = np.matmul(a.astype(object), b.astype(object))
    bits = np.dtype(dtype).itemsize * 8
    wrapped = (np.asarray(exact, dtype=object) + 2**(bits - 1)) % 2**bits - 2**(bits - 1)
    return np.asarray(wrapped, dtype=object).astype(dtype)


MATMUL_SHAPES = [((3, 5), (5, 7)), ((7,), (7, 3)), ((2, 3, 7), (7,)), ((2, 1, 3, 5), (4, 5, 6)),
                 ((1, 1), (1, 1)), ((0, 3), (3, 4)), ((2, 0, 3), (3, 5)), ((3, 0), (0, 4)), ((5, 129), (129, 3))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES)
@pytest.mark.parametrize("operands", ["uint8", "int8", "int32"])
@pytest.mark.parametrize("out_dtype", ["int32", "int64"])
def test_matmul_small_integers_exact(shapes, operands, out_dtype):
    rng = np.random.default_rng(0)
    info = np.iinfo(operands) if operands != "int32" else np.iinfo(np.int16)
    a = rng.integers(info.min, info.max, shapes[0], endpoint=True).astype(operands)
    b = rng.integers(info.min, info.max, shapes[1], endpoint=True).astype(operands)
    out = np.empty(_matmul_shape(a, b), out_dtype)
    matmul(a, b, out=out, out_dtype=None)
    np.testing.assert_array_equal(out, _reference_matmul(a, b, out_dtype))


def _matmul_shape(a, b):
    return np.matmul(np.zeros(a.shape, np.float32), np.zeros(b.shape, np.float32)).shape


@pytest.mark.parametrize("scale, expected", [(2**8, np.float32), (2**10, np.float64), (2**20, None)])
def test_matmul_picks_float_type_by_bound(monkeypatch, scale, expected):
    """Odd values whose sums pass 2**24 need float64 (float32 would round them);
    sums that can pass 2**31 stay with the integer loops (which wrap like int32)."""
    rng = np.random.default_rng(1)
    a = (rng.integers(-scale, scale, (4, 64)) | 1).astype(np.int32)
    b = (rng.integers(-scale, scale, (64, 5)) | 1).astype(np.int32)
    b.flags.writeable = False                                   # a constant: its bound is kept
    seen = _chosen(monkeypatch)
    out = np.empty((4, 5), np.int32)
    matmul(a, b, out=out, out_dtype=None)
    assert seen == [expected]
    np.testing.assert_array_equal(out, _reference_matmul(a, b, "int32"))


def test_matmul_writeable_operand_is_not_kept():
    """A writeable (or read-only view of writeable) operand is bounded per call: new values count."""
    base = np.ones((3, 2), np.int32)
    view = base.view()
    view.flags.writeable = False
    a = np.ones((1, 3), np.int32)
    out = np.empty((1, 2), np.int32)
    matmul(a, view, out=out, out_dtype=None)
    assert out.tolist() == [[3, 3]]
    base[:] = 2**12 + 1                  # now float32 would be inexact: 3 * 4097 * 2**12 > 2**24
    a[:] = 2**12
    matmul(a, view, out=out, out_dtype=None)
    assert out.tolist() == [[3 * 4097 * 2**12] * 2]


def _reference_conv(x, w, bias, stride, pad, groups):
    """Direct NCHW conv in Python ints (exact)."""
    x = np.pad(x.astype(object), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), object)
    per = o // groups
    for oc in range(o):
        g = oc // per
        for i in range(kh):
            for j in range(kw):
                patch = x[:, g * cg:(g + 1) * cg, i:i + stride * oh:stride, j:j + stride * ow:stride]
                out[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, i, j].astype(object))
        if bias is not None:
            out[:, oc] += int(bias[oc])
    return out.astype(np.int64)


CONVS = [  # (data NCHW, weight OIHW, stride, pad, groups)
    ((1, 3, 9, 11), (4, 3, 3, 3), 1, 1, 1),
    ((2, 4, 7, 6), (6, 2, 3, 3), 2, 1, 2),
    ((1, 5, 6, 6), (5, 1, 3, 3), 1, 1, 5),          # depthwise
    ((1, 64, 12, 10), (8, 64, 3, 3), 1, 1, 1),      # NHWC: a Winograd geometry, run by its direct fallback
    ((1, 7, 5, 5), (3, 7, 1, 1), 1, 0, 1),
    ((0, 3, 5, 5), (2, 3, 3, 3), 1, 1, 1),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("data, weight, stride, pad, groups", CONVS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv_integer_exact(layout, data, weight, stride, pad, groups, with_bias, monkeypatch):
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, data).astype(np.int32) - 128
    w = rng.integers(-127, 128, weight).astype(np.int32)
    w.flags.writeable = False
    bias = rng.integers(-2**20, 2**20, weight[0]).astype(np.int32) if with_bias else None
    want = _reference_conv(x, w, bias, stride, pad, groups)
    attrs = op_attrs("nn.conv", strides=stride, padding=pad, groups=groups, data_layout=layout)
    if layout == "NHWC":
        x, w = np.moveaxis(x, 1, -1).copy(), np.ascontiguousarray(w.transpose(2, 3, 1, 0))
        w.flags.writeable = False
        want = np.moveaxis(want, 1, -1)
    seen = _chosen(monkeypatch)
    out = np.empty(want.shape, np.int32)
    conv_bias(x, w, bias, out=out, **attrs)
    np.testing.assert_array_equal(out, want)
    if x.size:
        assert seen and seen[0] is not None


def test_conv_falls_back_to_integers_when_no_float_is_exact(monkeypatch):
    """Sums that may pass 2**31 stay integer (and wrap as int32 arithmetic does)."""
    rng = np.random.default_rng(3)
    x = rng.integers(-2**20, 2**20, (1, 4, 5, 5)).astype(np.int32)
    w = rng.integers(-2**12, 2**12, (3, 4, 3, 3)).astype(np.int32)
    seen = _chosen(monkeypatch)
    out = np.empty((1, 3, 5, 5), np.int32)
    conv_bias(x, w, None, out=out, **op_attrs("nn.conv", padding=1))
    assert seen == [None]
    want = _reference_conv(x, w, None, 1, 1, 1)
    np.testing.assert_array_equal(out, ((want + 2**31) % 2**32 - 2**31).astype(np.int32))


def test_declared_constants_keep_their_facts():
    """A writeable array is kept only once an instruction declares it a bound value (an in-memory
    executable's constants are writeable); the declaration ends with the array."""
    import gc
    w = np.arange(6, dtype=np.int32).reshape(3, 2)
    assert integer_exact.constant_facts(w, (0,)) is None
    integer_exact.declare_constant(w)
    facts = integer_exact.constant_facts(w, (0,))
    assert facts is not None and facts.bound == 9 and integer_exact.constant_facts(w, (0,)) is facts
    key = id(w)
    del w, facts
    gc.collect()
    assert key not in integer_exact._DECLARED
    assert not any(k[0] == key for k in integer_exact._CACHE)     # the facts do not keep it alive


@pytest.mark.parametrize("kernel, args", [
    ("matmul", lambda w: (np.ones((2, 3), np.int32), w)),
    ("nn.gemm", lambda w: (np.ones((2, 3), np.int32), w)),
])
def test_specialized_kernels_declare_constant_integer_weights(monkeypatch, kernel, args):
    from relaxpack.runtime.kernels import get_kernel
    declared = []
    monkeypatch.setattr(integer_exact, "declare_constant", declared.append)
    w = np.full((3, 4), 2, np.int32)
    fn = get_kernel(kernel).fn
    attrs = {"out_dtype": None} if kernel == "matmul" else {"activation": None}
    out = np.empty((2, 4), np.int32)
    for flags in ((False, False), (False, True)):
        call = fn.specialize_attrs(attrs, flags)
        call(*args(w), out=out)
        call(*args(w), out=out)
        np.testing.assert_array_equal(out, np.full((2, 4), 6))
    assert declared == [w]          # once, and only where the weight is a bound value


def test_specialized_conv_declares_its_constant_integer_weight(monkeypatch):
    from relaxpack.runtime.kernels import get_kernel
    declared = []
    monkeypatch.setattr(integer_exact, "declare_constant", declared.append)
    x = np.ones((1, 2, 4, 4), np.int32)
    w = np.ones((3, 2, 1, 1), np.int32)
    out = np.empty((1, 3, 4, 4), np.int32)
    call = get_kernel("nn.conv").fn.specialize_attrs(get_op_def("nn.conv").full_attrs({}), (False, True))
    call(x, w, out=out)
    call(x, w, out=out)
    np.testing.assert_array_equal(out, np.full((1, 3, 4, 4), 2))
    assert len(declared) == 1 and declared[0] is w



def test_declared_constants_freed_after_the_module_is_cleared(monkeypatch):
    """At interpreter exit a module's globals become None before every object it tracks dies (an
    executable's constants held by a module cleared later, as pytest's hold a test's): the weak
    references' callbacks must not need the module's globals then ("Exception ignored in ...")."""
    import gc
    import sys
    raised = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    constant = np.arange(6, dtype=np.int8)
    integer_exact.declare_constant(constant)
    key = id(constant)
    assert key in integer_exact._DECLARED
    monkeypatch.setattr(integer_exact, "_forget", None)     # what clearing the module does
    del constant
    gc.collect()
    assert raised == []
    assert key not in integer_exact._DECLARED
