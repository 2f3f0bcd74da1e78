"""The small-conv fast path (:mod:`.conv_small`) for an integer conv, in float32 when exact.

QLinearConv and ConvInteger convolve int32 operands (int8 / uint8 values less
their zero points) into int32. The generic kernel already runs such a conv
by float BLAS when :mod:`.integer_exact` proves it exact, but through the
generic conv engine with its plan, scratch and views made each call: on the
zoo's small images that cost 2-6x the float conv's prepared call. Here an
instruction whose weight (and bias) are constants gets the float32 runner of
:mod:`.conv_small` for the float32 copies of them, once; a call then checks
``max|data| <= limit`` (two read-only reductions; ``limit * sum|w| + max|bias|
<= 2**24``, so every partial sum is an exact float32 integer), runs the float
runner on the integer data (the copy into its padded input or columns
converts it), writes the float32 result into ``out``'s own memory and
converts it in place to int32: the integer kernel's values. A call beyond the
limit runs the generic kernel.
"""

from __future__ import annotations

import numpy as np

from . import integer_exact

_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)


def prepare(data, weight, bias, out, workspace, attrs, fixed_weight: bool, fixed_bias: bool,
            float_prepare, generic, private_max_bytes: int):
    """``run(data, out)`` for this integer call (NCHW or NHWC, int32 ``out``, constant
    weight and bias, no activation), or None where the generic kernel runs it."""
    layout = attrs["data_layout"]
    if not (layout in ("NCHW", "NHWC") and attrs["out_layout"] in (None, layout)
            and attrs["activation"] is None and out.dtype == _I32 and out.flags.c_contiguous
            and fixed_weight and (bias is None or fixed_bias)
            and data.dtype.kind in "iu" and weight.dtype.kind in "iu"
            and (bias is None or bias.dtype.kind in "iu") and data.size and out.size):
        return None
    reduce_axes = tuple(range(1, weight.ndim)) if layout == "NCHW" else tuple(range(weight.ndim - 1))
    facts = integer_exact.constant_facts(weight, reduce_axes)
    bias_facts = None if bias is None else integer_exact.constant_facts(bias, ())
    if facts is None or (bias is not None and bias_facts is None):
        return None
    bias_bound = 0 if bias is None else bias_facts.bound
    if facts.bound == 0 or bias_bound > integer_exact.FLOAT32_EXACT:
        return None
    limit = (integer_exact.FLOAT32_EXACT - bias_bound) // facts.bound
    if limit < 1:
        return None
    w = facts.as_float(weight, _F32)
    b = None if bias is None else bias_facts.as_float(bias, _F32)
    like = np.broadcast_to(np.zeros((), _F32), data.shape)    # the float runner reads shapes and dtype
    runner = float_prepare(like, w, b, out.view(_F32), workspace, attrs, True, True)
    if runner is None:
        return None
    # a channels-first pointwise GEMM and the channels-last runners may read the data as it is
    convert_first = getattr(runner, "pointwise", False) or layout == "NHWC"
    if convert_first and data.size * _F32.itemsize > private_max_bytes:
        return None
    shadow = np.empty(data.shape, _F32) if convert_first else None     # the instruction's own
    copy, magnitude = np.copyto, integer_exact.magnitude

    def run(x, out):
        if magnitude(x) > limit:
            generic(x, weight, bias, out=out, workspace=workspace, **attrs)
            return
        if convert_first:
            copy(shadow, x)
            x = shadow
        result = out.view(_F32)
        runner(x, result)
        copy(out, result, casting="unsafe")     # exact integers of at most 2**24: in place
    return run
