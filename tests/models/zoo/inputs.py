"""Seeded inputs for a zoo model at one concrete shape, from its manifest entry.

numpy only: the generator (which checks each export against torch) and the
test (which compares relaxpack with onnxruntime) make the same inputs.

An input entry is ``{"name", "dtype", "shape", "values", ...}``: ``shape``
lists ints and dim names; ``values`` is ``normal`` (standard normal),
``tokens`` (ints in ``[0, high)``, e.g. ids below the vocab size) or ``mask``
(0/1 with at least one 1 per row: the first position is always 1, as a
left-aligned padded batch is) or ``positions`` (``offset + 0, 1, ...`` along
the last axis, ``offset`` the value of the dim that ``spec["offset"]`` names:
position ids after a KV cache of that length) or ``dim`` (the value of the
dim that ``spec["dim"]`` names, e.g. a sample rate that selects a branch).
An input of ``"kind": "map"`` is a dict (a DictVectorizer's): ``shape`` is
``[dim]``, the number of entries, drawn from ``keys``.
"""

from __future__ import annotations

import zlib
from typing import Mapping

import numpy as np


def concrete_shape(shape, dims: Mapping[str, int]) -> tuple[int, ...]:
    """``shape`` with every dim name replaced by its value in ``dims``."""
    return tuple(d if isinstance(d, int) else dims[d] for d in shape)


def make_input(spec: Mapping, dims: Mapping[str, int], rng: np.random.Generator) -> np.ndarray | dict:
    if spec.get("kind") == "map":
        return make_map(spec, dims, rng)
    shape = concrete_shape(spec["shape"], dims)
    dtype = np.dtype(spec["dtype"])
    kind = spec.get("values", "normal")
    if kind == "normal":
        return (rng.standard_normal(shape) * spec.get("scale", 1.0)).astype(dtype)
    if kind == "tokens":
        return rng.integers(spec.get("low", 0), spec["high"], shape).astype(dtype)
    if kind == "mask":
        mask = rng.integers(0, 2, shape)
        mask[..., 0] = 1
        return mask.astype(dtype)
    if kind == "dim":
        return np.full(shape, dims[spec["dim"]], dtype)
    if kind == "positions":
        start = dims[spec["offset"]] if "offset" in spec else 0
        return np.broadcast_to(start + np.arange(shape[-1]), shape).astype(dtype)
    raise ValueError(f"input {spec['name']!r}: unknown values kind {kind!r}")


def make_map(spec: Mapping, dims: Mapping[str, int], rng: np.random.Generator) -> dict:
    """A dict of ``shape[0]`` entries (its dim's value) over ``spec["keys"]`` in a seeded order,
    standard normal values as Python floats (onnxruntime rounds them to the map's float32)."""
    count, = concrete_shape(spec["shape"], dims)
    keys = [spec["keys"][i] for i in rng.permutation(len(spec["keys"]))[:count]]
    return dict(zip(keys, (rng.standard_normal(count) * spec.get("scale", 1.0)).tolist()))


def make_inputs(entry: Mapping, dims: Mapping[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """The inputs of ``entry`` at ``dims``; the same model, dims and seed give the same arrays."""
    key = f"{entry['name']}:{sorted(dims.items())}:{seed}".encode()
    rng = np.random.default_rng(zlib.crc32(key))
    return {spec["name"]: make_input(spec, dims, rng) for spec in entry["inputs"]}
