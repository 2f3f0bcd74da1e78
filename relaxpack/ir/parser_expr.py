"""Reading expressions, struct info, attribute values and constants from
Python ``ast`` nodes (the expression half of :mod:`relaxpack.ir.parser`).

:class:`ExprReader` turns one ``ast.expr`` into IR; names are resolved
through hooks that the function parser overrides (vars, module functions,
declared symbolic dims, the metadata table). Every error is a
:class:`~relaxpack.errors.ParseError` naming the line.
"""

from __future__ import annotations

import ast
import contextlib
import math
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import ParseError, RelaxpackError, UnsupportedOpError
from .dims import Dim, from_ast, parse_dim
from .expr import (
    Call, Constant, Expr, ExternFunc, GlobalVar, Op, PrimValue, ShapeExpr, StringImm, Tuple,
    TupleGetItem, Var,
)
from .struct_info import (
    DTYPES, GLOBAL_SCOPE, FuncStructInfo, MapStructInfo, ObjectStructInfo, OptionalStructInfo, PrimStructInfo,
    SequenceStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
)
from .op import get_op_def
from .text_syntax import OUT_SINFO_OPS, SPECIAL_FORMS, numpy_dtype, quote, takes_callee_name

_FLOAT_NAMES = {"inf": math.inf, "nan": math.nan}


def dotted(node: ast.expr) -> list[str] | None:
    """``R.nn.softmax`` as ``["R", "nn", "softmax"]``; ``None`` for other nodes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def fail(node: ast.AST | None, message: str) -> ParseError:
    """A ParseError for ``node``'s line (raise the result)."""
    line = getattr(node, "lineno", None)
    return ParseError(f"line {line}: {message}" if line else message)


def is_call_to(node: ast.AST, *path: str) -> bool:
    return isinstance(node, ast.Call) and dotted(node.func) == list(path)


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _text(node: ast.AST) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # unparse is best effort, only for messages
        return type(node).__name__
    return text if len(text) <= 60 else text[:57] + "..."


