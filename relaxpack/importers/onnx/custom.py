"""Custom ops: a converter that calls a function registered in the runtime.

An op no IR op covers is converted to a call of a function that the
deploying process registers with :func:`relaxpack.runtime.register_func`;
the converter states the outputs' shapes and dtypes (symbolic dims welcome),
so everything downstream keeps its shapes::

    from relaxpack.importers.onnx import register_converter, call_registered

    @register_converter("acme", "Scale", since_opset=1)
    def scale(ctx, x, *, factor=1.0):
        # out: same shape and dtype as x; "acme.scale" writes into it (dps=True)
        return call_registered(ctx, "acme.scale", [x], (x.shape, x.dtype), dps=True, factor=factor)

``dps=True`` calls it with ``call_dps_packed``: the output is preallocated
(and memory planned), the function writes into ``out``, and it must be pure.
``dps=False`` calls it with ``call_packed``: it returns new arrays, may have
side effects (passes then never drop, merge or move the call), and may leave
dims unknown (``None``): they become fresh symbolic dims checked at run time.
"""

from __future__ import annotations

from typing import Sequence

from ...errors import RelaxpackError
from ...ir.dims import Dim
from ...ir.expr import ExternFunc, Tuple, TupleGetItem
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ...ops.registry import make_call
from .converters._shape_common import fresh_dims
from .value import Value

#: an output: a TensorStructInfo, or (shape, dtype) with ``None`` for an unknown dim
OutputSpec = TensorStructInfo | tuple[Sequence[Dim | None], str]


def call_registered(ctx, name: str, inputs: Sequence[Value], outputs: OutputSpec | Sequence[OutputSpec], *,
                    dps: bool = False, hint: str | None = None, **attrs) -> Value | list[Value]:
    """Emit a call of the registered function ``name`` on ``inputs`` with
    keyword attributes ``attrs`` (ints, floats, strings, bools, tuples of
    those); one Value per output (a single Value when ``outputs`` is one spec).

    The function need not be registered at import or build time, only where
    the archive runs. It is never evaluated at import time, even on constants.

    >>> call_registered(ctx, "acme.topk_rows", [x], [((None, 4), "float32")])   # doctest: +SKIP
    """
    single = _is_spec(outputs)
    specs = [outputs] if single else list(outputs)
    if not specs:
        raise RelaxpackError(f"call_registered({name!r}): needs at least one output")
    hint = hint or name.rsplit(".", 1)[-1]
    kernel_attrs = tuple(sorted((k, _frozen(v)) for k, v in attrs.items())) or None
    args = [ctx.expr(v) for v in inputs]
    if dps:
        values = _emit_dps(ctx, name, args, [_tensor_sinfo(name, s, dps) for s in specs], kernel_attrs, hint)
    else:
        values = _emit_packed(ctx, name, args, [_spec(s) for s in specs], kernel_attrs, hint)
    return values[0] if single else values


def _emit_dps(ctx, name, args, sinfos, kernel_attrs, hint) -> list[Value]:
    ret = sinfos[0] if len(sinfos) == 1 else TupleStructInfo(tuple(sinfos))
    call = make_call("call_dps_packed", ExternFunc(name), Tuple(tuple(args)), sinfo_args=(ret,),
                     kernel_attrs=kernel_attrs)
    found = ctx.bb.emit(call, hint)
    if len(sinfos) == 1:
        return [Value(found.struct_info, expr=found)]
    return [Value(s, expr=ctx.bb.emit(TupleGetItem(found, i), hint)) for i, s in enumerate(sinfos)]


def _emit_packed(ctx, name, args, specs, kernel_attrs, hint) -> list[Value]:
    # the function's result is only trusted after a match_cast: the runtime
    # checks every dim the converter declared and binds the unknown ones
    loose = [TensorStructInfo(None, dtype, ndim=len(shape)) for shape, dtype in specs]
    ret = loose[0] if len(loose) == 1 else TupleStructInfo(tuple(loose))
    call = make_call("call_packed", ExternFunc(name), *args, sinfo_args=(ret,), kernel_attrs=kernel_attrs)
    found = ctx.bb.emit(call, hint)
    values = []
    for i, (shape, dtype) in enumerate(specs):
        part = found if len(specs) == 1 else ctx.bb.emit(TupleGetItem(found, i), hint)
        unknown = iter(fresh_dims(ctx, sum(d is None for d in shape), hint))
        sinfo = TensorStructInfo(tuple(next(unknown) if d is None else d for d in shape), dtype)
        values.append(Value(sinfo, expr=ctx.bb.match_cast(part, sinfo, hint)))
    return values


def _is_spec(x) -> bool:
    return isinstance(x, TensorStructInfo) or (
        isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], str))


def _spec(spec) -> tuple[tuple, str]:
    if isinstance(spec, TensorStructInfo):
        if spec.shape is None or spec.dtype is None:
            raise RelaxpackError(f"call_registered: an output needs a known rank and dtype, got {spec}")
        return tuple(spec.shape), spec.dtype
    shape, dtype = spec
    if shape is None:
        raise RelaxpackError("call_registered: an output needs a known rank (give None for unknown dims)")
    return tuple(shape), dtype


def _tensor_sinfo(name: str, spec, dps: bool) -> TensorStructInfo:
    shape, dtype = _spec(spec)
    if any(d is None for d in shape):
        raise RelaxpackError(f"call_registered({name!r}): a destination-passing call needs every output dim "
                             f"(symbolic is fine); use dps=False for outputs with data-dependent dims")
    return TensorStructInfo(shape, dtype)


def _frozen(value):
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


__all__ = ["call_registered"]
