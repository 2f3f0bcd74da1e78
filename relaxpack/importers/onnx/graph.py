"""Walking an ONNX graph: nodes in order, each through its converter."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Mapping

import onnx
from onnx import helper

from ...errors import ModelError, RelaxpackError, UnsupportedOpError
from ...ir.expr import Expr, SeqExpr, Tuple
from .refusals import find_refusal
from .registry import canonical_domain, find_converter
from .context import ImportContext
from .lift import ELEMENT_OPS, derive_shadows, reveal, shadow_of
from .functions import FunctionLibrary, body_opsets, check_depth, instantiate, schema_defaults
from .tensors import tensor_to_array
from .value import Value


def collect_unsupported(graph, opsets: Mapping[str, int],
                        functions: FunctionLibrary | None = None) -> list[tuple[str, str, int]]:
    """Every (domain, op_type, opset) in ``graph`` and its subgraphs with
    neither a converter nor a function body to expand (nor, for a function
    of the model, a body whose ops all have one). Each function of the model
    is looked into once, however often it is called."""
    functions = functions or FunctionLibrary()
    return sorted(_missing(graph.node, opsets, functions, {}))


def _missing(nodes, opsets, functions: FunctionLibrary, seen: dict) -> set:
    """``seen`` maps each local function looked into (or being looked into: a
    function that calls itself) to what it misses."""
    missing = set()
    for node in nodes:
        domain = canonical_domain(node.domain)
        if domain not in opsets:
            missing.add((domain, node.op_type, 0))
        elif find_converter(domain, node.op_type, opsets[domain]) is None:
            local = functions.local_body(domain, node.op_type)
            key = (domain, node.op_type)
            if local is not None:
                if key not in seen:
                    seen[key] = set()
                    seen[key] = _missing(local.node, body_opsets(opsets, local), functions, seen)
                missing |= seen[key]
            elif not functions.has_body(domain, node.op_type, opsets[domain]):
                missing.add((domain, node.op_type, opsets[domain]))
        for attr in node.attribute:
            for sub in subgraphs(attr):
                missing |= _missing(sub.node, opsets, functions, seen)
    return missing


def subgraphs(attr) -> list:
    """The graphs an attribute holds (If's branches, Loop's and Scan's bodies), or none."""
    if attr.type == onnx.AttributeProto.GRAPH:
        return [attr.g]
    if attr.type == onnx.AttributeProto.GRAPHS:
        return list(attr.graphs)
    return []


class _Scope(dict):
    """Value names visible in a (sub)graph: its own, then the enclosing ones."""

    def __init__(self, parent: "Mapping[str, Value] | None" = None):
        super().__init__()
        self.parent = parent

    def lookup(self, name: str) -> Value | None:
        if name in self:
            return self[name]
        return self.parent.lookup(name) if isinstance(self.parent, _Scope) else \
            (self.parent.get(name) if self.parent is not None else None)


class GraphConverter:
    """Converts a graph's nodes; subgraphs (If branches) go through it too."""

    def __init__(self, ctx: ImportContext, model_dir: Path | None, functions: FunctionLibrary | None = None):
        self.ctx = ctx
        self.model_dir = model_dir
        self.functions = functions or FunctionLibrary()
        self.function_depth = 0
        #: the node lists being converted, innermost last: Gradient reads the
        #: forward nodes of its own graph (or function body) from here
        self.node_lists: list[list] = []
        ctx.graphs = self  # converters of control flow reach subgraphs through ctx

    def convert_graph(self, graph, values: Mapping[str, Value], top_level: bool = False) -> list[Value]:
        """Convert every node; returns the values of the graph's outputs."""
        _check_unique_initializers(graph)
        scope = _Scope(values if not top_level else None)
        if top_level:
            scope.update(values)
        for init in graph.initializer if not top_level else ():
            scope[init.name] = self.ctx.const(tensor_to_array(init, self.model_dir))
        nodes = _ordered(graph)
        self.node_lists.append(nodes)
        try:
            for node in nodes:
                self.convert_node(node, scope)
        finally:
            self.node_lists.pop()
        outputs = []
        for out in graph.output:
            value = scope.lookup(out.name)
            if value is None:
                raise ModelError(f"graph output {out.name!r} is not produced by any node or input")
            outputs.append(value)
        return outputs

    def nested_scope(self, parent: Mapping[str, Value]) -> "_Scope":
        """A scope of its own for nodes the importer generates (Gradient's
        backward nodes): they see ``parent``'s values, ``parent`` not theirs."""
        return _Scope(parent)

    def convert_branch(self, graph, outer: Mapping[str, Value]) -> SeqExpr:
        """A subgraph as a SeqExpr (its outputs as the body, a tuple if several).

        A value of an enclosing scope that is first made into IR (or match-cast)
        inside the branch is bound there only: afterwards it is restored, so a
        use after the branch binds it anew in the enclosing scope.
        """
        bb = self.ctx.bb
        saved = [(v, v.expr, v.sinfo, v.sym) for v in _visible_values(outer)]
        bound = self.ctx.lifts.snapshot()
        bb.begin_scope()
        try:
            outputs = self.convert_graph(graph, outer)
            exprs = [self.ctx.expr(v) for v in outputs]
            body: Expr = exprs[0] if len(exprs) == 1 else Tuple(exprs)
            return bb.end_scope(body)          # pops the scope last, once all else succeeded
        except BaseException:
            bb.discard_scope()
            raise
        finally:
            for value, expr, sinfo, contents in saved:
                value.expr, value.sinfo, value.sym = expr, sinfo, contents
            self.ctx.lifts.restore(bound)

    def convert_node(self, node, scope: _Scope) -> None:
        ctx = self.ctx
        domain = canonical_domain(node.domain)
        entry = find_converter(domain, node.op_type, ctx.opsets.get(domain, 0))
        inputs = self._inputs(node, scope)
        if entry is None:
            body = self.functions.body(node, ctx.opsets, inputs)
            if body is None:  # collect_unsupported ran first; this is a subgraph-only path
                refusal = find_refusal(domain, node.op_type)
                if refusal is not None:
                    raise UnsupportedOpError(refusal.message(ctx.opsets.get(domain, 0)))
                raise UnsupportedOpError(f"unsupported op {node.op_type} (domain {domain or 'ai.onnx'}, "
                                         f"opset {ctx.opsets.get(domain, 0)})")
            self._expand(node, body, scope)
            return
        attrs = {a.name: self._attr_value(a) for a in node.attribute}
        with ctx.bb.span(node.name or f"{node.op_type}:{node.output[0] if node.output else ''}"):
            ctx.node, ctx.scope = node, scope
            self._prepare_lifts(node, inputs)
            try:
                result = _call_converter(entry.fn, ctx, node, inputs, attrs)
            except RelaxpackError:
                raise
            except Exception as err:  # e.g. an attribute of the wrong type reaching the converter
                raise RelaxpackError(f"{ctx.node_label()} cannot be converted, it may be malformed: "
                                     f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from err
            ctx.node, ctx.scope = node, scope  # a subgraph's nodes may have set them
            self._bind_outputs(node, result, scope)
            outputs = [scope.get(name) if name else None for name in node.output]
            derive_shadows(ctx, node, entry.fn, inputs, attrs, outputs)

    def _prepare_lifts(self, node, inputs) -> None:
        """Inputs whose lifted dims are bound get them as known contents; the
        inputs of an element-moving op get shadows, to pass on (lift.py)."""
        for name, value in zip(node.input, inputs):
            reveal(self.ctx, value)
            if node.op_type in ELEMENT_OPS and value is not None:
                shadow_of(self.ctx, value, name)

    def _inputs(self, node, scope: _Scope) -> list[Value | None]:
        inputs = []
        for name in node.input:
            if name == "":
                inputs.append(None)  # an omitted optional input; converters check the required ones
                continue
            value = scope.lookup(name)
            if value is None:
                raise ModelError(f"{node.op_type} node {node.name!r} reads {name!r}, which no earlier "
                                     f"node, input or initializer defines")
            inputs.append(value)
        return inputs

    def _expand(self, node, body, scope: _Scope) -> None:
        """Convert ``node`` through its function ``body`` (see functions.py)."""
        ctx = self.ctx
        check_depth(self.function_depth + 1, node)
        nodes, bound = instantiate(node, body, schema_defaults(node, ctx.opsets))
        inner = _Scope()
        inner.update({formal: scope.lookup(actual) for formal, actual in bound.items()})
        saved_opsets = ctx.opsets
        ctx.opsets = body_opsets(saved_opsets, body)
        self.function_depth += 1
        ordered = _ordered_nodes(nodes)
        self.node_lists.append(ordered)
        try:
            for inner_node in ordered:
                self.convert_node(inner_node, inner)
        except RelaxpackError as err:
            label = f"{node.op_type} node {node.name!r}" if node.name else f"{node.op_type} node"
            raise type(err)(f"{label} (expanded from its function body): {err}") from err
        finally:
            ctx.opsets = saved_opsets
            self.function_depth -= 1
            self.node_lists.pop()
        ctx.node, ctx.scope = node, scope
        for formal, actual in zip(body.output, node.output):
            if not actual:
                continue
            value = inner.get(formal)
            if value is None:
                raise RelaxpackError(f"the function body of {node.op_type} does not produce its output {formal!r}")
            scope[actual] = value

    def _attr_value(self, attr):
        if attr.type == onnx.AttributeProto.TENSOR:
            return tensor_to_array(attr.t, self.model_dir)
        if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            return helper.get_attribute_value(attr)
        value = helper.get_attribute_value(attr)
        try:
            if isinstance(value, bytes):
                return value.decode("utf-8")
            if isinstance(value, list):
                return tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
        except UnicodeDecodeError:
            raise RelaxpackError(f"attribute {attr.name!r} of {self.ctx.node_label()} is not valid UTF-8 text") from None
        return value

    def _bind_outputs(self, node, result, scope: _Scope) -> None:
        results = result if isinstance(result, (tuple, list)) else (result,)
        names = list(node.output)
        if len(results) < len([n for n in names if n]):
            raise RelaxpackError(f"{self.ctx.node_label()} produced {len(results)} outputs, "
                                 f"the model uses {len(names)}")
        for name, res in zip(names, results):
            if name == "" or res is None:
                continue
            value = res if isinstance(res, Value) else self.ctx.emit(res, _hint(name))
            scope[name] = value


def _visible_values(scope) -> list[Value]:
    """Every value visible in ``scope`` and the scopes enclosing it."""
    out, seen = [], set()
    while scope is not None:
        for value in scope.values():
            if id(value) not in seen:
                seen.add(id(value))
                out.append(value)
        scope = getattr(scope, "parent", None)
    return out


def _hint(name: str) -> str:
    return name if name.isidentifier() else "lv"


def _call_converter(fn, ctx, node, inputs, attrs):
    try:
        return fn(ctx, *inputs, **attrs)
    except TypeError as err:
        # an attribute (or input count) the converter does not take
        try:
            inspect.signature(fn).bind(ctx, *inputs, **attrs)
        except TypeError as bind_err:
            raise UnsupportedOpError(f"{ctx.node_label()}: {bind_err} (opset {ctx.opset})") from None
        raise err


def _ordered(graph) -> list:
    """The nodes of ``graph`` in a topological order (see :func:`_ordered_nodes`)."""
    return _ordered_nodes(graph.node)


def _reads(node) -> list[str]:
    """The names ``node`` needs computed first: its inputs, the outer names its subgraphs read
    (an If branch may read a value a later node of the graph computes: onnxruntime sorts by
    them too), and for a Gradient node also its ``y`` (it differentiates the nodes computing y,
    which its inputs, the independent variables, do not name)."""
    reads = [*node.input, *_captured(node)]
    if node.op_type == "Gradient" and canonical_domain(node.domain) == "ai.onnx.preview.training":
        reads += [helper.get_attribute_value(a).decode() for a in node.attribute if a.name == "y"]
    return reads


def _captured(node) -> set[str]:
    """The names the subgraphs of ``node`` read from enclosing graphs (nested ones included)."""
    names: set[str] = set()
    for attr in node.attribute:
        for sub in subgraphs(attr):
            inner = {v.name for v in sub.input} | {t.name for t in sub.initializer} | \
                {t.values.name for t in sub.sparse_initializer} | {o for n in sub.node for o in n.output}
            for n in sub.node:
                names.update(name for name in (*n.input, *_captured(n)) if name and name not in inner)
    return names


def _ordered_nodes(nodes) -> list:
    """The nodes in a topological order (the spec requires one; repair if not).

    A name no node of this graph produces comes from an input, an
    initializer or an enclosing graph, and is ready from the start.
    """
    nodes = list(nodes)         # (one Python object a node: protobuf may wrap it anew per iteration)
    local = {o for n in nodes for o in n.output if o}
    reads = [[i for i in _reads(node) if i in local] for node in nodes]
    produced: set[str] = set()
    pending = list(range(len(nodes)))
    ordered, progress = [], True
    while pending and progress:
        progress = False
        rest = []
        for index in pending:
            node = nodes[index]
            if any(i not in produced for i in reads[index]):
                rest.append(index)
                continue
            ordered.append(node)
            produced.update(o for o in node.output if o)
            progress = True
        pending = rest
    if pending:
        names = ", ".join(nodes[i].name or nodes[i].op_type for i in pending[:5])
        raise ModelError(f"the graph has a cycle at: {names}")
    return ordered


def _check_unique_initializers(graph) -> None:
    """Two initializers of one name: ONNX's checker rejects the model (one of
    them would be silently ignored)."""
    seen = set()
    for init in graph.initializer:
        if init.name in seen:
            raise ModelError(f"malformed model: graph {graph.name!r} has two initializers named {init.name!r}")
        seen.add(init.name)


__all__ = ["GraphConverter", "collect_unsupported"]

