"""ONNX ModelProto -> IRModule.

>>> mod = relaxpack.from_onnx("model.onnx", dims={"batch": 8, "seq": (1, 512)})   # doctest: +SKIP

Graph inputs become the parameters of ``main`` with symbolic dims named
after their ``dim_param`` (dims without a usable name get fresh names);
initializers and Constant nodes become IR constants; every node is converted
by the converter registered for its domain, op type and opset, inside a span
that names the node.
"""

from __future__ import annotations

import hashlib
import logging
import re
import reprlib
from pathlib import Path
from typing import Mapping

import onnx

from ...errors import ModelError, RelaxpackError, UnsupportedOpError
from ...ir.block_builder import BlockBuilder
from ...ir.dims import Dim, dim_identifier, sym
from ...ir.expr import Tuple, Var
from ...ir.module import IRModule
from ...ir.struct_info import MapStructInfo, OptionalStructInfo, SequenceStructInfo, TensorStructInfo
from .context import ImportContext
from .functions import FunctionLibrary
from .graph import GraphConverter, collect_unsupported, subgraphs
from .refusals import Refusal, find_refusal
from .tensors import onnx_dtype_name, tensor_to_array
from .value import Value

log = logging.getLogger(__name__)

DimSpec = int | tuple[int, int | None] | str

#: ``dims={"N": UNTIE}`` (``--dim N=?``): every axis the model names ``N`` is a dim of its own.
UNTIE = "?"


