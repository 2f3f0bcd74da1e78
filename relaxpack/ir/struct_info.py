"""Struct info: what the compiler knows about a value.

Like Relax's StructInfo, it is a small closed family: a tensor (shape, dtype,
virtual device), a tuple of struct infos, a shape value, a primitive scalar,
an opaque object and a function signature. Shapes are tuples of dims
(``int`` or symbolic :class:`~relaxpack.ir.dims.DimExpr`), or ``None`` when
unknown.

Struct infos are values: frozen, compared and hashed by content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..errors import IRError
from .dims import Dim, DimAnalyzer, free_vars, normalize

GLOBAL_SCOPE = "global"

#: dtype names the IR accepts: numpy's names plus the ml_dtypes extensions.
DTYPES = frozenset({
    "bool", "int2", "int4", "int8", "int16", "int32", "int64",
    "uint2", "uint4", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "bfloat16",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn",
    "complex64", "complex128", "string",
})


def check_dtype(dtype: str | None) -> str | None:
    if dtype is not None and dtype not in DTYPES:
        raise IRError(f"unknown dtype {dtype!r}")
    return dtype


def _shape_tuple(shape: Sequence[Dim] | None) -> tuple[Dim, ...] | None:
    return None if shape is None else tuple(normalize(d) for d in shape)


def _check_ndim(shape, ndim: int, what: str) -> int:
    if shape is None:
        if ndim < -1:
            raise IRError(f"{what}: ndim must be >= -1, got {ndim}")
        return ndim
    if ndim not in (-1, len(shape)):
        raise IRError(f"{what}: ndim={ndim} contradicts shape of rank {len(shape)}")
    return len(shape)


class StructInfo:
    """Base of all struct infos."""

    __slots__ = ()

    def dim_vars(self) -> frozenset[str]:
        """The symbolic variable names this struct info mentions."""
        return frozenset()


@dataclass(frozen=True, slots=True)
class ObjectStructInfo(StructInfo):
    """Any value; nothing is known about it."""


@dataclass(frozen=True, slots=True)
class PrimStructInfo(StructInfo):
    """A scalar of ``dtype``, with its value when known (e.g. a dim)."""

    dtype: str = "int64"
    value: Dim | None = None

    def __post_init__(self):
        check_dtype(self.dtype)
        if self.value is not None:
            object.__setattr__(self, "value", normalize(self.value))

    def dim_vars(self):
        return frozenset() if self.value is None else free_vars(self.value)


@dataclass(frozen=True, slots=True)
class ShapeStructInfo(StructInfo):
    """A shape value (a tuple of dims), of known values or only known rank."""

    values: tuple[Dim, ...] | None = None
    ndim: int = -1

    def __post_init__(self):
        object.__setattr__(self, "values", _shape_tuple(self.values))
        object.__setattr__(self, "ndim", _check_ndim(self.values, self.ndim, "R.Shape"))

    def dim_vars(self):
        return _dims_vars(self.values)


@dataclass(frozen=True, slots=True)
class TensorStructInfo(StructInfo):
    """A tensor: shape (or only rank, or nothing), dtype and virtual device.

    ``vdevice`` is the memory scope that selects the memory planner's pool.
    """

    shape: tuple[Dim, ...] | None = None
    dtype: str | None = None
    ndim: int = -1
    vdevice: str = GLOBAL_SCOPE

    def __post_init__(self):
        object.__setattr__(self, "shape", _shape_tuple(self.shape))
        object.__setattr__(self, "ndim", _check_ndim(self.shape, self.ndim, "R.Tensor"))
        check_dtype(self.dtype)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def dim_vars(self):
        return _dims_vars(self.shape)


@dataclass(frozen=True, slots=True)
class TupleStructInfo(StructInfo):
    fields: tuple[StructInfo, ...] = field(default=())

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))

    def dim_vars(self):
        return frozenset().union(*(f.dim_vars() for f in self.fields))


@dataclass(frozen=True, slots=True)
class SequenceStructInfo(StructInfo):
    """An ONNX sequence: any number of values described by ``elem``.

    At run time a sequence is a Python tuple (immutable: every sequence op
    makes a new one), e.g. ``R.Sequence(R.Tensor(ndim=2, dtype="float32"))``
    holds 2-d float32 arrays of any shapes.
    """

    elem: StructInfo = field(default_factory=ObjectStructInfo)

    def dim_vars(self):
        return self.elem.dim_vars()


@dataclass(frozen=True, slots=True)
class OptionalStructInfo(StructInfo):
    """An ONNX optional: ``None`` (no element) or a value described by ``elem``."""

    elem: StructInfo = field(default_factory=ObjectStructInfo)

    def dim_vars(self):
        return self.elem.dim_vars()


@dataclass(frozen=True, slots=True)
class MapStructInfo(StructInfo):
    """An ONNX map: keys of ``key_dtype`` (an integer dtype or ``"string"``)
    to values described by ``value``, e.g. ``R.Map("int64", R.Tensor((),
    "float32"))``; at run time a Python ``dict`` in insertion order, its
    keys ints or strs, its values Python scalars (as onnxruntime gives and
    takes them)."""

    key_dtype: str = "int64"
    value: StructInfo = field(default_factory=ObjectStructInfo)

    def __post_init__(self):
        if self.key_dtype != "string" and not self.key_dtype.startswith(("int", "uint")):
            raise IRError(f"a map's keys are integers or strings, not {self.key_dtype}")

    def dim_vars(self):
        return self.value.dim_vars()


@dataclass(frozen=True, slots=True)
class FuncStructInfo(StructInfo):
    """A function's signature; ``params`` is ``None`` for an opaque callable."""

    params: tuple[StructInfo, ...] | None
    ret: StructInfo
    purity: bool = True

    def __post_init__(self):
        if self.params is not None:
            object.__setattr__(self, "params", tuple(self.params))

    def dim_vars(self):
        params = self.params or ()
        return frozenset().union(self.ret.dim_vars(), *(p.dim_vars() for p in params))


