"""The text printer: an :class:`IRModule` as Python-syntax, TVMScript-like text.

:func:`relaxpack.ir.parse` reads the text back; ``parse(print_module(m))`` is
structurally equal to ``m`` and prints the same text again::

    @I.ir_module
    class Module:
        @R.function
        def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
            n = T.int64(lower=1, upper=512)
            with R.dataflow():
                lv: R.Tensor(("n", 4), "float32") = R.exp(x)  # span: /Exp
                gv: R.Tensor(("n", 4), "float32") = R.add(lv, R.const([0.5], "float32"))
                R.output(gv)
            return gv

Decisions the parser relies on:

- every binding is ``name: <struct info> = <value>``; names are made unique
  per function (``_1``, ``_2`` suffixes) and never clash with symbolic dims,
  keywords or the reserved names ``R T I cls metadata inf nan``;
- each function starts with one ``n = T.int64(...)`` line per symbolic dim it
  mentions; ``lower=``/``upper=`` carry the ``dim_ranges`` attribute;
- a ``DataflowBlock`` is a ``with R.dataflow():`` block ending in
  ``R.output(...)`` (its non-dataflow vars); an ordinary block's bindings are
  printed in the body, with ``R.block_boundary()`` between two adjacent
  ordinary blocks. Empty ordinary blocks carry nothing and are not printed;
- large constants go to the ``metadata`` table after the class, numbered by
  first use (``metadata["c0"]``); ``show_meta=False`` leaves the data out.
"""

from __future__ import annotations

import keyword
import unicodedata

import numpy as np

from ..errors import IRError
from .dims import DimExpr, format_dim, free_vars
from .expr import (
    Binding, BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc, Function,
    GlobalVar, If, MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, StringImm, Tuple, TupleGetItem,
    Var, VarBinding,
)
from .module import IRModule
from .struct_info import FuncStructInfo, ObjectStructInfo, StructInfo, dtype_name, tensor_sinfo_of_array
from .text_syntax import (
    OUT_SINFO_OPS, RESERVED_NAMES, encode_tensor_data, format_attr, format_float, format_sinfo,
    format_sinfo_list, format_span, inline_literal, is_plain_name, op_spelling, quote,
    takes_callee_name,
)

HEADER = "# relaxpack IR (read it back with relaxpack.ir.parse)"
_INDENT = "    "


def print_module(mod: IRModule, show_meta: bool = True) -> str:
    """The text of ``mod``; with ``show_meta=False`` the data of metadata
    constants is left out (pass :func:`module_metadata` to ``parse`` then).

    >>> print(print_module(mod, show_meta=False))     # doctest: +SKIP
    """
    meta = _Metadata()
    lines = [HEADER, "@I.ir_module", "class Module:"]
    body: list[str] = []
    if mod.attrs:
        body.append(f"{_INDENT}I.module_attrs({format_attr(dict(mod.attrs))})")
    for name, func in mod.items():
        if body:
            body.append("")
        body.extend(_FunctionPrinter(meta).function(name, func, 1))
    lines.extend(body or [f"{_INDENT}pass"])
    if meta.constants:
        lines.append("")
        if show_meta:
            lines.append("metadata = {")
            lines.extend(f"{_INDENT}{quote(key)}: {encode_tensor_data(c.data)},"
                         for key, c in meta.constants.items())
            lines.append("}")
        else:
            nbytes = sum(c.data.nbytes for c in meta.constants.values())
            lines.append(f"# metadata: {len(meta.constants)} constants, {nbytes} bytes omitted")
    return "\n".join(lines) + "\n"


def module_metadata(mod: IRModule) -> dict[str, np.ndarray]:
    """The metadata table of ``mod``'s text (``{"c0": array, ...}``): what
    ``parse`` needs to read text printed with ``show_meta=False``."""
    meta = _Metadata()
    for name, func in mod.items():
        _FunctionPrinter(meta).function(name, func, 1)
    return {key: c.data for key, c in meta.constants.items()}


