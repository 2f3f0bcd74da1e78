"""The assumptions of a function, as ``vm.builtin.check_dims`` entries.

A ``match_cast`` of a value whose shape is known, to dims that are all
defined already, binds nothing: it asserts that the value's dims equal the
cast's (what ir/gradual.py records for a relation the importer assumed).
Its check needs no tensor, only the shape heap: codegen emits it as
relations (runtime/assumptions.py). Relations over the function's input dims
outside any ``If`` branch are gathered into one check right after the input
checks, evaluated once per input shape; the others stay at their binding.
Identical relations are checked once.
"""

from __future__ import annotations

from typing import Callable

from ..ir.dim_relations import describe_equal
from ..ir.dims import Dim, format_dim, free_vars
from ..ir.expr import MatchCast
from ..ir.gradual import assumed_relations
from ..ir.struct_info import TensorStructInfo
from .dim_program import dim_program


def cast_relations(binding: MatchCast, defined: Callable[[str], bool]) -> list[tuple[Dim, Dim]] | None:
    """The relations a cast asserts, when that is all it does (its value's
    shape, dtype and device are known and the cast's dims are all
    ``defined``); None for a cast that binds dims or must look at the tensor."""
    value, cast = binding.value.struct_info, binding.struct_info
    if not (isinstance(value, TensorStructInfo) and isinstance(cast, TensorStructInfo)):
        return None
    if value.shape is None or cast.shape is None or len(value.shape) != len(cast.shape):
        return None
    if value.dtype is None or cast.dtype not in (None, value.dtype) or cast.vdevice != value.vdevice:
        return None
    if not all(defined(name) for d in cast.shape for name in free_vars(d)):
        return None
    return assumed_relations(binding)


def check_entry(node: str, lhs: Dim, rhs: Dim, slot_of: Callable[[str], int]) -> tuple:
    """One ``check_dims`` entry for ``lhs == rhs`` assumed at ``node``."""
    names = tuple((name, slot_of(name)) for name in sorted(free_vars(lhs) | free_vars(rhs)))
    return (node, format_dim(lhs), format_dim(rhs), describe_equal(lhs, rhs),
            dim_program(lhs, slot_of), dim_program(rhs, slot_of), names)


def entry_key(entry: tuple) -> str:
    """What makes two entries the same check (their programs)."""
    return repr(entry[4:6])


__all__ = ["cast_relations", "check_entry", "entry_key"]
