"""Spellings shared by the text printer and parser.

The text form is Python syntax (TVMScript-like); this module holds the
pieces both directions must agree on: how struct info, attribute values,
inline constants and span comments are written, which names are reserved,
and how dtypes map to numpy.

Struct info (symbolic dims are strings, static dims ints)::

    R.Tensor(("n", 4), "float32")     R.Tensor("float32", ndim=2)    R.Tensor("float32")
    R.Tensor(ndim=-1)                 R.Tensor((2,), "int64", vdevice="fast")
    R.Tuple(R.Tensor(...), ...)       R.Shape(["n", 4])   R.Shape(ndim=2)   R.Shape(ndim=-1)
    R.Prim("int64")  R.Prim("int64", value="n + 1")       R.Object
    R.Callable((params...), ret, pure=True)       R.Callable(None, ret, pure=False)
    R.Sequence(R.Tensor("float32", ndim=2))      R.Optional(R.Tensor(...))
    R.Map("int64", R.Tensor((), "float32"))

Leaves: ``x`` (a var), ``cls.f`` (a module function), ``R.shape([n, 4])``,
``R.prim_value(n + 1)``, ``R.prim_value(0.5, "float32")``, ``R.str("s")``,
``R.ExternFunc("sym")``, ``(a, b)``, ``(a,)``, ``t[0]``,
``R.const([0.5, nan], "float32")`` (``shape=`` when a 0 hides dims,
``sinfo=`` when the struct info is not the array's), ``metadata["c0"]``.
Attribute values: Python literals, tuples, dicts, ``inf``/``nan``,
``R.dim("n + 1")``. Calls: ``R.<op>(args, attr=value, ...)`` with attributes
in key order; ``R.call_tir("kernel", (x,), out_sinfo=...)``;
``R.call_packed("f", x, sinfo_args=...)``; ``cls.f(x)``;
``R.ExternFunc("f")(x)``.

>>> format_sinfo(TensorStructInfo((sym("n"), 4), "float32"))
'R.Tensor(("n", 4), "float32")'
"""

from __future__ import annotations

import base64
import json
import keyword
import math
import unicodedata
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import IRError
from .dims import DimExpr, format_dim, sym  # noqa: F401  (sym: doctest)
from .expr import Span
from .struct_info import (
    GLOBAL_SCOPE, FuncStructInfo, MapStructInfo, ObjectStructInfo, OptionalStructInfo, PrimStructInfo,
    SequenceStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
)

#: Names the printer never gives to a var: the namespaces of the text form,
#: the metadata table, the float names used in literals.
RESERVED_NAMES = frozenset({"R", "T", "I", "cls", "metadata", "inf", "nan"})

#: ``R.<name>`` spellings that are not ops. An op whose name starts with one
#: of these is written ``R.op.<name>``.
SPECIAL_FORMS = frozenset({
    "const", "shape", "prim_value", "str", "ExternFunc", "match_cast", "output", "dataflow",
    "func_attr", "dim", "tensor_data", "block_boundary", "function", "op",
    "Tensor", "Tuple", "Shape", "Prim", "Object", "Callable",
})

#: Ops whose output struct info is written ``out_sinfo=`` (destination passing);
#: every other call writes it ``sinfo_args=``.
OUT_SINFO_OPS = frozenset({"call_tir", "call_dps_packed"})

#: Constants up to this many elements (and of these dtypes) are written inline.
INLINE_MAX_ELEMENTS = 16
INLINE_DTYPES = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bfloat16",
})

SPAN_PREFIX = "span:"


def takes_callee_name(op_name: str) -> bool:
    """Whether the op's first argument is a callee written as a plain string
    (the Relax ``call_*`` intrinsics: ``R.call_tir("kernel", (x,), ...)``)."""
    return op_name.rsplit(".", 1)[-1].startswith("call_")


def op_spelling(op_name: str) -> str:
    """``R.nn.softmax``; ``R.op.<name>`` when the name clashes with a special form."""
    parts = op_name.split(".")
    if not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        raise IRError(f"op name {op_name!r} cannot be written in the text form")
    return f"R.op.{op_name}" if parts[0] in SPECIAL_FORMS else f"R.{op_name}"


def is_plain_name(name: str) -> bool:
    """A Python identifier that reads back as itself (Python NFKC-normalizes
    identifiers, so ``"\u00b5"`` would come back as ``"\u03bc"``)."""
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) \
        and unicodedata.normalize("NFKC", name) == name