def print_expr(node) -> str:
    """A readable text of one node, for messages: a :class:`Function` prints
    as a ``def``; an expression, binding, block or struct info as itself."""
    printer = _FunctionPrinter(_Metadata())
    if isinstance(node, Function):
        name = node.attrs.get("global_symbol", "func")
        return "\n".join(printer.function(name if is_plain_name(name) else "func", node, 0))
    if isinstance(node, StructInfo):
        return format_sinfo(node)
    if isinstance(node, (Binding, BindingBlock)):
        out: list[str] = []
        if isinstance(node, Binding):
            printer.binding(node, 0, out)
        else:
            printer.blocks((node,), 0, out)
        return "\n".join(out)
    if isinstance(node, SeqExpr):
        out = []
        printer.blocks(node.blocks, 0, out)
        out.append(f"return {printer.expr(node.body)}")
        return "\n".join(out)
    if isinstance(node, If):
        out = []
        printer.if_binding(None, node, 0, out)
        return "\n".join(out)
    return printer.expr(node)


class _Metadata:
    """Large constants in first-use order, deduplicated by identity."""

    def __init__(self):
        self.constants: dict[str, Constant] = {}
        self._keys: dict[int, str] = {}

    def key(self, c: Constant) -> str:
        key = self._keys.get(id(c))
        if key is None:
            key = self._keys[id(c)] = f"c{len(self.constants)}"
            self.constants[key] = c
        return key


class _Namer:
    """Unique, valid names for the vars of one function, in definition order."""

    def __init__(self, reserved):
        self.reserved = frozenset(reserved) | RESERVED_NAMES
        self.used: set[str] = set()
        self.names: dict[Var, str] = {}

    def name(self, var: Var) -> str:
        name = self.names.get(var)
        if name is None:
            name = self.names[var] = self._fresh(_sanitize(var.name_hint))
        return name

    def _fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used or name in self.reserved:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


def _sanitize(hint: str) -> str:
    if is_plain_name(hint):
        return hint
    hint = unicodedata.normalize("NFKC", str(hint))
    if keyword.iskeyword(hint):
        return hint + "_"
    chars = "".join(ch if ("a" + ch).isidentifier() else "_" for ch in hint)
    if not chars or not chars.isidentifier():
        chars = "v" + chars
    return chars if is_plain_name(chars) else "v"


