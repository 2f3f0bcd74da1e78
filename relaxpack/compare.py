"""Comparing outputs with reference values within tolerances.

``check`` compares relaxpack with onnxruntime, ``run --expected`` with a
saved ``.npz``; numpy only.

A tolerance is explicit (``rtol``, ``atol``: ``|got - want| <= atol + rtol *
|want|`` as written) or, where neither is given, the default per dtype of
:data:`DTYPE_TOLERANCES`, whose atol is relative to the output's largest
finite magnitude, as the differential campaign judges: a sum of large
terms carries rounding error at the scale of its terms, not of its smallest
result. The magnitude counts as at least :data:`SCALE_FLOOR` (0.1, where the
campaign says 1), so that an output of small values is held to float32's
atol 1e-5 as before, not to a looser 1e-4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


#: float dtype -> (rtol, atol relative to the output's largest finite magnitude): about 1000 ulp
#: of it for float32, 10 for float16 and bfloat16; other dtypes compare exactly
DTYPE_TOLERANCES = {"float64": (1e-7, 1e-7), "float32": (1e-4, 1e-4), "float16": (1e-2, 1e-2),
                    "bfloat16": (8e-2, 8e-2)}
#: the tolerances an explicit --rtol or --atol alone keeps for the other
LEGACY_RTOL, LEGACY_ATOL = 1e-4, 1e-5
#: the least magnitude an output's atol scales by (float32: atol at least 1e-5, the former default)
SCALE_FLOOR = 0.1


def tolerance_for(want: np.ndarray, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """(rtol, absolute atol) for comparing with ``want``: as given when either is given (the
    other keeping its fixed default), else :data:`DTYPE_TOLERANCES` scaled by ``want``'s magnitude."""
    if rtol is not None or atol is not None:
        return (LEGACY_RTOL if rtol is None else rtol), (LEGACY_ATOL if atol is None else atol)
    dtype = np.asarray(want).dtype
    if dtype.name in DTYPE_TOLERANCES:
        relative = DTYPE_TOLERANCES[dtype.name]
    elif dtype.kind in "fc":        # complex: its part's float
        relative = DTYPE_TOLERANCES.get(np.finfo(dtype).dtype.name, (0.0, 0.0))
    else:
        return 0.0, 0.0
    return relative[0], relative[1] * output_scale(want)


def output_scale(want) -> float:
    """The largest finite magnitude of ``want``, at least :data:`SCALE_FLOOR`."""
    values = np.abs(np.asarray(want, dtype=np.complex128 if np.iscomplexobj(want) else np.float64))
    finite = values[np.isfinite(values)]
    return max(SCALE_FLOOR, float(finite.max())) if finite.size else SCALE_FLOOR


@dataclass
class OutputDiff:
    """One output against its reference: the largest absolute and relative errors, and the verdict."""

    name: str
    shape: tuple
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""


def compare_outputs(names: Sequence[str], got: Mapping[str, np.ndarray], want: Sequence[np.ndarray],
                    rtol: float | None = None, atol: float | None = None,
                    reference: str = "onnxruntime") -> list[OutputDiff]:
    """Each output in ``got`` against its ``want`` (in ``names`` order): shapes and dtypes equal, values
    within ``atol + rtol * |want|`` (see :func:`tolerance_for`; NaN matches NaN, an infinity itself;
    strings compare exactly)."""
    diffs = []
    for name, ref in zip(names, want):
        out = np.asarray(got[name])
        ref = np.asarray(ref)
        if out.shape != ref.shape or out.dtype != ref.dtype:
            diffs.append(OutputDiff(name, out.shape, np.inf, np.inf, False,
                                    f"got {out.dtype}{list(out.shape)}, {reference} {ref.dtype}{list(ref.shape)}"))
            continue
        if ref.dtype.kind in "OSU":
            same = out.tolist() == ref.tolist()
            diffs.append(OutputDiff(name, out.shape, 0.0 if same else np.inf, 0.0 if same else np.inf, same))
            continue
        r, t = tolerance_for(ref, rtol, atol)
        a, b = out.astype(np.float64), ref.astype(np.float64)
        both_nan = np.isnan(a) & np.isnan(b)
        err = np.where(both_nan, 0.0, np.abs(a - b))
        err = np.where(np.isinf(a) & (a == b), 0.0, err)
        max_abs = float(err.max()) if err.size else 0.0
        rel = err / np.maximum(np.abs(b), np.finfo(np.float64).tiny)
        max_rel = float(rel.max()) if rel.size else 0.0
        passed = bool(np.all(err <= t + r * np.abs(np.where(np.isnan(b), 0, b))))
        diffs.append(OutputDiff(name, out.shape, max_abs, max_rel, passed))
    return diffs


__all__ = ["DTYPE_TOLERANCES", "OutputDiff", "compare_outputs", "output_scale", "tolerance_for"]
