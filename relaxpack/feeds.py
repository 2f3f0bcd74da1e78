"""Inputs made for an archive: random (seeded), zeros or ones, at chosen dims.

``check`` and ``bench`` feed random inputs, ``run --fill`` fills the inputs
a user did not give. Numpy and :mod:`relaxpack.ir.dims` only (no onnx), so
this works in a runtime-only install.

>>> rng = np.random.default_rng(0)                                   # doctest: +SKIP
>>> feeds = make_inputs(exe, draw_dims(exe, rng, {"batch": 1}), rng)  # doctest: +SKIP
"""

from __future__ import annotations

from itertools import combinations
from math import prod
from typing import Mapping

import numpy as np

from .errors import InputError
from .ir.dims import evaluate, free_vars, parse_dim
from .runtime.dtypes import numpy_dtype

DEFAULT_DIM_RANGE = (1, 8)
#: ranges tried in turn for the dims nobody fixed, while a draw breaks the model's assumptions
#: (an image model whose sizes must be multiples of 32 holds none of 1..8); ``check`` also
#: widens while onnxruntime refuses the inputs
DRAW_RANGES = (DEFAULT_DIM_RANGE, (8, 48), (32, 96))
FILLS = ("random", "zeros", "ones")


def make_inputs(exe, dim_values: Mapping[str, int], rng: np.random.Generator, fill: str = "random",
                names=None) -> dict[str, np.ndarray]:
    """Inputs of ``exe``'s main function (those in ``names``, default all) at the given dim values:
    ``random`` (normal floats, small non-negative ints (below the rows of the embedding table an
    input indexes: :func:`table_rows`), a padding mask for an input named like a mask
    (:func:`padding_mask`), random bools and words), ``zeros`` or ``ones``."""
    if fill not in FILLS:
        raise InputError(f"unknown fill {fill!r}; use one of {', '.join(FILLS)}")
    shapes, maps = {}, {}
    for p in exe.function("main").params:
        if names is not None and p.name not in names:
            continue
        if p.kind == "map" and fill == "random":
            maps[p.name] = random_map(p.key_dtype, p.dtype, rng)
            continue
        if p.kind != "tensor" or p.shape is None:
            raise InputError(f"input {p.name!r} has no known shape; pass it explicitly")
        shapes[p] = tuple(d if isinstance(d, int) else _eval_dim(d, dim_values, p.name) for d in p.shape)
    _check_size(shapes)
    try:
        return {**_make(shapes, rng, fill, table_rows(exe) if fill == "random" else {}), **maps}
    except MemoryError:
        raise InputError("not enough memory for the inputs to make") from None


def _check_size(shapes: dict) -> None:
    """Inputs larger than :func:`~relaxpack.runtime.input_files.input_byte_limit` are an InputError
    (a 70000 x 70000 input was a MemoryError traceback)."""
    from .runtime.input_files import input_byte_limit
    total = sum(prod(shape) * (8 if p.dtype == "string" else numpy_dtype(p.dtype).itemsize)
                for p, shape in shapes.items())
    if total > input_byte_limit():
        raise InputError(f"inputs of shapes {', '.join(f'{p.name}{list(s)}' for p, s in shapes.items())} "
                         f"would take {total} bytes, more than half this machine's memory")


def table_rows(exe) -> dict[str, int]:
    """For each integer input of ``exe``'s main function that a ``take`` along axis 0 of a constant
    table reads as its indices (token ids, token type ids into their embeddings), the table's rows
    (the fewest, where several tables read it): random ids are drawn below them."""
    from .runtime.bytecode import CONST, IMM, REG, Call

    func = exe.function("main")
    names = {i: p.name for i, p in enumerate(func.params)
             if p.kind == "tensor" and p.dtype in ("int8", "int16", "int32", "int64", "uint8", "uint16")}
    rows: dict[str, int] = {}
    for ins in func.instructions:
        if not isinstance(ins, Call) or len(ins.args) != 2 or exe.func_table[ins.func].name != "take":
            continue
        (data_kind, data), (index_kind, index) = ins.args
        axis = dict(ins.kwargs).get("axis")
        if data_kind != CONST or index_kind != REG or index not in names or axis != (IMM, 0):
            continue
        table = exe.constants[data]
        if table.ndim and table.shape[0] > 0:
            name = names[index]
            rows[name] = min(rows.get(name, table.shape[0]), table.shape[0])
    return rows