def _canonical_ranges(func: Function) -> dict[str, tuple] | None:
    """``dim_ranges`` as {name: (lo, hi)} when it has the form the parser
    rebuilds from ``T.int64`` lines (sorted, well-typed), else ``None``."""
    ranges = func.attrs.get("dim_ranges")
    if ranges is None:
        return {}
    out: dict[str, tuple] = {}
    for entry in ranges if isinstance(ranges, tuple) else (None,):
        if not (isinstance(entry, tuple) and len(entry) == 3 and is_plain_name(entry[0])
                and _is_int(entry[1]) and (entry[2] is None or _is_int(entry[2]))):
            return None
        if out and entry[0] <= list(out)[-1]:
            return None
        out[entry[0]] = (entry[1], entry[2])
    return out if out else None


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _FunctionPrinter:
    def __init__(self, meta: _Metadata):
        self.meta = meta
        self.namer = _Namer(())

    # ------------------------------------------------------------ function
    def function(self, name: str, func: Function, level: int) -> list[str]:
        if not is_plain_name(name):
            raise IRError(f"function name {name!r} cannot be written in the text form")
        ranges = _canonical_ranges(func)
        attrs = dict(func.attrs)
        if ranges is not None:
            attrs.pop("dim_ranges", None)
        dims = sorted(_DimCollector().function(func) | set(ranges or ()))
        self.namer = _Namer(dims)
        ind, ind1 = _INDENT * level, _INDENT * (level + 1)
        params = ", ".join(f"{self.namer.name(p)}{self._annotation(p)}" for p in func.params)
        out = [f"{ind}@R.function" if func.is_pure else f"{ind}@R.function(pure=False)",
               f"{ind}def {name}({params}) -> {format_sinfo(func.ret_struct_info)}:"]
        for dim in dims:
            out.append(f"{ind1}{dim} = T.int64({_range_args((ranges or {}).get(dim))})")
        if attrs:
            out.append(f"{ind1}R.func_attr({format_attr(attrs)})")
        self.blocks(func.body.blocks, level + 1, out)
        out.append(f"{ind1}return {self.expr(func.body.body)}")
        return out

    @staticmethod
    def _annotation(var: Var) -> str:
        return "" if var.struct_info is None else f": {format_sinfo(var.struct_info)}"

    # ------------------------------------------------------------ blocks and bindings
    def blocks(self, blocks, level: int, out: list[str]) -> None:
        ind = _INDENT * level
        after_ordinary = False
        for block in blocks:
            if isinstance(block, DataflowBlock):
                out.append(f"{ind}with R.dataflow():")
                for b in block.bindings:
                    self.binding(b, level + 1, out)
                outputs = [self.namer.name(b.var) for b in block.bindings
                           if not isinstance(b.var, DataflowVar)]
                if outputs:
                    out.append(f"{ind}{_INDENT}R.output({', '.join(outputs)})")
                elif not block.bindings:
                    out.append(f"{ind}{_INDENT}pass")
                after_ordinary = False
            elif block.bindings:
                if after_ordinary:
                    out.append(f"{ind}R.block_boundary()")
                for b in block.bindings:
                    self.binding(b, level, out)
                after_ordinary = True

    def binding(self, b: Binding, level: int, out: list[str]) -> None:
        ind = _INDENT * level
        if isinstance(b, VarBinding) and isinstance(b.value, If):
            self.if_binding(b, b.value, level, out)
            return
        value = self.expr(b.value)
        if isinstance(b, MatchCast):
            value = f"R.match_cast({value}, {format_sinfo(b.struct_info)})"
        elif not isinstance(b, VarBinding):
            raise IRError(f"cannot print a binding of type {type(b).__name__}")
        out.append(f"{ind}{self.namer.name(b.var)}{self._annotation(b.var)} = {value}{format_span(b.span)}")

    def if_binding(self, b: VarBinding | None, node: If, level: int, out: list[str]) -> None:
        ind = _INDENT * level
        name = self.namer.name(b.var) if b is not None else "result"
        annotation = self._annotation(b.var) if b is not None else ""
        span = format_span(b.span) if b is not None else ""
        out.append(f"{ind}if {self.expr(node.cond)}:{span}")
        for i, branch in enumerate((node.true_branch, node.false_branch)):
            if i:
                out.append(f"{ind}else:")
            self.blocks(branch.blocks, level + 1, out)
            out.append(f"{ind}{_INDENT}{name}{annotation} = {self.expr(branch.body)}")

    # ------------------------------------------------------------ expressions
    def expr(self, e: Expr) -> str:
        method = _EXPR_PRINTERS.get(type(e))
        if method is None:
            raise IRError(f"cannot print a {type(e).__name__} as an expression in the text form")
        return method(self, e)

    def _var(self, v: Var) -> str:
        return self.namer.name(v)

    def _global_var(self, g: GlobalVar) -> str:
        if not is_plain_name(g.name_hint):
            raise IRError(f"function name {g.name_hint!r} cannot be written in the text form")
        return f"cls.{g.name_hint}"

    def _extern_func(self, e: ExternFunc) -> str:
        return f"R.ExternFunc({quote(e.global_symbol)}{self._extern_sinfo(e)})"

    @staticmethod
    def _extern_sinfo(e: ExternFunc) -> str:
        default = FuncStructInfo(None, ObjectStructInfo(), purity=False)
        return "" if e.struct_info == default else f", sinfo={format_sinfo(e.struct_info)}"

    def _constant(self, c: Constant) -> str:
        data = c.data
        dtype = dtype_name(data.dtype)
        default = tensor_sinfo_of_array(data)
        sinfo = "" if c.struct_info == default else f", sinfo={format_sinfo(c.struct_info)}"
        literal = inline_literal(data, dtype)
        if literal is not None:
            shape = "" if _literal_has_shape(data) else f", shape={_shape_tuple(data.shape)}"
            return f"R.const({literal}, {quote(dtype)}{shape}{sinfo})"
        ref = f"metadata[{quote(self.meta.key(c))}]"
        return f"R.const({ref}{sinfo})" if sinfo else ref

    def _prim_value(self, p: PrimValue) -> str:
        if p.dtype.startswith(("int", "uint")):
            value = format_dim(p.value)
        elif p.dtype == "bool":
            value = repr(bool(p.value))
        else:
            value = format_float(p.value)
        return f"R.prim_value({value})" if p.dtype == "int64" else f"R.prim_value({value}, {quote(p.dtype)})"

    def _string_imm(self, s: StringImm) -> str:
        return f"R.str({quote(s.value)})"

    def _shape_expr(self, s: ShapeExpr) -> str:
        return "R.shape([" + ", ".join(format_dim(v) for v in s.values) + "])"

    def _tuple(self, t: Tuple) -> str:
        items = [self.expr(f) for f in t.fields]
        return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"

    def _tuple_getitem(self, t: TupleGetItem) -> str:
        return f"{self.expr(t.tuple_value)}[{t.index}]"

    def _call(self, c: Call) -> str:
        op, args = c.op, list(c.args)
        sinfo_key = "sinfo_args"
        if isinstance(op, Op):
            head = op_spelling(op.name)
            if op.name in OUT_SINFO_OPS:
                sinfo_key = "out_sinfo"
            texts = [self.expr(a) for a in args]
            if args and takes_callee_name(op.name) and isinstance(args[0], ExternFunc) \
                    and not self._extern_sinfo(args[0]):
                texts[0] = quote(args[0].global_symbol)
        elif isinstance(op, (GlobalVar, ExternFunc, Var)):
            head = self.expr(op)
            texts = [self.expr(a) for a in args]
        else:
            raise IRError(f"cannot print a call of a {type(op).__name__}")
        for key in c.attrs:
            if not is_plain_name(key) or key in ("sinfo_args", "out_sinfo"):
                raise IRError(f"attribute name {key!r} cannot be written in the text form")
        texts.extend(f"{k}={format_attr(v)}" for k, v in sorted(c.attrs.items()))
        if c.sinfo_args:
            texts.append(f"{sinfo_key}={format_sinfo_list(c.sinfo_args)}")
        return f"{head}({', '.join(texts)})"


