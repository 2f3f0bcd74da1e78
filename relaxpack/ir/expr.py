"""IR expressions, bindings and blocks: the Relax vocabulary.

Nodes are frozen, slotted dataclasses compared by identity (use
:func:`~relaxpack.ir.equality.structural_equal` for "same program").
``node.replace(...)`` returns the node itself when nothing changes, so a
pass can tell whether it rewrote anything with ``new is not old``.

Every expression carries ``struct_info`` once normalized (the
:class:`~relaxpack.ir.block_builder.BlockBuilder` fills it in).
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import IRError
from .dims import Dim, normalize
from .struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo,
    TensorStructInfo, TupleStructInfo, check_dtype, tensor_sinfo_of_array,
)

EMPTY_ATTRS: Mapping[str, Any] = MappingProxyType({})


def frozen_attrs(attrs: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A read-only copy of ``attrs`` (lists become tuples), sorted by key."""
    if not attrs:
        return EMPTY_ATTRS
    if isinstance(attrs, MappingProxyType):
        return attrs
    return MappingProxyType({k: _freeze(attrs[k]) for k in sorted(attrs)})


def _freeze(value):
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def identical(new, old) -> bool:
    """``new`` is ``old``, or ``old`` is a tuple and ``new`` a sequence of the very
    same objects: "did a rewrite change anything" for a node's tuple fields."""
    if new is old:
        return True
    return (isinstance(old, tuple) and isinstance(new, (tuple, list)) and len(new) == len(old)
            and all(a is b for a, b in zip(new, old)))


@dataclass(frozen=True, slots=True, eq=False)
class Node:
    """Base of IR nodes: immutable, compared by identity."""

    def replace(self, **changes):
        """A copy with ``changes``; ``self`` when every value is already there
        (a tuple field element by element), so "did a pass change anything" is
        ``new is not old``."""
        if all(identical(v, getattr(self, k)) for k, v in changes.items()):
            return self
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True, eq=False)
class Span(Node):
    """Where a binding came from: the ONNX node name(s) it was made from."""

    sources: tuple[str, ...]

    def __str__(self):
        return ", ".join(self.sources)


@dataclass(frozen=True, slots=True, eq=False)
class Expr(Node):
    struct_info: StructInfo | None = field(default=None, kw_only=True)


# ---------------------------------------------------------------- leaves
@dataclass(frozen=True, slots=True, eq=False, init=False)
class Var(Expr):
    """A variable. Identity matters; ``name_hint`` is only for printing.

    ``Var("x", R.Tensor(...))``, as in Relax.
    """

    name_hint: str

    def __init__(self, name_hint: str, struct_info: StructInfo | None = None):
        object.__setattr__(self, "name_hint", name_hint)
        object.__setattr__(self, "struct_info", struct_info)

    def __repr__(self):
        return f"{type(self).__name__}({self.name_hint!r})"


@dataclass(frozen=True, slots=True, eq=False, init=False)
class DataflowVar(Var):
    """A variable local to a :class:`DataflowBlock`; it may not escape it."""


@dataclass(frozen=True, slots=True, eq=False)
class GlobalVar(Expr):
    """The name of a function in an :class:`IRModule`."""

    name_hint: str

    def __repr__(self):
        return f"GlobalVar({self.name_hint!r})"


@dataclass(frozen=True, slots=True, eq=False)
class ExternFunc(Expr):
    """A function resolved by name at run time (a kernel or a registered function)."""

    global_symbol: str

    def __post_init__(self):
        if self.struct_info is None:
            object.__setattr__(self, "struct_info", FuncStructInfo(None, ObjectStructInfo(), purity=False))


_OPS: dict[str, "Op"] = {}
_OPS_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True, eq=False)
class Op(Expr):
    """An operator, interned by name: ``Op.get("add") is Op.get("add")``.

    Its schema (attributes, struct-info inference) is its :class:`~.op.OpDef`,
    looked up with :func:`~.op.get_op_def`.
    """

    name: str

    @staticmethod
    def get(name: str) -> "Op":
        op = _OPS.get(name)
        if op is None:
            with _OPS_LOCK:
                op = _OPS.setdefault(name, Op(name))
        return op

    def __repr__(self):
        return f"Op({self.name!r})"


@dataclass(frozen=True, slots=True, eq=False)
class Constant(Expr):
    """A tensor constant; the array is held read-only in the IR."""

    data: np.ndarray

    def __post_init__(self):
        data = np.asarray(self.data)
        if not data.dtype.isnative:  # one byte order in the IR: the machine's
            data = data.astype(data.dtype.newbyteorder("="))
        if data.flags.writeable:
            data = data.view()
            data.flags.writeable = False
        object.__setattr__(self, "data", data)
        if self.struct_info is None:
            object.__setattr__(self, "struct_info", tensor_sinfo_of_array(data))


