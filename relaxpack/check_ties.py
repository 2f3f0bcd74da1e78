"""Telling a rounding near-tie from an error, for ``check --per-node``.

A quantized model rounds floats to integers at every QuantizeLinear,
DynamicQuantizeLinear and requantizing QLinear op. Two runtimes whose float
results differ in the last bit (another summation order in a GEMM, another
exp) round the same value one step apart wherever it sits within that bit of
a half: ``-22.5000000`` rounds to -22, ``-22.5000019`` to -23. Neither is
wrong, and the step then travels through the depth of the model. onnxruntime
with and without its optimizer differ by the same steps.

:func:`near_tie_note` recognizes that case at the first diverging node: an
integer output at most one step apart, computed from inputs that agree within
tolerance but not bit for bit. Inputs that agree bit for bit mean the node
itself computes otherwise: no note then, the divergence is the node's. Inputs
further apart than their last bits (an average of quantized values on a
tie, one side a step off) are said so by their absolute difference.

:func:`order_tie_note` does the same for a selection: TopK, ArgMax or ArgMin
indices that differ where the values they pick are as close as the two
runtimes' inputs are apart (a detector's scores 3e-6 apart swap two boxes).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

#: differences up to this many ulp are "the last bits" (float32 has 24 bits; 2**10 ulp is its last ten)
LAST_BITS = 1 << 10


def near_tie_note(inputs: Iterable[str], output: str, got: Mapping[str, np.ndarray],
                  want: Mapping[str, np.ndarray]) -> str:
    """Why a node's ``output`` differs between ``got`` (relaxpack) and ``want`` (onnxruntime)
    when the difference is rounding near-ties, else "". ``inputs`` are the node's input names;
    one in neither mapping (an initializer) is the same on both sides."""
    a, b = np.asarray(got[output]), np.asarray(want[output])
    if a.dtype != b.dtype or a.dtype.kind not in "iu" or a.shape != b.shape or a.size == 0:
        return ""
    steps = np.abs(a.astype(np.int64) - b.astype(np.int64))
    if int(steps.max()) != 1:
        return ""
    apart = _float_inputs_apart(inputs, got, want)
    if not apart:
        return ""
    ulps = max(ulp for _, ulp, _ in apart)
    names = ", ".join(repr(name) for name, _, _ in apart)
    if ulps <= LAST_BITS:
        apart_by, decide = _ulps_text(ulps), "the inputs' last bits decide"
    else:
        apart_by, decide = f"{max(d for _, _, d in apart):.3g} apart", "those differences decide"
    return (f"{int(np.count_nonzero(steps))} of {a.size} values one step apart; its input {names} agrees "
            f"within tolerance but not bit for bit (up to {apart_by}): rounding near-ties that "
            f"{decide}, not an error in this node")



#: selections whose indices follow the order of their input's values: the output holding them
_INDEX_OUTPUT = {"TopK": 1, "ArgMax": 0, "ArgMin": 0}


def order_tie_note(node, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> str:
    """Why a TopK's, ArgMax's or ArgMin's indices (``node``, an ONNX NodeProto) differ between
    ``got`` and ``want`` when they pick between near-equal values, else "": its input agrees within
    tolerance but not bit for bit, and each differing pair of picks (read from onnxruntime's input)
    is at most twice the inputs' largest difference apart. Equal inputs mean the node itself
    orders otherwise. (Its attributes are read as protobuf fields: this module imports no onnx.)"""
    at = _INDEX_OUTPUT.get(node.op_type)
    if at is None or len(node.output) <= at or not node.input:
        return ""
    index, data = node.output[at], node.input[0]
    if any(name not in side for name in (index, data) for side in (got, want)):
        return ""
    ig, iw, xg, xw = (np.asarray(v) for v in (got[index], want[index], got[data], want[data]))
    if ig.shape != iw.shape or ig.dtype.kind not in "iu" or iw.dtype.kind not in "iu" or xw.dtype.kind != "f" \
            or xg.shape != xw.shape or xw.ndim == 0 or np.array_equal(xg, xw, equal_nan=True):
        return ""
    attrs = {a.name: a.i for a in node.attribute if a.name in ("axis", "keepdims")}     # INT attributes
    axis = int(attrs.get("axis", -1 if node.op_type == "TopK" else 0)) % xw.ndim
    if node.op_type != "TopK" and not attrs.get("keepdims", 1):
        ig, iw = np.expand_dims(ig, axis), np.expand_dims(iw, axis)
    differ = ig != iw
    length = xw.shape[axis]
    if ig.ndim != xw.ndim or not differ.any() or min(ig.min(), iw.min()) < 0 or max(ig.max(), iw.max()) >= length:
        return ""
    picks = [np.take_along_axis(xw, i.astype(np.intp), axis).astype(np.float64)[differ] for i in (ig, iw)]
    with np.errstate(invalid="ignore", over="ignore"):
        gap = np.abs(picks[0] - picks[1])
        apart = np.abs(xg.astype(np.float64) - xw)
    apart = float(apart[np.isfinite(apart)].max(initial=0.0))
    if not np.isfinite(gap).all() or float(gap.max()) > 2 * apart:
        return ""
    return (f"{int(np.count_nonzero(differ))} of {ig.size} indices differ, each pick {float(gap.max()):.3g} or less "
            f"from the other where its input {data!r} agrees within tolerance but not bit for bit (up to "
            f"{apart:.3g} apart): the order of near-equal values, which the inputs' last bits decide, not an "
            f"error in this node")


def _float_inputs_apart(inputs: Iterable[str], got: Mapping[str, np.ndarray],
                        want: Mapping[str, np.ndarray]) -> list[tuple[str, float]]:
    """The node's float inputs whose two values differ: (name, largest difference in units of the
    last place of the larger of the two values, largest absolute difference)."""
    apart = []
    for name in inputs:
        if not name or name not in got or name not in want:
            continue
        a, b = np.asarray(got[name]), np.asarray(want[name])
        if a.dtype != b.dtype or a.dtype.kind != "f" or a.shape != b.shape or np.array_equal(a, b, equal_nan=True):
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a.astype(np.float64) - b)
            ulps = diff / np.spacing(np.maximum(np.abs(a), np.abs(b)))
        finite = np.isfinite(ulps)
        apart.append((name, float(ulps[finite].max()) if finite.any() else float("inf"),
                      float(diff[finite].max()) if finite.any() else float("inf")))
    return apart


def _ulps_text(ulps: float) -> str:
    if not np.isfinite(ulps):
        return "an infinity"
    return f"{ulps:.0f} ulp" if ulps >= 1.5 else "1 ulp"


__all__ = ["LAST_BITS", "near_tie_note", "order_tie_note"]
