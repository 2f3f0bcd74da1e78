"""ONNX functions: ops defined by a function body are expanded in place.

An op with no converter of its own is imported through its body when it has
one: a function of the model (``ModelProto.functions``) or the function body
that onnx's schema gives the op (``HannWindow``, ``CenterCropPad``,
``AffineGrid``, ``LinearAttention``, ...; some bodies depend on the node's
attributes and input types, and are asked for with both). The body's nodes
are converted like any others, in a scope of their own where the function's
formal inputs name the caller's values; attribute references (``ref_attr_name``)
take the caller's attribute or the function's default, and the body's opsets
apply while it is converted.

>>> lib = FunctionLibrary(model)                         # doctest: +SKIP
>>> body = lib.body(node, opsets, input_values)          # a FunctionProto or None
"""

from __future__ import annotations

from typing import Mapping, Sequence

import onnx
from onnx import defs

from ...errors import RelaxpackError
from .registry import canonical_domain, find_converter
from .value import Value

#: nodes a model may expand to through its own functions (the archive holds at
#: most 2**20 instructions: a model past this could not be saved anyway)
MAX_EXPANDED_NODES = 1 << 20


class FunctionLibrary:
    """The function bodies an import may expand: the model's own, then onnx's."""

    def __init__(self, model: "onnx.ModelProto | None" = None):
        self.local = {}
        for fn in model.functions if model is not None else ():
            self.local[(canonical_domain(fn.domain), fn.name)] = fn

    def has_body(self, domain: str, op_type: str, opset: int) -> bool:
        """Whether (domain, op_type) at ``opset`` can be expanded (without
        asking for a context-dependent body, which needs the inputs)."""
        if (domain, op_type) in self.local:
            return True
        schema = _schema(domain, op_type, opset)
        return schema is not None and (_has_plain_body(schema, opset) or schema.has_context_dependent_function)

    def local_body(self, domain: str, op_type: str):
        return self.local.get((domain, op_type))

    def check_expansion(self, graph, opsets: Mapping[str, int]) -> int:
        """The number of nodes ``graph`` expands to through the model's functions
        (subgraphs included), counted with each function's size memoized, so two
        calls per level, 30 levels deep, are refused in microseconds, not expanded
        2**30 times. Raises when it is more than :data:`MAX_EXPANDED_NODES` or a
        function calls itself."""
        total = _expanded(graph.node, opsets, self, {}, [])
        if total > MAX_EXPANDED_NODES:
            raise RelaxpackError(f"the model expands to more than {MAX_EXPANDED_NODES} nodes through its functions")
        return total

    def body(self, node, opsets: Mapping[str, int], inputs: Sequence[Value | None]):
        """The FunctionProto to expand ``node`` with, or None when there is none."""
        domain = canonical_domain(node.domain)
        local = self.local.get((domain, node.op_type))
        if local is not None:
            return local
        opset = opsets.get(domain, 0)
        schema = _schema(domain, node.op_type, opset)
        if schema is None:
            return None
        if _has_plain_body(schema, opset):
            return _parsed(schema.get_function_with_opset_version(
                _body_opset(schema.function_opset_versions, opset)))
        if schema.has_context_dependent_function:
            protos = [_type_proto(v) for v in inputs]
            if any(p is None for p in protos):  # onnx crashes on an input of unknown type
                return None
            types = [p.SerializeToString() for p in protos]
            version = _body_opset(schema.context_dependent_function_opset_versions, opset)
            return _parsed(schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), types))
        return None


def _parsed(data) -> "onnx.FunctionProto | None":
    if isinstance(data, onnx.FunctionProto):
        return data
    if not data:
        return None
    proto = onnx.FunctionProto()
    proto.ParseFromString(data)
    return proto


def schema_defaults(node, opsets: Mapping[str, int]) -> dict:
    """The default values (AttributeProtos) the op's schema declares."""
    domain = canonical_domain(node.domain)
    schema = _schema(domain, node.op_type, opsets.get(domain, 0))
    if schema is None:
        return {}
    return {name: attr.default_value for name, attr in schema.attributes.items()
            if attr.default_value.type != onnx.AttributeProto.UNDEFINED}


def _schema(domain: str, op_type: str, opset: int):
    if opset <= 0:
        return None
    try:
        return defs.get_schema(op_type, opset, domain)
    except defs.SchemaError:
        return None


def _has_plain_body(schema, opset: int) -> bool:
    return schema.has_function and _body_opset(schema.function_opset_versions, opset) is not None


