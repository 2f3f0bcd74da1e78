"""The conv runners' in-place activations (conv_small._activation): a clip bound to its 0-d bounds,
SiLU and sigmoid of negated bound operands (negated_activation.py), bit for bit the generic kernel,
call after call; weights in registers keep the plain activation and are read every call."""

from __future__ import annotations

import numpy as np
import pytest

from .test_kernels_conv_small import CONV_BIAS_ACT, full_attrs, out_for, workspace_for
from .test_kernels_conv_small_nhwc import CASES, check_calls, nhwc_attrs
from .test_kernels_registry import rand

CLIPS = [("clip", None, 6.0), ("clip", 0.0, None), ["clip", 0.0, 6.0], ("clip", None, None)]


def _ids(case):
    return case if isinstance(case, str) else None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", CLIPS + ["silu", "sigmoid"], ids=str)
@pytest.mark.parametrize("data, weight, attrs, method", CASES[::3], ids=_ids)
def test_channels_last_runners(data, weight, attrs, method, activation, dtype):
    attrs = nhwc_attrs(attrs, activation)
    rng = np.random.default_rng(0)
    check_calls(CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True)), data, weight, attrs, dtype, rng,
                workspace_for(data, weight, attrs, dtype))


@pytest.mark.parametrize("activation", ["silu", "sigmoid"])
@pytest.mark.parametrize("data, weight, attrs, method", CASES[::4], ids=_ids)
def test_weights_in_registers_are_not_negated_once(data, weight, attrs, method, activation):
    """A weight or bias computed at run time (the same object, new values) is read every call."""
    attrs = nhwc_attrs(attrs, activation)
    rng = np.random.default_rng(1)
    check_calls(CONV_BIAS_ACT.specialize_attrs(attrs, (False, False, False)), data, weight, attrs, "float32", rng,
                workspace_for(data, weight, attrs, "float32"), w=rand(rng, weight, "float32"),
                b=rand(rng, (weight[-1],), "float32"), mutate=True)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("activation", ["silu", "sigmoid", ("clip", None, 0.5)], ids=str)
def test_without_a_bias_and_at_saturating_values(layout, activation):
    """A bound weight without a bias is negated alone; products far out in SiLU's and sigmoid's
    tails (exp overflows to inf, underflows to 0) and NaN inputs give the kernel's values."""
    data, weight = ((1, 6, 9, 11), (8, 6, 3, 3)) if layout == "NCHW" else ((1, 9, 11, 6), (3, 3, 6, 8))
    attrs = full_attrs({"padding": (1, 1, 1, 1), "data_layout": layout}, activation)
    rng = np.random.default_rng(2)
    w = rand(rng, weight, "float32") * 40
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True))
    out = out_for(data, weight, attrs, "float32")
    for round_ in range(3):
        x = rand(rng, data, "float32") * 10
        x.flat[5] = np.nan
        call(x, w, None, out=out, workspace=workspace_for(data, weight, attrs, "float32"))
        want = out_for(data, weight, attrs, "float32")
        with np.errstate(all="ignore"):
            CONV_BIAS_ACT(x, w, None, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        assert np.isnan(out).any() and not np.isnan(out).all()
        if activation == "silu":
            assert (np.abs(out) > 100).any()
        elif activation == "sigmoid":
            assert (out == 1).any() and (out < 1e-20).any()
