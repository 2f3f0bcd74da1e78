"""dynamic_quantize_params against the IR composition it replaces, run kernel by kernel
(bit for bit, NaN, infinities, empty and all-zero inputs included), and DynamicQuantizeLinear
built with it against onnxruntime (its scale and zero point)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.kernels.quantize import dynamic_quantize_params

from .kernel_calls import call_kernel


def _k(name, *args, dtype=np.float32, **attrs):
    out = np.empty((), dtype)
    call_kernel(name, *args, out=out, **attrs)
    return out


def _composition(x):
    """The seven-instruction composition the importer emitted before (each kernel as the VM ran it)."""
    zero, f255, one = np.float32(0), np.float32(255), np.float32(1)
    with np.errstate(all="ignore"):
        hi = _k("maximum", _k("max", x), zero)
        lo = _k("minimum", _k("min", x), zero)
        span = _k("subtract", hi, lo)
        scale = _k("where", _k("equal", span, zero, dtype=bool), one, _k("divide", span, f255))
        initial = _k("negative", _k("divide", lo, scale))
        return scale, _k("round", _k("clip", initial, min=0.0, max=255.0))


CASES = [
    np.array([-1.0, 2.0], np.float32), np.zeros((3, 4), np.float32), np.zeros((0, 5), np.float32),
    np.array([3.0, 7.5], np.float32), np.array([-6.0, -0.25], np.float32), np.array([np.nan, 1.0], np.float32),
    np.array([np.inf, -1.0], np.float32), np.array([-np.inf, 2.0], np.float32), np.array([-np.inf, np.inf], np.float32),
    np.array([1e-42, -3e-41], np.float32), np.array([-3.4e38, 3.4e38], np.float32),
]


@pytest.mark.parametrize("x", CASES + [np.random.default_rng(s).normal(0, 3, (7, 13)).astype(np.float32)
                                       for s in range(5)], ids=str)
def test_matches_the_composition_bit_for_bit(x):
    scale, zp = np.empty((), np.float32), np.empty((), np.float32)
    dynamic_quantize_params(x, out=(scale, zp))
    want_scale, want_zp = _composition(x)
    np.testing.assert_array_equal(scale.view(np.uint32), want_scale.view(np.uint32))
    np.testing.assert_array_equal(zp.view(np.uint32), want_zp.view(np.uint32))


def test_non_contiguous_input():
    x = np.random.default_rng(7).normal(size=(6, 8)).astype(np.float32)[::2, 1::3]
    scale, zp = np.empty((), np.float32), np.empty((), np.float32)
    dynamic_quantize_params(x, out=(scale, zp))
    assert (scale, zp) == _composition(np.ascontiguousarray(x))


def test_dynamic_quantize_linear_uses_one_kernel_and_matches_onnxruntime():
    import onnxruntime as ort
    graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5])],
                              [helper.make_tensor_value_info(n, t, None) for n, t in
                               (("y", TensorProto.UINT8), ("s", TensorProto.FLOAT), ("zp", TensorProto.UINT8))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    exe = relaxpack.build(relaxpack.from_onnx(model), opt_level=2)
    assert "kernel.dynamic_quantize_params" in exe.as_text()
    assert "kernel.max(" not in exe.as_text()
    vm = VirtualMachine(exe)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for x in (rng.normal(1, 4, (6, 5)).astype(np.float32), np.zeros((2, 5), np.float32)):
        got = vm.run({"x": x})
        want = dict(zip(("y", "s", "zp"), session.run(None, {"x": x})))
        for name in ("y", "s", "zp"):
            np.testing.assert_array_equal(got[name], want[name])


def _edge_cases():
    """Ranges around zero the float path takes (and its neighbours it leaves to numpy): signed
    zeros, denormals, spans at float32's top, zero points at rounding ties and at 0 / 255."""
    f = np.float32
    cases = [np.array([-0.0, 1.0], f), np.array([0.0, -0.0], f), np.array([-1.0, -0.0], f),
             np.array([-1e-45, 1e-45], f), np.array([-1e-45, 3.0], f), np.array([-3.0, 1e-45], f),
             np.array([-1.7e38, 1.7e38], f), np.array([-3.4e38, 1.0], f), np.array([-1.0, 3.4e38], f),
             np.array([-2.0, 1e-38], f), np.array([-5e-39, 7e-39], f)]
    # zero points whose -min / scale is near a .5 tie: min = -(k + 0.5) * span / 255
    for k in (0, 1, 84, 127, 253, 254):
        for span in (1.0, 255.0, 3.3):
            lo = -f((k + 0.5) * span / 255)
            cases.append(np.array([lo, f(span) + lo], f))
    rng = np.random.default_rng(11)
    for _ in range(200):
        lo, hi = -rng.exponential() ** rng.integers(-8, 9), rng.exponential() ** rng.integers(-8, 9)
        cases.append(rng.uniform(lo, hi, rng.integers(1, 9)).astype(f))
    return cases


