"""An integer ``nn.conv`` by the float engine when :mod:`.integer_exact` proves it exact.

QLinearConv and ConvInteger convolve int32 operands (int8 / uint8 values less
their zero points); numpy multiplies integer matrices without BLAS. Here the
conv's bound (``max|data|`` times the largest per-output-channel ``sum |w|``,
plus ``max|bias|``) picks float32 or float64, the engine runs on float
copies of the operands (a constant weight's copy kept) into a float result,
and that is converted back into ``out``. The plan is the one the integer
call would run, except that Winograd's transforms (fractions of the weight)
give way to the plan's direct fallback: only sums of products are exact.
"""

from __future__ import annotations

import numpy as np

from . import conv_nhwc, integer_exact
from ._workspace import Scratch
from .conv_direct import run_conv


def run_exact(plan, data, weight, bias, out, groups: int, data_layout: str, channels_last: bool,
              workspace, epilogue) -> bool:
    """``out = conv(data, weight) (+ bias)``, then ``epilogue(out)``, by float
    BLAS when exact (then True); False when the integer engine must run."""
    if out.dtype.kind != "i" or out.size * (weight.size // weight.shape[0 if data_layout == "NCHW" else -1]) \
            < integer_exact.MIN_PRODUCTS or not integer_exact.is_integer(data, weight, bias):
        return False
    reduce_axes = tuple(range(1, weight.ndim)) if data_layout == "NCHW" else tuple(range(weight.ndim - 1))
    bound, facts = integer_exact.operand_bound(weight, reduce_axes)
    bound = integer_exact.magnitude(data) * bound + (0 if bias is None else integer_exact.operand_bound(bias, ())[0])
    dtype = integer_exact.exact_dtype(bound, out.dtype)
    if dtype is None:
        return False
    w = integer_exact.as_float(weight, dtype, facts)
    b = None if bias is None else bias.astype(dtype)
    # the float copy of the data and the float result in the thread's workspace: a fresh large
    # array per call would be fresh pages (faults) every call
    with Scratch([(data.shape, dtype), (out.shape, dtype)], None) as (x, result):
        np.copyto(x, data, casting="unsafe")
        if data_layout == "NCHW":
            run_conv(plan, x, w, groups, result, b, workspace, None, channels_last)
        else:
            nhwc = plan.fallback if plan.method == "winograd" else plan
            conv_nhwc.run_conv_nhwc(nhwc, x, w, groups, result, b, workspace)
        np.copyto(out, result, casting="unsafe")
    if epilogue is not None:
        epilogue(out)
    return True
