"""Struct-info inference of convolution and pooling (static and symbolic)."""

import itertools

import pytest

from relaxpack.errors import IRError, ShapeError, UnprovenDimsError
from relaxpack.ir import BlockBuilder, DimAnalyzer, TensorStructInfo, Var, evaluate, sym
from relaxpack.ops import make_call

N, h, w = sym("batch"), sym("h"), sym("w")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def infer(name, *sinfos, analyzer=None, **attrs):
    args = [Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)]
    return BlockBuilder(analyzer=analyzer).infer_call(make_call(name, *args, **attrs))


def conv_out(x, k, s=1, pb=0, pe=0, d=1):
    return (x + pb + pe - d * (k - 1) - 1) // s + 1


# ---------------------------------------------------------------- conv

@pytest.mark.parametrize("data, weight, attrs, out", [
    ((1, 3, 224, 224), (64, 3, 7, 7), dict(strides=2, padding=3), (1, 64, 112, 112)),
    ((2, 8, 32, 32), (16, 8, 3, 3), {}, (2, 16, 30, 30)),
    ((2, 8, 32, 32), (16, 8, 3, 3), dict(padding=(1, 1, 1, 1)), (2, 16, 32, 32)),
    ((2, 8, 32, 30), (16, 8, 3, 3), dict(padding=(0, 1, 2, 3), strides=(1, 2)), (2, 16, 32, 16)),
    ((2, 8, 32, 32), (16, 8, 3, 3), dict(dilation=2), (2, 16, 28, 28)),
    ((1, 32, 10, 10), (32, 1, 3, 3), dict(groups=32, padding=1), (1, 32, 10, 10)),   # depthwise
    ((1, 4, 100), (6, 2, 5), dict(groups=2, strides=3), (1, 6, 32)),                # conv1d
    ((1, 2, 8, 8, 8), (4, 2, 3, 3, 3), dict(padding=1), (1, 4, 8, 8, 8)),           # conv3d
])
def test_conv_static(data, weight, attrs, out):
    assert infer("nn.conv", T(data), T(weight), **attrs) == T(out)


@pytest.mark.parametrize("k, s, p, d", [(7, 2, 3, 1), (3, 1, 1, 1), (3, 2, 0, 2), (1, 1, 0, 1), (5, 3, 2, 1)])
def test_conv_symbolic_spatial_dims(k, s, p, d):
    out = infer("nn.conv", T((N, 3, h, w)), T((8, 3, k, k)), strides=s, padding=p, dilation=d)
    expected = (N, 8, conv_out(h, k, s, p, p, d), conv_out(w, k, s, p, p, d))
    assert out == T(expected)
    for hv, wv in itertools.product(range(d * (k - 1) + 1, 40, 7), (17, 64)):
        env = {"h": hv, "w": wv, "batch": 2}
        assert evaluate(out.shape[2], env) == conv_out(hv, k, s, p, p, d)
        assert evaluate(out.shape[3], env) == conv_out(wv, k, s, p, p, d)


def test_conv_unknown_shapes_keep_rank():
    assert infer("nn.conv", T(None, ndim=4), T((8, 3, 3, 3))) == T(None, ndim=4)
    assert infer("nn.conv", T(None), T(None)) == T(None)


@pytest.mark.parametrize("data, weight, attrs, message", [
    ((1, 3, 8, 8), (4, 2, 3, 3), {}, r"R\.nn\.conv: channels must equal groups \(1\) \* weight dim 1: data "
                                     r"\(1, 3, 8, 8\) has 3 channels but weight \(4, 2, 3, 3\) expects 2"),
    ((1, 4, 8, 8), (6, 1, 3, 3), dict(groups=4), r"weight \(6, 1, 3, 3\) has 6 output channels, not a "
                                                 r"multiple of groups \(4\)"),
    ((1, 3, 2, 2), (4, 3, 3, 3), {}, r"R\.nn\.conv: the window does not fit: input \(1, 3, 2, 2\) gives "
                                     r"output spatial dims \(0, 0\)"),
    ((1, 3, 8, 8), (4, 3, 3), {}, r"R\.nn\.conv: data and weight must have the same rank, got "
                                  r"\(1, 3, 8, 8\) and \(4, 3, 3\)"),
    ((3, 8), (4, 3), {}, r"R\.nn\.conv: data must be \(N, C, \*spatial\)"),
])
def test_conv_errors(data, weight, attrs, message):
    with pytest.raises(ShapeError, match=message):
        infer("nn.conv", T(data), T(weight), **attrs)


