"""Outputs never share memory with the caller's inputs or the archive's constants.

``Identity(x)``, a Reshape done as a view, an output that is an input or a
constant: the bytecode may hand back an array that is (a view of) an input
or a constant. onnxruntime returns a copy there, and a caller who writes
into an output must not change its input or the model. The check is one
byte-range comparison per output against each input and (by bisection)
against the merged byte ranges of the constants; only an output that
overlaps is copied, so the common case costs no copy.

>>> detach = OutputDetacher(exe.constants)            # doctest: +SKIP
>>> result = detach(result, args)                     # doctest: +SKIP
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np

from .bytecode import IMM, NO_DST, REG, Call, Ret
from .maps import CheckedMap, PlainMaps


def byte_range(a: np.ndarray) -> tuple[int, int]:
    """``[lo, hi)``: the bytes ``a``'s elements span in memory (a non-empty array)."""
    lo = hi = a.__array_interface__["data"][0]
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            lo += s * (n - 1)
        else:
            hi += s * (n - 1)
    return lo, hi + a.itemsize


class OutputDetacher:
    """Copies outputs that overlap an input, a constant or an earlier output."""

    def __init__(self, constants):
        ranges = sorted(byte_range(c) for c in constants if isinstance(c, np.ndarray) and c.size)
        merged: list[list[int]] = []
        for lo, hi in ranges:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._starts = [lo for lo, _ in merged]
        self._ends = [hi for _, hi in merged]
        #: the numpy arrays that own the constants' memory (a constant, or the array it views):
        #: the only arrays owning their memory that share some with a constant
        self._owners = {id(c) if c.base is None else id(c.base) for c in constants
                        if isinstance(c, np.ndarray) and (c.base is None or type(c.base) is np.ndarray)}

    def __call__(self, result, args):
        if self._owned_apart(result, args):
            return result
        if all(type(a) is np.ndarray for a in args):
            inputs = [a for a in args if a.size]
        else:
            inputs = [a for a in _arrays(args) if a.size]
        if type(result) is np.ndarray:      # one output: nothing earlier to compare with
            return self._detached(result, inputs, [])
        seen: list[np.ndarray] = []
        return _map(result, lambda a: self._detached(a, inputs, seen))

    def _owned_apart(self, result, args) -> bool:
        """The common case, decided without byte ranges: each output (``result`` or a tuple of
        them) is an array owning its memory or a view of one (numpy points a view's ``base``
        straight at the owning array), no two outputs share an owner, no owner holds a
        constant, and every input is an owner or a view of one that no output has. Arrays
        share memory only with arrays of the same owner, so nothing overlaps. A
        :class:`PlainMaps` output (ZipMap's fresh dicts of Python scalars) and a :class:`CheckedMap`
        input (``as_map_input``'s numpy scalars) hold no array. False:
        ask the full check (a base numpy does not own, such as a mapped file, and everything else)."""
        outputs = (result,) if type(result) is np.ndarray else result
        if type(outputs) is not tuple:
            return False
        owners, mine = self._owners, set()
        for o in outputs:
            if type(o) is not np.ndarray:
                if type(o) is PlainMaps:
                    continue
                return False
            owner = _owner(o)
            if owner is None or id(owner) in owners or id(owner) in mine:
                return False
            mine.add(id(owner))
        for a in args:
            if type(a) is CheckedMap:           # numpy scalars and strs: no array to share
                continue
            owner = _owner(a) if type(a) is np.ndarray else None
            if owner is None or id(owner) in mine:
                return False
        return True

    def _detached(self, a: np.ndarray, inputs: list, seen: list) -> np.ndarray:
        if a.size and (self._in_constants(a) or any(_overlap(a, x) for x in inputs)
                       or any(_overlap(a, s) for s in seen)):
            a = a.copy()
        seen.append(a)
        return a

    def _in_constants(self, a: np.ndarray) -> bool:
        if not self._starts:
            return False
        if a.base is None:      # its own allocation: in the constants only if it is one
            return id(a) in self._owners
        lo, hi = byte_range(a)
        i = bisect_left(self._starts, hi) - 1   # the last range starting before a's end
        return i >= 0 and self._ends[i] > lo


