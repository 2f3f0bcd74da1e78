"""Structural equality and hashing: "the same program", vars up to renaming.

Both reduce a node to a canonical key: a nested tuple in which every var
defined inside the node (parameters, bound vars) is replaced by its
definition index, and every free var by its identity. Two nodes are equal
when their keys are; the hash is the key's hash. Spans and name hints do not
count, as in TVM's ``structural_equal``.
"""

from __future__ import annotations

import difflib
import hashlib
import weakref

import numpy as np

from .expr import (
    BindingBlock, Call, Constant, DataflowBlock, DataflowVar, ExternFunc, Function,
    GlobalVar, If, MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, StringImm, Tuple, TupleGetItem,
    Var, VarBinding,
)
from .module import IRModule


class _Keyer:
    def __init__(self, map_free_vars: bool):
        self.map_free_vars = map_free_vars
        self.var_ids: dict[Var, int] = {}

    def define(self, var: Var):
        self.var_ids[var] = len(self.var_ids)
        return ("def", type(var) is DataflowVar, var.struct_info, self.var_ids[var])

    def key(self, node):
        method = _KEYERS.get(type(node))
        if method is None:
            raise TypeError(f"no structural key for {type(node).__name__}")
        return method(self, node)

    def var(self, var: Var):
        if var in self.var_ids:
            return ("var", self.var_ids[var])
        if self.map_free_vars:
            return ("var", self.define(var))
        return ("free", id(var))

    def constant(self, c: Constant):
        data = c.data
        return ("const", data.dtype.str, data.shape, content_digest(data), c.struct_info)

    def call(self, c: Call):
        return ("call", self.key(c.op), tuple(self.key(a) for a in c.args),
                tuple((k, _attr_key(v)) for k, v in c.attrs.items()), c.sinfo_args)

    def seq(self, s: SeqExpr):
        return ("seq", tuple(self.block(b) for b in s.blocks), self.key(s.body))

    def block(self, b: BindingBlock):
        return (type(b) is DataflowBlock, tuple(self.binding(x) for x in b.bindings))

    def binding(self, b):
        value = self.key(b.value)  # the value first: it cannot see its own var
        if isinstance(b, MatchCast):
            return ("match_cast", value, b.struct_info, self.define(b.var))
        return ("bind", value, self.define(b.var))

    def function(self, f: Function):
        params = tuple(self.define(p) for p in f.params)
        return ("fn", params, self.seq(f.body), f.ret_struct_info, f.is_pure,
                tuple((k, _attr_key(v)) for k, v in f.attrs.items()))


def _attr_key(value):
    if isinstance(value, float) and value != value:
        return ("nan",)
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    return (type(value).__name__, value)


_KEYERS = {
    Var: _Keyer.var,
    DataflowVar: _Keyer.var,
    Constant: _Keyer.constant,
    Call: _Keyer.call,
    SeqExpr: _Keyer.seq,
    Function: _Keyer.function,
    GlobalVar: lambda k, g: ("global", g.name_hint),
    ExternFunc: lambda k, e: ("extern", e.global_symbol),
    Op: lambda k, o: ("op", o.name),
    PrimValue: lambda k, p: ("prim", p.dtype, _attr_key(p.value)),
    StringImm: lambda k, s: ("str", s.value),
    ShapeExpr: lambda k, s: ("shape", s.values),
    Tuple: lambda k, t: ("tuple", tuple(k.key(f) for f in t.fields)),
    TupleGetItem: lambda k, t: ("getitem", k.key(t.tuple_value), t.index),
    If: lambda k, i: ("if", k.key(i.cond), k.seq(i.true_branch), k.seq(i.false_branch)),
    VarBinding: _Keyer.binding,
    MatchCast: _Keyer.binding,
    BindingBlock: _Keyer.block,
    DataflowBlock: _Keyer.block,
}


def structural_key(node, map_free_vars: bool = False):
    """The canonical key of ``node`` (an Expr, binding, block or IRModule)."""
    if isinstance(node, IRModule):
        return ("module", tuple((name, _Keyer(map_free_vars).key(f)) for name, f in node.items()),
                tuple((k, _attr_key(v)) for k, v in node.attrs.items()))
    return _Keyer(map_free_vars).key(node)


def structural_equal(a, b, map_free_vars: bool = False) -> bool:
    """True when ``a`` and ``b`` are the same program up to var renaming.

    Free vars (used but not defined inside) must be the same object unless
    ``map_free_vars``.
    """
    if type(a) is not type(b):
        return False
    return structural_key(a, map_free_vars) == structural_key(b, map_free_vars)


#: id(array) -> digest of its bytes, dropped when the array is collected.
#: A Constant's data is read-only, so its digest never changes; passes that
#: key constants again and again (CSE runs twice in -O2, on ~100 MB of
#: weights for a ResNet-50) hash each array once.
_DIGESTS: dict[int, str] = {}


def content_digest(data: np.ndarray) -> str:
    """A digest of a read-only array's bytes (cached while the array lives)."""
    key = id(data)
    digest = _DIGESTS.get(key)
    if digest is None:
        if data.dtype == object:
            digest = hashlib.blake2b(repr(data.tolist()).encode(), digest_size=20).hexdigest()
        else:
            contiguous = np.ascontiguousarray(data)
            digest = hashlib.blake2b(memoryview(contiguous.reshape(-1).view(np.uint8)),
                                     digest_size=20).hexdigest()
        if not data.flags.writeable:
            _DIGESTS[key] = digest
            weakref.finalize(data, _DIGESTS.pop, key, None)
    return digest


def structural_hash(node, map_free_vars: bool = False) -> int:
    return hash(structural_key(node, map_free_vars))


def assert_structural_equal(actual, expected, map_free_vars: bool = False) -> None:
    """Raise AssertionError with a diff of the two texts when they differ."""
    if structural_equal(actual, expected, map_free_vars):
        return
    diff = "\n".join(difflib.unified_diff(_text(expected).splitlines(), _text(actual).splitlines(),
                                          "expected", "actual", lineterm=""))
    raise AssertionError(f"not structurally equal:\n{diff or '(texts equal; keys differ)'}")


def _text(node) -> str:
    try:
        if isinstance(node, IRModule):
            return node.script(show_meta=False)
        from .printer import print_expr
        return print_expr(node)
    except Exception as err:  # the printer may not handle a broken node: still report
        return f"<unprintable {type(node).__name__}: {err}>"


__all__ = ["structural_equal", "structural_hash", "structural_key", "assert_structural_equal"]
