"""Kernel attributes added after archives of format 2 were first written.

The bytecode passes every attribute of a kernel call, and kernels take them
as required keywords (no kernel repeats its op's defaults). An archive built
before an attribute existed lacks it; the loader adds it with the value that
reproduces what the kernel did then (:data:`ADDED`), so older archives keep
running. A test checks each value against the op's own default.
"""

from __future__ import annotations

from dataclasses import replace

from .bytecode import IMM, Call, VMFunction

#: kernel name -> {attribute: the value older archives meant}
ADDED: dict[str, dict[str, object]] = {
    "dynamic_quantize": {"scales": (),           # y_scale's products with the weights' scales
                         "any_zero_sign": False},  # y's zeros +0.0 as the chain makes them
    "linear_classifier": {"norm": "NONE"},       # a Normalizer after it (FuseClassifierNormalizer)
    "nn.conv": {"exact": False},                 # exact float convs of quantized models
    "nn.conv_bias_act": {"exact": False},
    "string_normalizer": {"ascii_case": False},  # A-Z only in the C/POSIX locales
    "take": {"in_bounds": False},                # indices checked (a table look-up's are proven in range)
}


def fill_added_attrs(functions: dict[str, VMFunction], table) -> dict[str, VMFunction]:
    """``functions`` with every call of a kernel in :data:`ADDED` holding its added attributes."""
    added = {i: ADDED[e.name] for i, e in enumerate(table) if e.kind in ("kernel", "packed") and e.name in ADDED}
    if not added:
        return functions
    return {name: _filled(fn, added) for name, fn in functions.items()}


def _filled(fn: VMFunction, added: dict[int, dict]) -> VMFunction:
    instructions = tuple(_with_attrs(ins, added[ins.func]) if _calls(ins, added) else ins for ins in fn.instructions)
    return fn if instructions == fn.instructions else replace(fn, instructions=instructions)


def _calls(ins, added: dict[int, dict]) -> bool:
    return isinstance(ins, Call) and isinstance(ins.func, int) and ins.func in added


def _with_attrs(ins: Call, attrs: dict) -> Call:
    have = {k for k, _ in ins.kwargs}
    extra = [(k, (IMM, v)) for k, v in attrs.items() if k not in have]
    return ins if not extra else replace(ins, kwargs=tuple(sorted(ins.kwargs + tuple(extra), key=lambda kv: kv[0])))


__all__ = ["ADDED", "fill_added_attrs"]
