"""DepthwiseTokensChannelsLast: a depthwise conv between token-major transposes runs channels last on
the tokens (before/after texts, numerically equal up to the sums' order), the places it must not fire,
and the rounding contract: either layout's depthwise sums within float32's bound of float64's."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.passes.depthwise_tokens_channels_last import depthwise_tokens_channels_last_pass
from relaxpack.runtime.kernels._registry import KERNELS

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce
from .test_convert_layout import c, hwio

RNG = np.random.default_rng(0)
C = 8
W = RNG.standard_normal((C, 1, 3, 3)).astype(np.float32)        # depthwise 3x3, 8 channels
BIAS = RNG.standard_normal(C).astype(np.float32)
GROUPED = RNG.standard_normal((C, 2, 3, 3)).astype(np.float32)  # 4 groups of 2 channels
DENSE = RNG.standard_normal((C, C, 3, 3)).astype(np.float32)

X = f'x: R.Tensor(("n", 48, {C}), "float32")'                   # tokens of a 6x8 image
TOKENS = f'("n", 48, {C})'


def _sandwich(conv: str, out_tokens: int = 48) -> str:
    """The Mix-FFN's tokens -> image -> conv -> image -> tokens, the conv's text given."""
    return f"""
lv = R.permute_dims(x, axes=(0, 2, 1))
lv1 = R.reshape(lv, R.shape([n, {C}, 6, 8]))
lv2 = {conv.format(x="lv1")}
lv3 = R.reshape(lv2, R.shape([n, {C}, {out_tokens}]))
lv4 = R.permute_dims(lv3, axes=(0, 2, 1))
return lv4
"""


def _rewritten(conv: str, out_tokens: int = 48) -> str:
    """The tokens as the 6x8 image channels last, the conv NHWC, its result as tokens."""
    return f"""
lv1 = R.reshape(x, R.shape([n, 6, 8, {C}]))
lv2 = {conv.format(x="lv1")}
lv4 = R.reshape(lv2, R.shape([n, {out_tokens}, {C}]))
return lv4
"""


CASES = {
    # SegFormer's Mix-FFN conv: 3x3, stride 1, padded, no bias
    "conv": (48, f"R.nn.conv({{x}}, {c(W)}, groups={C}, padding=(1, 1, 1, 1))",
             f'R.nn.conv({{x}}, {c(hwio(W))}, groups={C}, padding=(1, 1, 1, 1), data_layout="NHWC")'),
    # with its bias and an activation fused, strided: the result has fewer tokens (3x4)
    "conv_bias_act_strided": (
        12,
        f'R.nn.conv_bias_act({{x}}, {c(W)}, {c(BIAS)}, groups={C}, strides=(2, 2), padding=(1, 1, 1, 1), '
        f'activation="relu")',
        f'R.nn.conv_bias_act({{x}}, {c(hwio(W))}, {c(BIAS)}, groups={C}, strides=(2, 2), padding=(1, 1, 1, 1), '
        f'activation="relu", data_layout="NHWC")'),
}


@pytest.mark.parametrize("name", CASES)
def test_depthwise_tokens_channels_last(name):
    tokens, before, after = CASES[name]
    ret = f'("n", {tokens}, {C})'
    mod, out = assert_rewrites(with_dce(depthwise_tokens_channels_last_pass),
                               program(X, ret, _sandwich(before, tokens)),
                               program(X, ret, _rewritten(after, tokens)))
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}, {"n": 0}], rtol=1e-5, atol=1e-5)


UNCHANGED = {
    # groups of two channels: a GEMM per group, whose orientation the layout would change
    "grouped": _sandwich(f"R.nn.conv({{x}}, {c(GROUPED)}, groups=4, padding=(1, 1, 1, 1))"),
    # a dense conv (ConvertLayout's to weigh)
    "dense": _sandwich(f"R.nn.conv({{x}}, {c(DENSE)}, padding=(1, 1, 1, 1))"),
    # an integer product in float keeps its layout
    "exact": _sandwich(f"R.nn.conv({{x}}, {c(W)}, groups={C}, padding=(1, 1, 1, 1), exact=True)"),
    # the image is read by something else too: the transposes would stay
    "image_read_twice": f"""
lv = R.permute_dims(x, axes=(0, 2, 1))
lv1 = R.reshape(lv, R.shape([n, {C}, 6, 8]))
lv2 = R.nn.conv(lv1, {c(W)}, groups={C}, padding=(1, 1, 1, 1))
lv3 = R.reshape(R.add(lv2, lv1), R.shape([n, {C}, 48]))
lv4 = R.permute_dims(lv3, axes=(0, 2, 1))
return lv4
""",
    # the conv's result read twice
    "result_read_twice": f"""