def _body_opset(versions, opset: int) -> int | None:
    """The newest body version written for an opset no newer than the model's."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _type_proto(value: Value | None) -> "onnx.TypeProto | None":
    """What a context-dependent body asks of an input: its type, element
    type and rank (dims as far as they are known); None when unknown."""
    if value is None:
        return onnx.TypeProto()  # an omitted optional input
    return _sinfo_type(value.sinfo)


def _sinfo_type(sinfo) -> "onnx.TypeProto | None":
    from ...ir.struct_info import OptionalStructInfo, SequenceStructInfo, TensorStructInfo
    from .tensors import onnx_elem_type  # the inverse of onnx_dtype_name
    proto = onnx.TypeProto()
    if isinstance(sinfo, (SequenceStructInfo, OptionalStructInfo)):
        elem = _sinfo_type(sinfo.elem)
        if elem is None:
            return None
        target = proto.sequence_type if isinstance(sinfo, SequenceStructInfo) else proto.optional_type
        target.elem_type.CopyFrom(elem)
        return proto
    if not isinstance(sinfo, TensorStructInfo) or sinfo.dtype is None:
        return None
    tensor = proto.tensor_type
    tensor.elem_type = onnx_elem_type(sinfo.dtype)
    if sinfo.ndim >= 0:
        tensor.shape.SetInParent()
        for dim in sinfo.shape if sinfo.shape is not None else (None,) * sinfo.ndim:
            entry = tensor.shape.dim.add()
            if isinstance(dim, int):
                entry.dim_value = dim
    return proto


# ---------------------------------------------------------------- instantiation


def instantiate(node, body, schema_defaults: Mapping | None = None) -> tuple[list, dict[str, str]]:
    """The body's nodes with the caller's attributes substituted, and the
    formal input -> caller value name map (unbound optional inputs omitted;
    the nodes then read them as ``""``, an omitted input). An attribute the
    caller leaves out takes the function's default, or the op schema's."""
    bound = {formal: actual for formal, actual in zip(body.input, node.input) if actual}
    caller = {a.name: a for a in node.attribute}
    defaults = {**(schema_defaults or {}), **{a.name: a for a in body.attribute_proto}}
    unbound = set(body.input) - set(bound)
    nodes = [_substitute(n, caller, defaults, unbound) for n in body.node]
    return nodes, bound


def _substitute(node, caller, defaults, unbound):
    out = onnx.NodeProto()
    out.CopyFrom(node)
    del out.attribute[:]
    for attr in node.attribute:
        resolved = _resolve(attr, caller, defaults, unbound)
        if resolved is not None:
            out.attribute.append(resolved)
    if unbound:
        for i, name in enumerate(out.input):
            if name in unbound:
                out.input[i] = ""
    return out


def _resolve(attr, caller, defaults, unbound):
    if attr.ref_attr_name:
        source = caller.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
        if source is None:
            return None  # not given and no default: the body node's own default applies
        resolved = onnx.AttributeProto()
        resolved.CopyFrom(source)
        resolved.name = attr.name
        return resolved
    if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        resolved = onnx.AttributeProto()
        resolved.CopyFrom(attr)
        graphs = [resolved.g] if attr.type == onnx.AttributeProto.GRAPH else list(resolved.graphs)
        for graph in graphs:
            subs = [_substitute(n, caller, defaults, unbound) for n in graph.node]
            del graph.node[:]
            graph.node.extend(subs)
        return resolved
    return attr


def body_opsets(opsets: Mapping[str, int], body) -> dict[str, int]:
    """The opsets the body's nodes are converted with: the body's imports
    over the model's."""
    merged = dict(opsets)
    for entry in body.opset_import:
        merged[canonical_domain(entry.domain)] = entry.version
    return merged


def _expanded(nodes, opsets: Mapping[str, int], library: FunctionLibrary, sizes: dict, path: list) -> int:
    """Nodes after expansion; ``sizes`` memoizes each local function's, ``path`` is the
    chain of functions being counted (a function met again on it calls itself)."""
    total = 0
    for node in nodes:
        domain = canonical_domain(node.domain)
        key = (domain, node.op_type)
        body = library.local.get(key)
        if body is not None and find_converter(domain, node.op_type, opsets.get(domain, 0)) is None:
            if key not in sizes:
                if key in path:
                    chain = " -> ".join(name for _, name in path[path.index(key):] + [key])
                    raise RelaxpackError(f"function {node.op_type!r} calls itself ({chain}): it would expand forever")
                path.append(key)
                sizes[key] = _expanded(body.node, body_opsets(opsets, body), library, sizes, path)
                path.pop()
                if sizes[key] > MAX_EXPANDED_NODES:
                    raise RelaxpackError(f"function {node.op_type!r} expands to more than {MAX_EXPANDED_NODES} nodes "
                                         f"(calls of functions that call others, several times per level)")
            total += sizes[key]
        else:
            total += 1
        for attr in node.attribute:
            for graph in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                          attr.graphs if attr.type == onnx.AttributeProto.GRAPHS else ()):
                total += _expanded(graph.node, opsets, library, sizes, path)
        if total > MAX_EXPANDED_NODES:
            return total            # enough to refuse: stop counting
    return total


def check_depth(depth: int, node) -> None:
    """A function that (through others) calls itself would expand forever."""
    if depth > 32:
        raise RelaxpackError(f"{node.op_type} node {node.name!r}: function bodies nest more than 32 deep "
                             f"(a function that calls itself?)")