class ExprReader:
    """Reads IR from ast nodes. Subclasses resolve names by overriding
    :meth:`lookup_var`, :meth:`lookup_global`, :meth:`metadata_constant`
    and :attr:`dims` (the declared symbolic dims)."""

    dims: Mapping[str, Dim] = MappingProxyType({})

    # ------------------------------------------------------------ hooks
    def lookup_var(self, node: ast.Name) -> Var:
        raise fail(node, f"a var ({node.id!r}) is not allowed here")

    def lookup_global(self, name: str, node: ast.AST) -> GlobalVar:
        raise fail(node, f"cls.{name} is not allowed here")

    def metadata_constant(self, key: str, node: ast.AST) -> Constant:
        raise fail(node, "metadata constants are not allowed here")

    @contextlib.contextmanager
    def at(self, node: ast.AST):
        """Report IR errors raised inside as ParseErrors at ``node``'s line."""
        try:
            yield
        except ParseError:
            raise
        except RelaxpackError as err:
            raise fail(node, str(err)) from None

    # ------------------------------------------------------------ small literals
    def string(self, node: ast.AST, what: str) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        raise fail(node, f"{what} must be a string literal, got {_text(node)}")

    def integer(self, node: ast.AST, what: str) -> int:
        value = self.number(node)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise fail(node, f"{what} must be an integer, got {_text(node)}")

    def dtype(self, node: ast.AST) -> str:
        dtype = self.string(node, "a dtype")
        if dtype not in DTYPES:
            raise fail(node, f"unknown dtype {dtype!r}")
        return dtype

    def number(self, node: ast.AST):
        """An int, float or bool literal; ``inf``/``nan`` names and ``float("inf")``."""
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = self.number(node.operand)
            if isinstance(value, bool):
                raise fail(node, f"cannot negate a bool: {_text(node)}")
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Name) and node.id in _FLOAT_NAMES:
            return _FLOAT_NAMES[node.id]
        if is_call_to(node, "float") and len(node.args) == 1 and not node.keywords:
            text = self.string(node.args[0], "the argument of float()")
            try:
                return float(text)
            except ValueError:
                raise fail(node, f"bad float literal {text!r}") from None
        raise fail(node, f"expected a number, got {_text(node)}")

    def attr(self, node: ast.AST) -> Any:
        """An attribute value: literals, tuples/lists (as tuples), dicts with
        string keys, ``R.dim("n + 1")``."""
        if isinstance(node, ast.Constant):
            if node.value is None or isinstance(node.value, (str, bool, int, float)):
                return node.value
            raise fail(node, f"unsupported attribute value {_text(node)}")
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.attr(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    raise fail(node, "** is not allowed in an attribute dict")
                out[self.string(k, "an attribute dict key")] = self.attr(v)
            return out
        if is_call_to(node, "R", "dim"):
            self.no_keywords(node)
            if len(node.args) != 1:
                raise fail(node, "R.dim takes one string, like R.dim(\"n + 1\")")
            return self.dim_text(node.args[0])
        return self.number(node)

    def no_keywords(self, node: ast.Call) -> None:
        if node.keywords:
            raise fail(node, f"{_text(node.func)} takes no keyword arguments")

    def keywords(self, node: ast.Call, allowed: tuple[str, ...]) -> dict[str, ast.expr]:
        out = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise fail(node, "** arguments are not allowed")
            if kw.arg not in allowed:
                raise fail(kw.value, f"{_text(node.func)} has no keyword {kw.arg!r}"
                                     + (f"; it takes {', '.join(allowed)}" if allowed else ""))
            out[kw.arg] = kw.value
        return out

    def positional(self, node: ast.Call, names: tuple[str, ...], kwargs: dict) -> dict[str, ast.expr]:
        """Map positional arguments to ``names``, merged with ``kwargs``."""
        if len(node.args) > len(names):
            raise fail(node, f"{_text(node.func)} takes at most {len(names)} positional arguments")
        out = dict(kwargs)
        for name, arg in zip(names, node.args):
            if isinstance(arg, ast.Starred):
                raise fail(arg, "* arguments are not allowed")
            if name in out:
                raise fail(node, f"{_text(node.func)} got {name!r} twice")
            out[name] = arg
        return out

    # ------------------------------------------------------------ dims
    def dim_text(self, node: ast.AST) -> Dim:
        text = self.string(node, "a symbolic dim")
        with self.at(node):
            return parse_dim(text)

    def sinfo_dim(self, node: ast.AST) -> Dim:
        """A dim in struct info: an int, a string (``"seq * 64"``) or an expression."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self.dim_text(node)
        with self.at(node):
            return from_ast(node)

    def declared_dim(self, node: ast.AST) -> Dim:
        """A dim written as an expression of the function's declared dims."""
        def lookup(name: str) -> Dim:
            if name not in self.dims:
                raise fail(node, f"undefined symbolic dim {name!r} (declare it with `{name} = T.int64()`)")
            return self.dims[name]
        with self.at(node):
            return from_ast(node, lookup)

    # ------------------------------------------------------------ struct info
    def sinfo(self, node: ast.AST) -> StructInfo:
        call = node if isinstance(node, ast.Call) else None
        path = dotted(call.func if call else node)
        if not path or path[0] != "R" or len(path) != 2 or path[1] not in _SINFO_READERS:
            raise fail(node, f"expected struct info (R.Tensor, R.Tuple, R.Shape, R.Prim, R.Object, "
                             f"R.Sequence, R.Optional, R.Map or R.Callable), got {_text(node)}")
        with self.at(node):
            return _SINFO_READERS[path[1]](self, call)

    def sinfo_list(self, node: ast.AST) -> tuple[StructInfo, ...]:
        if isinstance(node, ast.List):
            return tuple(self.sinfo(e) for e in node.elts)
        return (self.sinfo(node),)

    def _tensor_sinfo(self, call: ast.Call | None) -> StructInfo:
        if call is None:
            return TensorStructInfo()
        kwargs = self.keywords(call, ("shape", "dtype", "ndim", "vdevice"))
        args = list(call.args)
        names = ["shape", "dtype"]
        if not (args and (isinstance(args[0], (ast.Tuple, ast.List)) or _is_none(args[0]))):
            names.pop(0)  # R.Tensor("float32", ndim=2): the first argument is the dtype
        if len(args) > len(names):
            raise fail(call, "R.Tensor takes a shape and a dtype as positional arguments")
        for name, arg in zip(names, args):
            if name in kwargs or isinstance(arg, ast.Starred):
                raise fail(call, f"R.Tensor got {name!r} twice")
            kwargs[name] = arg
        shape_node = kwargs.get("shape")
        shape = None
        if shape_node is not None and not _is_none(shape_node):
            if not isinstance(shape_node, (ast.Tuple, ast.List)):
                raise fail(shape_node, f"a tensor shape must be a tuple, got {_text(shape_node)}")
            shape = tuple(self.sinfo_dim(e) for e in shape_node.elts)
        dtype = self._optional(kwargs.get("dtype"), self.dtype)
        ndim = self.integer(kwargs["ndim"], "ndim") if "ndim" in kwargs else -1
        vdevice = self.string(kwargs["vdevice"], "vdevice") if "vdevice" in kwargs else GLOBAL_SCOPE
        return TensorStructInfo(shape, dtype, ndim, vdevice)

    def _tuple_sinfo(self, call: ast.Call | None) -> StructInfo:
        if call is None:
            return TupleStructInfo(())
        self.no_keywords(call)
        return TupleStructInfo(tuple(self.sinfo(a) for a in call.args))

    def _shape_sinfo(self, call: ast.Call | None) -> StructInfo:
        if call is None:
            return ShapeStructInfo()
        args = self.positional(call, ("values",), self.keywords(call, ("values", "ndim")))
        values = None
        if "values" in args:
            node = args["values"]
            if not isinstance(node, (ast.Tuple, ast.List)):
                raise fail(node, f"R.Shape values must be a list, got {_text(node)}")
            values = tuple(self.sinfo_dim(e) for e in node.elts)
        ndim = self.integer(args["ndim"], "ndim") if "ndim" in args else -1
        return ShapeStructInfo(values, ndim)

    def _prim_sinfo(self, call: ast.Call | None) -> StructInfo:
        if call is None:
            return PrimStructInfo()
        args = self.positional(call, ("dtype",), self.keywords(call, ("dtype", "value")))
        dtype = self.dtype(args["dtype"]) if "dtype" in args else "int64"
        value = self._optional(args.get("value"), self.sinfo_dim)
        return PrimStructInfo(dtype, value)

    def _object_sinfo(self, call: ast.Call | None) -> StructInfo:
        if call is not None and (call.args or call.keywords):
            raise fail(call, "R.Object takes no arguments")
        return ObjectStructInfo()

    def _container_sinfo(self, call: ast.Call | None, cls, name: str) -> StructInfo:
        if call is None or len(call.args) != 1 or call.keywords:
            raise fail(call, f"R.{name} takes one struct info: the element's")
        return cls(self.sinfo(call.args[0]))

    def _sequence_sinfo(self, call: ast.Call | None) -> StructInfo:
        return self._container_sinfo(call, SequenceStructInfo, "Sequence")

    def _optional_sinfo(self, call: ast.Call | None) -> StructInfo:
        return self._container_sinfo(call, OptionalStructInfo, "Optional")

    def _map_sinfo(self, call: ast.Call | None) -> StructInfo:
        if call is None or len(call.args) != 2 or call.keywords:
            raise fail(call, "R.Map takes the keys' dtype and the values' struct info")
        return MapStructInfo(self.dtype(call.args[0]), self.sinfo(call.args[1]))

    def _callable_sinfo(self, call: ast.Call | None) -> StructInfo:
        if call is None:
            return FuncStructInfo(None, ObjectStructInfo(), purity=False)
        args = self.positional(call, ("params", "ret"), self.keywords(call, ("params", "ret", "pure")))
        params = None
        node = args.get("params")
        if node is not None and not _is_none(node):
            if not isinstance(node, (ast.Tuple, ast.List)):
                raise fail(node, f"R.Callable params must be a tuple of struct infos, got {_text(node)}")
            params = tuple(self.sinfo(e) for e in node.elts)
        ret = self.sinfo(args["ret"]) if "ret" in args else ObjectStructInfo()
        pure = self.attr(args["pure"]) if "pure" in args else True
        if not isinstance(pure, bool):
            raise fail(call, "pure= must be True or False")
        return FuncStructInfo(params, ret, pure)

    @staticmethod
    def _optional(node, read):
        if node is None or _is_none(node):
            return None
        return read(node)

    # ------------------------------------------------------------ expressions
    def expr(self, node: ast.AST) -> Expr:
        if isinstance(node, ast.Name):
            return self.lookup_var(node)
        if isinstance(node, ast.Tuple):
            return Tuple(tuple(self.expr(e) for e in node.elts))
        if isinstance(node, ast.Subscript):
            return self._subscript(node)
        if isinstance(node, ast.Call):
            with self.at(node):
                return self._call(node)
        path = dotted(node)
        if path and len(path) == 2 and path[0] == "cls":
            return self.lookup_global(path[1], node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            raise fail(node, f"a string is not an expression here; write R.str({quote(node.value)})")
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            raise fail(node, f"a number is not an expression; write R.prim_value({_text(node)}) "
                             f"or R.const({_text(node)}, \"<dtype>\")")
        raise fail(node, f"unsupported expression {_text(node)}")

    def _subscript(self, node: ast.Subscript) -> Expr:
        index = node.slice
        if isinstance(node.value, ast.Name) and node.value.id == "metadata":
            return self.metadata_constant(self.string(index, "a metadata key"), node)
        if not (isinstance(index, ast.Constant) and type(index.value) is int and index.value >= 0):
            raise fail(node, f"a tuple index must be a non-negative integer literal, got {_text(index)}")
        value = self.expr(node.value)
        with self.at(node):
            return TupleGetItem(value, index.value)

    def _call(self, node: ast.Call) -> Expr:
        path = dotted(node.func)
        if path and path[0] == "R" and len(path) >= 2:
            if path[1] == "op" and len(path) > 2:
                return self._op_call(".".join(path[2:]), node)
            if path[1] in _SPECIAL_READERS:
                return _SPECIAL_READERS[path[1]](self, node)
            if path[1] in SPECIAL_FORMS:
                raise fail(node, f"R.{path[1]}(...) is not allowed here")
            return self._op_call(".".join(path[1:]), node)
        if path and len(path) == 2 and path[0] == "cls":
            callee = self.lookup_global(path[1], node.func)
        elif isinstance(node.func, ast.Call) and is_call_to(node.func, "R", "ExternFunc"):
            callee = self._extern_func(node.func)
        elif isinstance(node.func, ast.Name):
            callee = self.lookup_var(node.func)
        else:
            raise fail(node, f"cannot call {_text(node.func)}")
        args, attrs, sinfo_args = self._call_args(node, "sinfo_args", first_is_callee=False)
        return Call(callee, args, attrs, sinfo_args)

    def _call_args(self, node: ast.Call, sinfo_key: str, first_is_callee: bool):
        args = []
        for i, a in enumerate(node.args):
            if isinstance(a, ast.Starred):
                raise fail(a, "* arguments are not allowed")
            if i == 0 and first_is_callee and isinstance(a, ast.Constant) and isinstance(a.value, str):
                args.append(ExternFunc(a.value))
            else:
                args.append(self.expr(a))
        attrs, sinfo_args = {}, ()
        for kw in node.keywords:
            if kw.arg is None:
                raise fail(node, "** arguments are not allowed")
            if kw.arg == sinfo_key:
                sinfo_args = self.sinfo_list(kw.value)
            elif kw.arg in ("sinfo_args", "out_sinfo"):
                raise fail(kw.value, f"{_text(node.func)} takes {sinfo_key}=, not {kw.arg}=")
            else:
                attrs[kw.arg] = self.attr(kw.value)
        return tuple(args), attrs, sinfo_args

    def _op_call(self, name: str, node: ast.Call) -> Call:
        try:
            opdef = get_op_def(name)
        except UnsupportedOpError:
            raise fail(node, f"unknown op R.{name}") from None
        sinfo_key = "out_sinfo" if name in OUT_SINFO_OPS else "sinfo_args"
        args, attrs, sinfo_args = self._call_args(node, sinfo_key, takes_callee_name(name))
        op = Op.get(name)
        opdef.check_call(Call(op, args, attrs, sinfo_args))
        # Attributes left out take the op's defaults, as with make_call.
        return Call(op, args, opdef.full_attrs(attrs), sinfo_args)

    # ------------------------------------------------------------ R.<special>(...)
    def _extern_func(self, node: ast.Call) -> ExternFunc:
        args = self.positional(node, ("name",), self.keywords(node, ("sinfo",)))
        if "name" not in args:
            raise fail(node, "R.ExternFunc needs the function's name")
        sinfo = self.sinfo(args["sinfo"]) if "sinfo" in args else None
        return ExternFunc(self.string(args["name"], "an extern function name"), struct_info=sinfo)

    def _string_imm(self, node: ast.Call) -> StringImm:
        self.no_keywords(node)
        if len(node.args) != 1:
            raise fail(node, "R.str takes one string")
        return StringImm(self.string(node.args[0], "the argument of R.str"))

    def _shape_expr(self, node: ast.Call) -> ShapeExpr:
        self.no_keywords(node)
        if len(node.args) != 1 or not isinstance(node.args[0], (ast.List, ast.Tuple)):
            raise fail(node, "R.shape takes a list of dims, like R.shape([n, 4])")
        return ShapeExpr(tuple(self.declared_dim(e) for e in node.args[0].elts))

    def _prim_value(self, node: ast.Call) -> PrimValue:
        args = self.positional(node, ("value", "dtype"), self.keywords(node, ("value", "dtype")))
        if "value" not in args:
            raise fail(node, "R.prim_value needs a value")
        dtype = self.dtype(args["dtype"]) if "dtype" in args else "int64"
        value_node = args["value"]
        if dtype.startswith(("int", "uint")):
            value = self.declared_dim(value_node)
        elif dtype == "bool":
            value = self.number(value_node)
            if not isinstance(value, bool):
                raise fail(value_node, f"a bool prim value must be True or False, got {_text(value_node)}")
        else:
            value = self.number(value_node)
            if isinstance(value, bool):
                raise fail(value_node, f"a {dtype} prim value must be a number")
        return PrimValue(value, dtype)

    def _const(self, node: ast.Call) -> Constant:
        args = self.positional(node, ("value", "dtype"), self.keywords(node, ("value", "dtype", "shape", "sinfo")))
        if "value" not in args:
            raise fail(node, "R.const needs a value")
        sinfo = self.sinfo(args["sinfo"]) if "sinfo" in args else None
        value_node = args["value"]
        if isinstance(value_node, ast.Subscript):
            if "dtype" in args or "shape" in args:
                raise fail(node, "a metadata constant has its own dtype and shape")
            const = self._subscript(value_node)
            if not isinstance(const, Constant):
                raise fail(value_node, "R.const of a subscript must name a metadata constant")
            return const if sinfo is None else Constant(const.data, struct_info=sinfo)
        if "dtype" not in args:
            raise fail(node, f"R.const needs a dtype, like R.const({_text(value_node)}, \"float32\")")
        dtype = self.dtype(args["dtype"])
        kind = "bool" if dtype == "bool" else "int" if dtype.startswith(("int", "uint")) else "float"
        values = self._const_values(value_node, kind)
        try:
            data = np.array(values, dtype=numpy_dtype(dtype))
            if "shape" in args:
                shape_node = args["shape"]
                if not isinstance(shape_node, (ast.Tuple, ast.List)):
                    raise fail(shape_node, "shape= must be a tuple of ints")
                data = data.reshape(tuple(self.integer(e, "a shape dim") for e in shape_node.elts))
        except (ValueError, TypeError, OverflowError) as err:
            raise fail(node, f"bad constant of dtype {dtype}: {err}") from None
        return Constant(data, struct_info=sinfo)

    def _const_values(self, node: ast.AST, kind: str):
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self._const_values(e, kind) for e in node.elts]
        value = self.number(node)
        if kind == "bool" and not isinstance(value, bool) or \
                kind == "int" and (isinstance(value, bool) or not isinstance(value, int)) or \
                kind == "float" and isinstance(value, bool):
            raise fail(node, f"{_text(node)} is not a valid {kind} constant element")
        return value


_SINFO_READERS = {
    "Tensor": ExprReader._tensor_sinfo,
    "Tuple": ExprReader._tuple_sinfo,
    "Shape": ExprReader._shape_sinfo,
    "Prim": ExprReader._prim_sinfo,
    "Object": ExprReader._object_sinfo,
    "Callable": ExprReader._callable_sinfo,
    "Sequence": ExprReader._sequence_sinfo,
    "Optional": ExprReader._optional_sinfo,
    "Map": ExprReader._map_sinfo,
}

_SPECIAL_READERS = {
    "const": ExprReader._const,
    "shape": ExprReader._shape_expr,
    "prim_value": ExprReader._prim_value,
    "str": ExprReader._string_imm,
    "ExternFunc": ExprReader._extern_func,
}