def test_float_path_matches_the_composition_at_its_edges():
    for x in _edge_cases():
        scale, zp = np.empty((), np.float32), np.empty((), np.float32)
        dynamic_quantize_params(x, out=(scale, zp))
        want_scale, want_zp = _composition(x)
        np.testing.assert_array_equal(scale.view(np.uint32), want_scale.view(np.uint32), err_msg=repr(x))
        np.testing.assert_array_equal(zp.view(np.uint32), want_zp.view(np.uint32), err_msg=repr(x))


def _chain(x):
    """DynamicQuantizeLinear's quantized operand with its zero point taken off, as the importer's
    chain computes it kernel by kernel: the scalars, then clip(round(x / s) + z, 0, 255) (NaN to
    0) minus float32(uint8(z))."""
    scale, zp = np.empty((), np.float32), np.empty((), np.float32)
    dynamic_quantize_params(x, out=(scale, zp))
    y = np.empty(x.shape, np.float32)
    call_kernel("divide", x, scale, out=y)
    call_kernel("round", y.copy(), out=y)
    call_kernel("add", y.copy(), zp, out=y)
    call_kernel("clip", y.copy(), out=y, min=0.0, max=255.0, saturate_nan=True)
    stored = np.empty((), np.uint8)
    call_kernel("astype", zp, out=stored, dtype="uint8")
    widened = np.empty((), np.float32)
    call_kernel("astype", stored, out=widened, dtype="float32")
    call_kernel("subtract", y.copy(), widened, out=y)
    return scale, zp, y


def _ties():
    """Values whose quotients by the scale (span 255: scale 1) land on and next to .5 ties."""
    base = np.arange(-100, 156, dtype=np.float32)
    return np.concatenate([base - 0.5, base + 0.5, np.nextafter(base + 0.5, np.float32(0)), [-100.0, 155.0],
                           [-0.0, 0.0, -0.2, 0.2]]).astype(np.float32)


@pytest.mark.parametrize("x", CASES + [_ties(), np.array([-0.0, 0.0, 3.0], np.float32),
                                       np.array([-0.3, 0.0, -1e-30, 4.0], np.float32)]
                         + [np.random.default_rng(s).normal(0, 3, (7, 13)).astype(np.float32) for s in range(5)],
                         ids=str)
def test_dynamic_quantize_matches_the_chain_bit_for_bit(x):
    from relaxpack.runtime.kernels.quantize import dynamic_quantize
    out = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32))
    dynamic_quantize(x, out=out, scales=(), any_zero_sign=False)
    for got, want in zip(out, _chain(x), strict=True):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


#: weight scales (float32 values): usual ones, a negative zero, one whose products overflow and one
#: whose products are subnormal
SCALES = tuple(float(np.float32(c)) for c in (0.0004735, 0.031, -0.0, 3.0e38, 1.5e-39, 7.0))


@pytest.mark.parametrize("x", CASES + [_ties(), np.random.default_rng(3).normal(0, 3, (7, 13)).astype(np.float32),
                                       (np.arange(12, dtype=np.float32) - 5) * 1e5], ids=str)