#: what makes a new value on every call that holds no array of anyone else's: an allocation,
#: ZipMap's fresh dicts of Python scalars (function-table labels)
FRESH_MAKERS = frozenset({"vm.builtin.alloc_tensor", "packed.ml.zip_map"})


def fresh_returns(instrs, labels: dict, num_params: int) -> bool:
    """Whether the bytecode alone shows that every value the function returns is one its own
    ``alloc_tensor`` (or ZipMap, :data:`FRESH_MAKERS`) made during the call, or a flat tuple of
    such values from different registers: then no output shares memory with an input, a
    constant or another output, and the detacher has nothing to look at. ``labels[pc]``: the
    function-table label of the builtin or packed function instruction ``pc`` calls (absent for
    anything else). Each register holding an output must be written only by those (every value
    it ever holds is new); a field of the tuple a kernel wrote into (``make_tuple`` then
    ``tuple_getitem`` of an immediate index, each register written once) is the register it
    was made from."""
    writers: dict[int, list[int]] = {}
    for pc, ins in enumerate(instrs):
        if isinstance(ins, Call) and ins.dst != NO_DST:
            writers.setdefault(ins.dst, []).append(pc)

    def only(reg: int, name: str):
        """The one instruction writing ``reg``, when it calls the builtin ``name``."""
        pcs = writers.get(reg, ())
        if reg < num_params or len(pcs) != 1 or labels.get(pcs[0]) != name:
            return None
        return instrs[pcs[0]]

    def allocated(reg: int) -> bool:
        pcs = writers.get(reg, ())
        return reg >= num_params and bool(pcs) and all(
            labels.get(pc) in FRESH_MAKERS for pc in pcs)

    def source(reg: int):
        """The register written only by alloc_tensor whose array ``reg`` holds, or None."""
        if allocated(reg):
            return reg
        get = only(reg, "vm.builtin.tuple_getitem")
        if get is None or len(get.args) != 2 or get.kwargs or get.args[0][0] != REG or get.args[1][0] != IMM:
            return None
        made, index = only(get.args[0][1], "vm.builtin.make_tuple"), get.args[1][1]
        if made is None or made.kwargs or type(index) is not int or not 0 <= index < len(made.args):
            return None
        kind, field = made.args[index]
        return field if kind == REG and allocated(field) else None

    def fresh(reg: int) -> bool:
        if allocated(reg):
            return True
        made = only(reg, "vm.builtin.make_tuple")
        if made is None or made.kwargs or any(kind != REG for kind, _ in made.args):
            return False
        regs = [source(r) for _, r in made.args]
        return None not in regs and len(set(regs)) == len(regs)

    rets = [ins.src for ins in instrs if isinstance(ins, Ret)]
    return bool(rets) and all(fresh(r) for r in rets)


def _owner(a: np.ndarray):
    """The numpy array that owns ``a``'s memory (``a`` or its base), or None when that is not
    plain: a base that is no array, or an array that does not own its data."""
    base = a.base
    if base is None:
        return a if a.flags.owndata else None
    if type(base) is np.ndarray and base.base is None and base.flags.owndata:
        return base
    return None


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` may share memory; two arrays that own theirs share only if one."""
    if a is b:
        return True
    if a.base is None and b.base is None:
        return False
    return np.may_share_memory(a, b)


def _arrays(value):
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _arrays(item)


def _map(value, fn):
    """``value`` with ``fn`` applied to its arrays; a tuple none of whose items changed is kept as
    it is (its class too: as_map_output takes a PlainMaps as it is), and a PlainMaps (fresh dicts
    of Python scalars) holds no array to look at."""
    if isinstance(value, np.ndarray):
        return fn(value)
    if isinstance(value, tuple) and type(value) is not PlainMaps:
        items = [_map(item, fn) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else tuple(items)
    return value


__all__ = ["FRESH_MAKERS", "OutputDetacher", "byte_range", "fresh_returns"]
