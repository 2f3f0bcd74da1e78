"""A dilated conv's taps on padding alone, left out (kernels/conv_pruned.py): the kept taps and
the window they read, the conv against onnx's reference evaluator and against every tap's
products and onnxruntime, the specialized call against the generic kernel bit for bit, maps the
taps cover (every tap kept)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir.op import get_op_def
from relaxpack.runtime.kernels import conv_pruned, get_kernel

from .test_kernels_registry import assert_close, rand, run_onnx, tolerance

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn


def test_the_kept_taps_of_deeplabs_aspp():
    """ASPP's dilation-24 3x3 conv on an 8x10 map: only the center tap reads data, so the conv is
    a 1x1 conv of the whole map, unpadded; at dilation 6 the map holds every tap."""
    assert conv_pruned.kept_taps(8, 3, 1, 24, 24, 8) == (1, 2)
    assert conv_pruned.pruned_geometry((8, 10), (3, 3), (1, 1), (24, 24, 24, 24), (24, 24)) == (
        (slice(1, 2), slice(1, 2)), (slice(0, 8), slice(0, 10)), (0, 0, 0, 0))
    assert conv_pruned.pruned_geometry((8, 10), (3, 3), (1, 1), (6, 6, 6, 6), (6, 6)) is None


def test_a_partly_kept_axis_is_cropped_and_padded_by_what_is_left():
    """Height 10 at dilation 8: taps 0..2 of a 3x3 all read data for some row; width 5 at
    dilation 8 keeps the center only. Stride 2 and uneven padding: the window and new padding give
    the same reads for every output."""
    geometry = conv_pruned.pruned_geometry((10, 5), (3, 3), (2, 1), (8, 8, 7, 8), (8, 8))
    assert geometry == ((slice(0, 3), slice(1, 2)), (slice(0, 10), slice(0, 5)), (8, 0, 7, 0))
    # every output's reads, before and after, as positions in the data (-1: padding)
    assert conv_pruned.kept_taps(3, 3, 1, 4, 4, 3) == (1, 2)
    assert conv_pruned.kept_taps(0, 3, 1, 4, 4, 8) == (0, 0)        # no data: nothing kept


def test_only_dilated_padded_convs_are_looked_at():
    assert conv_pruned.may_prune(2, (12, 12, 12, 12), (12, 12))
    assert not conv_pruned.may_prune(2, (1, 1, 1, 1), (1, 1))
    assert not conv_pruned.may_prune(2, (0, 0, 0, 0), (2, 2))
    assert conv_pruned.may_prune(1, (3, 3), (3,))


def _attrs(data_layout, strides, padding, dilation, groups=1, activation=None):
    return get_op_def("nn.conv_bias_act").full_attrs(dict(
        strides=strides, padding=padding, dilation=dilation, groups=groups, activation=activation,
        data_layout=data_layout, out_layout=None))


def _onnx_conv(x, w, b, strides, padding, dilation, groups):
    """onnx's reference Conv (NCHW) with these attributes."""
    want, = run_onnx("Conv", [x, w, b], dict(strides=list(strides), pads=list(padding), dilations=list(dilation),
                                             group=groups))
    return want


# (data NCHW, weight OIHW, strides, padding, dilation, groups)
CASES = [
    ((1, 16, 8, 10), (8, 16, 3, 3), (1, 1), (24, 24, 24, 24), (24, 24), 1),      # ASPP: the center tap only
    ((2, 8, 9, 11), (6, 8, 3, 3), (1, 1), (6, 6, 6, 6), (6, 6), 1),              # rows and columns partly
    ((1, 12, 7, 13), (12, 1, 3, 3), (1, 1), (8, 8, 8, 8), (8, 8), 12),            # depthwise
    ((1, 5, 10, 5), (4, 5, 3, 3), (2, 1), (8, 8, 7, 8), (8, 8), 1),               # stride 2, uneven padding
    ((1, 4, 3, 17), (3, 4, 5, 3), (1, 1), (8, 2, 8, 2), (4, 2), 1),               # one axis pruned
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("data, weight, strides, padding, dilation, groups", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pruned_convs_against_the_reference_and_every_tap(data, weight, strides, padding, dilation, groups,
                                                         layout, dtype):
    """The generic kernel and the instruction's specialized call (three calls: the plan and the
    weight's kept taps reused) against onnx's reference evaluator, against the products of every
    tap (the kernel with pruning turned off), and against each other bit for bit."""
    rng = np.random.default_rng(sum(data) + len(layout))
    x, w, b = rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    want = _onnx_conv(x, w, b, strides, padding, dilation, groups)
    xl, wl = (x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0)) if layout == "NHWC" else (x, w)
    wl = np.ascontiguousarray(wl)
    attrs = _attrs(layout, strides, padding, dilation, groups)
    shape = want.transpose(0, 2, 3, 1).shape if layout == "NHWC" else want.shape
    generic = np.full(shape, np.nan, dtype)
    CONV_BIAS_ACT(np.ascontiguousarray(xl), wl, b, out=generic, **attrs)
    every = np.full(shape, np.nan, dtype)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_pruned, "pruned_operands", lambda *args: None)
        CONV_BIAS_ACT(np.ascontiguousarray(xl), wl, b, out=every, **attrs)
    back = generic.transpose(0, 3, 1, 2) if layout == "NHWC" else generic
    assert_close(back, want, **tolerance(np.dtype(dtype)))
    assert_close(generic, every, **tolerance(np.dtype(dtype)))
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    for _ in range(3):
        out = np.full(shape, np.nan, dtype)
        call(np.ascontiguousarray(xl), wl, b, out=out)
        np.testing.assert_array_equal(out, generic)


