"""Maps at run time: their representation, the input check, and outputs.

An ONNX ``map(K, tensor(V))`` is a Python ``dict`` whose keys are ``int``
(an integer K) or ``str`` and whose values are scalars of V, as onnxruntime
takes and returns them: DictVectorizer and CastMap read one, ZipMap makes a
sequence of them (a tuple in the VM, a list for the user). The signature
records a map input or output by kind: ``"map"`` or ``"sequence_map"``, with
the values' dtype and the keys' (``ParamInfo.key_dtype``).

A user's dict is checked and made canonical once, at the input: keys
``int`` or ``str`` (numpy integers, bytes as UTF-8), values numpy scalars of
the value dtype (a Python float fed to a float32 map is rounded to float32,
as onnxruntime's binding does). Outputs hold Python scalars, as
onnxruntime's do (``{0: 0.25, 1: 0.75}``).

>>> as_map_input({"a": 1.0}, "m", "map", "string", "float32")
{'a': np.float32(1.0)}
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import InputError
from .builtins import builtin, input_or_shape_error
from .dtypes import numpy_dtype

MAP_KINDS = ("map", "sequence_map")


def _key(key, key_dtype: str, ctx: str):
    if key_dtype == "string":
        if isinstance(key, bytes):
            try:
                return key.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"{ctx}: key {key!r} is bytes that are not valid UTF-8") from None
        if isinstance(key, (str, np.str_)):
            return str(key)
    elif isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return int(key)
    raise input_or_shape_error(ctx, f"key {key!r} is a {type(key).__name__}, expected "
                                    f"{'str' if key_dtype == 'string' else 'int'} ({key_dtype} keys)")


#: Python and numpy scalar types a map value may be without further checks (not bool: np.ndim
#: and the dtype's constructor decide those as before)
_PLAIN_NUMBERS = frozenset({float, int, np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64,
                            np.uint8, np.uint16, np.uint32, np.uint64})


def _value(value, dtype: str, ctx: str):
    if dtype == "string":
        if isinstance(value, (str, np.str_)):
            return str(value)
        raise input_or_shape_error(ctx, f"value {value!r} is a {type(value).__name__}, expected str")
    if isinstance(value, (str, bytes)) or np.ndim(value) != 0:
        raise input_or_shape_error(ctx, f"value {value!r} is not a number (the map holds {dtype} values)")
    try:
        return numpy_dtype(dtype).type(value)
    except (TypeError, ValueError, OverflowError) as err:
        raise input_or_shape_error(ctx, f"value {value!r} is not a {dtype} ({err})") from None


class PlainMaps(tuple):
    """A tuple of fresh dicts whose keys and values are Python scalars already (ZipMap's
    result, ``kernels/ml_maps.py``): :func:`as_map_output` hands them over as they are."""

    __slots__ = ()


class CheckedMap(dict):
    """A map :func:`as_map_input` made canonical: ``vm.builtin.check_map`` need not look at
    its entries again (a plain dict, e.g. one passed to ``vm[name](...)``, is checked there)."""

    __slots__ = ()


def _one_map(value, key_dtype: str, dtype: str, ctx: str) -> dict:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise input_or_shape_error(ctx, f"expected a map (a dict), got {type(value).__name__}")
    kind = None if dtype == "string" else numpy_dtype(dtype).type
    if kind is not None:
        fast = _plain_map(value, str if key_dtype == "string" else int, kind)
        if fast is not None:
            return fast
    return CheckedMap({_key(k, key_dtype, ctx): _entry(k, v, dtype, kind, ctx) for k, v in value.items()})


def _plain_map(value, key_type: type, kind) -> "CheckedMap | None":
    """The canonical map of a dict whose keys are exactly ``key_type`` (what :func:`_key` keeps
    as it is) and whose values are plain numbers, their conversion one array call (the same
    scalars :func:`_entry` makes one by one, at a fifth of the cost for ten entries); None
    for anything else, or when the array refuses a value (the entries then say what is wrong)."""
    keys, values = list(value.keys()), list(value.values())
    if not ({*map(type, keys)} <= {key_type} and {*map(type, values)} <= _PLAIN_NUMBERS):   # (no generators)
        return None
    try:
        converted = np.array(values, dtype=kind)
    except (TypeError, ValueError, OverflowError):
        return None
    return CheckedMap(zip(keys, converted))


def _entry(key, value, dtype: str, kind, ctx: str):
    """:func:`_value` of a map entry, with a fast path for plain numbers (same result)."""
    if kind is not None and type(value) in _PLAIN_NUMBERS:
        try:
            return kind(value)
        except (TypeError, ValueError, OverflowError):
            pass                        # _value says what is wrong
    return _value(value, dtype, f"{ctx} at key {key!r}")


def as_map_input(value, name: str, kind: str, key_dtype: str, dtype: str):
    """A user's map (or sequence of maps) as the VM holds it: canonical dicts (a tuple of them)."""
    ctx = f"input {name!r}"
    if kind == "map":
        return _one_map(value, key_dtype, dtype, ctx)
    if kind == "sequence_map":
        if isinstance(value, (Mapping, np.ndarray)) or not isinstance(value, (list, tuple)):
            raise InputError(f"{ctx} is a sequence of maps: pass a list of dicts, got {type(value).__name__}")
        return tuple(_one_map(v, key_dtype, dtype, f"{ctx} element {i}") for i, v in enumerate(value))
    raise InputError(f"{ctx}: unknown map kind {kind!r}")


@builtin("vm.builtin.check_map")
def check_map(value, kind: str, key_dtype: str, dtype: str, ctx: str):
    """Check a map (or a tuple of maps) against its key and value dtypes."""
    maps = (value,) if kind == "map" else value
    if kind == "sequence_map" and not isinstance(value, tuple):
        raise input_or_shape_error(ctx, f"expected a sequence of maps (a tuple), got {type(value).__name__}")
    for i, m in enumerate(maps):
        where = ctx if kind == "map" else f"{ctx} element {i}"
        if type(m) is CheckedMap:        # canonical already (as_map_input); a CheckedMap is never written
            continue
        if not isinstance(m, dict):
            raise input_or_shape_error(where, f"expected a map (a dict), got {type(m).__name__}")
        for k, v in m.items():
            _key(k, key_dtype, where)
            _value(v, dtype, f"{where} at key {k!r}")
    return value


def as_map_output(value, kind: str):
    """A map output as the user gets it: dicts of Python scalars; a sequence of maps as a list."""
    if kind == "sequence_map":
        if type(value) is PlainMaps:    # fresh dicts of Python scalars: nothing to convert
            return list(value)
        return [_plain(m) for m in value]
    return _plain(value)


def _plain(m: dict) -> dict:
    return {k: v.item() if isinstance(v, np.generic) else v for k, v in m.items()}
