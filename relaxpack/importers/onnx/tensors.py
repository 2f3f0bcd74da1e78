"""ONNX tensors and element types to numpy arrays and IR dtype names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ...errors import RelaxpackError, UnsupportedOpError
from ...ir.struct_info import DTYPES, dtype_name


def onnx_dtype_name(elem_type: int, what: str) -> str:
    """The IR dtype for an ONNX element type; unsupported ones name ``what``."""
    if elem_type == onnx.TensorProto.STRING:
        return "string"
    try:
        name = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except Exception:
        name = None
    if name not in DTYPES:
        type_name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() \
            else str(elem_type)
        raise UnsupportedOpError(f"{what} has element type {type_name}, which relaxpack does not support")
    return name


def onnx_elem_type(dtype: str) -> int:
    """The ONNX element type of an IR dtype (the inverse of :func:`onnx_dtype_name`)."""
    for elem_type in onnx.TensorProto.DataType.values():
        if elem_type == onnx.TensorProto.UNDEFINED:
            continue
        try:
            if onnx_dtype_name(elem_type, "") == dtype:
                return elem_type
        except UnsupportedOpError:
            continue
    raise UnsupportedOpError(f"dtype {dtype!r} has no ONNX element type")


def tensor_to_array(tensor: onnx.TensorProto, model_dir: Path | None) -> np.ndarray:
    """The contents of an initializer or a Constant's tensor.

    External data is read only from files inside the model's folder.
    """
    onnx_dtype_name(tensor.data_type, f"tensor {tensor.name!r}")
    base = ""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        if model_dir is None:
            raise RelaxpackError(f"tensor {tensor.name!r} keeps its data in an external file; "
                                 f"import the model from its path so the file can be found")
        _check_external_location(tensor, model_dir)
        base = str(model_dir)
    try:
        array = numpy_helper.to_array(tensor, base)
    except Exception as err:
        raise RelaxpackError(f"cannot read tensor {tensor.name!r}: {err}") from None
    if array.dtype.kind in "OSU":
        array = string_array(array, f"tensor {tensor.name!r}")
    dtype_name(array.dtype)
    return array


def string_array(items, what: str) -> np.ndarray:
    """ONNX string contents as relaxpack holds them: an object array of
    Python ``str`` (ONNX stores bytes; its string ops define them as UTF-8).

    >>> string_array(np.array([b"ab", b"\\xc3\\xa9"], dtype=object), "t").tolist()
    ['ab', 'é']
    """
    array = np.asarray(items, dtype=object)
    out = np.empty(array.size, dtype=object)
    try:
        out[:] = [s.decode("utf-8") if isinstance(s, bytes) else str(s) for s in array.reshape(-1)]
    except UnicodeDecodeError:
        raise RelaxpackError(f"{what} holds a string that is not valid UTF-8") from None
    return out.reshape(array.shape)


def _check_external_location(tensor, model_dir: Path) -> None:
    location = next((e.value for e in tensor.external_data if e.key == "location"), None)
    if not location:
        raise RelaxpackError(f"tensor {tensor.name!r} has external data without a location")
    path = Path(location)
    target = (model_dir / path).resolve()
    if path.is_absolute() or model_dir.resolve() not in target.parents:
        raise RelaxpackError(f"tensor {tensor.name!r}: external data {location!r} lies outside the "
                             f"model's folder")