def _dims_vars(dims) -> frozenset[str]:
    if dims is None:
        return frozenset()
    return frozenset().union(*(free_vars(d) for d in dims))


def tensor_sinfo_of_array(array: np.ndarray, vdevice: str = GLOBAL_SCOPE) -> TensorStructInfo:
    return TensorStructInfo(tuple(int(d) for d in array.shape), dtype_name(array.dtype), vdevice=vdevice)


def dtype_name(dtype) -> str:
    """The IR name of a numpy (or ml_dtypes) dtype."""
    name = np.dtype(dtype).name
    if name.startswith(("str", "bytes", "object")):
        return "string"
    return check_dtype(name)


def is_base_of(base: StructInfo, derived: StructInfo, analyzer: DimAnalyzer | None = None) -> bool:
    """True when every value described by ``derived`` is also described by ``base``.

    ``R.Tensor(ndim=2)`` is a base of ``R.Tensor((n, 4), "float32")``; equal
    symbolic dims must be provably equal under ``analyzer``'s ranges.
    """
    if base is derived or isinstance(base, ObjectStructInfo):
        return True
    analyzer = analyzer or DimAnalyzer()
    if type(base) is not type(derived):
        return False
    if isinstance(base, TensorStructInfo):
        return (
            (base.dtype is None or base.dtype == derived.dtype)
            and base.vdevice == derived.vdevice
            and (base.ndim == -1 or base.ndim == derived.ndim)
            and _dims_base_of(base.shape, derived.shape, analyzer)
        )
    if isinstance(base, ShapeStructInfo):
        return (base.ndim == -1 or base.ndim == derived.ndim) and _dims_base_of(
            base.values, derived.values, analyzer)
    if isinstance(base, PrimStructInfo):
        return base.dtype == derived.dtype and (
            base.value is None
            or (derived.value is not None and analyzer.prove_equal(base.value, derived.value)))
    if isinstance(base, (SequenceStructInfo, OptionalStructInfo)):
        return is_base_of(base.elem, derived.elem, analyzer)
    if isinstance(base, MapStructInfo):
        return base.key_dtype == derived.key_dtype and is_base_of(base.value, derived.value, analyzer)
    if isinstance(base, TupleStructInfo):
        return len(base.fields) == len(derived.fields) and all(
            is_base_of(b, d, analyzer) for b, d in zip(base.fields, derived.fields))
    if isinstance(base, FuncStructInfo):
        if base.params is None:
            return is_base_of(base.ret, derived.ret, analyzer)
        return (
            derived.params is not None
            and len(base.params) == len(derived.params)
            and all(is_base_of(d, b, analyzer) for b, d in zip(base.params, derived.params))
            and is_base_of(base.ret, derived.ret, analyzer)
            and (not base.purity or derived.purity)
        )
    return base == derived