def from_onnx(model: "onnx.ModelProto | str | Path", dims: Mapping[str, DimSpec] | None = None) -> IRModule:
    """Import an ONNX model (a ModelProto or a path) into an :class:`IRModule`.

    ``dims`` binds symbolic dims to a value (``{"batch": 8}``) or gives their
    range (``{"seq": (1, 512)}``, an upper bound of ``None`` for none);
    ``{"N": "?"}`` unties a dim_param the model writes on axes that may
    differ (each such axis gets a dim of its own; onnxruntime does not hold
    equal names equal either). Unknown dims (no dim_value or dim_param, a
    negative dim_value as paddle2onnx writes, a placeholder name such as
    "?" or "unk__3") get a fresh dim per axis.
    A model that cannot be imported raises a :class:`RelaxpackError` saying why,
    also when it is malformed in a way no check anticipated.
    """
    try:
        return _from_onnx(model, dims)
    except RelaxpackError:
        raise
    except RecursionError:
        raise ModelError("the model nests subgraphs too deeply to import") from None
    except Exception as err:  # a malformed model no check anticipated: one clear line, not a traceback
        raise ModelError(f"malformed model: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                         ) from err


def _from_onnx(model, dims) -> IRModule:
    model, model_dir, digest = _load(model)
    check_model_structure(model)
    opsets = _opsets(model)
    graph = model.graph
    functions = FunctionLibrary(model)
    functions.check_expansion(graph, opsets)      # before anything is expanded
    unsupported = collect_unsupported(graph, opsets, functions)
    if unsupported:
        raise UnsupportedOpError(_unsupported_message(unsupported))

    bb = BlockBuilder(gradual=True)
    inputs = [inp for inp in graph.input if inp.name not in _initializer_names(graph)]
    namer = _DimNamer(dims or {}, bb, _declared_dim_names(inputs))
    params = [_input_var(inp, namer) for inp in inputs]
    namer.check_all_used()
    ctx = ImportContext(bb, opsets)
    converter = GraphConverter(ctx, model_dir, functions)
    with bb.function("main", params, attrs={"output_names": tuple(o.name for o in graph.output)}):
        values = {p.name_hint: Value(p.struct_info, expr=p) for p in params}
        for init in graph.initializer:
            if init.name not in values:
                values[init.name] = ctx.const(tensor_to_array(init, model_dir))
        outputs = converter.convert_graph(graph, values, top_level=True)
        _check_output_dtypes(graph, outputs)
        exprs = [ctx.expr(v) for v in outputs]
        result = exprs[0] if len(exprs) == 1 else Tuple(exprs)
        bb.emit_func_output(result)
    mod = bb.get().with_attrs(stage="import", source=graph.name or "model", source_sha256=digest,
                              model_metadata=_model_metadata(model))
    log.debug("imported %d nodes", len(graph.node))
    return mod


def _check_output_dtypes(graph, outputs: list[Value]) -> None:
    """A graph output declared of one element type whose value has another is a ModelError:
    onnxruntime refuses such a model ("does not match expected type"), and the archive would
    give the other dtype without a word (skl2onnx's HistGradientBoosting with float64 input
    declares a double output its TreeEnsembleRegressor computes as float32)."""
    for out, value in zip(graph.output, outputs):
        declared = out.type.tensor_type.elem_type if out.type.HasField("tensor_type") else 0
        if not declared or value.dtype is None:
            continue
        try:
            name = onnx_dtype_name(declared, f"graph output {out.name!r}")
        except UnsupportedOpError:
            continue            # a type relaxpack has no dtype for: its op would have been refused
        if name != value.dtype:
            raise ModelError(f"graph output {out.name!r} is declared {name} but the model computes {value.dtype} "
                             f"(onnxruntime refuses it too)")


#: what onnxruntime reports as the version of a model that sets none (INT64_MAX)
_UNSET_VERSION = 2 ** 63 - 1


def _model_metadata(model) -> dict:
    """What onnxruntime's ``ModelMetadata`` reports, kept for the archive (``InferenceSession.get_modelmeta``)."""
    return {"producer_name": model.producer_name, "graph_name": model.graph.name, "domain": model.domain,
            "description": model.doc_string, "graph_description": model.graph.doc_string,
            "version": int(model.model_version) if model.HasField("model_version") else _UNSET_VERSION,
            "custom_metadata_map": {p.key: p.value for p in model.metadata_props}}


def _unsupported_message(unsupported: list[tuple[str, str, int]]) -> str:
    """One line naming every unsupported op; a deliberately refused op says
    why and how to do without it."""
    alike: dict[tuple, list[Refusal]] = {}      # ops refused for one reason share one message
    for dom, op, ver in unsupported:
        if (r := find_refusal(dom, op)) is not None:
            alike.setdefault((r.domain, r.reason, r.workaround, ver), []).append(r)
    plain = [f"{op} (domain {dom or 'ai.onnx'}, opset {ver})" for dom, op, ver in unsupported
             if find_refusal(dom, op) is None]
    parts = [group[0].message(key[3], ", ".join(r.op for r in group) if len(group) > 1 else None)
             for key, group in alike.items()]
    if plain:
        parts.append(f"the model uses {len(plain)} unsupported op(s): {', '.join(plain)}")
    return " | ".join(parts)


def _load(model) -> tuple["onnx.ModelProto", Path | None, str]:
    """The model, the folder its external data is relative to, and the sha256
    of its serialized form (of the file's bytes when read from a file)."""
    if isinstance(model, onnx.ModelProto):
        return model, None, hashlib.sha256(model.SerializeToString()).hexdigest()
    path = Path(model)
    if not path.is_file():
        raise ModelError(f"no such model file: {path}")
    data = path.read_bytes()
    return parse_model(data, path), path.resolve().parent, hashlib.sha256(data).hexdigest()


#: what a relaxpack archive starts with (runtime/archive_check.py), to say so when one is given as a model
_ARCHIVE_MAGIC = b"\x89RPK\r\n\x1a\n"


def parse_model(data: bytes, path) -> "onnx.ModelProto":
    """The ModelProto serialized in ``data`` (read from ``path``), or a ModelError saying what the file is."""
    if data.startswith(_ARCHIVE_MAGIC):
        raise ModelError(f"{path} is a relaxpack archive, not an ONNX model")
    try:
        return onnx.load_model_from_string(data)
    except Exception as err:  # protobuf raises DecodeError and friends
        raise ModelError(f"{path} is not an ONNX model ({type(err).__name__}: {str(err).splitlines()[0]})") from None


def load_model(path) -> "onnx.ModelProto":
    """The model in the file ``path`` with its external data (as ``onnx.load``), checked
    like :func:`from_onnx` checks it: every failure is a one-line ModelError."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"no such model file: {path}")
    model = parse_model(path.read_bytes(), path)
    check_model_structure(model)
    try:
        onnx.load_external_data_for_model(model, str(path.resolve().parent))
    except Exception as err:
        raise ModelError(f"{path}: cannot load its external data ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    return model


def check_model_structure(model: "onnx.ModelProto") -> None:
    """What every model needs: a graph, outputs, and an opset for the ops it uses (ONNX's
    checker asks the same; onnxruntime refuses a model that imports no opset at all)."""
    if not model.HasField("graph"):
        raise ModelError("the model has no graph (an empty file, or not an ONNX model?)")
    if not model.graph.output:
        raise ModelError(f"graph {model.graph.name!r} has no outputs: it computes nothing")
    if not model.opset_import:
        raise ModelError("the model imports no opset: every ModelProto must say which ONNX opset it uses")
    declared = {"" if e.domain in ("", "ai.onnx") else e.domain for e in model.opset_import}
    if "" not in declared and "" in _node_domains(model.graph):
        raise ModelError("the model uses ONNX ops but imports no opset of the default domain (ai.onnx)")


def _opsets(model) -> dict[str, int]:
    """The model's opset imports by domain. A domain its nodes use without
    declaring it (onnxruntime's transformer optimizer leaves com.microsoft
    undeclared; onnxruntime accepts that) counts as opset 1."""
    opsets = {}
    for entry in model.opset_import:
        domain = "" if entry.domain in ("", "ai.onnx") else entry.domain
        opsets[domain] = entry.version
    if "" not in opsets:
        opsets[""] = 1 if not model.opset_import else max(opsets.values(), default=1)
    for domain in _node_domains(model.graph) - set(opsets):
        log.debug("domain %r is used but not declared; taking opset 1", domain)
        opsets[domain] = 1
    return opsets


def _node_domains(graph) -> set[str]:
    domains = set()
    for node in graph.node:
        domains.add("" if node.domain in ("", "ai.onnx") else node.domain)
        for attr in node.attribute:
            for sub in subgraphs(attr):
                domains |= _node_domains(sub)
    return domains


def _initializer_names(graph) -> set[str]:
    return {init.name for init in graph.initializer}


def _input_var(inp, namer: "_DimNamer") -> Var:
    return Var(inp.name, _input_sinfo(inp.type, inp.name, namer))


def _input_sinfo(type_proto, name: str, namer: "_DimNamer"):
    """A graph input's struct info: a tensor with named dims, a map, or a sequence / optional of
    tensors or maps (their elements' dims may differ from one element to the next: only the rank
    is kept)."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        tensor_type = type_proto.tensor_type
        dtype = onnx_dtype_name(tensor_type.elem_type, f"graph input {name!r}")
        if not tensor_type.HasField("shape"):
            return TensorStructInfo(None, dtype)
        return TensorStructInfo(tuple(namer.dim(d, name, i) for i, d in enumerate(tensor_type.shape.dim)), dtype)
    if which == "sequence_type":
        return SequenceStructInfo(_element_sinfo(type_proto.sequence_type.elem_type, name))
    if which == "optional_type":
        elem = type_proto.optional_type.elem_type
        inner = (SequenceStructInfo(_element_sinfo(elem.sequence_type.elem_type, name))
                 if elem.WhichOneof("value") == "sequence_type" else _element_sinfo(elem, name))
        return OptionalStructInfo(inner)
    if which == "map_type":
        return _map_sinfo(type_proto, name)
    raise UnsupportedOpError(f"graph input {name!r} is not a tensor, map, sequence or optional ({which})")


def _map_sinfo(type_proto, name: str) -> MapStructInfo:
    """``map(K, tensor(V))``: a dict of K keys to V scalars, as onnxruntime takes and gives them."""
    value = type_proto.map_type.value_type
    if value.WhichOneof("value") != "tensor_type":
        raise UnsupportedOpError(f"graph input {name!r} is {_type_text(type_proto)}: relaxpack's maps hold "
                                 f"tensors (scalars), as onnxruntime's")
    key = onnx_dtype_name(type_proto.map_type.key_type, f"graph input {name!r}")
    if key != "string" and not key.startswith(("int", "uint")):
        raise UnsupportedOpError(f"graph input {name!r} is {_type_text(type_proto)}: map keys are integers or "
                                 f"strings")
    return MapStructInfo(key, TensorStructInfo((), onnx_dtype_name(value.tensor_type.elem_type,
                                                                   f"graph input {name!r}")))


def _type_text(type_proto) -> str:
    """A short ONNX spelling of a type: ``map(string, float)``, ``seq(map(int64, float))``."""
    which = type_proto.WhichOneof("value")
    if which == "tensor_type":
        return onnx_dtype_name(type_proto.tensor_type.elem_type, "a map's value")
    if which == "map_type":
        key = onnx.TensorProto.DataType.Name(type_proto.map_type.key_type).lower()
        return f"map({key}, {_type_text(type_proto.map_type.value_type)})"
    if which == "sequence_type":
        return f"seq({_type_text(type_proto.sequence_type.elem_type)})"
    if which == "optional_type":
        return f"optional({_type_text(type_proto.optional_type.elem_type)})"
    return str(which)


def _element_sinfo(type_proto, name: str) -> TensorStructInfo | MapStructInfo:
    if type_proto.WhichOneof("value") == "map_type":
        return _map_sinfo(type_proto, name)
    if type_proto.WhichOneof("value") != "tensor_type":
        raise UnsupportedOpError(f"graph input {name!r} holds {_type_text(type_proto)} elements; "
                                 f"relaxpack supports sequences and optionals of tensors and maps")
    tensor_type = type_proto.tensor_type
    dtype = onnx_dtype_name(tensor_type.elem_type, f"graph input {name!r}")
    ndim = len(tensor_type.shape.dim) if tensor_type.HasField("shape") else -1
    return TensorStructInfo(None, dtype, ndim)


_PLACEHOLDER = re.compile(r"^(\?|unk__\d+|-1|None|none|)$")


#: a dim declared as a sum of names (and numbers): ``past_sequence_length + sequence_length``
_SUM = re.compile(r"^\s*\w+(\s*\+\s*\w+)+\s*$")


def _terms(name: str) -> list[str]:
    return [t.strip() for t in name.split("+")]


def _declared_dim_names(inputs) -> set[str]:
    """The dim names the model's tensor inputs declare (placeholders such as ``?`` excepted)."""
    return {dim_identifier(d.dim_param) for inp in inputs if inp.type.WhichOneof("value") == "tensor_type"
            for d in inp.type.tensor_type.shape.dim
            if d.HasField("dim_param") and not _PLACEHOLDER.match(d.dim_param)}


class _DimNamer:
    """Turns ONNX dims into IR dims, applying the user's ``dims``.

    An unnamed dim is named after its input and axis (``x_dim0``), avoiding the names the model
    declares, so that its name does not depend on the ``dims`` given: the name ``check`` or
    ``inspect`` shows is the one ``--dim`` binds.
    """

    def __init__(self, dims: Mapping[str, DimSpec], bb: BlockBuilder, declared: set[str]):
        self.spec = {dim_identifier(k): v for k, v in dims.items()}     # a model's spelling or relaxpack's
        self.bb = bb
        self.declared = set(declared)
        self.used: set[str] = set()
        self.untied: set[str] = set()

    def dim(self, d, input_name: str, axis: int) -> Dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            return int(d.dim_value)
        # a negative dim_value (paddle2onnx's -1) is unknown, as onnxruntime reads it
        name = d.dim_param if d.HasField("dim_param") else ""
        if _PLACEHOLDER.match(name):
            name = self._fresh(f"{input_name}_dim{axis}")
        elif _SUM.match(name) and all(t.isdigit() or t in self.declared for t in _terms(name)):
            # optimum's attention mask: "past_sequence_length + sequence_length", both declared
            return sum((int(t) if t.isdigit() else self._apply(t) for t in _terms(name)), start=0)
        else:
            name = dim_identifier(name)
            if self.spec.get(name) == UNTIE:
                self.untied.add(name)
                name = name if name not in self.used else self._fresh(name)
                self.used.add(name)
                return sym(name)
        return self._apply(name)

    def _fresh(self, base: str) -> str:
        base = dim_identifier(base)
        name, k = base, 1
        while name in self.used or name in self.declared:
            k += 1
            name = f"{base}_{k}"
        return name

    def _apply(self, name: str) -> Dim:
        self.used.add(name)
        spec = self.spec.get(name)
        if spec is None:
            return sym(name)
        if _dim_value(spec):
            return spec
        if isinstance(spec, tuple) and len(spec) == 2 and _dim_value(spec[0]) and (
                spec[1] is None or (_dim_value(spec[1]) and spec[1] >= spec[0])):
            lo, hi = spec
            self.bb.analyzer.set_range(name, lo, hi)
            return sym(name)
        raise RelaxpackError(f"dims[{name!r}] must be an int, a (lo, hi) pair of ints in 0..2**48 "
                             f"(lo <= hi, hi may be None) or {UNTIE!r}, got {reprlib.repr(spec)}")

    def check_all_used(self) -> None:
        unknown = sorted(set(self.spec) - self.used - self.untied)
        if unknown:
            raise RelaxpackError(f"dims {unknown} do not name any dim of the model's inputs "
                                 f"(its dims are {sorted(self.used) or 'all static'})")


def _dim_value(value) -> bool:
    """Whether ``value`` can be a dim: an int in 0..2**48 (as archives bound dims)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1 << 48


