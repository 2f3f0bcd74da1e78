"""A function's inputs and outputs by name, as :meth:`VirtualMachine.run <.vm.VirtualMachine.run>`
takes and returns them: what its fast path needs of a function, worked out once per VM.

A tiny model's whole run is ~8 us, so each step here is one C call where it can be: the inputs by
one ``itemgetter`` of the names, the outputs by one dict display made once per output count.

>>> namer(("label", "probabilities"), ("tensor", "tensor"))((1, 2))
{'label': 1, 'probabilities': 2}
"""

from __future__ import annotations

import functools
import operator
from typing import Callable, Mapping

from .bytecode import VMFunction
from .containers import as_output, as_output_is_identity


class Signature:
    """What ``run`` needs of a function on its fast path (inputs a dict with exactly its names)."""

    __slots__ = ("names", "params", "index", "outputs", "single", "kinds", "arrays", "take", "named")

    def __init__(self, func: VMFunction, index: int):
        self.names = tuple(p.name for p in func.params)
        self.params = tuple(func.params)
        self.index = index
        self.outputs = tuple(func.outputs or ("output",))
        self.single = len(self.outputs) == 1
        self.kinds = tuple(func.attrs.get("output_kinds") or ("tensor",) * len(self.outputs))
        #: every input a numeric tensor: a numpy array passes to the function as it is (_as_value)
        self.arrays = all(p.kind == "tensor" and p.dtype != "string" for p in self.params)
        #: the inputs, in order, from the dict (a tuple; KeyError for a missing name)
        self.take = taker(self.names)
        #: the outputs by name from the returned values (a tuple of len(outputs)), as_output's
        self.named = namer(self.outputs, self.kinds)


def taker(names: tuple[str, ...]) -> Callable[[Mapping], tuple]:
    """``take(inputs)``: ``tuple(inputs[n] for n in names)`` by one C call (a list display was
    ~0.2 us of a tiny model's ~8 us run)."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    if names:
        name, = names
        return lambda inputs: (inputs[name],)
    return lambda inputs: ()


@functools.lru_cache(maxsize=64)
def _named_display(count: int, converted: tuple[int, ...]) -> Callable:
    """``make(*names, *converters)`` -> ``named(values)``: the dict ``dict(zip(names, values))`` as
    one dict display over the unpacked values (keys in order, a repeated name's last value at its
    first place: the same dict, at a third of zip's cost on two outputs), the values at positions
    ``converted`` passed through their converter (in order). Only numbers go into the source."""
    keys, values = [f"k{i}" for i in range(count)], [f"v{i}" for i in range(count)]
    converters = [f"c{i}" for i in converted]
    shown = [f"c{i}({v})" if i in converted else v for i, v in enumerate(values)]
    display = ", ".join(f"{k}: {v}" for k, v in zip(keys, shown))
    source = (f"def make({', '.join(keys + converters)}):\n"
              f"    def named(values):\n"
              f"        {', '.join(values)}, = values\n"
              f"        return {{{display}}}\n"
              f"    return named\n")
    namespace: dict = {}
    exec(compile(source, f"<outputs {count}>", "exec"), namespace)  # noqa: S102
    return namespace["make"]


def namer(outputs: tuple[str, ...], kinds: tuple[str, ...]) -> Callable[[tuple], dict]:
    """``named(values)``: ``{name: as_output(value, kind)}`` over ``outputs``, ``values`` and
    ``kinds`` in order (:func:`_named_display` up to 16 outputs; as_output only where it may
    change a value)."""
    converted = tuple(i for i, kind in enumerate(kinds) if not as_output_is_identity(kind))
    if 0 < len(outputs) <= 16:
        return _named_display(len(outputs), converted)(
            *outputs, *(functools.partial(_as_output_of, kind=kinds[i]) for i in converted))
    return lambda values: {name: as_output(value, kind) for name, value, kind in zip(outputs, values, kinds)}


def _as_output_of(value, kind: str):
    """:func:`as_output` with its kind by keyword (a partial binds it)."""
    return as_output(value, kind)


__all__ = ["Signature", "namer", "taker"]
