"""Lifting data-dependent sizes into symbolic dims, once, shared by every use.

A small int tensor known only at run time (AffineGrid's ``size`` input) is
often split into its elements, which then size several ops:
``N, C, H, W = Split(size)``, ``ConstantOfShape(Concat(H, W))``,
``Range(0, W, 1)``, ``Reshape(x, Concat(N, H, W, [2]))``. Each op binding
its own fresh dims at run time would leave ``W`` of the Range unrelated to
``W`` of the ConstantOfShape, and the Add of the two unprovable. Instead:

* **Shadows.** Such a tensor (the *source*) gets a name per element, a
  dim variable not yet bound in the IR (``size_d0 .. size_d3``), as its
  ``Value.shadow``. Ops that only move elements (Split, Slice, Gather,
  Concat, Squeeze, ...) are converted as usual *and* run again, at import
  time, on the shadows of their inputs (:func:`derive_shadows`): ``W`` gets
  the shadow ``(size_d3,)``.
* **Lifting.** Where the contents are used as sizes (ConstantOfShape's
  shape, Expand's shape, Tile's repeats), :func:`lift_dims` binds the dim
  variables the contents use, once per source element::

      lv = R.call_packed("dyn.tensor_to_shape", size, indices=(2, 3), what=...)
      lv1 = R.match_cast(lv, R.Shape([size_d2, size_d3]))

  The packed kernel and the match_cast check at run time that each element
  is a valid dim (``>= 0``); the value's ``sym`` becomes its contents, so
  the op's output shape is exact.
* **Revealing.** Any value whose shadow uses only bound variables has
  known contents from then on (:func:`reveal`): ``Range(0, W, 1)`` after
  the ConstantOfShape has length ``size_d3`` and no new check, and so has
  a Reshape (whose -1 and 0 entries are not sizes, so it never lifts).

Elements are lifted only where the model uses them as sizes; a source's
other elements (an axis, a negative offset) are never checked.
"""

from __future__ import annotations

import math
from typing import Sequence

from ...errors import RelaxpackError
from ...ir.dims import Dim, free_vars, sym
from ...ir.expr import ExternFunc, ShapeExpr
from ...ir.struct_info import ShapeStructInfo
from ...ops.registry import make_call
from .value import Value

#: sources up to this many elements get shadows (sizes, not data)
LIFT_LIMIT = 16
#: ops whose int outputs are their inputs' elements moved around: their
#: outputs' shadows are computed by converting them again on the inputs' shadows
ELEMENT_OPS = frozenset({"Split", "Slice", "Gather", "Concat", "Squeeze", "Unsqueeze", "Reshape",
                         "Flatten", "Identity"})


class Lifts:
    """The import's dim variables for source elements, and which are bound."""

    def __init__(self):
        self.sources: dict[str, tuple[Value, int]] = {}  # dim name -> (source, element index)
        self.bound: set[str] = set()
        self.counter = 0

    def new_names(self, ctx, hint: str, count: int) -> tuple[Dim, ...]:
        """``count`` dim variables ``{hint}_v{i}`` that no dim of the function uses
        (their own counter: the import's other fresh names do not shift)."""
        base = dim_name_base(hint, "size")
        taken = set(ctx.bb.defined_dim_vars()) | set(self.sources)
        out = []
        while len(out) < count:
            self.counter += 1
            name = f"{base}_v{self.counter}"
            if name not in taken:
                out.append(sym(name))
        return tuple(out)

    def snapshot(self) -> frozenset[str]:
        return frozenset(self.bound)

    def restore(self, bound: frozenset[str]) -> None:
        """Forget bindings made since ``snapshot`` (they were local to an If branch)."""
        self.bound = set(bound)


def dim_name_base(hint: str, default: str) -> str:
    """An ONNX value name made the prefix of a dim variable: characters
    other than letters, digits and ``_`` become ``_``, and a name that does
    not start like an identifier gets a ``v`` (torchvision's ``2974``)."""
    base = "".join(c if c.isalnum() else "_" for c in hint).strip("_") or default
    if not base.isidentifier():
        base = "v" + base
    return base if base.isidentifier() else default


def _small_int(value: Value) -> bool:
    shape = value.shape
    return (value.dtype is not None and value.dtype.startswith(("int", "uint")) and shape is not None
            and len(shape) <= 1 and all(isinstance(d, int) for d in shape) and math.prod(shape) <= LIFT_LIMIT)


