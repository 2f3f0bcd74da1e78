"""The text parser: reads what :mod:`relaxpack.ir.printer` writes back into
an :class:`IRModule`, with the standard :mod:`ast` module (no lexer of ours).

>>> mod = parse('''
... @I.ir_module
... class Module:
...     @R.function
...     def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
...         n = T.int64(lower=1)
...         with R.dataflow():
...             gv: R.Tensor(("n", 4), "float32") = R.exp(x)  # span: /Exp
...             R.output(gv)
...         return gv
... ''')
>>> mod["main"].attrs["dim_ranges"]
(('n', 1, None),)

Values are normalized with a :class:`BlockBuilder`, so a call's struct info
is inferred by its op; a binding's annotation, when present, is the var's
struct info. Op attributes left out take the op's defaults (as with
``make_call``). Every error is a :class:`~relaxpack.errors.ParseError` whose
message starts with the line number.
"""

from __future__ import annotations

import ast
import contextlib
import io
import tokenize
from typing import Mapping

import numpy as np

from ..errors import ParseError
from .block_builder import BlockBuilder
from .dims import Dim, DimAnalyzer, sym
from .expr import (
    Constant, DataflowVar, Function, GlobalVar, If, MatchCast, Span, Var, VarBinding,
)
from .module import IRModule
from .struct_info import FuncStructInfo
from .parser_expr import ExprReader, dotted, fail, is_call_to
from .text_syntax import RESERVED_NAMES, decode_tensor_data, parse_span_comment


def parse(text: str, metadata: Mapping[str, np.ndarray] | None = None) -> IRModule:
    """The module written in ``text`` (the format of ``IRModule.script()``).

    ``metadata`` supplies the large constants (``metadata["c0"]``) of a text
    printed with ``show_meta=False``; see ``printer.module_metadata``.
    """
    if not isinstance(text, str):
        raise ParseError(f"parse expects a str, got {type(text).__name__}")
    try:
        return _ModuleParser(text, metadata).run()
    except RecursionError:
        raise ParseError("the text is nested too deeply to parse") from None


def _span_comments(text: str) -> dict[int, Span]:
    """The ``# span: ...`` comments of ``text`` by line number."""
    spans: dict[int, Span] = {}
    if "#" not in text:
        return spans
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                try:
                    span = parse_span_comment(tok.string)
                except ValueError as err:
                    raise ParseError(f"line {tok.start[0]}: bad span comment: {err}") from None
                if span is not None:
                    spans[tok.start[0]] = span
    except (tokenize.TokenError, SyntaxError) as err:
        raise ParseError(f"cannot read the comments: {err}") from None
    return spans