def test_dynamic_quantize_scale_products_are_the_multiply_kernels(x):
    """The items after ``y``: ``y_scale * c`` as the multiply kernel made them, for every case (the
    usual Python product, an overflow, and the numpy path of zeros, infinities, NaN)."""
    from relaxpack.runtime.kernels.quantize import dynamic_quantize
    out = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32),
           *(np.empty((), np.float32) for _ in SCALES))
    dynamic_quantize(x, out=out, scales=SCALES, any_zero_sign=False)
    scale = _chain(x)[0]
    for got, want in zip(out[:3], _chain(x), strict=True):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    for c, got in zip(SCALES, out[3:], strict=True):
        want = np.empty((), np.float32)
        with np.errstate(all="ignore"):
            call_kernel("multiply", scale, np.array(c, np.float32), out=want)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _f32_neighbours(v: float) -> list[float]:
    """``v`` and its finite float32 neighbours (as Python floats holding float32 values)."""
    x = np.float32(v)
    with np.errstate(all="ignore"):
        near = [x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(0))]
    return [float(n) for n in near if np.isfinite(n)]


#: scale values (float32, positive as the usual case makes them) and constants whose products
#: sit at float32's largest value (just below, at, rounding down to it, past it), in the subnormal
#: range (near the smallest subnormals, where the rounding is coarsest), exact and inexact
_EDGE_PAIRS = [(v, c) for v in _f32_neighbours(1.0) + _f32_neighbours(2.0 ** 100) + _f32_neighbours(0.003)
               for c in _f32_neighbours(float(np.finfo(np.float32).max)) + _f32_neighbours(2.0 ** 28)
               + _f32_neighbours(2.0 ** -149) + _f32_neighbours(1.5 * 2.0 ** -149) + _f32_neighbours(2.5 * 2.0 ** -149)
               + _f32_neighbours(2.0 ** -130) + [0.0, -0.0, -3.0, float(np.float32(1 / 3)), float(np.float32(0.00046423843014054))]]


@pytest.mark.parametrize("seed", [0, 1])
def test_scale_products_fill_as_the_float32_multiply(seed):
    """``_scale_products``' Python path (``fill`` of the exact double product) against numpy's float32
    multiply, bit for bit: products at and past float32's largest value (those take the numpy path),
    subnormal ones with rounding ties, signed zeros, and random float32 pairs of every magnitude."""
    from relaxpack.runtime.kernels.quantize import _scale_products
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 0x7F800000, 4000, dtype=np.uint32).view(np.float32)     # finite, positive
    signs = np.where(rng.random(2000) < 0.5, -1, 1).astype(np.float32)
    pairs = _EDGE_PAIRS + [(float(v), float(c)) for v, c in zip(bits[:2000], bits[2000:] * signs)]
    for value, c in pairs:
        product = np.empty((), np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # an overflow takes the quiet numpy path
            _scale_products(value, np.array(value, np.float32), (c,), (product,))
        with np.errstate(all="ignore"):
            want = np.multiply(np.float32(value), np.float32(c))
        assert product.view(np.uint32) == want.view(np.uint32), (value, c, product, want)


def test_scale_products_after_an_overflow_are_all_numpys():
    """A product past float32's range after ones already filled: every item is the multiply's."""
    from relaxpack.runtime.kernels.quantize import _scale_products
    scales = (0.5, float(np.float32(3.0e38)), float(np.float32(1 / 3)))
    value = float(np.float32(7.0))
    products = tuple(np.full((), np.nan, np.float32) for _ in scales)
    _scale_products(value, np.array(value, np.float32), scales, products)
    with np.errstate(all="ignore"):
        want = [np.multiply(np.float32(value), np.float32(c)) for c in scales]
    assert [p.view(np.uint32) for p in products] == [w.view(np.uint32) for w in want]
    assert np.isinf(products[1])


def test_dynamic_quantize_of_a_strided_input():
    from relaxpack.runtime.kernels.quantize import dynamic_quantize
    x = np.random.default_rng(7).normal(size=(6, 8)).astype(np.float32)[::2, 1::3]
    out = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32))
    dynamic_quantize(x, out=out, scales=(), any_zero_sign=False)
    for got, want in zip(out, _chain(np.ascontiguousarray(x)), strict=True):
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _zero_points_at_the_ends():
    """Ranges whose zero point is 0 (the minimum a hair below 0) and 255 (the maximum a hair
    above) and one between, each with values that round to -0.0."""
    f = np.float32
    return [np.array([-1e-6, -0.0, 0.0, 0.4, 10.0, -0.3e-6], f), np.array([-10.0, -0.04, -0.0, 0.0, 1e-6], f),
            np.array([-5.0, -0.01, 0.01, 5.0, -0.0], f)]


