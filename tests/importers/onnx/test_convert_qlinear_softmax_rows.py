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
