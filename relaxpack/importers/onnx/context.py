"""ImportContext: what a converter sees of the import in progress."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.block_builder import BlockBuilder, is_leaf, is_pure_expr
from ...ir.dims import Dim
from ...ir.expr import Call, Constant, Expr, ShapeExpr, Var
from ...ir.struct_info import TensorStructInfo, dtype_name
from ...ops.registry import make_call
from ...ops.evaluate import evaluate_call
from .lift import Lifts
from .value import Value

#: Constants up to this many elements are folded at import time when an op
#: computes them from other constants (shape arithmetic and the like).
FOLD_LIMIT = 4096


class ImportContext:
    """Passed to every converter: the builder, the opsets, value helpers."""

    def __init__(self, bb: BlockBuilder, opsets: dict[str, int]):
        self.bb = bb
        self.opsets = opsets
        self.node = None    # the NodeProto being converted (for messages)
        self.scope = None   # the value names visible to it
        self.graphs = None  # the GraphConverter, for subgraphs (If branches)
        self.lifts = Lifts()  # data-dependent sizes lifted to dims (lift.py)

    @property
    def opset(self) -> int:
        """The default domain's opset version."""
        return self.opsets.get("", 1)

    # ------------------------------------------------------------ values
    def expr(self, value: Value) -> Expr:
        """The IR expression for ``value``, made on first use."""
        if value.expr is None:
            if value.const is not None:
                value.expr = Constant(value.const)
            elif value.sym is not None:
                value.expr = self._materialize_sym(value)
            elif value.float_of is not None:     # a shape cast to float
                dims = self.expr(Value(TensorStructInfo(value.shape, "int64"), sym=value.float_of))
                value.expr = self.bb.emit(make_call("astype", dims, dtype=value.dtype), "cast")
            else:
                raise ShapeError(f"value of {self.node_label()} has no IR expression")
        return value.expr

    def _materialize_sym(self, value: Value) -> Expr:
        scalar = value.ndim == 0
        call = make_call("shape_to_tensor", ShapeExpr(value.sym), scalar=scalar)
        return self.bb.emit(call, "shape")

    def emit(self, expr: Expr, name: str = "lv") -> Value:
        """Bind ``expr`` and return its value; a small call of a pure op on
        constants is folded at import time (with the runtime's kernels)
        instead. Impure calls (random draws) are always emitted: folded,
        one draw would stand for every run."""
        if isinstance(expr, (Var, Constant)):
            return Value(expr.struct_info, expr=expr,
                         const=np.asarray(expr.data) if isinstance(expr, Constant) else None)
        if isinstance(expr, Call) and is_pure_expr(expr) and all(is_leaf(a) for a in expr.args):
            call = self.bb.normalize(expr)
            folded = evaluate_call(call, FOLD_LIMIT)
            if folded is not None and not isinstance(folded, tuple):
                return self.const(folded)
            expr = call
        var = self.bb.emit(expr, name)
        return Value(var.struct_info, expr=var)

    def const(self, array) -> Value:
        """A value with known contents (not yet in the IR)."""
        array = np.asarray(array)
        return Value(TensorStructInfo(tuple(int(d) for d in array.shape), dtype_name(array.dtype)), const=array)

    def sym_value(self, dims: Sequence[Dim], scalar: bool = False) -> Value:
        """A 1-D (or 0-d) int64 value whose contents are the dims."""
        dims = tuple(dims)
        if all(isinstance(d, int) for d in dims):
            data = np.array(dims, dtype=np.int64)
            return self.const(data.reshape(()) if scalar else data)
        shape = () if scalar else (len(dims),)
        return Value(TensorStructInfo(shape, "int64"), sym=dims)

    def node_label(self) -> str:
        node = self.node
        if node is None:
            return "the graph"
        return f"{node.op_type} node {node.name!r}" if node.name else f"{node.op_type} node"
