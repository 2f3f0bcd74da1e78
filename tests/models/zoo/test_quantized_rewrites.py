"""DropZeroSignRoundTrips, TabulateIntegerFunctions, DropNaNSaturation and FuseDynamicQuantize on the
zoo's quantized models: the archive built with them gives the same bits as the archive built without
them, at every tested shape (the first only drops steps whose one effect, a -0.0 made +0.0, nothing
downstream can tell; the second computes a chain on its input's every value with the same kernels; the
third leaves out NaN checks of values proven finite; the fourth makes a dynamic quantizer's numpy calls
in one kernel), and they make fewer passes over the data in each."""

from __future__ import annotations

import re

import numpy as np
import pytest

import relaxpack
from relaxpack.passes import PassContext
from relaxpack.passes.pipeline import optimize_pipeline
from relaxpack.passes.tabulate_integer_functions import ELEMENTWISE
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import ir_text

from .judge import MODELS, converted, expected

#: the passes compared: with both against without either
PASSES = ["DropZeroSignRoundTrips", "TabulateIntegerFunctions", "DropNaNSaturation", "FuseDynamicQuantize"]

#: passes that act only on what the compared ones make (left out of the count of passes over data)
LATER = ("MergeQuantizedProducts",)

#: the zoo's quantized models (static QDQ and QOperator, dynamic): the pass has steps to drop in each
QUANTIZED = ("bert_dynamic_int8", "gpt2_dynamic_int8", "resnet_dynamic_int8", "bert_qdq_tensor", "bert_qop_tensor",
             "efficientnet_qop_tensor", "mobilenet_v2_qdq_channel", "mobilenet_v2_qdq_tensor",
             "mobilenet_v2_qop_channel", "resnet_qdq_channel", "resnet_qdq_tensor", "resnet_qdq_tensor_u8",
             "resnet_qop_tensor")

#: dynamically quantized: each quantizer divides by a scale computed at run time (zero for an all-zero
#: input: NaN), so no NaN check goes
DYNAMIC = ("bert_dynamic_int8", "gpt2_dynamic_int8", "resnet_dynamic_int8")


def _passes(mod, disabled=()) -> int:
    """The passes over data the calls of ``mod`` optimized at -O2 make (fused functions included),
    each call weighted by TabulateIntegerFunctions' costs (erf ~35 passes, others 1)."""
    with PassContext(opt_level=2, disabled_passes=disabled):
        text = ir_text(optimize_pipeline()(mod))
    return sum(ELEMENTWISE.get(op, 1) for op in re.findall(r" = R\.([a-z_.]+)\(", text))


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_same_bits_with_and_without_the_pass(name):
    mod = converted(name)
    with_pass = relaxpack.build(mod, opt_level=2)
    with PassContext(disabled_passes=PASSES):
        without = relaxpack.build(mod, opt_level=2)
    # (counted without MergeQuantizedProducts, which needs FuseDynamicQuantize's items: its batched
    # product and take views are calls of their own; its bits are compared below all the same)
    steps, steps_without = _passes(mod, LATER), _passes(mod, PASSES)
    assert steps < steps_without
    nan_checks = [exe.metadata["ir"].count('("saturate_nan", True)') for exe in (with_pass, without)]
    assert nan_checks[0] < nan_checks[1] or (nan_checks[0] == nan_checks[1] and name in DYNAMIC), (name, nan_checks)
    a, b = VirtualMachine(with_pass), VirtualMachine(without)
    for dims, feeds, _ in expected(name):
        got, want = a.run(feeds), b.run(feeds)
        for out in want:
            g, w = np.asarray(got[out]), np.asarray(want[out])
            assert g.dtype == w.dtype and g.shape == w.shape, (name, dims, out)
            np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8), err_msg=f"{name} {dims} {out}")


def test_the_list_is_the_zoo_quantized_models():
    quantized = {m for m, e in MODELS.items() if "int8" in m or "_qdq_" in m or "_qop_" in m}
    assert quantized == set(QUANTIZED)