@dataclass(frozen=True, slots=True, eq=False)
class PrimValue(Expr):
    """A scalar value: an int or symbolic dim (``int64``), or a float."""

    value: Dim | float | bool
    dtype: str = "int64"

    def __post_init__(self):
        check_dtype(self.dtype)
        value = self.value
        if self.dtype.startswith(("int", "uint")):
            value = normalize(value)
        elif self.dtype == "bool":
            value = bool(value)
        else:
            value = float(value)
        object.__setattr__(self, "value", value)
        if self.struct_info is None:
            known = self.value if self.dtype.startswith(("int", "uint")) else None
            object.__setattr__(self, "struct_info", PrimStructInfo(self.dtype, known))


@dataclass(frozen=True, slots=True, eq=False)
class StringImm(Expr):
    value: str

    def __post_init__(self):
        if self.struct_info is None:
            object.__setattr__(self, "struct_info", ObjectStructInfo())


@dataclass(frozen=True, slots=True, eq=False)
class ShapeExpr(Expr):
    """A shape value built from dims: ``R.shape([batch, seq * 64])``."""

    values: tuple[Dim, ...]

    def __post_init__(self):
        values = tuple(normalize(v) for v in self.values)
        object.__setattr__(self, "values", values)
        if self.struct_info is None:
            object.__setattr__(self, "struct_info", ShapeStructInfo(values))


# ---------------------------------------------------------------- compound
@dataclass(frozen=True, slots=True, eq=False)
class Call(Expr):
    """``op(*args, **attrs)``; ``sinfo_args`` give output struct info where the
    op cannot infer it (``call_tir``, ``call_packed``, ...)."""

    op: Expr
    args: tuple[Expr, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=lambda: EMPTY_ATTRS)
    sinfo_args: tuple[StructInfo, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "attrs", frozen_attrs(self.attrs))
        object.__setattr__(self, "sinfo_args", tuple(self.sinfo_args))
        for arg in self.args:
            if not isinstance(arg, Expr):
                raise IRError(f"argument of a call must be an Expr, got {type(arg).__name__}")


@dataclass(frozen=True, slots=True, eq=False)
class Tuple(Expr):
    fields: tuple[Expr, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))
        if self.struct_info is None and all(f.struct_info is not None for f in self.fields):
            object.__setattr__(self, "struct_info", TupleStructInfo(tuple(f.struct_info for f in self.fields)))


@dataclass(frozen=True, slots=True, eq=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int

    def __post_init__(self):
        sinfo = self.tuple_value.struct_info
        if self.struct_info is None and isinstance(sinfo, TupleStructInfo):
            if not 0 <= self.index < len(sinfo.fields):
                raise IRError(f"tuple index {self.index} out of range for a tuple of {len(sinfo.fields)}")
            object.__setattr__(self, "struct_info", sinfo.fields[self.index])


# ---------------------------------------------------------------- bindings and blocks
@dataclass(frozen=True, slots=True, eq=False)
class Binding(Node):
    var: Var
    span: Span | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True, eq=False)
class VarBinding(Binding):
    """``var = value``."""

    value: Expr


@dataclass(frozen=True, slots=True, eq=False)
class MatchCast(Binding):
    """``var = R.match_cast(value, struct_info)``: a run-time checked cast that
    may bind new symbolic dims."""

    value: Expr
    struct_info: StructInfo


@dataclass(frozen=True, slots=True, eq=False)
class BindingBlock(Node):
    """Bindings evaluated in order; may hold impure calls."""

    bindings: tuple[Binding, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "bindings", tuple(self.bindings))


@dataclass(frozen=True, slots=True, eq=False)
class DataflowBlock(BindingBlock):
    """Pure bindings; only the vars that are not DataflowVars leave the block."""


@dataclass(frozen=True, slots=True, eq=False)
class SeqExpr(Expr):
    """Blocks of bindings followed by a result expression."""

    blocks: tuple[BindingBlock, ...]
    body: Expr

    def __post_init__(self):
        # an empty block means nothing; dropping it keeps one form per program
        object.__setattr__(self, "blocks", tuple(b for b in self.blocks if b.bindings))
        if self.struct_info is None and self.body.struct_info is not None:
            object.__setattr__(self, "struct_info", self.body.struct_info)


@dataclass(frozen=True, slots=True, eq=False)
class If(Expr):
    cond: Expr
    true_branch: SeqExpr
    false_branch: SeqExpr


@dataclass(frozen=True, slots=True, eq=False)
class Function(Expr):
    """A function: parameters, a body and its declared return struct info.

    ``attrs`` hold e.g. ``{"Primitive": True}`` for a fused function.
    """

    params: tuple[Var, ...]
    body: SeqExpr
    ret_struct_info: StructInfo
    is_pure: bool = True
    attrs: Mapping[str, Any] = field(default_factory=lambda: EMPTY_ATTRS)

    def __post_init__(self):
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "attrs", frozen_attrs(self.attrs))
        if self.struct_info is None:
            sinfo = FuncStructInfo(tuple(p.struct_info or ObjectStructInfo() for p in self.params),
                                   self.ret_struct_info, self.is_pure)
            object.__setattr__(self, "struct_info", sinfo)


def is_tensor(expr: Expr) -> bool:
    return isinstance(expr.struct_info, TensorStructInfo)