@pytest.mark.parametrize("x", CASES + [_ties(), np.array([-0.0, 0.0, 3.0], np.float32),
                                       np.array([-0.3, 0.0, -1e-30, 4.0], np.float32)] + _zero_points_at_the_ends()
                         + [np.random.default_rng(s).normal(0, 3, (7, 13)).astype(np.float32) for s in range(5)],
                         ids=str)
def test_any_zero_sign_is_the_chain_up_to_zero_signs(x):
    """With ``any_zero_sign`` the scalars and the products are the chain's bits and ``y`` its values,
    the bits of every nonzero; a zero may be -0.0 (``round(-0.3)``) where the chain makes +0.0."""
    from relaxpack.runtime.kernels.quantize import dynamic_quantize
    out = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32),
           *(np.empty((), np.float32) for _ in SCALES))
    dynamic_quantize(x, out=out, scales=SCALES, any_zero_sign=True)
    exact = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32),
             *(np.empty((), np.float32) for _ in SCALES))
    dynamic_quantize(x, out=exact, scales=SCALES, any_zero_sign=False)
    for k, (got, want) in enumerate(zip(out, exact, strict=True)):
        if k != 2:
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    y, want = out[2], exact[2]
    np.testing.assert_array_equal(y, want)          # -0.0 == +0.0
    nonzero = want != 0
    np.testing.assert_array_equal(y[nonzero].view(np.uint32), want[nonzero].view(np.uint32))


def test_any_zero_sign_leaves_negative_zeros_at_both_ends():
    """The clip form really is taken: ``round(-0.3 / s)`` stays -0.0 (the chain's ``+ zp ... - zp``
    would make it +0.0), with zero points 0 and 255 (the clip's bounds 0 and 0) and one between."""
    from relaxpack.runtime.kernels._math import CLIP
    from relaxpack.runtime.kernels.quantize import dynamic_quantize
    for x, zero_point in zip(_zero_points_at_the_ends(), (0.0, 255.0, 127.0), strict=True):
        out = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32))
        dynamic_quantize(x, out=out, scales=(), any_zero_sign=True)
        y = out[2]
        assert float(out[1]) == zero_point and y.min() >= -zero_point and y.max() <= 255 - zero_point
        # at a bound of 0 numpy 2.0's clip gives the bound (+0.0), 2.4's keeps -0.0: either is the value
        bound = np.float32(-zero_point if zero_point else 0.0)
        if zero_point not in (0.0, 255.0) or np.signbit(CLIP(np.float32(-0.0), bound, bound + np.float32(255))):
            assert np.signbit(y[y == 0]).any(), x
        assert not np.signbit(_chain(x)[2][y == 0]).any(), x


def test_extremes_of_a_transposed_input():
    """The range is read at ``argmax`` / ``argmin`` of the array as it is (C order, ``item``): a
    transposed input whose extremes sit where its memory order and C order differ."""
    from relaxpack.runtime.kernels.quantize import dynamic_quantize
    x = np.arange(-11, 13, dtype=np.float32).reshape(4, 6) * np.float32(0.37)
    x[0, 5], x[3, 0] = 9.0, -7.0
    x = x.T
    want = _chain(np.ascontiguousarray(x))
    for flag in (False, True):
        out = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32))
        dynamic_quantize(x, out=out, scales=(), any_zero_sign=flag)
        for got, expected in zip(out[:2], want[:2]):
            np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
        np.testing.assert_array_equal(out[2], want[2])


@pytest.mark.parametrize("where", [0, 3, 6])
def test_a_nan_anywhere_takes_the_exact_path(where):
    """``argmax`` / ``argmin`` point at a NaN wherever it is (first, middle, last), so the float path
    is never taken with one: NaN quantizes to 0 as the chain's saturating clip makes it."""
    from relaxpack.runtime.kernels.quantize import dynamic_quantize
    x = np.array([-2.0, 1.0, 0.5, -0.25, 3.0, -1.0, 2.0], np.float32)
    x[where] = np.nan
    for flag in (False, True):
        out = (np.empty((), np.float32), np.empty((), np.float32), np.empty(x.shape, np.float32))
        dynamic_quantize(x, out=out, scales=(), any_zero_sign=flag)
        for got, want in zip(out, _chain(x), strict=True):
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