def test_the_specialized_call_follows_the_input_size_and_the_weight():
    """A new map size plans again (8x10 prunes, 40x40 keeps every tap, 8x10 again); a new weight
    object takes its own kept taps: each call the generic kernel's values."""
    rng = np.random.default_rng(5)
    attrs = _attrs("NCHW", (1, 1), (12, 12, 12, 12), (12, 12))
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, True))
    b = rand(rng, (4,), "float32")
    for size, seed in (((8, 10), 0), ((40, 40), 1), ((8, 10), 2), ((8, 10), 3)):
        x, w = rand(rng, (1, 6) + size, "float32"), rand(np.random.default_rng(seed), (4, 6, 3, 3), "float32")
        out, want = np.empty((1, 4) + size, np.float32), np.empty((1, 4) + size, np.float32)
        call(x, w, b, out=out)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


def _ort_conv_of_constant_weights(x, w, b, pads, dilations):
    """onnxruntime's Conv with the weight and bias as initializers (a model's: its prepacked path)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=pads, dilations=dilations)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_a_run_time_weight_is_taken_anew_each_call():
    """A weight computed at run time may come back in the same array with new values: its kept
    taps are taken each call (a bound weight's once)."""
    rng = np.random.default_rng(4)
    attrs = _attrs("NCHW", (1, 1), (24, 24, 24, 24), (24, 24))
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, True))
    x, w, b = rand(rng, (1, 6, 8, 10), "float32"), rand(rng, (4, 6, 3, 3), "float32"), rand(rng, (4,), "float32")
    for _ in range(3):
        w[...] = rand(rng, w.shape, "float32")
        out, want = np.empty((1, 4, 8, 10), np.float32), np.empty((1, 4, 8, 10), np.float32)
        call(x, w, b, out=out)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want)


def test_a_non_finite_weight_on_a_left_out_tap_is_never_read():
    """An inf weight on a tap that reads only padding: left out, it makes no NaN, as onnxruntime's
    conv of a model's weights (which never multiplies the padding). Given the weight at run time
    onnxruntime multiplies the padding (NaN everywhere) and onnx's reference makes NaN of some
    outputs: a weight like this has no one answer."""
    rng = np.random.default_rng(9)
    x, w, b = rand(rng, (1, 3, 8, 10), "float32"), rand(rng, (2, 3, 3, 3), "float32"), rand(rng, (2,), "float32")
    w[0, 1, 0, 0] = np.inf
    want = _ort_conv_of_constant_weights(x, w, b, [24] * 4, [24, 24])
    assert np.isfinite(want).all()
    attrs = _attrs("NCHW", (1, 1), (24, 24, 24, 24), (24, 24))
    for call in (lambda out: CONV_BIAS_ACT(x, w, b, out=out, **attrs),
                 lambda out, c=CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True)): c(x, w, b, out=out)):
        out = np.empty(want.shape, np.float32)
        call(out)
        assert_close(out, want, **tolerance(np.dtype(np.float32)))


def test_the_aspp_conv_runs_as_a_one_by_one_conv(monkeypatch):
    """The specialized ASPP conv hands its runner a 1x1 weight and the unpadded map."""
    from relaxpack.runtime.kernels import conv_small
    seen = []
    real = conv_small._specialize_taps

    def spy(generic, constant, **attrs):
        inner = real(generic, constant, **attrs)

        def call(data, weight, bias=None, *, out, workspace=None):
            seen.append((data.shape, weight.shape, attrs["padding"]))
            inner(data, weight, bias, out=out, workspace=workspace)
        return call
    monkeypatch.setattr(conv_small, "_specialize_taps", spy)
    attrs = _attrs("NCHW", (1, 1), (24, 24, 24, 24), (24, 24))
    rng = np.random.default_rng(2)
    x, w, b = rand(rng, (1, 16, 8, 10), "float32"), rand(rng, (8, 16, 3, 3), "float32"), rand(rng, (8,), "float32")
    CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))(x, w, b, out=np.empty((1, 8, 8, 10), np.float32))
    assert seen == [((1, 16, 8, 10), (8, 16, 1, 1), (0, 0, 0, 0))]


def test_operands_that_do_not_fit_get_the_kernels_own_error(monkeypatch):
    """Data of another rank than the weight: no pruning is tried, and the conv's own checks say
    what is wrong, in the words they use without pruning."""
    from relaxpack.errors import ShapeError
    rng = np.random.default_rng(1)
    attrs = _attrs("NCHW", (1, 1), (24, 24, 24, 24), (24, 24))
    x, w = rand(rng, (1, 4, 8), "float32"), rand(rng, (2, 4, 3, 3), "float32")
    messages = []
    for prune in (True, False):
        if not prune:
            monkeypatch.setattr(conv_pruned, "pruned_operands", lambda *args: None)
        with pytest.raises(ShapeError) as error:
            CONV_BIAS_ACT(x, w, None, out=np.empty((1, 2, 8), np.float32), **attrs)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
