"""Comparing outputs with reference values within tolerances.

``check`` compares relaxpack with onnxruntime, ``run --expected`` with a
saved ``.npz``; numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


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
                    rtol: float, atol: float, reference: str = "onnxruntime") -> list[OutputDiff]:
    """Each output in ``got`` against its ``want`` (in ``names`` order): shapes and dtypes equal, values
    within ``atol + rtol * |want|`` (NaN matches NaN, an infinity itself; strings compare exactly)."""
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
        a, b = out.astype(np.float64), ref.astype(np.float64)
        both_nan = np.isnan(a) & np.isnan(b)
        err = np.where(both_nan, 0.0, np.abs(a - b))
        err = np.where(np.isinf(a) & (a == b), 0.0, err)
        max_abs = float(err.max()) if err.size else 0.0
        rel = err / np.maximum(np.abs(b), np.finfo(np.float64).tiny)
        max_rel = float(rel.max()) if rel.size else 0.0
        passed = bool(np.all(err <= atol + rtol * np.abs(np.where(np.isnan(b), 0, b))))
        diffs.append(OutputDiff(name, out.shape, max_abs, max_rel, passed))
    return diffs


__all__ = ["OutputDiff", "compare_outputs"]
