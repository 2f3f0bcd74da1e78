"""ai.onnx.ml's map ops: ``ml.zip_map``, ``ml.cast_map``, ``ml.dict_vectorizer``.

Their values are maps (``R.Map(key_dtype, value)``, Python dicts at run
time) or a sequence of them, which the compiler cannot allocate: like the
sequence ops, the importer calls their packed kernels
(runtime/kernels/ml_maps.py) with ``call_packed`` and the struct info
inferred here.

>>> make_call("ml.zip_map", probabilities, labels=(0, 1, 2))   # R.Sequence(R.Map("int64", R.Tensor((), "float32")))
"""

from __future__ import annotations

from ...errors import ShapeError
from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import MapStructInfo, SequenceStructInfo, StructInfo, TensorStructInfo
from ...runtime.kernels.ml_maps import CAST_TO
from ..registry import REQUIRED, register_op
from .common import attr_error, op_label


def _map(call: Call) -> MapStructInfo:
    sinfo = call.args[0].struct_info
    if not isinstance(sinfo, MapStructInfo):
        raise ShapeError(f"{op_label(call)}: the argument must be a map, got {sinfo}")
    return sinfo


def _infer_zip_map(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    x = call.args[0].struct_info
    if not isinstance(x, TensorStructInfo) or x.dtype != "float32" or x.ndim not in (-1, 1, 2):
        raise ShapeError(f"{op_label(call)}: the argument must be a 1-D or 2-D float32 tensor, got {x}")
    labels = call.attrs["labels"]
    if not labels or len({type(v) for v in labels}) != 1 or not isinstance(labels[0], (int, str)):
        raise attr_error(call, f"labels must be ints or strings, all of one kind, got {labels!r}")
    if x.shape is not None and isinstance(x.shape[-1], int) and x.shape[-1] != len(labels):
        raise ShapeError(f"{op_label(call)}: {x.shape[-1]} columns for {len(labels)} labels")
    key = "int64" if isinstance(labels[0], int) else "string"
    return SequenceStructInfo(MapStructInfo(key, TensorStructInfo((), "float32")))


def _infer_cast_map(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    if _map(call).key_dtype != "int64":
        raise ShapeError(f"{op_label(call)}: the map's keys must be int64, got {_map(call).key_dtype}")
    cast_to, form = call.attrs["cast_to"], call.attrs["map_form"]
    if cast_to not in CAST_TO or form not in ("DENSE", "SPARSE"):
        raise attr_error(call, f"cast_to must be one of {', '.join(CAST_TO)} and map_form DENSE or SPARSE, "
                               f"got {cast_to!r} and {form!r}")
    if form == "DENSE":
        return TensorStructInfo(None, CAST_TO[cast_to], ndim=2)       # (1, one value per key)
    return TensorStructInfo((1, int(call.attrs["max_map"])), CAST_TO[cast_to])


def _infer_dict_vectorizer(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    sinfo, vocabulary = _map(call), call.attrs["vocabulary"]
    key = "string" if vocabulary and isinstance(vocabulary[0], str) else "int64"
    if sinfo.key_dtype != key:
        raise ShapeError(f"{op_label(call)}: the map's keys are {sinfo.key_dtype}, the vocabulary's {key}")
    return TensorStructInfo((1, len(vocabulary)), sinfo.value.dtype)


register_op("ml.zip_map", infer=_infer_zip_map, attrs={"labels": REQUIRED}, num_args=1, pure=False, data_dependent=True,
            doc="One {label: value} map per row of a 1-D or 2-D float32 tensor (ONNX ZipMap).")
register_op("ml.cast_map", infer=_infer_cast_map, attrs={"cast_to": "TO_FLOAT", "map_form": "DENSE", "max_map": 1},
            num_args=1, pure=False, data_dependent=True,
            doc="An int64-keyed map's values as a (1, n) tensor, by ascending key or at their keys (ONNX CastMap).")
register_op("ml.dict_vectorizer", infer=_infer_dict_vectorizer, attrs={"vocabulary": REQUIRED, "dtype": REQUIRED},
            num_args=1, pure=False, data_dependent=True,
            doc="A map's values at the vocabulary's positions, a (1, len(vocabulary)) tensor (ONNX DictVectorizer).")
