"""ConvertLayout: convolutional regions rewritten channels last (before/after
texts, numerically equal), and the CNN models against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.passes import PassContext
from relaxpack.passes.convert_layout import convert_layout
from relaxpack.runtime import VirtualMachine
from benchmarks.models import MODELS as BENCHMARKS

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, with_dce

MODELS = Path(__file__).resolve().parents[1] / "models"
RNG = np.random.default_rng(0)
DW = RNG.standard_normal((16, 1, 3, 3)).astype(np.float32)           # depthwise, OIHW
PW = RNG.standard_normal((16, 3, 1, 1)).astype(np.float32)
BIAS = RNG.standard_normal(16).astype(np.float32)
SHIFT = RNG.standard_normal((1, 16, 1, 1)).astype(np.float32)
STEM = RNG.standard_normal((16, 3, 3, 3)).astype(np.float32)
UP = RNG.standard_normal((16, 8, 2, 2)).astype(np.float32)          # conv_transpose, (C, O, kh, kw)
DEEP = (RNG.standard_normal((16, 64, 3, 3)) / 24).astype(np.float32)   # 64 channels: Winograd channels last
GRID = np.stack(np.meshgrid(np.arange(7), np.arange(9))).astype(np.float32)[None]   # (1, 2, 9, 7): x, y


def c(values) -> str:
    return f'R.const({np.asarray(values, np.float32).tolist()}, "float32")'


def hwio(w) -> np.ndarray:
    return w.transpose(2, 3, 1, 0)


def program(params: str, ret: str, body: str) -> str:
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return f'''
@I.ir_module
class Module:
    @R.function
    def main({params}) -> R.Tensor({ret}, "float32"):
        n = T.int64()
{"        h = T.int64()" + chr(10) + "        w = T.int64()" + chr(10) if '"h"' in params else ""}{lines}
'''


X = 'x: R.Tensor(("n", 16, 9, 7), "float32")'
# a stem the channels-first engine runs by its "wide" method (a copy out); its weight need not be a constant
STEM_X = 'x: R.Tensor(("n", 3, 120, 120), "float32"), w: R.Tensor((16, 3, 7, 7), "float32")'
STEM_ATTRS = 'strides=2, padding=3, activation="relu"'
DW_ATTRS = 'groups=16, padding=1, strides=2, activation="relu"'
DW1_ATTRS = 'groups=16, padding=1, activation="relu"'

CASES = {
    # a region: a transpose in, the convs with HWIO weights, the bias
    # (1, C, 1, 1) reordered to (1, 1, 1, C), one transpose out
    "depthwise_then_add": ((X, '("n", 16, 5, 4)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
lv0 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.add(lv0, {c(SHIFT)})
lv2 = R.nn.relu(lv1)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW_ATTRS}, data_layout="NHWC")
lv0_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.add(lv0_nhwc, {c(SHIFT.transpose(0, 2, 3, 1))})
lv2_nhwc = R.nn.relu(lv1_nhwc)
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # a quantized model's table look-up (a 1-d table: it has no layout, even computed at run time)
    # and its integer global average pool's sum over H, W stay in the region (as elementwise ops
    # and a mean): the table is not counted as a transpose in
    "table_lookup_and_integer_sum": (('x: R.Tensor(("n", 16, 9, 7), "float32"), t: R.Tensor((256,), "int32")',
                                      '("n", 16, 1, 1)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
lv0 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.clip(lv0, min=0.0, max=255.0, saturate_nan=True)
lv2 = R.astype(lv1, dtype="int32")
lv3 = R.take(t, lv2, axis=0)
lv4 = R.sum(lv3, axis=[2, 3], keepdims=True)
lv5 = R.astype(lv4, dtype="float32")
return lv5
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW_ATTRS}, data_layout="NHWC")
lv0_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.clip(lv0_nhwc, min=0.0, max=255.0, saturate_nan=True)
lv2_nhwc = R.astype(lv1_nhwc, dtype="int32")
lv3_nhwc = R.take(t, lv2_nhwc, axis=0)
lv4_nhwc = R.sum(lv3_nhwc, axis=(1, 2), keepdims=True)
lv5_nhwc = R.astype(lv4_nhwc, dtype="float32")
lv5 = R.permute_dims(lv5_nhwc, axes=(0, 3, 1, 2))
return lv5
"""),
    # a look-up in a 2-d table (rows of an embedding) is not elementwise in its index: it reads
    # the region's value channels first
    "table_of_rows": (('x: R.Tensor(("n", 16, 9, 7), "float32"), t: R.Tensor((256, 2), "float32")',
                       '("n", 16, 5, 4, 2)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
lv0 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.astype(lv0, dtype="int32")
lv2 = R.take(t, lv1, axis=0)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW_ATTRS}, data_layout="NHWC")
lv0_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.astype(lv0_nhwc, dtype="int32")
lv1 = R.permute_dims(lv1_nhwc, axes=(0, 3, 1, 2))
lv2 = R.take(t, lv1, axis=0)
return lv2
"""),
    # one depthwise conv does not pay for a transpose in and one out
    "single_gain": ((X, '("n", 16, 5, 4)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
return lv
""", f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
return lv
"""),
    # flatten after a global pool reads the region as it is: no transpose out
    "global_pool_flatten": ((X, '("n", 16)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
lv1 = R.nn.global_avg_pool(lv)
lv2 = R.flatten(lv1, axis=1)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.global_avg_pool(lv_nhwc, data_layout="NHWC")
lv2 = R.flatten(lv1_nhwc, axis=1)
return lv2
"""),
    # concat along the channels of two region values -> axis 3; a transpose
    # into the region of a transpose out of channels last cancels
    "concat_and_cancelling_transpose": (('y: R.Tensor(("n", 9, 7, 16), "float32")', '("n", 32, 9, 7)'), f"""
x = R.permute_dims(y, axes=(0, 3, 1, 2))
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv2 = R.concat((lv, lv1), axis=1)
return lv2
""", f"""
lv_nhwc = R.nn.conv_bias_act(y, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv2_nhwc = R.concat((lv_nhwc, lv1_nhwc), axis=3)
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # a channels-first operand of a concat whose other operand is channels last is transposed in
    # (DenseNet's blocks concat the stem's pooled map with each layer's output): the transpose of
    # x the convs read already serves it, and one transpose out leaves the region
    "concat_enters_a_channels_first_operand": ((X, '("n", 32, 9, 7)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv2 = R.concat((x, lv1), axis=1)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv2_nhwc = R.concat((x_nhwc, lv1_nhwc), axis=3)
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # a constant operand of a concat taken in (RAFT's coordinate grid) is transposed here, folded:
    # no transpose call, a constant of the channels-last shape
    "concat_takes_a_constant_operand_in": (('x: R.Tensor((1, 16, 9, 7), "float32")', '(1, 18, 9, 7)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv2 = R.concat(({c(GRID)}, lv1), axis=1)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv2_nhwc = R.concat(({c(GRID.transpose(0, 2, 3, 1))}, lv1_nhwc), axis=3)
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # where taking the concat in would sink the region (z's transpose in and the concat's out are
    # more than its two convs gain), the concat stays channels first and the convs' region forms
    "concat_left_out_where_it_would_sink_the_region": ((X + ', z: R.Tensor(("n", 16, 9, 7), "float32")',
                                                        '("n", 32, 9, 7)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv2 = R.concat((z, lv1), axis=1)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1 = R.permute_dims(lv1_nhwc, axes=(0, 3, 1, 2))
lv2 = R.concat((z, lv1), axis=1)
return lv2
"""),
    # conv_transpose joins with its weight packed to (C, kh, kw, O); resize
    # renumbers its axes (2, 3) -> (1, 2) and keeps scales and size
    "conv_transpose_then_resize": ((X, '("n", 8, 36, 28)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.nn.conv_transpose(lv, {c(UP)}, strides=2)
lv2 = R.image.resize(lv1, R.shape([36, 28]), axes=(2, 3), scales=(2.0, 2.0), method="linear")
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.conv_transpose(lv_nhwc, {c(UP.transpose(0, 2, 3, 1))}, strides=2, data_layout="NHWC")
lv2_nhwc = R.image.resize(lv1_nhwc, R.shape([36, 28]), axes=(1, 2), scales=(2.0, 2.0), method="linear")
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # a resize of the channels too (negative axes): each axis renumbered, the order kept
    "resize_channels_and_width": ((X, '("n", 32, 9, 14)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.image.resize(lv, R.shape([14, 32]), axes=(-1, 1), scales=(2.0, 2.0))
return lv1
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.image.resize(lv_nhwc, R.shape([14, 32]), axes=(2, 3), scales=(2.0, 2.0))
lv1 = R.permute_dims(lv1_nhwc, axes=(0, 3, 1, 2))
return lv1
"""),
    # a residual add whose shortcut is the region's own input: x is transposed in
    # for the first conv anyway, so the add reads that (no transpose out and back)
    "residual_add_of_region_input": ((X, '("n", 16, 9, 7)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv2 = R.add(lv1, x)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv2_nhwc = R.add(lv1_nhwc, x_nhwc)
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # a channels-first operand no region reads would need a transpose of its
    # own: the add stays channels first
    "add_of_other_channels_first_value": ((f'{X}, y: R.Tensor(("n", 16, 9, 7), "float32")', '("n", 16, 9, 7)'), f"""
lv = R.nn.conv_bias_act(x, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv1 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv2 = R.add(lv1, y)
return lv2
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv1 = R.permute_dims(lv1_nhwc, axes=(0, 3, 1, 2))
lv2 = R.add(lv1, y)
return lv2
"""),
    # a 3x3 stride-1 conv of 64 channels on a large plane runs by Winograd channels last:
    # a gain, not a shallow conv kept channels first
    "winograd_conv_then_resize": (('x: R.Tensor(("n", 64, 64, 64), "float32")', '("n", 16, 128, 128)'), f"""
lv = R.nn.conv_bias_act(x, {c(DEEP)}, {c(BIAS)}, padding=1, activation="relu")
lv1 = R.image.resize(lv, R.shape([128, 128]), axes=(2, 3), scales=(2.0, 2.0))
return lv1
""", f"""
x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
lv_nhwc = R.nn.conv_bias_act(x_nhwc, {c(hwio(DEEP))}, {c(BIAS)}, padding=1, activation="relu", data_layout="NHWC")
lv1_nhwc = R.image.resize(lv_nhwc, R.shape([128, 128]), axes=(1, 2), scales=(2.0, 2.0))
lv1 = R.permute_dims(lv1_nhwc, axes=(0, 3, 1, 2))
return lv1
"""),
    # a 3-channel stem the channels-first engine ends in a copy out writes its
    # result channels last (no transpose in after it), and its max pool joins the region
    "stem_writes_channels_last": ((STEM_X, '("n", 16, 15, 15)'), f"""
lv = R.nn.conv_bias_act(x, w, {c(BIAS)}, {STEM_ATTRS})
lv1 = R.nn.max_pool(lv, pool_size=3, strides=2, padding=1)
lv2 = R.nn.conv_bias_act(lv1, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
lv3 = R.nn.conv_bias_act(lv2, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
return lv3
""", f"""
lv_nhwc = R.nn.conv_bias_act(x, w, {c(BIAS)}, {STEM_ATTRS}, out_layout="NHWC")
lv1_nhwc = R.nn.max_pool(lv_nhwc, pool_size=3, strides=2, padding=1, data_layout="NHWC")
lv2_nhwc = R.nn.conv_bias_act(lv1_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW_ATTRS}, data_layout="NHWC")
lv3_nhwc = R.nn.conv_bias_act(lv2_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv3 = R.permute_dims(lv3_nhwc, axes=(0, 3, 1, 2))
return lv3
"""),
    # a MobileNet's 3x3/2 stem on an image of any size (its method is picked per call: on small
    # images its GEMM writes channels last) starts the region of the depthwise conv after it
    "stem_of_any_size_writes_channels_last": (('x: R.Tensor(("n", 3, "h", "w"), "float32")',
                                               '("n", 16, "(h + 1) // 2", "(w + 1) // 2")'), f"""
lv = R.nn.conv_bias_act(x, {c(STEM)}, {c(BIAS)}, strides=2, padding=1, activation="hard_swish")
lv1 = R.nn.conv_bias_act(lv, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv2 = R.nn.conv_bias_act(lv1, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
return lv2
""", f"""
lv_nhwc = R.nn.conv_bias_act(x, {c(STEM)}, {c(BIAS)}, strides=2, padding=1, activation="hard_swish", out_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv2_nhwc = R.nn.conv_bias_act(lv1_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # LCNet-0.5's and the 0.5-width MobileNets' first block: an 8-channel stem writes channels last
    # for the 8-channel depthwise convs after it (depthwise starts a region from 8 channels)
    "stem_of_8_channels_writes_channels_last": (('x: R.Tensor(("n", 3, 17, 14), "float32")', '("n", 8, 9, 7)'), f"""
lv = R.nn.conv_bias_act(x, {c(STEM[:8])}, {c(BIAS[:8])}, strides=2, padding=1, activation="hard_swish")
lv1 = R.nn.conv_bias_act(lv, {c(DW[:8])}, {c(BIAS[:8])}, groups=8, padding=1, activation="relu")
lv2 = R.nn.conv_bias_act(lv1, {c(DW[:8])}, {c(BIAS[:8])}, groups=8, padding=1, activation="relu")
return lv2
""", f"""
lv_nhwc = R.nn.conv_bias_act(x, {c(STEM[:8])}, {c(BIAS[:8])}, strides=2, padding=1, activation="hard_swish", out_layout="NHWC")
lv1_nhwc = R.nn.conv_bias_act(lv_nhwc, {c(hwio(DW[:8]))}, {c(BIAS[:8])}, groups=8, padding=1, activation="relu", data_layout="NHWC")
lv2_nhwc = R.nn.conv_bias_act(lv1_nhwc, {c(hwio(DW[:8]))}, {c(BIAS[:8])}, groups=8, padding=1, activation="relu", data_layout="NHWC")
lv2 = R.permute_dims(lv2_nhwc, axes=(0, 3, 1, 2))
return lv2
"""),
    # the same stem's result also read channels first: writing it channels last would only move
    # the transpose (one out instead of one in), so the stem stays channels first
    "stem_read_channels_first_too": ((STEM_X, '("n", 16, 15, 15)'), f"""
lv = R.nn.conv_bias_act(x, w, {c(BIAS)}, {STEM_ATTRS})
lv1 = R.nn.max_pool(lv, pool_size=3, strides=2, padding=1)
lv2 = R.nn.conv_bias_act(lv1, {c(DW)}, {c(BIAS)}, {DW_ATTRS})
lv3 = R.nn.conv_bias_act(lv2, {c(DW)}, {c(BIAS)}, {DW1_ATTRS})
lv4 = R.nn.softmax(lv, axis=1)
lv5 = R.nn.max_pool(lv4, pool_size=4, strides=4, padding=(0, 0, 0, 1))
lv6 = R.add(lv3, lv5)
return lv6
""", f"""
lv = R.nn.conv_bias_act(x, w, {c(BIAS)}, {STEM_ATTRS})
lv1 = R.nn.max_pool(lv, pool_size=3, strides=2, padding=1)
lv1_nhwc = R.permute_dims(lv1, axes=(0, 2, 3, 1))
lv2_nhwc = R.nn.conv_bias_act(lv1_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW_ATTRS}, data_layout="NHWC")
lv3_nhwc = R.nn.conv_bias_act(lv2_nhwc, {c(hwio(DW))}, {c(BIAS)}, {DW1_ATTRS}, data_layout="NHWC")
lv3 = R.permute_dims(lv3_nhwc, axes=(0, 3, 1, 2))
lv4 = R.nn.softmax(lv, axis=1)
lv5 = R.nn.max_pool(lv4, pool_size=4, strides=4, padding=(0, 0, 0, 1))
lv6 = R.add(lv3, lv5)
return lv6
"""),
}


#: the stem's values reach ~100 (a 7x7 conv of unit-variance weights): the channels-last
#: depthwise convs sum in another order
#: channels last sums a conv's products in another order: float32 agrees to 1e-5 (more with a stem)
TOLERANCES = {name: dict(rtol=1e-5, atol=1e-4) for name in ("stem_writes_channels_last", "stem_read_channels_first_too",
                                                             "stem_of_any_size_writes_channels_last",
                                                             "stem_of_8_channels_writes_channels_last")}
#: the dims each case runs at (default: n = 1 and 3)
DIMS = {"stem_of_any_size_writes_channels_last": [{"n": 1, "h": 13, "w": 10}, {"n": 3, "h": 8, "w": 9}]}


@pytest.mark.parametrize("name", CASES)
def test_convert_layout(name):
    (params, ret), before, expected = CASES[name]
    mod, out = assert_rewrites(with_dce(convert_layout), program(params, ret, before), program(params, ret, expected))
    assert_same_results(mod, out, DIMS.get(name, [{"n": 1}, {"n": 3}]),
                        **TOLERANCES.get(name, dict(rtol=1e-5, atol=1e-5)))


UNCHANGED = {
    # a 3-channel stem does not start a region (channels-last im2col is slower)
    "stem": ('x: R.Tensor(("n", 3, 9, 7), "float32")', '("n", 16, 5, 4)',
             f"lv = R.nn.conv(x, {c(STEM)}, strides=2, padding=1)\nreturn lv"),
    # depthwise convs of fewer than 8 channels do not start a region
    "depthwise_of_4_channels": ('x: R.Tensor(("n", 4, 30, 30), "float32")', '("n", 4, 30, 30)', f"""
lv = R.nn.conv_bias_act(x, {c(DW[:4])}, {c(BIAS[:4])}, groups=4, padding=1, activation="relu")
lv1 = R.nn.conv_bias_act(lv, {c(DW[:4])}, {c(BIAS[:4])}, groups=4, padding=1, activation="relu")
return lv1"""),
    # a region of 1x1 convs only would gain nothing and pay its transposes
    "pointwise_only": (X, '("n", 3, 9, 7)', f"lv = R.nn.conv(x, {c(PW.transpose(1, 0, 2, 3))})\nreturn lv"),
    # pools do not start a region
    "resize_only": (X, '("n", 16, 18, 14)',
                    "lv = R.image.resize(x, R.shape([18, 14]), axes=(2, 3), scales=(2.0, 2.0))\nreturn lv"),
    # one conv_transpose does not pay for a transpose in and one out
    "single_conv_transpose": (X, '("n", 8, 18, 14)', f"lv = R.nn.conv_transpose(x, {c(UP)}, strides=2)\nreturn lv"),
    "pool_only": (X, '("n", 16, 5, 4)', "lv = R.nn.max_pool(x, pool_size=3, strides=2, padding=1)\nreturn lv"),
    # the same with 32 channels: too shallow for Winograd, the conv stays channels first (it could
    # write its result channels last, but that counts as the transpose in it replaces: one resize
    # does not pay for it and the transpose out)
    "shallow_conv_then_resize": ('x: R.Tensor(("n", 32, 64, 64), "float32")', '("n", 16, 128, 128)', f"""
lv = R.nn.conv_bias_act(x, {c(DEEP[:, :32])}, {c(BIAS)}, padding=1, activation="relu")
lv1 = R.image.resize(lv, R.shape([128, 128]), axes=(2, 3), scales=(2.0, 2.0))
return lv1"""),
}


@pytest.mark.parametrize("name", UNCHANGED)
def test_convert_layout_leaves_alone(name):
    params, ret, body = UNCHANGED[name]
    assert_unchanged(convert_layout, program(params, ret, body))


# ---------------------------------------------------------------- models


def _check_against_onnxruntime(model, dims, feeds_for, batches=(1, 3), converts=True):
    mod = relaxpack.from_onnx(model, dims=dims)
    exe = relaxpack.build(mod)
    assert ('("data_layout", "NHWC")' in exe.metadata["ir"]) == converts
    plan = exe.metadata["memory_plan"]
    assert plan["arena_bytes"] == plan["lower_bound_bytes"]
    vm, session = VirtualMachine(exe), onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    for batch in batches:
        feeds = feeds_for(batch)
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), 1e-4, 1e-4)
        assert all(d.passed for d in diffs), diffs


def test_resnet_small_channels_last_matches_onnxruntime():
    model = onnx.load(str(MODELS / "resnet_small.onnx"))
    rng = np.random.default_rng(1)
    _check_against_onnxruntime(model, None, lambda b: {"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)})


# UNet's regions gain from their ConvTranspose and Resize (its convs are shallow stride-1 3x3 or 1x1)
@pytest.mark.parametrize("name, converts", [("resnet18", True), ("mobilenetv2", True), ("unet", True),
                                            ("yolo_head", True)])
def test_benchmark_cnn_channels_last_matches_onnxruntime(name, converts):
    bench = BENCHMARKS[name]("smoke")
    setting = bench.settings[0]
    shape = {k: v.shape for k, v in setting.feeds(0).items()}
    rng = np.random.default_rng(2)
    batches = (1,) if name == "unet" else (1, 3)       # unet's batch is bound at import for smoke too
    _check_against_onnxruntime(bench.model, bench.import_dims, lambda b: {
        k: rng.standard_normal((b, *s[1:])).astype(np.float32) for k, s in shape.items()}, batches, converts)


def test_disabling_the_pass_keeps_channels_first():
    bench = BENCHMARKS["mobilenetv2"]("smoke")
    with PassContext(disabled_passes=["ConvertLayout"]):
        exe = relaxpack.build(relaxpack.from_onnx(bench.model, dims=bench.import_dims))
    assert "NHWC" not in exe.metadata["ir"]


# ---------------------------------------------------------------- resize and conv_transpose vs onnxruntime


def _region_model(op: str, inputs: list, attrs: dict, channels: int = 16, hw=(9, 7)):
    """input (batch, C, *hw) -> depthwise 3x3 Conv (a gain: the region starts) -> ``op``
    (extra ``inputs`` as initializers) -> output: a region of two gains and two transposes."""
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(3)
    dw = rng.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(dw, "dw")]
    names = ["dw_out"]
    for i, value in enumerate(inputs):
        if value is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(np.asarray(value), f"in{i}"))
        names.append(f"in{i}")
    nodes = [helper.make_node("Conv", ["input", "dw"], ["dw_out"], group=channels, pads=[1, 1, 1, 1]),
             helper.make_node(op, names, ["output"], **attrs)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT,
                                                                          ["batch", channels, *hw])],
                              [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _feeds(channels=16, hw=(9, 7)):
    rng = np.random.default_rng(4)
    return lambda b: {"input": rng.standard_normal((b, channels, *hw)).astype(np.float32)}


SCALES = np.array([1, 1, 2, 2], np.float32)
# (half_pixel_symmetric is left out: this onnxruntime disagrees with onnx's reference there, channels first too)
RESIZES = {
    "nearest_asymmetric_floor": ([None, SCALES], dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                                      nearest_mode="floor")),
    "nearest_half_pixel_ceil": ([None, np.array([1, 1, 1.5, 2.5], np.float32)],
                                dict(mode="nearest", nearest_mode="round_prefer_ceil")),
    "linear_half_pixel": ([None, SCALES], dict(mode="linear")),
    "linear_pytorch_half_pixel": ([None, SCALES], dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel")),
    "linear_align_corners_sizes": ([None, None, np.array([5, 11], np.int64)],
                                   dict(mode="linear", coordinate_transformation_mode="align_corners", axes=[2, 3])),
    "linear_antialias_down": ([None, np.array([1, 1, 0.5, 0.6], np.float32)], dict(mode="linear", antialias=1)),
    "cubic_asymmetric": ([None, SCALES], dict(mode="cubic", coordinate_transformation_mode="asymmetric")),
    "cubic_half_pixel_exclude": ([None, np.array([1, 1, 1.7, 0.8], np.float32)],
                                 dict(mode="cubic", exclude_outside=1)),
    "tf_crop_and_resize": ([np.array([0.2, -0.1, 0.9, 0.8], np.float32), None, np.array([6, 8], np.int64)],
                           dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                                extrapolation_value=0.5, axes=[2, 3])),
}


@pytest.mark.parametrize("name", RESIZES)
def test_resize_channels_last_matches_onnxruntime(name):
    inputs, attrs = RESIZES[name]
    model = _region_model("Resize", inputs, attrs)
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(), batches=(1, 3))


UP_W = np.random.default_rng(5).standard_normal((16, 12, 3, 3)).astype(np.float32)
CONV_TRANSPOSES = {
    "unet_2x2_stride_2": ([UP_W[:, :6, :2, :2], UP_W[0, :6, 0, 0]], dict(strides=[2, 2])),
    "2x3_stride_2_3_wide": ([UP_W[:, :6, :2, :3], None], dict(strides=[2, 3])),
    "3x3_stride_2_pads_output_padding": ([UP_W[:, :6], None], dict(strides=[2, 2], pads=[1, 0, 1, 2],
                                                                      output_padding=[1, 1])),
    "groups_4": ([UP_W[:, :3], UP_W[1, :12, 1, 1]], dict(strides=[2, 1], pads=[0, 1, 1, 0], group=4)),
    "dilated": ([UP_W[:, :5, :2], None], dict(dilations=[2, 1], pads=[1, 1, 0, 0])),
}


@pytest.mark.parametrize("name", CONV_TRANSPOSES)
def test_conv_transpose_channels_last_matches_onnxruntime(name):
    inputs, attrs = CONV_TRANSPOSES[name]
    hw = (9, 40) if name.endswith("wide") else (9, 7)
    model = _region_model("ConvTranspose", [np.ascontiguousarray(v) if v is not None else None for v in inputs],
                          attrs, hw=hw)
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=hw), batches=(1, 3))


# ---------------------------------------------------------------- means over the spatial dims


def _se_block_model(reduce_axes=(2, 3)):
    """depthwise conv -> an SE block (mean over H, W kept -> 1x1 conv + relu -> 1x1 conv + sigmoid ->
    multiply) -> depthwise conv -> global mean over ``reduce_axes`` (keepdims=0)."""
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(6)
    arrays = {"dw": rng.standard_normal((16, 1, 3, 3)), "dw2": rng.standard_normal((16, 1, 3, 3)),
              "fc1": rng.standard_normal((4, 16, 1, 1)), "b1": rng.standard_normal(4),
              "fc2": rng.standard_normal((16, 4, 1, 1)), "b2": rng.standard_normal(16),
              "axes": np.array([2, 3]), "gaxes": np.array(reduce_axes)}
    inits = [numpy_helper.from_array(v.astype(np.int64 if "axes" in k else np.float32), k) for k, v in arrays.items()]
    nodes = [helper.make_node("Conv", ["input", "dw"], ["a"], group=16, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("ReduceMean", ["a", "axes"], ["s"], keepdims=1),
             helper.make_node("Conv", ["s", "fc1", "b1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s2"]),
             helper.make_node("Conv", ["s2", "fc2", "b2"], ["s3"]),
             helper.make_node("Sigmoid", ["s3"], ["s4"]),
             helper.make_node("Mul", ["a", "s4"], ["m"]),
             helper.make_node("Conv", ["m", "dw2"], ["d"], group=16, pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["d", "gaxes"], ["output"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT,
                                                                          ["batch", 16, 11, 9])],
                              [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_an_se_block_and_a_global_mean_stay_channels_last():
    """The squeeze (N, 1, 1, C) and the global pool (N, C) are means over H and W channels last: one
    transpose, into the region (the SE block then one channels-last nn.squeeze_excite,
    FuseSqueezeExcite's); results as onnxruntime's."""
    model = _se_block_model()
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=(11, 9)))
    ir = relaxpack.build(relaxpack.from_onnx(model, dims={"batch": (1, 4)})).metadata["ir"]
    assert ir.count('"permute_dims"') == 1 and ir.count('("axis", (1, 2))') == 1
    assert ir.count('"nn.squeeze_excite"') == 1 and '("data_layout", "NHWC")' in ir


def test_a_mean_over_other_axes_ends_the_region():
    model = _se_block_model(reduce_axes=(1, 2))
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=(11, 9)))
    ir = relaxpack.build(relaxpack.from_onnx(model, dims={"batch": (1, 4)})).metadata["ir"]
    assert ir.count('"permute_dims"') == 2          # in, and out before the mean over (C, H)

