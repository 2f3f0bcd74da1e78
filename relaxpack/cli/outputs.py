"""Outputs as ``relaxpack run`` shows and saves them: tensors, sequences, empty optionals, maps.

A sequence output is a list of arrays of possibly different shapes (numpy
cannot make one array of them): it is shown element by element and saved
as ``NAME.0``, ``NAME.1``, ... in the ``.npz``; an empty optional (``None``)
is shown as such and not saved. Maps (a DictVectorizer's input, a ZipMap's
list of dicts) are shown by their first entries; an ``.npz`` cannot hold
them (``run --output`` refuses them).
"""

from __future__ import annotations

import numpy as np

from .terminal import one_line

#: the output kinds that are maps (runtime/maps.py)
MAP_KINDS = ("map", "sequence_map")


def preview(array: np.ndarray, limit: int = 6) -> str:
    flat = np.asarray(array).reshape(-1)
    items = ", ".join(np.format_float_positional(v, precision=4, trim="-") if flat.dtype.kind == "f"
                      else one_line(v) for v in flat[:limit])
    return f"[{items}{', ...' if flat.size > limit else ''}]"


def value_text(value, kind: str = "tensor") -> str:
    """``float32[2, 3]``, ``map`` or ``3 maps``: what a value of ``kind`` is, in a few characters."""
    if kind == "map" or isinstance(value, dict):
        return "map"
    if kind == "sequence_map":
        return f"{len(value)} map{'' if len(value) == 1 else 's'}"
    value = np.asarray(value)
    return f"{value.dtype}{list(value.shape)}"


def preview_maps(value, limit: int = 4) -> str:
    """The first map's first entries: ``{0: 0.275, 1: 0.681, ...}``; ``[]`` for no maps."""
    if not value:
        return "{}" if isinstance(value, dict) else "[]"
    first = value if isinstance(value, dict) else value[0]
    items = [f"{one_line(repr(k))}: "
             f"{np.format_float_positional(v, precision=4, trim='-') if isinstance(v, float) else one_line(repr(v))}"
             for k, v in list(first.items())[:limit]]
    return "{" + ", ".join(items) + (", ...}" if len(first) > limit else "}")


def output_lines(name: str, value, kind: str = "tensor") -> list[str]:
    """The lines that show output ``name``, a value of ``kind`` (the signature's)."""
    label = one_line(name)
    if kind in MAP_KINDS:
        return [f"{label}: {value_text(value, kind)} {preview_maps(value)}"]
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


__all__ = ["MAP_KINDS", "output_arrays", "output_lines", "preview", "preview_maps", "value_text"]