class _ModuleParser(ExprReader):
    def __init__(self, text: str, metadata: Mapping[str, np.ndarray] | None):
        self.text = text
        self.given_metadata = dict(metadata or {})
        self.text_metadata: dict[str, np.ndarray] = {}
        self.constants: dict[str, Constant] = {}
        self.globals: dict[str, GlobalVar] = {}

    def run(self) -> IRModule:
        try:
            tree = ast.parse(self.text)
        except SyntaxError as err:
            raise ParseError(f"line {err.lineno}: invalid syntax: {err.msg}") from None
        except ValueError as err:
            raise ParseError(f"cannot parse the text: {err}") from None
        self.spans = _span_comments(self.text)
        classes = []
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                classes.append(stmt)
            elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                    and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == "metadata":
                self._read_metadata(stmt.value)
            elif not isinstance(stmt, (ast.Import, ast.ImportFrom)) and not _is_docstring(stmt):
                raise fail(stmt, "expected a module class (@I.ir_module class Module:) or the "
                                 "metadata table")
        if len(classes) != 1:
            raise fail(classes[1] if classes else None,
                       f"expected one @I.ir_module class, found {len(classes)}")
        return self._module(classes[0])

    # ------------------------------------------------------------ metadata
    def _read_metadata(self, node: ast.AST) -> None:
        if not isinstance(node, ast.Dict):
            raise fail(node, "metadata must be a dict of R.tensor_data(...) entries")
        for key_node, value in zip(node.keys, node.values):
            key = self.string(key_node, "a metadata key") if key_node is not None else None
            if key is None or key in self.text_metadata:
                raise fail(node, f"metadata key {key!r} is missing or repeated")
            if not is_call_to(value, "R", "tensor_data") or len(value.args) != 3 or value.keywords:
                raise fail(value, "a metadata entry must be R.tensor_data(dtype, shape, data)")
            dtype_node, shape_node, data_node = value.args
            dtype = self.dtype(dtype_node)
            if not isinstance(shape_node, ast.Tuple):
                raise fail(shape_node, "the shape of R.tensor_data must be a tuple of ints")
            shape = tuple(self.integer(e, "a shape dim") for e in shape_node.elts)
            payload = self._payload(data_node)
            try:
                self.text_metadata[key] = decode_tensor_data(dtype, shape, payload)
            except (ValueError, TypeError) as err:
                raise fail(value, f"bad data for metadata[{key!r}]: {err}") from None

    def _payload(self, node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.List) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, (str, bytes)) for e in node.elts):
            return [e.value for e in node.elts]
        raise fail(node, "tensor data must be a base64 string (or a list of strings)")

    def metadata_constant(self, key: str, node: ast.AST) -> Constant:
        const = self.constants.get(key)
        if const is None:
            if key in self.given_metadata:
                data = np.asarray(self.given_metadata[key])
            elif key in self.text_metadata:
                data = self.text_metadata[key]
            else:
                raise fail(node, f"metadata[{key!r}] is not defined: the text has no such entry in its "
                                 f"metadata table (text printed with show_meta=False needs the constants: "
                                 f"parse(text, metadata=...))")
            const = self.constants[key] = Constant(data)
        return const

    # ------------------------------------------------------------ module
    def lookup_global(self, name: str, node: ast.AST) -> GlobalVar:
        gv = self.globals.get(name)
        if gv is None:
            raise fail(node, f"the module has no function {name!r}")
        return gv

    def _module(self, cls: ast.ClassDef) -> IRModule:
        if len(cls.decorator_list) != 1 or dotted(cls.decorator_list[0]) != ["I", "ir_module"]:
            raise fail(cls, "the module class must be decorated with @I.ir_module")
        attrs: dict = {}
        defs: list[ast.FunctionDef] = []
        for stmt in cls.body:
            if isinstance(stmt, ast.FunctionDef):
                defs.append(stmt)
            elif isinstance(stmt, ast.Expr) and is_call_to(stmt.value, "I", "module_attrs"):
                call = stmt.value
                if attrs or len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Dict):
                    raise fail(stmt, "write the module attributes once, as I.module_attrs({...})")
                attrs = self.attr(call.args[0])
            elif not isinstance(stmt, ast.Pass) and not _is_docstring(stmt):
                raise fail(stmt, "expected a @R.function or I.module_attrs({...}) in the module class")
        signatures = {}
        for fdef in defs:
            if fdef.name in signatures:
                raise fail(fdef, f"function {fdef.name!r} is defined twice")
            signatures[fdef.name] = self._signature(fdef)
            params, ret, pure = signatures[fdef.name]
            sinfo = FuncStructInfo(tuple(s for _, s in params), ret, pure)
            self.globals[fdef.name] = GlobalVar(fdef.name, struct_info=sinfo)
        functions = {fdef.name: _FunctionParser(self, fdef, signatures[fdef.name]).run() for fdef in defs}
        return IRModule(functions, attrs)

    def _signature(self, fdef: ast.FunctionDef):
        pure = True
        if len(fdef.decorator_list) != 1:
            raise fail(fdef, f"function {fdef.name!r} must be decorated with @R.function")
        deco = fdef.decorator_list[0]
        if isinstance(deco, ast.Call) and dotted(deco.func) == ["R", "function"]:
            if deco.args:
                raise fail(deco, "@R.function takes only pure=")
            kwargs = self.keywords(deco, ("pure",))
            if "pure" in kwargs:
                pure = self.attr(kwargs["pure"])
                if not isinstance(pure, bool):
                    raise fail(deco, "pure= must be True or False")
        elif dotted(deco) != ["R", "function"]:
            raise fail(deco, f"function {fdef.name!r} must be decorated with @R.function")
        a = fdef.args
        if a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults:
            raise fail(fdef, f"function {fdef.name!r}: parameters are plain `name: <struct info>`")
        params = []
        for arg in a.args:
            if arg.annotation is None:
                raise fail(arg, f"parameter {arg.arg!r} needs a struct info annotation")
            params.append((arg.arg, self.sinfo(arg.annotation)))
        if fdef.returns is None:
            raise fail(fdef, f"function {fdef.name!r} needs a return annotation (-> <struct info>)")
        return params, self.sinfo(fdef.returns), pure


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def _target(stmt: ast.stmt) -> ast.Name | None:
    """The single name an assignment binds (``None`` when it is not one)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target
    return None


def _is_dim_decl(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Assign) and is_call_to(stmt.value, "T", "int64")


def _is_stmt_call(stmt: ast.stmt, *path: str) -> bool:
    return isinstance(stmt, ast.Expr) and is_call_to(stmt.value, *path)


class _FunctionParser(ExprReader):
    """Reads one function; a BlockBuilder normalizes values as they come."""

    def __init__(self, module: _ModuleParser, fdef: ast.FunctionDef, signature):
        self.module, self.fdef = module, fdef
        self.params_sig, self.ret, self.pure = signature
        self.dims: dict[str, Dim] = {}
        self.ranges: dict[str, tuple] = {}
        self.attrs: dict | None = None      # R.func_attr({...}), read once
        self.scopes: list[dict[str, Var]] = [{}]

    # hooks of ExprReader
    def lookup_var(self, node: ast.Name) -> Var:
        for scope in reversed(self.scopes):
            if node.id in scope:
                return scope[node.id]
        if node.id in self.dims:
            raise fail(node, f"{node.id!r} is a symbolic dim, not a var; use R.prim_value({node.id}) "
                             f"or R.shape([{node.id}])")
        raise fail(node, f"undefined var {node.id!r}")

    def lookup_global(self, name: str, node: ast.AST) -> GlobalVar:
        return self.module.lookup_global(name, node)

    def metadata_constant(self, key: str, node: ast.AST) -> Constant:
        return self.module.metadata_constant(key, node)

    def define(self, name_node: ast.Name, var: Var) -> None:
        name = name_node.id
        if any(name in scope for scope in self.scopes):
            raise fail(name_node, f"var {name!r} is defined twice")
        self.scopes[-1][name] = var

    def check_new_name(self, node: ast.Name) -> None:
        if node.id in RESERVED_NAMES:
            raise fail(node, f"{node.id!r} is a reserved name")
        if node.id in self.dims:
            raise fail(node, f"{node.id!r} is already a symbolic dim")
        if any(node.id in scope for scope in self.scopes):
            raise fail(node, f"var {node.id!r} is defined twice")

    # ------------------------------------------------------------ function
    def run(self) -> Function:
        body = self.fdef.body
        if not isinstance(body[-1], ast.Return) or body[-1].value is None:
            raise fail(body[-1], f"function {self.fdef.name!r} must end with `return <expr>`")
        for stmt in body[:-1]:
            if _is_dim_decl(stmt):
                self._declare_dim(stmt)
            elif _is_stmt_call(stmt, "R", "func_attr"):
                self._func_attr(stmt.value)
        if self.attrs is None:
            self.attrs = {}
        elif "dim_ranges" in self.attrs and self.ranges:
            raise fail(self.fdef, "dim_ranges is given both in R.func_attr and by T.int64(lower=..., upper=...)")
        analyzer = self._analyzer()
        params = []
        for arg, (name, sinfo) in zip(self.fdef.args.args, self.params_sig):
            name_node = ast.Name(name, lineno=arg.lineno)
            self.check_new_name(name_node)
            var = Var(name, struct_info=sinfo)
            self.define(name_node, var)
            params.append(var)
        self.bb = BlockBuilder(analyzer=analyzer)
        with self.bb.function_scope(params):
            self.bb.begin_scope()
            self.statements(body[:-1], top=True)
            with self.at(body[-1]):
                seq = self.bb.end_scope(self.expr(body[-1].value))
        attrs = dict(self.attrs)
        if self.ranges:
            attrs["dim_ranges"] = tuple((n, *self.ranges[n]) for n in sorted(self.ranges))
        with self.at(self.fdef):
            return Function(tuple(params), seq, self.ret, self.pure, attrs)

    def _declare_dim(self, stmt: ast.Assign) -> None:
        target, call = _target(stmt), stmt.value
        if target is None:
            raise fail(stmt, "declare a symbolic dim as `name = T.int64()`")
        if target.id in self.dims:
            raise fail(stmt, f"symbolic dim {target.id!r} is declared twice")
        if call.args:
            raise fail(call, "T.int64 takes only lower= and upper=")
        kwargs = self.keywords(call, ("lower", "upper"))
        with self.at(stmt):
            self.dims[target.id] = sym(target.id)
        if kwargs:
            lower = self.integer(kwargs["lower"], "lower") if "lower" in kwargs else 0
            upper = self._optional(kwargs.get("upper"), lambda n: self.integer(n, "upper"))
            self.ranges[target.id] = (lower, upper)

    def _func_attr(self, call: ast.Call) -> None:
        if self.attrs is not None or len(call.args) != 1 or call.keywords or not isinstance(call.args[0], ast.Dict):
            raise fail(call, "write the function attributes once, as R.func_attr({...})")
        self.attrs = self.attr(call.args[0])

    def _analyzer(self) -> DimAnalyzer:
        analyzer = DimAnalyzer()
        ranges = [(n, *r) for n, r in self.ranges.items()]
        if "dim_ranges" in self.attrs:
            ranges = self.attrs["dim_ranges"]
        with self.at(self.fdef):
            for entry in ranges if isinstance(ranges, tuple | list) else ():
                if isinstance(entry, tuple) and len(entry) == 3:
                    analyzer.set_range(*entry)
        return analyzer

    # ------------------------------------------------------------ statements
    def statements(self, stmts, top: bool = False, outputs: frozenset[str] | None = None) -> None:
        for stmt in stmts:
            with self.at(stmt):
                self.statement(stmt, top, outputs)

    def statement(self, stmt: ast.stmt, top: bool, outputs: frozenset[str] | None) -> None:
        if _is_dim_decl(stmt) or _is_stmt_call(stmt, "R", "func_attr"):
            if not top:
                raise fail(stmt, "declare symbolic dims and function attributes at the top of the function")
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            self.binding(stmt, outputs)
        elif isinstance(stmt, ast.With):
            self.dataflow_block(stmt, outputs)
        elif isinstance(stmt, ast.If):
            self.if_binding(stmt, outputs)
        elif _is_stmt_call(stmt, "R", "block_boundary"):
            if outputs is not None or stmt.value.args or stmt.value.keywords:
                raise fail(stmt, "R.block_boundary() takes no arguments and separates ordinary blocks")
            self.bb.begin_block(is_dataflow=False)
        elif _is_stmt_call(stmt, "R", "output"):
            raise fail(stmt, "R.output(...) must be the last statement of a `with R.dataflow():` block")
        elif isinstance(stmt, ast.Return):
            raise fail(stmt, "`return` must be the last statement of the function")
        elif not isinstance(stmt, ast.Pass) and not _is_docstring(stmt):
            raise fail(stmt, "expected a binding (`name: <struct info> = <value>`), `with R.dataflow():` "
                             "or `if`")

    def _span(self, stmt: ast.stmt, whole: bool = True) -> Span | None:
        last = (stmt.end_lineno or stmt.lineno) if whole else stmt.lineno
        for line in range(stmt.lineno, last + 1):
            if line in self.module.spans:
                return self.module.spans[line]
        return None

    @contextlib.contextmanager
    def _with_span(self, span: Span | None):
        if span is None:
            yield
        else:
            with self.bb.span(*span.sources):
                yield

    def _new_var(self, name: ast.Name, outputs: frozenset[str] | None, sinfo) -> Var:
        cls = DataflowVar if outputs is not None and name.id not in outputs else Var
        return cls(name.id, struct_info=sinfo)

    def binding(self, stmt: ast.Assign | ast.AnnAssign, outputs: frozenset[str] | None) -> None:
        target = _target(stmt)
        if target is None:
            raise fail(stmt, "a binding assigns one name: `name: <struct info> = <value>`")
        self.check_new_name(target)
        annotation = self.sinfo(stmt.annotation) if isinstance(stmt, ast.AnnAssign) else None
        span = self._span(stmt)
        with self._with_span(span):
            if is_call_to(stmt.value, "R", "match_cast"):
                call = stmt.value
                if len(call.args) != 2 or call.keywords:
                    raise fail(call, "R.match_cast takes a value and a struct info")
                value = self.bb.normalize(self.expr(call.args[0]))
                cast = self.sinfo(call.args[1])
                var = self._new_var(target, outputs, cast if annotation is None else annotation)
                self.bb.emit_binding(MatchCast(var, value, cast, span=span))
            else:
                value = self.bb.normalize(self.expr(stmt.value))
                var = self._new_var(target, outputs, value.struct_info if annotation is None else annotation)
                self.bb.emit_binding(VarBinding(var, value, span=span))
        self.define(target, var)

    def dataflow_block(self, stmt: ast.With, outputs: frozenset[str] | None) -> None:
        if len(stmt.items) != 1 or stmt.items[0].optional_vars is not None \
                or not is_call_to(stmt.items[0].context_expr, "R", "dataflow") \
                or stmt.items[0].context_expr.args or stmt.items[0].context_expr.keywords:
            raise fail(stmt, "the only `with` block is `with R.dataflow():`")
        if outputs is not None:
            raise fail(stmt, "dataflow blocks cannot be nested")
        body, names = list(stmt.body), []
        if _is_stmt_call(body[-1], "R", "output"):
            out = body.pop().value
            if out.keywords or not all(isinstance(a, ast.Name) for a in out.args):
                raise fail(out, "R.output lists the names of vars bound in the block")
            names = [a for a in out.args]
            if len({a.id for a in names}) != len(names):
                raise fail(out, "R.output names a var twice")
        self.scopes.append({})
        with self.bb.dataflow():
            self.statements(body, outputs=frozenset(a.id for a in names))
        scope = self.scopes.pop()
        for name in names:
            if name.id not in scope:
                raise fail(name, f"R.output names {name.id!r}, which this dataflow block does not bind")
            self.define(name, scope[name.id])

    def if_binding(self, stmt: ast.If, outputs: frozenset[str] | None) -> None:
        if not stmt.orelse:
            raise fail(stmt, "an `if` needs an `else` branch")
        cond = self.expr(stmt.test)
        target, annotations, branches = None, [], []
        for body in (stmt.body, stmt.orelse):
            last = body[-1]
            name = _target(last)
            if name is None or is_call_to(last.value, "R", "match_cast"):
                raise fail(last, "an if branch must end by assigning the if's result, like "
                                 "`r: R.Tensor(...) = lv`")
            if target is not None and name.id != target.id:
                raise fail(last, f"both branches must assign the same var ({target.id!r}, not {name.id!r})")
            target = name
            if isinstance(last, ast.AnnAssign):
                annotations.append(self.sinfo(last.annotation))
            self.bb.begin_scope()
            self.scopes.append({})
            self.statements(body[:-1])
            with self.at(last):
                branches.append(self.bb.end_scope(self.expr(last.value)))
            self.scopes.pop()
        if len(annotations) == 2 and annotations[0] != annotations[1]:
            raise fail(stmt, f"the branches annotate {target.id!r} with different struct info")
        self.check_new_name(target)
        span = self._span(stmt, whole=False)
        with self._with_span(span):
            value = self.bb.normalize(If(cond, *branches))
        var = self._new_var(target, outputs, annotations[0] if annotations else value.struct_info)
        self.bb.emit_binding(VarBinding(var, value, span=span))
        self.define(target, var)
