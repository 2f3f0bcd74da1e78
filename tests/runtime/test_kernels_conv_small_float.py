"""Float small convs run channels last inside (kernels/conv_small_cl.py) as exact ones do: the
specialized runner and the generic kernel (``nn.conv_bias_act`` / ``nn.conv`` called directly) take
the same method for the same geometry and give the same bits, call after call; the results stay
within float32 (float64) rounding of a float64 (long double) reference; float16, a conv the geometry
leaves out and one of too much scratch keep their methods."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_small, conv_small_cl, get_kernel

from .test_kernels_conv_small import full_attrs, out_for
from .test_kernels_conv_small_exact import NOT_TAKEN, TAKEN

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn
CONV = get_kernel("nn.conv").fn

# the exact file's edges plus the bars' other sides for float data
FLOAT_TAKEN = TAKEN + [
    ((1, 16, 31, 33), (8, 16, 3, 3), 2, (1, 1, 1, 1)),           # 1023 pixels, odd sizes (float64: 478 KiB)
    ((4, 48, 2, 3), (40, 48, 3, 3), 1, (1, 1, 1, 1)),            # batch 4 of 6 pixels: cols @ W
]


def _attrs(stride, padding, activation=None, **extra):
    stride = stride if isinstance(stride, tuple) else (stride, stride)
    return {**full_attrs(dict(strides=stride, padding=padding), activation), **extra}


def _operands(rng, data, weight, dtype, bias: bool):
    x = rng.standard_normal(data).astype(dtype)
    w = (rng.standard_normal(weight) / np.sqrt(np.prod(weight[1:]))).astype(dtype)
    b = rng.standard_normal(weight[0]).astype(dtype) if bias else None
    return x, w, b


class _Counter:
    """Counts the generic kernel's runs of the method (``runs_generic`` returning True)."""

    def __init__(self, monkeypatch):
        self.taken = 0
        inner = conv_small_cl.runs_generic

        def counted(*args):
            ran = inner(*args)
            self.taken += ran
            return ran
        monkeypatch.setattr(conv_small_cl, "runs_generic", counted)


def _reference(x, w, b, strides, padding, wide=np.float64):
    """The conv in ``wide`` precision and the sums of the products' magnitudes (for the bound)."""
    x = np.pad(x.astype(wide), ((0, 0), (0, 0), (padding[0], padding[2]), (padding[1], padding[3])))
    w = w.astype(wide)
    (sh, sw), (kh, kw) = strides, w.shape[2:]
    rows, cols = (x.shape[2] - kh) // sh + 1, (x.shape[3] - kw) // sw + 1
    taps = [(x[:, :, i:i + sh * rows:sh, j:j + sw * cols:sw], w[:, :, i, j]) for i in range(kh) for j in range(kw)]
    out = sum(np.einsum("nchw,oc->nohw", a, c) for a, c in taps)
    magnitude = sum(np.einsum("nchw,oc->nohw", np.abs(a), np.abs(c)) for a, c in taps)
    if b is not None:
        out, magnitude = out + b.astype(wide).reshape(-1, 1, 1), magnitude + np.abs(b.astype(wide)).reshape(-1, 1, 1)
    return out, magnitude


@pytest.mark.parametrize("data, weight, stride, padding", FLOAT_TAKEN)
def test_a_float_conv_takes_the_runner(data, weight, stride, padding):
    attrs = _attrs(stride, padding)
    out = out_for(data, weight, attrs, "float32")
    w = np.ones(weight, np.float32)
    runner = conv_small._prepare(np.zeros(data, np.float32), w, None, out, None, attrs, True, True, None)
    assert runner is not None and runner.__module__ == conv_small_cl.__name__


@pytest.mark.parametrize("case, extra", NOT_TAKEN, ids=str)
def test_neither_path_takes_it_off_its_geometry(case, extra, monkeypatch):
    """Off the method's geometry (and past its scratch bar) the specialized runner and the generic
    kernel both keep their method."""
    data, weight, stride, padding = case
    attrs = _attrs(stride, padding, **extra)
    counter = _Counter(monkeypatch)
    x, w, b = _operands(np.random.default_rng(3), data, weight, np.float32, True)
    runner = conv_small._prepare(x, w, b, out_for(data, weight, attrs, "float32"), None, attrs, True, True, None)
    assert runner is None or runner.__module__ != conv_small_cl.__name__
    CONV_BIAS_ACT(x, w, b, out=out_for(data, weight, attrs, "float32"), **attrs)
    assert counter.taken == 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bias", ["bound", "register", None])
@pytest.mark.parametrize("activation", [None, "relu", "silu"], ids=str)
@pytest.mark.parametrize("data, weight, stride, padding", FLOAT_TAKEN)
def test_the_runner_is_the_generic_kernel_bit_for_bit(data, weight, stride, padding, activation, bias, dtype,
                                                      monkeypatch):
    """The specialized call, ``nn.conv_bias_act`` called directly and (without bias and activation)
    ``nn.conv`` give the same bits, the generic kernel by the same method; within rounding of the
    float64 reference (float64 data: of a long double one)."""
    attrs = _attrs(stride, padding, activation)
    rng = np.random.default_rng(1)
    _, w, b = _operands(rng, data, weight, dtype, bias is not None)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, bias == "bound"))
    counter = _Counter(monkeypatch)
    out = out_for(data, weight, attrs, dtype)
    x_view = np.empty(int(np.prod(data)) + 1, dtype)[1:].reshape(data)
    out_view = np.empty(out.size + 1, dtype)[1:].reshape(out.shape)
    for round_ in range(4):             # rounds 0-1: new arrays; 2-3: an arena's views, new values
        x = rng.standard_normal(data).astype(dtype)
        if round_ >= 2:
            x_view[...] = x
            x, out = x_view, out_view
        call(x, w, b, out=out)
        want = out_for(data, weight, attrs, dtype)
        taken = counter.taken
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        assert counter.taken == taken + 1
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        if activation is None and bias is None:
            plain = out_for(data, weight, attrs, dtype)
            CONV(x, w, out=plain, **{k: v for k, v in attrs.items() if k != "activation"})
            np.testing.assert_array_equal(out, plain)
    if activation is None:
        _assert_within_rounding(out, x, w, b, attrs["strides"], padding, weight)