def _make(shapes: dict, rng: np.random.Generator, fill: str, rows: Mapping[str, int]) -> dict[str, np.ndarray]:
    inputs = {}
    for p, shape in shapes.items():
        if p.dtype == "string":
            inputs[p.name] = random_strings(shape, rng) if fill == "random" else _strings(shape, fill)
            continue
        dtype = numpy_dtype(p.dtype)
        if fill != "random":
            inputs[p.name] = (np.zeros if fill == "zeros" else np.ones)(shape, dtype)
        elif dtype.kind in "fc":
            inputs[p.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iub" and _is_mask(p.name):
            inputs[p.name] = padding_mask(shape, rng).astype(dtype)
        elif dtype.kind in "iu":
            inputs[p.name] = rng.integers(0, min(8, rows.get(p.name, 8)), shape).astype(dtype)
        elif dtype.kind == "b":
            inputs[p.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise InputError(f"cannot make random values of dtype {p.dtype} for input {p.name!r}")
    return inputs


def padding_mask(shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """A mask as a tokenizer's padding makes it: along the last axis, a run of ones from the start
    (at least one) and zeros after it, each row's length drawn. Random 0/1 values would mask the
    first keys of some rows, which no right-padded input does, and a causal attention's first
    queries would then see no key (a slower path, and not what a benchmark should time)."""
    if not shape or not shape[-1]:
        return np.ones(shape, np.int64)
    lengths = rng.integers(1, shape[-1] + 1, shape[:-1])
    return (np.arange(shape[-1]) < np.asarray(lengths)[..., None]).astype(np.int64)


def _is_mask(name: str) -> bool:
    """An input named like a mask (``attention_mask``, ``pixel_mask``) holds 0 or 1: a float16
    model computes ``(1 - mask) * -65504``, which overflows to -inf for a mask of 2..7."""
    return "mask" in name.lower()


def random_inputs(exe, dim_values: Mapping[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs for ``exe``'s main function at the given dim values."""
    return make_inputs(exe, dim_values, rng, "random")


#: the characters of random strings: letters of two cases, digits, a space and a non-ASCII letter
_STRING_CHARS = np.array(list("abcdefgxyzABCXYZ0123456789 \u00e9"))


def random_strings(shape, rng: np.random.Generator, max_len: int = 6) -> np.ndarray:
    """An object array of ``shape`` holding random words of 0..``max_len``
    characters. Models that need particular strings (numbers to parse,
    label keys) need explicit inputs."""
    lengths = rng.integers(0, max_len + 1, int(np.prod(shape, dtype=np.int64)))
    out = np.empty(lengths.size, dtype=object)
    out[:] = ["".join(rng.choice(_STRING_CHARS, n)) for n in lengths.tolist()]
    return out.reshape(shape)


def random_map(key_dtype: str, dtype: str, rng: np.random.Generator, max_len: int = 4) -> dict:
    """A dict of 1..``max_len`` entries: int keys 0..7 or random words, values as
    :func:`make_inputs` draws them. Models that read particular keys (a
    DictVectorizer's vocabulary) need explicit inputs to see them."""
    count = int(rng.integers(1, max_len + 1))
    keys = random_strings((count,), rng).tolist() if key_dtype == "string" else rng.integers(0, 8, count).tolist()
    if dtype == "string":
        values = random_strings((len(keys),), rng).tolist()
    elif numpy_dtype(dtype).kind in "iu":
        values = rng.integers(0, 8, len(keys)).astype(numpy_dtype(dtype)).tolist()
    else:
        values = rng.standard_normal(len(keys)).astype(numpy_dtype(dtype)).tolist()
    return dict(zip(keys, values))


def _strings(shape, fill: str) -> np.ndarray:
    """Empty strings for ``zeros``, "1" for ``ones``."""
    out = np.empty(shape, dtype=object)
    out[...] = "" if fill == "zeros" else "1"
    return out


def _eval_dim(text: str, values: Mapping[str, int], input_name: str | None = None) -> int:
    try:
        return evaluate(parse_dim(text), values)
    except Exception as err:   # a dim no --dim and no range gave a value
        where = f" of input {input_name!r}" if input_name else ""
        raise InputError(f"cannot size dim {text!r}{where}: {err}; give its value with --dim NAME=VALUE") from None


def input_dim_names(exe) -> set[str]:
    """The symbolic dim names used by main's input shapes."""
    names = set()
    for p in exe.function("main").params:
        for d in p.shape or ():
            if isinstance(d, str):
                names |= free_vars(parse_dim(d))
    return names


def dims_of_inputs(exe, feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Dim values that given inputs fix: an input whose dim is a plain name gives that name its size."""
    values: dict[str, int] = {}
    for p in exe.function("main").params:
        value = feeds.get(p.name)
        if p.shape is None or value is None or np.ndim(value) != len(p.shape):
            continue
        for d, size in zip(p.shape, np.shape(value)):
            if isinstance(d, str) and d.isidentifier():
                values.setdefault(d, int(size))
    return values


#: Draws of the dims tried for values that hold the model's assumptions.
ASSUMPTION_DRAWS = 200


def dim_ranges(exe) -> dict[str, tuple[int, int | None]]:
    """The archive's range of each ranged dim of ``main``: ``{name: (lo, hi)}`` (hi None: unbounded)."""
    return {name: (lo, hi) for name, lo, hi in exe.function("main").dim_ranges}


def draw_dims(exe, rng: np.random.Generator, fixed: Mapping | None = None) -> dict[str, int]:
    """A value for every symbolic dim of main's inputs, within its range, that
    holds the relations the model was converted assuming (``h % 8 < 4``):
    other values fail in onnxruntime too. Redrawn a bounded number of times;
    the last draw when none holds them. ``fixed`` gives a dim its value (an
    int) or the range to draw it from (a ``(lo, hi)`` pair, ``hi`` may be None)."""
    relations = _input_relations(exe)
    # a dim a relation sets to a number takes it, drawn from no range (a user's value stays)
    fixed = {**{k: v for k, v in (fixed or {}).items() if v != "?"},
             **{k: v for k, v in _pinned(relations).items() if not isinstance((fixed or {}).get(k), int)}}
    values = _draw_once(exe, rng, fixed)
    for _ in range(ASSUMPTION_DRAWS):
        if _hold(relations, values):
            break
        values = _draw_once(exe, rng, fixed)
    return values


def widening_draws(exe, rng: np.random.Generator, fixed: Mapping | None = None):
    """:func:`draw_dims` with the dims ``fixed`` does not name drawn from each of
    :data:`DRAW_RANGES` in turn (once when it names them all), up to the first range the
    archive's own dim ranges exclude; then, with two or more such dims, all of them given one
    value drawn from each range within all their archive ranges (two inputs whose batches the model
    names apart); then all of them each of :data:`ROUND_DIMS` (:func:`_round_draws`); then, with
    three or more, one of them the sum of two others (:func:`_sum_draws`). A range wholly below a
    dim's archive range (built with ``--dim h=32..128``) starts at its lowest value instead."""
    fixed = dict(fixed or {})
    free = sorted(input_dim_names(exe) - set(fixed))
    ranges = dim_ranges(exe)
    yield from _ranged_draws(exe, rng, fixed, free, ranges)
    yield from _round_draws(exe, rng, fixed, free, ranges)
    yield from _sum_draws(exe, rng, fixed, free, ranges)


def _ranged_draws(exe, rng: np.random.Generator, fixed: dict, free: list, ranges: dict):
    """:func:`widening_draws`' draws from :data:`DRAW_RANGES`."""
    for attempt, (lo, hi) in enumerate(DRAW_RANGES):
        try:
            yield draw_dims(exe, rng, {**{name: _above(lo, hi, ranges.get(name, (None,))[0]) for name in free},
                                       **fixed})
        except InputError:      # outside the archive's ranges: those are the user's
            if attempt == 0:
                raise
            break
        if not free:
            return
    if len(free) < 2:
        return
    floor = max(ranges.get(name, (0, None))[0] for name in free)
    ceilings = [ranges[name][1] for name in free if name in ranges and ranges[name][1] is not None]
    for lo, hi in DRAW_RANGES:  # then all of them one value: paddle2onnx names each input's batch apart
        lo, hi = _above(lo, hi, floor)      # within every dim's range: a value outside one is refused
        lo, hi = max(lo, floor), min([hi, *ceilings])
        if hi < lo:
            return
        value = int(rng.integers(lo, hi + 1))
        try:
            yield draw_dims(exe, rng, {**dict.fromkeys(free, value), **fixed})
        except InputError:
            return


#: the values every free dim takes together in the last draws: a sequence padded, windowed or
#: chunked to a multiple of 8 (Longformer/LED windows, Mamba2 chunks refuse 95 or 69 tokens)
ROUND_DIMS = (16, 32, 64, 8)


def _round_draws(exe, rng: np.random.Generator, fixed: dict, free: list, ranges: dict):
    """:func:`widening_draws`' last draws: every free dim one value of :data:`ROUND_DIMS` that
    lies in all their archive ranges, the lengths real inputs often come in, where the random
    lengths before may all have broken a model's reshapes."""
    for value in ROUND_DIMS:
        if not free or _outside(dict.fromkeys(free, value), ranges):
            continue
        try:
            yield draw_dims(exe, rng, {**dict.fromkeys(free, value), **fixed})
        except InputError:
            continue


#: at most this many of :func:`_sum_draws` (four free dims make 12, five 30)
SUM_DRAWS = 36


def _sum_draws(exe, rng: np.random.Generator, fixed: dict, free: list, ranges: dict):
    """:func:`widening_draws`' last resort: one free dim the sum of two others drawn from
    :data:`DEFAULT_DIM_RANGE`, the rest drawn as ever. A decoder exported with its past keys and
    values takes an attention mask over the past and the new tokens: ``total_sequence`` must be
    ``past_sequence + sequence``, which no shape in the graph says (GPT-2's positions come from
    the mask; onnxruntime refuses every other draw). Values outside a dim's archive range are not
    drawn."""
    if len(free) < 3:
        return
    combos = [(total, a, b) for total in free for a, b in combinations([n for n in free if n != total], 2)]
    for total, a, b in combos[:SUM_DRAWS]:
        values = dict(zip((a, b), (int(v) for v in rng.integers(1, DEFAULT_DIM_RANGE[1] + 1, 2))))
        values[total] = values[a] + values[b]
        if _outside(values, ranges):
            continue
        try:
            yield draw_dims(exe, rng, {**values, **fixed})
        except InputError:
            continue


def _outside(values: dict, ranges: dict) -> bool:
    """Whether a dim's value lies outside its archive range (``ranges``; a dim without one: 0..)."""
    return any(v < lo or (hi is not None and v > hi)
               for v, (lo, hi) in ((v, ranges.get(name, (0, None))) for name, v in values.items()))


def _above(lo: int, hi: int, floor: int | None) -> tuple[int, int]:
    """The draw range ``lo..hi`` moved up to start at the archive's lowest value of a dim when
    it lies wholly below it (a dim built as ``--dim h=32..128`` is drawn from 32..39 first, not
    refused for lying outside 1..8); else as it is (the archive's range clips it)."""
    if floor is not None and hi < floor:
        return floor, floor + hi - lo
    return lo, hi


def draw_dims_holding(exe, rng: np.random.Generator, fixed: Mapping | None = None) -> dict[str, int]:
    """The first of :func:`widening_draws` that holds the model's assumptions; an InputError
    naming them and ``--dim`` when none does (``run --fill``, ``bench``)."""
    for values in widening_draws(exe, rng, fixed):
        if assumptions_hold(exe, values):
            return values
    free = input_dim_names(exe) - set(fixed or {})
    from .runtime.assumptions import assumptions_of
    broken = "; ".join(dict.fromkeys(a["condition"] for a in assumptions_of(exe)
                                     if a["function"] == "main" and a["when"] == "inputs"))
    raise InputError(f"no dims drawn for {', '.join(sorted(free))} hold what the model assumes ({broken}); "
                     f"give them with --dim NAME=VALUE")


def _pinned(relations: list[tuple[str, str]]) -> dict[str, int]:
    """The input dims a relation sets to a number (``num_channels == 3``: the first Conv's
    weight fixes the channels an export left symbolic)."""
    pins: dict[str, int] = {}
    for lhs, rhs in relations:
        for name, value in ((lhs, rhs), (rhs, lhs)):
            if name.isidentifier() and value.lstrip("-").isdigit():
                pins[name] = int(value)
    return pins


def assumptions_hold(exe, values: Mapping[str, int]) -> bool:
    """Whether the dim ``values`` hold the relations over main's input dims
    that the model was converted assuming (else the run is refused)."""
    return _hold(_input_relations(exe), values)


def _input_relations(exe) -> list[tuple[str, str]]:
    from .runtime.assumptions import assumptions_of
    return [(a["lhs"], a["rhs"]) for a in assumptions_of(exe) if a["function"] == "main" and a["when"] == "inputs"]


def _hold(relations: list[tuple[str, str]], values: Mapping[str, int]) -> bool:
    return all(_eval_dim(lhs, values) == _eval_dim(rhs, values) for lhs, rhs in relations)


def _draw_once(exe, rng: np.random.Generator, fixed: Mapping | None) -> dict[str, int]:
    ranges = dim_ranges(exe)
    known = input_dim_names(exe)
    unknown = sorted({k for k, v in (fixed or {}).items() if v != "?"} - known)
    if unknown:
        raise InputError(f"dims {unknown} do not name any dim of the inputs (their dims are "
                         f"{sorted(known) or 'all static'})")
    values = {}
    for name, spec in (fixed or {}).items():
        if isinstance(spec, tuple):     # within the archive's range
            (lo, hi), (want_lo, want_hi) = ranges.get(name, (0, None)), spec
            lo, hi = max(lo, want_lo), want_hi if hi is None else (hi if want_hi is None else min(hi, want_hi))
            if hi is not None and hi < lo:
                raise InputError(f"dim {name}: the range {want_lo}..{'' if want_hi is None else want_hi} "
                                 f"lies outside the archive's {ranges.get(name)}")
            ranges[name] = (lo, hi)
        elif isinstance(spec, int):
            values[name] = spec         # (a "?" from --dim N=? concerns the import only)
    for name in sorted(known - set(values)):
        lo, hi = ranges.get(name, DEFAULT_DIM_RANGE)
        lo = max(lo, DEFAULT_DIM_RANGE[0]) if hi is None else lo
        hi = hi if hi is not None else max(lo, DEFAULT_DIM_RANGE[1])
        values[name] = int(rng.integers(lo, hi + 1))
    return values


__all__ = ["ASSUMPTION_DRAWS", "DEFAULT_DIM_RANGE", "DRAW_RANGES", "FILLS", "assumptions_hold", "dim_ranges",
           "dims_of_inputs", "draw_dims", "draw_dims_holding", "input_dim_names", "make_inputs", "random_inputs",
           "random_strings", "widening_draws"]