def _dims_base_of(base, derived, analyzer: DimAnalyzer) -> bool:
    if base is None:
        return True
    if derived is None or len(base) != len(derived):
        return False
    return all(analyzer.prove_equal(b, d) for b, d in zip(base, derived))


def erase_to_well_defined(sinfo: StructInfo, defined: frozenset[str]) -> StructInfo:
    """Forget dims that use symbolic variables not in ``defined``.

    Used where a value leaves the scope that defines its shape variables
    (e.g. the result of an ``If`` whose branches bind new dims).
    """
    def keep(dims):
        if dims is None:
            return None
        return dims if _dims_vars(dims) <= defined else None

    if isinstance(sinfo, TensorStructInfo):
        shape = keep(sinfo.shape)
        return sinfo if shape is sinfo.shape else TensorStructInfo(None, sinfo.dtype, sinfo.ndim, sinfo.vdevice)
    if isinstance(sinfo, ShapeStructInfo):
        values = keep(sinfo.values)
        return sinfo if values is sinfo.values else ShapeStructInfo(None, sinfo.ndim)
    if isinstance(sinfo, PrimStructInfo):
        if sinfo.value is not None and not free_vars(sinfo.value) <= defined:
            return PrimStructInfo(sinfo.dtype)
        return sinfo
    if isinstance(sinfo, TupleStructInfo):
        return TupleStructInfo(tuple(erase_to_well_defined(f, defined) for f in sinfo.fields))
    if isinstance(sinfo, (SequenceStructInfo, OptionalStructInfo)):
        return type(sinfo)(erase_to_well_defined(sinfo.elem, defined))
    if isinstance(sinfo, MapStructInfo):
        return MapStructInfo(sinfo.key_dtype, erase_to_well_defined(sinfo.value, defined))
    return sinfo


def unify_struct_info(a: StructInfo, b: StructInfo, analyzer: DimAnalyzer | None = None) -> StructInfo:
    """The most precise struct info that describes values of both ``a`` and ``b``."""
    analyzer = analyzer or DimAnalyzer()
    if is_base_of(a, b, analyzer):
        return a
    if is_base_of(b, a, analyzer):
        return b
    if isinstance(a, TensorStructInfo) and isinstance(b, TensorStructInfo):
        dtype = a.dtype if a.dtype == b.dtype else None
        vdevice = a.vdevice if a.vdevice == b.vdevice else GLOBAL_SCOPE
        if a.ndim == b.ndim and a.ndim >= 0 and a.shape is not None and b.shape is not None:
            shape = [x if analyzer.prove_equal(x, y) else None for x, y in zip(a.shape, b.shape)]
            if all(d is not None for d in shape):
                return TensorStructInfo(tuple(shape), dtype, vdevice=vdevice)
        ndim = a.ndim if a.ndim == b.ndim else -1
        return TensorStructInfo(None, dtype, ndim, vdevice)
    if isinstance(a, TupleStructInfo) and isinstance(b, TupleStructInfo) and len(a.fields) == len(b.fields):
        return TupleStructInfo(tuple(unify_struct_info(x, y, analyzer) for x, y in zip(a.fields, b.fields)))
    if type(a) is type(b) and isinstance(a, (SequenceStructInfo, OptionalStructInfo)):
        return type(a)(unify_struct_info(a.elem, b.elem, analyzer))
    if isinstance(a, MapStructInfo) and isinstance(b, MapStructInfo) and a.key_dtype == b.key_dtype:
        return MapStructInfo(a.key_dtype, unify_struct_info(a.value, b.value, analyzer))
    if isinstance(a, ShapeStructInfo) and isinstance(b, ShapeStructInfo):
        return ShapeStructInfo(None, a.ndim if a.ndim == b.ndim else -1)
    if isinstance(a, PrimStructInfo) and isinstance(b, PrimStructInfo) and a.dtype == b.dtype:
        return PrimStructInfo(a.dtype)
    return ObjectStructInfo()
