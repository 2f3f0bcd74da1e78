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


def tolerance_for(want: np.ndarray, rtol: float | None = None, atol: float | None = None,
                  precision: str | None = None) -> tuple[float, float]:
    """(rtol, absolute atol) for comparing with ``want``: as given when either is given (the
    other keeping its fixed default), else :data:`DTYPE_TOLERANCES` scaled by ``want``'s magnitude.
    ``precision`` names the float dtype ``want`` was computed in where that is coarser than its
    own (a float32 output cast from float16): that dtype's tolerance then."""
    if rtol is not None or atol is not None:
        return (LEGACY_RTOL if rtol is None else rtol), (LEGACY_ATOL if atol is None else atol)
    dtype = np.asarray(want).dtype
    if precision in DTYPE_TOLERANCES and dtype.name in DTYPE_TOLERANCES:
        coarser = max(DTYPE_TOLERANCES[precision], DTYPE_TOLERANCES[dtype.name])
        return coarser[0], coarser[1] * output_scale(want)
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
    """One output against its reference: the largest absolute and relative errors, and the verdict.
    The relative error is taken against the output's absolute tolerance where
    the reference is smaller (a 1e-8 error on a 1e-300 value is not 1e292)."""

    name: str
    shape: tuple
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""


def compare_outputs(names: Sequence[str], got: Mapping[str, np.ndarray], want: Sequence[np.ndarray],
                    rtol: float | None = None, atol: float | None = None,
                    reference: str = "onnxruntime", precisions: Mapping[str, str] | None = None) -> list[OutputDiff]:
    """Each output in ``got`` against its ``want`` (in ``names`` order): shapes and dtypes equal, values
    within ``atol + rtol * |want|`` (see :func:`tolerance_for`, given ``precisions[name]``; NaN matches
    NaN, an infinity itself; strings compare exactly)."""
    diffs = []
    for name, ref in zip(names, want):
        if is_maps(ref):
            diffs.append(compare_maps(name, got[name], ref, rtol, atol, reference))
            continue
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
        r, t = tolerance_for(ref, rtol, atol, (precisions or {}).get(name))
        a, b = out.astype(np.float64), ref.astype(np.float64)
        both_nan = np.isnan(a) & np.isnan(b)
        with np.errstate(invalid="ignore", over="ignore"):      # inf - inf: NaN, handled below
            err = np.where(both_nan, 0.0, np.abs(a - b))
            err = np.where(np.isinf(a) & (a == b), 0.0, err)
            max_abs = float(err.max()) if err.size else 0.0
            rel = err / np.fmax(np.abs(b), max(t, np.finfo(np.float64).tiny))   # fmax: NaN in both is 0 apart
            max_rel = float(rel.max()) if rel.size else 0.0
            passed = bool(np.all(err <= t + r * np.abs(np.where(np.isnan(b), 0, b))))
        diffs.append(OutputDiff(name, out.shape, max_abs, max_rel, passed))
    return diffs


def is_maps(value) -> bool:
    """Whether ``value`` is a map output: a dict, or a list (tuple) of dicts (ZipMap's)."""
    return isinstance(value, Mapping) or (isinstance(value, (list, tuple)) and len(value) > 0
                                          and all(isinstance(v, Mapping) for v in value))


def compare_maps(name: str, got, want, rtol: float | None = None, atol: float | None = None,
                 reference: str = "onnxruntime") -> OutputDiff:
    """A map output (a dict, or a list of dicts) against its reference: as many maps, the same keys
    in the same order, and each value within ``atol + rtol * |want|`` (strings exactly; the default
    tolerance is float32's, the dtype of maps' values). The diff's shape is the number of maps."""
    refs = [want] if isinstance(want, Mapping) else list(want)
    numbers = np.array([v for m in refs for v in m.values() if not isinstance(v, str)], np.float32)
    rtol, atol = tolerance_for(numbers, rtol, atol)
    if isinstance(got, Mapping):
        outs = [got]
    elif isinstance(got, (list, tuple)) and all(isinstance(v, Mapping) for v in got):
        outs = list(got)
    else:
        return OutputDiff(name, np.shape(got), np.inf, np.inf, False,
                          f"got a {type(got).__name__}, {reference} {len(refs)} map(s)")
    if len(outs) != len(refs):
        return OutputDiff(name, (len(outs),), np.inf, np.inf, False,
                          f"got {len(outs)} maps, {reference} {len(refs)}")
    max_abs = max_rel = 0.0
    passed = True
    for i, (out, ref) in enumerate(zip(outs, refs)):
        if list(out) != list(ref):
            return OutputDiff(name, (len(outs),), np.inf, np.inf, False,
                              f"map {i} has keys {list(out)[:8]}, {reference} {list(ref)[:8]}")
        for key in ref:
            a, b = out[key], ref[key]
            if isinstance(b, str) or isinstance(a, str):
                same = a == b
                max_abs, passed = (max_abs, passed) if same else (np.inf, False)
                continue
            err = abs(float(a) - float(b))
            if np.isnan(float(a)) and np.isnan(float(b)):
                err = 0.0
            max_abs = max(max_abs, err)
            max_rel = max(max_rel, err / max(abs(float(b)), np.finfo(np.float64).tiny))
            passed &= bool(err <= atol + rtol * abs(float(b)))
    return OutputDiff(name, (len(outs),), max_abs, max_rel, passed)


__all__ = ["DTYPE_TOLERANCES", "OutputDiff", "compare_maps", "compare_outputs", "is_maps", "output_scale",
           "tolerance_for"]