def shadow_of(ctx, value: Value | None, hint: str = "size") -> tuple[Dim, ...] | None:
    """The contents of ``value`` as dims: known ones, its shadow, or (for a
    small int tensor known only at run time) a new shadow of unbound dim
    variables named after ``hint``. None for anything else."""
    if value is None:
        return None
    known = value.int_values()
    if known is not None:
        return known
    if value.shadow is not None:
        return value.shadow
    if value.expr is None or not _small_int(value):
        return None
    names = ctx.lifts.new_names(ctx, hint, math.prod(value.shape))
    for i, name in enumerate(names):
        ctx.lifts.sources[str(name)] = (value, i)
    value.shadow = names
    return names


def reveal(ctx, value: Value | None) -> None:
    """Give ``value`` its shadow as known contents when every variable it
    uses is bound (an earlier lift checked and bound them)."""
    if value is None or value.shadow is None or value.int_values() is not None:
        return
    if _vars(value.shadow) <= ctx.lifts.bound:
        value.sym = value.shadow


def lift_dims(ctx, value: Value, what: str) -> tuple[Dim, ...] | None:
    """The contents of ``value``, to be used as sizes, with their dim
    variables bound (checked ``>= 0`` at run time) where needed; ``value``
    keeps them as known contents. None when ``value`` is not a small int
    tensor."""
    contents = shadow_of(ctx, value, what)
    if contents is None:
        return None
    missing = sorted(_vars(contents) - ctx.lifts.bound, key=_source_order(ctx))
    by_source: dict[int, tuple[Value, list[tuple[int, str]]]] = {}
    for name in missing:
        source, index = ctx.lifts.sources[name]
        by_source.setdefault(id(source), (source, []))[1].append((index, name))
    for source, elements in by_source.values():
        _bind(ctx, source, elements)
    if value.int_values() is None:
        value.sym = contents
    return contents


def _source_order(ctx):
    return lambda name: ctx.lifts.sources[name][1]


def _bind(ctx, source: Value, elements: Sequence[tuple[int, str]]) -> None:
    """Emit the run-time check and match_cast that bind ``elements`` (index, dim name) of ``source``."""
    indices = tuple(i for i, _ in elements)
    call = make_call("call_packed", ExternFunc("dyn.tensor_to_shape"), ctx.expr(source),
                     sinfo_args=(ShapeStructInfo(None, len(indices)),),
                     kernel_attrs=(("indices", indices), ("what", ctx.node_label())))
    found = ctx.bb.emit(call, "lifted")
    ctx.bb.match_cast(found, ShapeStructInfo(tuple(sym(n) for _, n in elements)), "lifted")
    ctx.lifts.bound.update(n for _, n in elements)


def derive_shadows(ctx, node, converter, inputs: Sequence[Value | None], attrs: dict,
                   outputs: Sequence[Value | None]) -> None:
    """Shadows for the int outputs of an element-moving ``node`` whose inputs
    have shadows: ``converter`` runs again, at import time, on the inputs'
    shadows as known contents. A rerun that would emit IR (or fail) gives no
    shadow; the real conversion already happened."""
    if node.op_type not in ELEMENT_OPS or node.domain not in ("", "ai.onnx"):
        return
    if not any(v is not None and v.int_values() is None and v.shadow is not None for v in inputs):
        return
    targets = [i for i, v in enumerate(outputs)
               if v is not None and v.int_values() is None and v.shadow is None and _small_int(v)]
    if not targets:
        return
    probes = [None if v is None else v if v.int_values() is not None else
              Value(v.sinfo, sym=v.shadow) if v.shadow is not None else None for v in inputs]
    if any(p is None and v is not None for p, v in zip(probes, inputs)):
        return
    results = _probe(ctx, converter, probes, attrs)
    if results is None:
        return
    for i in targets:
        if i < len(results) and isinstance(results[i], Value):
            outputs[i].shadow = results[i].int_values()


def _probe(ctx, converter, probes, attrs) -> list | None:
    bb = ctx.bb
    bb.begin_scope()
    try:
        result = converter(ctx, *probes, **attrs)
    except (RelaxpackError, ValueError, TypeError, IndexError):
        result = None    # e.g. an op the rerun cannot compute on dims: no shadow
    finally:
        seq = bb.end_scope(ShapeExpr(()))
    if result is None or any(block.bindings for block in seq.blocks):
        return None
    return list(result) if isinstance(result, (tuple, list)) else [result]


def _vars(dims: Sequence[Dim]) -> frozenset[str]:
    return frozenset().union(*(free_vars(d) for d in dims)) if dims else frozenset()