def test_conv_channel_check_uses_proofs():
    c = sym("c")
    # not provable either way: an unproven relation, which the importer assumes and the run checks
    with pytest.raises(UnprovenDimsError, match=r"has c channels but weight \(4, 3, 3, 3\) expects 3, which are "
                                                r"not provably equal") as info:
        infer("nn.conv", T((1, c, 8, 8)), T((4, 3, 3, 3)))
    assert (info.value.lhs, info.value.rhs) == (c, 3)
    with pytest.raises(ShapeError, match=r"has c channels but weight \(4, 3, 3, 3\) expects 3"):
        infer("nn.conv", T((1, c, 8, 8)), T((4, 3, 3, 3)), analyzer=DimAnalyzer({"c": (4, 16)}))


@pytest.mark.parametrize("attrs, message", [
    (dict(strides=(1, 2, 3)), r"R\.nn\.conv: attribute strides needs 2 values"),
    (dict(strides=0), r"attribute strides values must be >= 1"),
    (dict(padding=(1, 1, 1)), r"attribute padding needs 2 or 4 values"),
    (dict(groups=0), r"attribute groups must be >= 1"),
])
def test_conv_attribute_errors(attrs, message):
    with pytest.raises(IRError, match=message):
        infer("nn.conv", T((1, 3, 8, 8)), T((4, 3, 3, 3)), **attrs)


@pytest.mark.parametrize("data, weight, attrs", [
    ((1, 3, 224, 224), (64, 3, 7, 7), dict(strides=2, padding=3)),
    ((N, 8, h, w), (16, 4, 3, 3), dict(groups=2, padding=(0, 1, 2, 3), strides=(1, 2))),
    ((N, 4, h), (6, 2, 5), dict(groups=2, strides=3)),                              # conv1d
    ((0, 2, 8, 8, 8), (4, 2, 3, 3, 3), dict(padding=1)),                            # conv3d, empty batch
])
def test_conv_out_layout_nhwc_is_the_result_channels_last(data, weight, attrs):
    """out_layout="NHWC" with NCHW data: the channels-first result with its channels moved last."""
    first = infer("nn.conv", T(data), T(weight), **attrs)
    last = infer("nn.conv", T(data), T(weight), out_layout="NHWC", **attrs)
    assert last == T((first.shape[0], *first.shape[2:], first.shape[1]))
    assert infer("nn.conv", T(data), T(weight), out_layout="NCHW", **attrs) == first
    assert infer("nn.conv", T(None, ndim=len(data)), T(weight), out_layout="NHWC", **attrs) == T(None, ndim=len(data))


@pytest.mark.parametrize("attrs, message", [
    (dict(out_layout="NCHWc"), r"R\.nn\.conv: attribute out_layout must be None or one of \('NCHW', 'NHWC'\), "
                               r"got 'NCHWc'"),
    (dict(data_layout="NHWC", out_layout="NCHW"), r"out_layout 'NCHW' with data_layout 'NHWC' is not supported"),
])
def test_conv_out_layout_errors(attrs, message):
    with pytest.raises(IRError, match=message):
        infer("nn.conv", T((1, 8, 8, 3)), T((3, 3, 3, 4)), **attrs)


@pytest.mark.parametrize("data, weight, attrs, out", [
    ((1, 4, 5, 5), (4, 3, 3, 3), {}, (1, 3, 7, 7)),
    ((1, 4, 5, 5), (4, 3, 3, 3), dict(strides=2, padding=1, output_padding=1), (1, 3, 10, 10)),
    ((1, 4, 5, 5), (4, 3, 3, 3), dict(groups=2, dilation=2), (1, 6, 9, 9)),
    ((1, 4, 5), (4, 3, 3), dict(strides=3, padding=(0, 2)), (1, 3, 13)),
])
def test_conv_transpose(data, weight, attrs, out):
    assert infer("nn.conv_transpose", T(data), T(weight), **attrs) == T(out)