def _assert_within_rounding(out, x, w, b, strides, padding, weight):
    """|out - reference| <= (K + 2) u * sum |x w| (+ |b|): a sum of K products in any order, the
    bias added last (u the unit roundoff of ``out``'s dtype), with the reference's own rounding
    (float64 data: a long double reference) below it."""
    wide = np.longdouble if out.dtype == np.float64 else np.float64
    ref, magnitude = _reference(x, w, b, strides, padding, wide)
    depth = int(np.prod(weight[1:]))
    bound = (depth + 2) * np.finfo(out.dtype).eps / 2 * magnitude
    err = np.abs(out.astype(wide) - ref)
    assert np.all(err <= bound), float(np.max(err / np.maximum(bound, np.finfo(out.dtype).tiny)))


def test_a_weight_computed_at_run_time_runs_the_generic_kernel(monkeypatch):
    """A weight that is not a bound value: the specialized call hands the conv to the generic
    kernel, which runs the same method (its taps reordered per call)."""
    data, weight = (1, 32, 4, 6), (32, 32, 3, 3)
    attrs = _attrs(1, (1, 1, 1, 1))
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, False))
    counter = _Counter(monkeypatch)
    rng = np.random.default_rng(5)
    for _ in range(2):
        x, w, b = _operands(rng, data, weight, np.float32, True)
        out, want = out_for(data, weight, attrs, "float32"), out_for(data, weight, attrs, "float32")
        call(x, w, b, out=out)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)
    assert counter.taken == 4


def test_float16_keeps_its_method(monkeypatch):
    """float16 is excluded (its convs run in float32 and round once: the strided runner's float32
    result); neither path takes the method, and the two agree."""
    data, weight = (1, 32, 4, 6), (32, 32, 3, 3)
    attrs = _attrs(1, (1, 1, 1, 1), "relu")
    counter = _Counter(monkeypatch)
    x, w, b = _operands(np.random.default_rng(6), data, weight, np.float16, True)
    out, want = out_for(data, weight, attrs, "float16"), out_for(data, weight, attrs, "float16")
    runner = conv_small._prepare(x, w, b, out, None, attrs, True, True, None)
    assert runner is not None and runner.__module__ != conv_small_cl.__name__
    CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))(x, w, b, out=out)
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)
    assert counter.taken == 0


# (data, weight, stride, dtype, taken): the scratch bar's sides (conv_small_cl.OWN_MAX_BYTES = 1 MiB)
# and the deep stride-1 bar's (DEEP_STRIDE1_MIN_CHANNELS = 64, DEEP_STRIDE1_MAX_PIXELS = 256)
BARS = [
    ((1, 64, 16, 10), (32, 64, 3, 3), 1, "float32", True),     # 160 pixels of 64 channels (UNet's)
    ((1, 64, 16, 10), (32, 64, 3, 3), 1, "float64", True),     # (868 KiB)
    ((1, 64, 16, 16), (8, 64, 3, 3), 1, "float32", True),      # 256 pixels
    ((1, 64, 16, 17), (8, 64, 3, 3), 1, "float32", False),     # 272 pixels
    ((1, 63, 16, 10), (32, 63, 3, 3), 1, "float32", False),    # 63 channels: 96 pixels at most
    ((1, 63, 8, 12), (32, 63, 3, 3), 1, "float32", True),      # ... 96 pixels
    ((3, 64, 6, 14), (32, 64, 3, 3), 1, "float32", True),      # UNet's batch-3 decoder conv: 694 KiB
    ((3, 32, 6, 14), (32, 32, 3, 3), 1, "float64", True),      # 726 KiB
    ((1, 64, 30, 30), (16, 64, 3, 3), 2, "float32", True),     # 776 KiB
    ((3, 64, 6, 14), (32, 64, 3, 3), 1, "float64", False),     # 1.36 MiB
    ((2, 64, 30, 30), (16, 64, 3, 3), 2, "float32", False),    # 1.52 MiB
]


@pytest.mark.parametrize("data, weight, stride, dtype, taken", BARS, ids=str)
def test_the_bars(data, weight, stride, dtype, taken, monkeypatch):
    """Up to the bar the runner and the generic kernel take the method, the same bits, within
    rounding of the wider reference; past it both keep the strided method."""
    padding = (1, 1, 1, 1)
    attrs = _attrs(stride, padding)
    rng = np.random.default_rng(2)
    x, w, b = _operands(rng, data, weight, dtype, True)
    out = out_for(data, weight, attrs, dtype)
    runner = conv_small._prepare(x, w, b, out, None, attrs, True, True, None)
    assert (runner is not None and runner.__module__ == conv_small_cl.__name__) == taken
    counter = _Counter(monkeypatch)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    call(x, w, b, out=out)
    want = out_for(data, weight, attrs, dtype)
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    assert counter.taken == int(taken)
    np.testing.assert_array_equal(out, want)
    _assert_within_rounding(out, x, w, b, attrs["strides"], padding, weight)
