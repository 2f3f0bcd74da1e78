"""QLinearSoftmax through its one ``qlinear_softmax_exp`` kernel on inputs past the kernel's table
threshold (runtime/kernels/quantized_softmax.py: ``t`` from the 256 exponentials, the sums by rows),
bit for bit against onnxruntime at -O0 and -O2: attention-shaped rows (BERT's batch x heads x
sequence x sequence), long rows, a softmax over a middle axis (opset 12's flattened trailing dims)
and a single row. (A pairwise sum passes these too: the quantized outputs rarely see the sums'
last bit; tests/runtime/test_kernels_quantized_softmax.py checks the order bit for bit.)"""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels.quantized_softmax import TABLE_MIN

from .test_convert_microsoft import ms_model, rand
from .test_convert_microsoft_qlinear import DTYPES, check_exact, qparams


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("opset, axis", [(13, -1), (12, 2)])
def test_large_inputs_take_the_table(dtype, opset, axis):
    sx, zx = qparams(dtype, 7)
    sy, zy = np.float32(1 / 256), dtype(0 if dtype == np.uint8 else -128)
    model = ms_model("QLinearSoftmax", {"x": rand(3, 2, 17, 17, dtype=dtype)}, {"sx": sx, "zx": zx, "sy": sy, "zy": zy},
                     inputs=["x", "sx", "zx", "sy", "zy"], attrs={"opset": opset, "axis": axis},
                     sym={"x": ["b", "h", "s", "s2"]})
    shapes = ((3, 2, 17, 17), (1, 2, 64, 64), (2, 1, 3, 300), (1, 1, 1, TABLE_MIN))
    assert all(int(np.prod(s)) >= TABLE_MIN for s in shapes)
    check_exact(model, [{"x": rand(*s, dtype=dtype, seed=sum(s))} for s in shapes])


@pytest.mark.parametrize("sx", [0.5, 0.05])
def test_long_rows(sx):
    """Rows of up to 1000 values spread over many binades."""
    dtype = np.uint8
    model = ms_model("QLinearSoftmax", {"x": rand(4, 400, dtype=dtype)},
                     {"sx": np.float32(sx), "zx": dtype(3), "sy": np.float32(1 / 256), "zy": dtype(0)},
                     inputs=["x", "sx", "zx", "sy", "zy"], attrs={"opset": 13}, sym={"x": ["n", "d"]})
    check_exact(model, [{"x": rand(n, d, dtype=dtype, seed=n)} for n, d in ((4, 400), (2, 999), (1, 1000))])


# one 198-value row of timm DeiT-tiny's first attention softmax (quantize_static, QOperator), as
# `relaxpack check` drew it: one value sat on a rounding tie that the headroom's last bits decide
DEIT_ROW = [93, 108, 140, 155, 188, 127, 163, 172, 165, 120, 127, 173, 149, 121, 145, 152, 182, 153, 170, 156, 113,
            199, 146, 158, 197, 194, 157, 144, 128, 149, 163, 224, 163, 161, 134, 111, 145, 112, 125, 166, 197, 135,
            194, 184, 140, 136, 148, 163, 139, 124, 133, 164, 161, 187, 131, 204, 135, 172, 140, 167, 196, 144, 170,
            184, 137, 173, 161, 115, 164, 108, 190, 190, 168, 177, 169, 133, 170, 174, 158, 139, 175, 167, 133, 201,
            113, 140, 179, 160, 179, 126, 138, 221, 132, 128, 162, 131, 192, 166, 179, 154, 157, 165, 175, 115, 166,
            153, 191, 141, 190, 157, 181, 138, 164, 180, 176, 110, 189, 120, 135, 118, 157, 156, 185, 173, 163, 135,
            157, 177, 141, 149, 164, 171, 161, 126, 155, 155, 169, 206, 154, 173, 115, 175, 145, 124, 124, 144, 145,
            94, 203, 134, 192, 177, 163, 178, 163, 142, 157, 202, 133, 171, 148, 185, 195, 123, 113, 145, 165, 165,
            131, 177, 156, 170, 168, 171, 164, 101, 130, 133, 170, 170, 129, 184, 122, 188, 153, 128, 145, 147, 167,
            147, 181, 74, 148, 198, 147, 150, 170, 184]


def test_the_headroom_is_a_float32_log():
    """onnxruntime takes ``log(FLT_MAX / D)`` of a float (the float overload): rounded to float32
    before the float64 shift. With the float64 log this DeiT row came out one step off."""
    row = np.array(DEIT_ROW, np.uint8).reshape(1, 198)
    model = ms_model("QLinearSoftmax", {"x": row},
                     {"sx": np.float32(0.002309839939698577), "zx": np.uint8(138), "sy": np.float32(0.00390625),
                      "zy": np.uint8(0)},
                     inputs=["x", "sx", "zx", "sy", "zy"], attrs={"opset": 17, "axis": -1}, sym={"x": ["n", 198]})
    check_exact(model, [{"x": row}])