def test_conv_transpose_symbolic_and_errors():
    out = infer("nn.conv_transpose", T((N, 4, h, h)), T((4, 2, 4, 4)), strides=2, padding=1)
    assert out == T((N, 2, 2 * h, 2 * h))
    with pytest.raises(ShapeError, match=r"R\.nn\.conv_transpose: channels must equal weight dim 0: data "
                                         r"\(1, 5, 3, 3\) has 5 channels"):
        infer("nn.conv_transpose", T((1, 5, 3, 3)), T((4, 2, 3, 3)))
    with pytest.raises(IRError, match=r"output_padding \(2, 2\) must be smaller than the stride"):
        infer("nn.conv_transpose", T((1, 4, 3, 3)), T((4, 2, 3, 3)), strides=2, output_padding=2)


def test_conv_transpose_channels_last():
    """NHWC: data (N, H, W, C), weight (C, kh, kw, O/groups); the result channels last."""
    out = infer("nn.conv_transpose", T((N, h, h, 4)), T((4, 4, 4, 1)), strides=2, padding=1, groups=2,
                data_layout="NHWC")
    assert out == T((N, 2 * h, 2 * h, 2))
    with pytest.raises(ShapeError, match=r"channels must equal weight dim 0"):
        infer("nn.conv_transpose", T((1, 3, 3, 5)), T((4, 3, 3, 2)), data_layout="NHWC")


# ---------------------------------------------------------------- pooling

@pytest.mark.parametrize("op", ["nn.max_pool", "nn.avg_pool"])
@pytest.mark.parametrize("x, attrs, out", [
    (32, dict(pool_size=2, strides=2), 16),
    (7, dict(pool_size=3, strides=2), 3),
    (7, dict(pool_size=2, strides=2), 3),
    (7, dict(pool_size=2, strides=2, ceil_mode=True), 4),
    (112, dict(pool_size=3, strides=2, padding=1), 56),
    (4, dict(pool_size=2, strides=3, padding=1, ceil_mode=True), 2),   # last window would start in padding
    (9, dict(pool_size=3, strides=1, dilation=2), 5),
])
def test_pool_static(op, x, attrs, out):
    assert infer(op, T((2, 3, x, x)), **attrs) == T((2, 3, out, out))


def test_pool_symbolic():
    out = infer("nn.max_pool", T((N, 64, h, w)), pool_size=3, strides=2, padding=1)
    assert out == T((N, 64, conv_out(h, 3, 2, 1, 1), conv_out(w, 3, 2, 1, 1)))
    out = infer("nn.avg_pool", T((N, 64, h, w)), pool_size=3, strides=2, ceil_mode=True)
    for hv in range(3, 30):
        assert evaluate(out.shape[2], {"h": hv}) == -(-(hv - 3) // 2) + 1
    # ceil mode where the last-window rule depends on h: an exact expression (min of the two counts)
    out = infer("nn.max_pool", T((N, 3, h)), pool_size=2, strides=3, padding=1, ceil_mode=True)
    for hv in range(1, 30):
        span = hv + 2 - 2
        full = -(-span // 3) + 1
        want = full - 1 if (full - 1) * 3 >= hv + 1 else full   # the last window must start before the end padding
        assert evaluate(out.shape[2], {"h": hv}) == want


def test_pool_errors():
    with pytest.raises(IRError, match=r"R\.nn\.max_pool needs attribute\(s\) \['pool_size'\]"):
        make_call("nn.max_pool", Var("x", struct_info=T((1, 1, 4, 4))))
    with pytest.raises(IRError, match=r"R\.nn\.max_pool has no attribute\(s\) \['count_include_pad'\]"):
        make_call("nn.max_pool", Var("x", struct_info=T((1, 1, 4, 4))), pool_size=2, count_include_pad=True)
    with pytest.raises(ShapeError, match=r"R\.nn\.avg_pool: the window does not fit: input \(1, 1, 2, 2\)"):
        infer("nn.avg_pool", T((1, 1, 2, 2)), pool_size=3)
    with pytest.raises(IRError, match=r"R\.nn\.avg_pool: attribute pool_size needs 2 values"):
        infer("nn.avg_pool", T((1, 1, 8, 8)), pool_size=(2, 2, 2))


@pytest.mark.parametrize("op", ["nn.global_avg_pool", "nn.global_max_pool"])
def test_global_pool(op):
    assert infer(op, T((N, 512, h, w))) == T((N, 512, 1, 1))
    assert infer(op, T((N, 16, h))) == T((N, 16, 1))
    assert infer(op, T(None, ndim=5)) == T(None, ndim=5)
