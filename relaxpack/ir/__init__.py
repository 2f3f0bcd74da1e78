"""The Relax-style IR: symbolic dims, struct info, expressions, modules.

Import what you need from here::

    from relaxpack.ir import BlockBuilder, Var, TensorStructInfo, sym
"""

from .block_builder import BlockBuilder, is_leaf
from .dims import Dim, DimAnalyzer, DimExpr, evaluate, format_dim, free_vars, parse_dim, substitute, sym
from .expr import (
    Binding, BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc, Function,
    GlobalVar, If, MatchCast, Node, Op, PrimValue, SeqExpr, ShapeExpr, Span, StringImm, Tuple,
    TupleGetItem, Var, VarBinding,
)
from .module import STAGES, IRModule
from .struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo,
    TensorStructInfo, TupleStructInfo, is_base_of,
)

from .parser import parse
from .printer import print_module

__all__ = [name for name in dir() if not name.startswith("_")]
