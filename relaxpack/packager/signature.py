"""How an input or output appears in the archive's signature: kind, dtype, rank, dims."""

from __future__ import annotations

from ..errors import IRError
from ..ir.struct_info import (
    MapStructInfo, OptionalStructInfo, PrimStructInfo, SequenceStructInfo, ShapeStructInfo, TensorStructInfo,
    TupleStructInfo,
)
from ..runtime.bytecode import ParamInfo


def value_info(name: str, sinfo) -> ParamInfo:
    """An input's or output's signature entry: kind, dtype, rank and dims (ints, or the
    dim's text: a name such as ``"seq"`` or an expression such as ``"2 * seq"``)."""
    if isinstance(sinfo, TensorStructInfo):
        shape = None if sinfo.shape is None else tuple(d if isinstance(d, int) else str(d) for d in sinfo.shape)
        return ParamInfo(name, "tensor", sinfo.dtype, sinfo.ndim, shape)
    if map_kind(sinfo) is not None:
        kind, key_dtype, dtype = map_kind(sinfo)
        return ParamInfo(name, kind, dtype, 0, key_dtype=key_dtype)
    if isinstance(sinfo, (SequenceStructInfo, OptionalStructInfo)):
        kind, dtype, ndim = container_kind(sinfo)
        return ParamInfo(name, kind, dtype, ndim)
    kind = {ShapeStructInfo: "shape", PrimStructInfo: "prim", TupleStructInfo: "tuple"}.get(type(sinfo), "object")
    return ParamInfo(name, kind)


def map_kind(sinfo) -> tuple[str, str, str | None] | None:
    """(kind, key dtype, value dtype) of a map (``"map"``) or a sequence of maps
    (``"sequence_map"``), as the signature records them; None for any other value."""
    if isinstance(sinfo, SequenceStructInfo) and isinstance(sinfo.elem, MapStructInfo):
        kind, sinfo = "sequence_map", sinfo.elem
    elif isinstance(sinfo, MapStructInfo):
        kind = "map"
    else:
        return None
    if not isinstance(sinfo.value, TensorStructInfo):
        raise IRError(f"a map of {sinfo.value} cannot be a function's input or output (only of tensors)")
    return kind, sinfo.key_dtype, sinfo.value.dtype


def container_kind(sinfo) -> tuple[str, str | None, int]:
    """(kind, element dtype, element rank) of a sequence or optional value, as the signature
    records it: ``"sequence"``, ``"optional"`` (of a tensor) or ``"optional_sequence"``."""
    elem = sinfo.elem
    if isinstance(sinfo, OptionalStructInfo) and isinstance(elem, SequenceStructInfo):
        kind, elem = "optional_sequence", elem.elem
    else:
        kind = "sequence" if isinstance(sinfo, SequenceStructInfo) else "optional"
    if isinstance(elem, TensorStructInfo):
        return kind, elem.dtype, elem.ndim
    raise IRError(f"a {kind} of {elem} cannot be a function's input or output (only of tensors)")


__all__ = ["container_kind", "map_kind", "value_info"]
