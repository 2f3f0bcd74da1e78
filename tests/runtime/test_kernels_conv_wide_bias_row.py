"""An exact wide-rows conv's bias as its GEMM's last term (kernels/conv_wide.py: ``bias_row``): which
convs take it (exact, a bound weight and bias, one group, no stacked rows), and that they give the
exact integers of the sums (an int64 reference), equal to the generic kernel, call after call, with
new inputs and an arena's views, a planned workspace (the columns' extra row past it: the runner's
own scratch) or none, activations, a batch, column blocks (the 7x7/2 stem) and float32/float64."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import conv_column_phases, conv_flat_rows, conv_wide, get_kernel

from .test_kernels_conv_small import out_for, workspace_for
from .test_kernels_conv_small_exact import _attrs, _integers, check_exact_rounds

CONV_BIAS_ACT = get_kernel("nn.conv_bias_act").fn

# (data, weight, stride, padding) of wide-rows convs
WIDE = [
    ((1, 16, 16, 24), (16, 16, 3, 3), 1, (1, 1, 1, 1)),          # ResNet's 16-channel 3x3
    ((1, 3, 61, 96), (16, 3, 7, 7), 2, (3, 3, 3, 3)),            # the 7x7/2 stem: phases, column blocks
    ((2, 5, 13, 17), (7, 5, 3, 3), 1, (1, 1, 1, 1)),             # a batch, odd sizes
    ((1, 4, 9, 10), (3, 4, 5, 3), 1, (2, 0, 1, 1)),              # uneven padding, a 5x3 kernel
    ((3, 3, 20, 21), (8, 3, 5, 5), 2, (2, 2, 2, 2)),             # a strided batch
]


def _recorded(monkeypatch) -> list:
    """The ``bias_row`` argument of every wide runner prepared from now on. (An exact stride-1 conv
    whose output is as wide as its input runs flat rows instead, kernels/conv_flat_rows.py: turned
    off here, so that the wide rows they would otherwise take are what is tested.)"""
    monkeypatch.setattr(conv_flat_rows, "applies", lambda *args: False)
    seen = []
    prepare = conv_wide.prepare

    def recording(*args, **kwargs):
        seen.append(kwargs.get("bias_row", args[10] if len(args) > 10 else False))
        return prepare(*args, **kwargs)
    monkeypatch.setattr(conv_wide, "prepare", recording)
    return seen


@pytest.mark.parametrize("planned", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", [None, "relu", "silu"], ids=str)
@pytest.mark.parametrize("data, weight, stride, padding", WIDE)
def test_bias_row_gives_the_exact_sums(monkeypatch, data, weight, stride, padding, activation, dtype, planned):
    # a stem whose column phases fit runs those instead of wide rows (conv_column_phases.replaces_wide):
    # none fit here, so the stem's wide rows, as a larger batch's, are what is tested
    monkeypatch.setattr(conv_column_phases, "MAX_PLANES_BYTES", 0)
    seen = _recorded(monkeypatch)
    check_exact_rounds(data, weight, _attrs(stride, padding, activation), dtype, "bound", planned,
                       np.random.default_rng(3))
    assert seen == [True]


@pytest.mark.parametrize("exact, bias, groups, data, weight", [
    (False, "bound", 1, (1, 16, 16, 24), (16, 16, 3, 3)),        # a float conv: its own sums' order
    (True, "register", 1, (1, 16, 16, 24), (16, 16, 3, 3)),      # a bias computed at run time
    (True, None, 1, (1, 16, 16, 24), (16, 16, 3, 3)),            # no bias
    (True, "bound", 2, (1, 16, 16, 24), (16, 8, 3, 3)),          # grouped
    (True, "bound", 1, (1, 32, 32, 20), (16, 32, 3, 3)),         # stacked kernel rows
], ids=str)
def test_bias_row_is_not_taken(monkeypatch, exact, bias, groups, data, weight):
    seen = _recorded(monkeypatch)
    attrs = {**_attrs(1, (1, 1, 1, 1), groups=groups), "exact": exact}
    rng = np.random.default_rng(4)
    w = _integers(rng, weight, 127, "float32")
    b = None if bias is None else _integers(rng, (weight[0],), 2**10, "float32")
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, bias == "bound"))
    x = _integers(rng, data, 255, "float32")
    out = out_for(data, weight, attrs, "float32")
    call(x, w, b, out=out, workspace=workspace_for(data, weight, attrs, "float32"))
    want = out_for(data, weight, attrs, "float32")
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)
    assert seen == [False]


def test_bias_row_layouts():
    """The columns one row longer, the other scratch as it was; none for stacked rows."""
    from relaxpack.runtime.kernels.nn import _prepared_conv
    plan = _prepared_conv((1, 16, 16, 24), (16, 16, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "NCHW")[0]
    layouts = conv_wide.wide_layouts(plan, 2, 16, 16, np.float32)
    longer = conv_wide.bias_row_layouts(plan, layouts, 16, 16)
    (batch, channels, taps, columns), _ = layouts[-2]
    assert longer[-2][0] == (batch, channels * taps + 1, columns) and longer[:-2] == layouts[:-2] \
        and longer[-1] == layouts[-1]
    stacked = _prepared_conv((1, 32, 32, 20), (16, 32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, "NCHW")[0]
    assert conv_wide.stacks_rows(stacked, 32, 16)
    assert conv_wide.bias_row_layouts(stacked, conv_wide.wide_layouts(stacked, 1, 32, 16, np.float32), 32, 16) is None
