"""Outputs as ``relaxpack run`` shows and saves them: tensors, sequences, empty optionals.

A sequence output is a list of arrays of possibly different shapes (numpy
cannot make one array of them): it is shown element by element and saved
as ``NAME.0``, ``NAME.1``, ... in the ``.npz``; an empty optional (``None``)
is shown as such and not saved.
"""

from __future__ import annotations

import numpy as np

from .terminal import one_line


def preview(array: np.ndarray, limit: int = 6) -> str:
    flat = np.asarray(array).reshape(-1)
    items = ", ".join(np.format_float_positional(v, precision=4, trim="-") if flat.dtype.kind == "f"
                      else one_line(v) for v in flat[:limit])
    return f"[{items}{', ...' if flat.size > limit else ''}]"


def output_lines(name: str, value) -> list[str]:
    """The lines that show output ``name``."""
    label = one_line(name)
    if value is None:
        return [f"{label}: empty optional"]
    if isinstance(value, (list, tuple)):
        lines = [f"{label}: sequence of {len(value)}"]
        for i, item in enumerate(value):
            lines += ["  " + line for line in output_lines(f"[{i}]", item)]
        return lines
    array = np.asarray(value)
    return [f"{label}: {array.dtype}{list(array.shape)} {preview(array)}"]


def output_arrays(outputs: dict) -> dict[str, np.ndarray]:
    """The arrays to save: sequences as ``NAME.0``, ``NAME.1``, ..., empty optionals left out."""
    arrays: dict[str, np.ndarray] = {}

    def add(name: str, value) -> None:
        if value is None:
            return
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add(f"{name}.{i}", item)
            return
        arrays[name] = np.asarray(value)
    for name, value in outputs.items():
        add(name, value)
    return arrays


__all__ = ["output_arrays", "output_lines", "preview"]