lv = R.permute_dims(x, axes=(0, 2, 1))
lv1 = R.reshape(lv, R.shape([n, {C}, 6, 8]))
lv2 = R.nn.conv(lv1, {c(W)}, groups={C}, padding=(1, 1, 1, 1))
lv3 = R.reshape(lv2, R.shape([n, {C}, 48]))
lv4 = R.permute_dims(lv3, axes=(0, 2, 1))
lv5 = R.add(lv4, R.permute_dims(R.reshape(lv2, R.shape([n, {C}, 48])), axes=(0, 2, 1)))
return lv5
""",
}


@pytest.mark.parametrize("name", UNCHANGED)
def test_depthwise_tokens_channels_last_leaves_alone(name):
    assert_unchanged(depthwise_tokens_channels_last_pass, program(X, TOKENS, UNCHANGED[name]))


def test_leaves_tokens_not_transposed_to_channels():
    """A transpose that swaps batch and tokens does not make channels-first images of the tokens."""
    body = f"""
lv = R.permute_dims(x, axes=(1, 0, 2))
lv1 = R.reshape(lv, R.shape([48, {C}, 1, n]))
lv2 = R.nn.conv(lv1, {c(W)}, groups={C}, padding=(1, 1, 1, 1))
lv3 = R.reshape(lv2, R.shape([48, {C}, n]))
lv4 = R.permute_dims(lv3, axes=(0, 2, 1))
return lv4
"""
    assert_unchanged(depthwise_tokens_channels_last_pass,
                     program(f'x: R.Tensor((48, "n", {C}), "float32")', f'(48, "n", {C})', body))


def test_leaves_float16_alone():
    body = _sandwich(f'R.nn.conv({{x}}, R.const({W.tolist()}, "float16"), groups={C}, padding=(1, 1, 1, 1))')
    assert_unchanged(depthwise_tokens_channels_last_pass,
                     program(f'x: R.Tensor(("n", 48, {C}), "float16")', TOKENS, body, dtype="float16"))


# ---------------------------------------------------------------- the rounding contract

def _depthwise64(x: np.ndarray, w: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact (float64) depthwise 3x3 conv, padding 1, of NCHW ``x`` and the sums of the
    products' magnitudes (the rounding bound's scale)."""
    n, ch, h, wd = x.shape
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h - 1) // stride + 1, (wd - 1) // stride + 1
    exact, scale = np.zeros((n, ch, oh, ow)), np.zeros((n, ch, oh, ow))
    for i in range(3):
        for j in range(3):
            tap = padded[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            product = tap * w[:, 0, i, j].astype(np.float64)[None, :, None, None]
            exact += product
            scale += np.abs(product)
    return exact, scale


@pytest.mark.parametrize("shape,stride", [((1, 32, 16, 24), 1), ((1, 64, 8, 12), 1), ((3, 32, 16, 10), 1),
                                          ((2, 16, 7, 5), 2), ((1, 8, 1, 1), 1), ((1, 160, 4, 6), 1)])
def test_either_layout_within_float32_rounding_of_float64(shape, stride):
    """The rewrite changes which engine sums a depthwise conv's 9 products (the channels-first
    engine's method depends on the plane: an einsum or wide rows); any order of 9 float32 products
    and 8 additions is within ``gamma_9 * sum |x w|`` of the exact sum (``gamma_k = k u / (1 - k u)``,
    ``u = 2^-24``, and each product's own rounding), which both layouts meet, at planes where the
    engines agree bit for bit and where they do not."""
    conv = KERNELS["nn.conv"].fn
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal((shape[1], 1, 3, 3)).astype(np.float32)
    exact, scale = _depthwise64(x, w, stride)
    u = 2.0 ** -24
    bound = 10 * u / (1 - 10 * u) * scale
    attrs = dict(dilation=(1, 1), exact=False, out_layout=None, workspace=np.zeros(1 << 20, np.uint8), groups=shape[1], padding=(1, 1, 1, 1), strides=(stride, stride))
    first = np.empty(exact.shape, np.float32)
    conv(x, w, out=first, data_layout="NCHW", **attrs)
    last = np.empty(exact.shape[:1] + exact.shape[2:] + exact.shape[1:2], np.float32)
    conv(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), np.ascontiguousarray(hwio(w)), out=last,
         data_layout="NHWC", **attrs)
    for result in (first, last.transpose(0, 3, 1, 2)):
        assert np.all(np.abs(result.astype(np.float64) - exact) <= bound)