# ------------------------------------------------------------------ literals
def quote(text: str) -> str:
    """A double-quoted Python string literal for ``text`` (escapes what must be)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(repr(ch)[1:-1])
    return '"' + "".join(out) + '"'


def format_float(value: float) -> str:
    """``repr`` of the float64 value; non-finite values as ``inf``/``-inf``/``nan``."""
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


def format_dim_literal(dim) -> str:
    """A dim inside struct info: an int, or the symbolic expression as a string."""
    return quote(format_dim(dim)) if isinstance(dim, DimExpr) else str(dim)


def format_attr(value: Any) -> str:
    """An attribute value: Python literals, tuples, dicts; dims as ``R.dim("n + 1")``."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, DimExpr):
        return f"R.dim({quote(format_dim(value))})"
    if isinstance(value, (tuple, list)):
        items = [format_attr(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    if isinstance(value, (dict, MappingProxyType)):
        for k in value:
            if not isinstance(k, str):
                raise IRError(f"attribute dict keys must be strings, got {k!r}")
        return "{" + ", ".join(f"{quote(k)}: {format_attr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, np.generic):
        return format_attr(value.item())
    raise IRError(f"cannot write an attribute value of type {type(value).__name__}: {value!r}")


# ------------------------------------------------------------------ struct info
def _dims(values) -> str:
    items = [format_dim_literal(d) for d in values]
    return f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"


def format_sinfo(sinfo: StructInfo) -> str:
    """The text spelling of a struct info (see the module docstring)."""
    if isinstance(sinfo, TensorStructInfo):
        parts = []
        if sinfo.shape is not None:
            parts.append(_dims(sinfo.shape))
        if sinfo.dtype is not None:
            parts.append(quote(sinfo.dtype))
        if sinfo.shape is None and (sinfo.ndim != -1 or sinfo.dtype is None):
            parts.append(f"ndim={sinfo.ndim}")
        if sinfo.vdevice != GLOBAL_SCOPE:
            parts.append(f"vdevice={quote(sinfo.vdevice)}")
        return f"R.Tensor({', '.join(parts)})"
    if isinstance(sinfo, TupleStructInfo):
        return f"R.Tuple({', '.join(format_sinfo(f) for f in sinfo.fields)})"
    if isinstance(sinfo, ShapeStructInfo):
        if sinfo.values is None:
            return f"R.Shape(ndim={sinfo.ndim})"
        return "R.Shape([" + ", ".join(format_dim_literal(d) for d in sinfo.values) + "])"
    if isinstance(sinfo, PrimStructInfo):
        value = "" if sinfo.value is None else f", value={format_dim_literal(sinfo.value)}"
        return f"R.Prim({quote(sinfo.dtype)}{value})"
    if isinstance(sinfo, ObjectStructInfo):
        return "R.Object"
    if isinstance(sinfo, SequenceStructInfo):
        return f"R.Sequence({format_sinfo(sinfo.elem)})"
    if isinstance(sinfo, OptionalStructInfo):
        return f"R.Optional({format_sinfo(sinfo.elem)})"
    if isinstance(sinfo, MapStructInfo):
        return f"R.Map({quote(sinfo.key_dtype)}, {format_sinfo(sinfo.value)})"
    if isinstance(sinfo, FuncStructInfo):
        if sinfo.params is None:
            params = "None"
        else:
            items = [format_sinfo(p) for p in sinfo.params]
            params = f"({items[0]},)" if len(items) == 1 else "(" + ", ".join(items) + ")"
        return f"R.Callable({params}, {format_sinfo(sinfo.ret)}, pure={sinfo.purity})"
    raise IRError(f"cannot write struct info of type {type(sinfo).__name__}")


def format_sinfo_list(sinfos) -> str:
    """``sinfo_args``/``out_sinfo``: one struct info bare, several as a list."""
    items = [format_sinfo(s) for s in sinfos]
    return items[0] if len(items) == 1 else "[" + ", ".join(items) + "]"


# ------------------------------------------------------------------ dtypes and constants
def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of an IR dtype name (ml_dtypes for bfloat16, float8, int4...)."""
    if name == "string":
        return np.dtype(object)
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))
    except (ImportError, AttributeError):
        raise IRError(f"dtype {name!r} needs the ml_dtypes package") from None


def _canonical_nan_bytes(dtype: np.dtype) -> bytes:
    return np.array(np.nan, dtype=np.float64).astype(dtype).tobytes()


def inline_literal(data: np.ndarray, dtype_name: str) -> str | None:
    """The nested-list literal of a small constant, or ``None`` when it goes to
    the metadata table (too big, another dtype, or a NaN with a payload that a
    literal would not keep)."""
    if dtype_name not in INLINE_DTYPES or data.size > INLINE_MAX_ELEMENTS or _nested_lists(data.shape) > INLINE_MAX_ELEMENTS:
        return None
    if data.size == 0:       # no values: no cast (a float64 copy of (0, 2**20, 2**40) is "too big")
        values, fmt = data.tolist(), repr
    elif dtype_name == "bool":
        values, fmt = data.tolist(), repr
    elif dtype_name.startswith(("int", "uint")):
        values, fmt = data.tolist(), str
    else:
        nan_bytes = _canonical_nan_bytes(data.dtype)
        for x in data.reshape(-1):
            if x != x and np.asarray(x).tobytes() != nan_bytes:
                return None
        values, fmt = data.astype(np.float64).tolist(), format_float

    def render(v) -> str:
        if isinstance(v, list):
            return "[" + ", ".join(render(x) for x in v) + "]"
        return fmt(v)

    return render(values)


def _nested_lists(shape) -> int:
    """How many lists a nested-list literal of ``shape`` writes (an empty tensor of
    shape (100000, 100000, 0) would write 10**10 of them)."""
    total, count = 0, 1
    for d in shape[:-1]:
        count *= d
        total += count
        if not count or total > 1 << 62:
            break
    return total


def encode_tensor_data(data: np.ndarray) -> str:
    """The arguments of ``R.tensor_data``: dtype, shape, base64 of the raw
    little-endian bytes (a list of strings for the ``string`` dtype)."""
    from .struct_info import dtype_name
    dtype = dtype_name(data.dtype)
    shape = "(" + ", ".join(str(d) for d in data.shape) + ("," if data.ndim == 1 else "") + ")"
    if dtype == "string":
        items = ", ".join(repr(v) if isinstance(v, bytes) else quote(str(v)) for v in data.reshape(-1).tolist())
        payload = f"[{items}]"
    else:
        raw = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
        payload = quote(base64.b64encode(raw).decode("ascii"))
    return f"R.tensor_data({quote(dtype)}, {shape}, {payload})"


def decode_tensor_data(dtype: str, shape: tuple[int, ...], payload) -> np.ndarray:
    """Inverse of :func:`encode_tensor_data`; raises ValueError on bad data."""
    np_dtype = numpy_dtype(dtype)
    if dtype == "string":
        if not isinstance(payload, list):
            raise ValueError("string tensor data must be a list of strings")
        array = np.empty(len(payload), dtype=object)
        array[:] = payload
        return array.reshape(shape)
    if not isinstance(payload, str):
        raise ValueError("tensor data must be a base64 string")
    raw = base64.b64decode(payload.encode("ascii"), validate=True)
    count = math.prod(shape)
    if len(raw) != count * np_dtype.itemsize:
        raise ValueError(f"{len(raw)} bytes of data for shape {shape} of {dtype} "
                         f"({count * np_dtype.itemsize} bytes)")
    return np.frombuffer(raw, dtype=np_dtype.newbyteorder("<")).astype(np_dtype, copy=False).reshape(shape)


# ------------------------------------------------------------------ spans
def _plain_source(s: str) -> bool:
    return bool(s) and s == s.strip() and s.isprintable() and ", " not in s and not s.startswith("[")


def format_span(span: Span | None) -> str:
    """The trailing comment of a binding: ``  # span: a, b`` (JSON list when a
    source name would not survive the plain spelling)."""
    if span is None:
        return ""
    sources = span.sources
    if sources and all(_plain_source(s) for s in sources):
        return f"  # {SPAN_PREFIX} " + ", ".join(sources)
    return f"  # {SPAN_PREFIX} " + json.dumps(list(sources))


def parse_span_comment(comment: str) -> Span | None:
    """The span in a comment (``# span: ...``), ``None`` for another comment.
    Raises ValueError for a malformed JSON list."""
    text = comment.lstrip("#").strip()
    if not text.startswith(SPAN_PREFIX):
        return None
    rest = text[len(SPAN_PREFIX):].strip()
    if rest.startswith("["):
        sources = json.loads(rest)
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise ValueError("a span list must hold strings")
        return Span(tuple(sources))
    return Span(tuple(rest.split(", ")))