_EXPR_PRINTERS = {
    Var: _FunctionPrinter._var,
    DataflowVar: _FunctionPrinter._var,
    GlobalVar: _FunctionPrinter._global_var,
    ExternFunc: _FunctionPrinter._extern_func,
    Constant: _FunctionPrinter._constant,
    PrimValue: _FunctionPrinter._prim_value,
    StringImm: _FunctionPrinter._string_imm,
    ShapeExpr: _FunctionPrinter._shape_expr,
    Tuple: _FunctionPrinter._tuple,
    TupleGetItem: _FunctionPrinter._tuple_getitem,
    Call: _FunctionPrinter._call,
}


def _range_args(r) -> str:
    if r is None:
        return ""
    lo, hi = r
    return f"lower={lo}" if hi is None else f"lower={lo}, upper={hi}"


def _shape_tuple(shape) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _literal_has_shape(data: np.ndarray) -> bool:
    """Whether a nested list of ``data`` rebuilds its shape (false when a 0
    in the shape hides the dims after it)."""
    return 0 not in data.shape[:-1]


class _DimCollector:
    """The symbolic dim names a function mentions anywhere in its text."""

    def __init__(self):
        self.names: set[str] = set()

    def function(self, func: Function) -> frozenset[str]:
        for p in func.params:
            self.sinfo(p.struct_info)
        self.sinfo(func.ret_struct_info)
        self.seq(func.body)
        return frozenset(self.names)

    def sinfo(self, s) -> None:
        if s is not None:
            self.names |= s.dim_vars()

    def seq(self, seq: SeqExpr) -> None:
        for block in seq.blocks:
            for b in block.bindings:
                self.sinfo(b.var.struct_info)
                if isinstance(b, MatchCast):
                    self.sinfo(b.struct_info)
                self.expr(b.value)
        self.expr(seq.body)

    def attr(self, v) -> None:
        if isinstance(v, DimExpr):
            self.names |= free_vars(v)
        elif isinstance(v, (tuple, list)):
            for x in v:
                self.attr(x)
        elif isinstance(v, dict):
            for x in v.values():
                self.attr(x)

    def expr(self, e) -> None:
        if isinstance(e, Call):
            self.expr(e.op)
            for a in e.args:
                self.expr(a)
            for v in e.attrs.values():
                self.attr(v)
            for s in e.sinfo_args:
                self.sinfo(s)
        elif isinstance(e, Tuple):
            for f in e.fields:
                self.expr(f)
        elif isinstance(e, TupleGetItem):
            self.expr(e.tuple_value)
        elif isinstance(e, ShapeExpr):
            for v in e.values:
                self.names |= free_vars(v)
        elif isinstance(e, PrimValue) and e.dtype.startswith(("int", "uint")):
            self.names |= free_vars(e.value)
        elif isinstance(e, (Constant, ExternFunc)):
            self.sinfo(e.struct_info)
        elif isinstance(e, If):
            self.expr(e.cond)
            self.seq(e.true_branch)
            self.seq(e.false_branch)
