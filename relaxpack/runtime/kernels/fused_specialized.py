"""``fused_elementwise`` specialized to one instruction's recipe: a generated Python function.

The generic kernel (:mod:`.fused_elementwise`) works out per call which
buffer each step writes, makes the views and calls each step's kernel, all
from the recipe: 10-40 µs of Python on tensors of a few hundred values,
more than the unfused chain's calls. The VM instead asks, once per
instruction, for :func:`specialize` of the instruction's recipe, which
generates (once per shape of recipe: its steps' inputs, the buffer each
step writes, which take attributes or a workspace; never the archive's
strings) a function that makes the steps' calls one after another.

The buffers are the generic kernel's plan for an ``out`` that is none of
the inputs (:func:`~.fused_elementwise.plan_buffers`), fixed per recipe: a
step of ``out``'s shape and dtype that writes ``out`` is passed ``out``
itself; the others write views (a prefix of ``out``'s bytes, or the
temporaries in the planned ``workspace``) worked out by the first call at
the operands' shapes (:func:`~.fused_elementwise.prepare_call`) and kept.
A call on the same arrays as the last (an arena view is the same object
from run to run) only makes the calls. A call on new arrays of the kept
shapes (a model input, a fresh output) checks them inline, a few hundred
nanoseconds: ``out`` C-contiguous of the kept shape and dtype, each new
operand of its kept shape and, where the plan writes ``out`` before the
operand's last read, not overlapping ``out`` (or ``out`` itself where the
plan for that aliasing is the same); views into ``out`` are made again.
Anything else (new shapes, a new workspace, an overlap) plans again as the
generic kernel does; where that plan is another or needs the thread's
scratch (no planned workspace) or copies, the call goes to the generic
kernel.

A step whose kernel is a bare ufunc call (:func:`.registry.as_ufunc`) calls
the ufunc itself, its ``out`` positional (keyword parsing is half of a
ufunc call's cost on a small array); those that need floating-point
warnings off run inside one :func:`~relaxpack.runtime.fpstate.quiet` for
the whole chain. A float clip without NaN saturation of an earlier step's
result calls the clip ufunc with its bounds (:func:`_bare_clip`); a cast of
an earlier step's result is the assignment ``v[...] = s`` in the generated
source (:func:`_inline_cast`), inside that ``quiet``; a bounds-free look-up
is the method call ``t.take(i, 0, v, "wrap")`` (:func:`_inline_take`): the
kernels' own calls without their Python frames. A step whose kernel
specializes (a producer conv: :mod:`.conv_small`) gets its own specialized
callable. A binary ufunc step with one bound constant operand reads it as a
tile of its shape (:mod:`.tiled_operand`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

from ..fpstate import IGNORING, quiet, state_now
from ._math import CLIP, is_low_float, scalar_array
from .fused_elementwise import (OUT, _plan, compile_recipe, fused_elementwise, nbytes, prepare_call,
                                split_aliases)
from ._registry import bound_value, positional_out
from ._workspace import same_workspace, scratch_nbytes
from .elementwise import clip as _clip_kernel
from .index import take as _take_kernel
from .manipulate import astype as _astype_kernel
from .tiled_operand import tiled

#: a parameter the call did not pass (the generic kernel then says so)
_MISSING = object()
#: what the generated function keeps in place of an array it does not hold on to
_NOREF = object()

#: how a step's result is held: ``out`` itself, a view of ``out``'s bytes, a temporary in the workspace
_OUT, _OUT_VIEW, _TEMPORARY = "out", "view", "temp"


def specialize(recipe, constant: tuple = ()) -> Callable:
    """``call(*inputs, out, workspace=None)`` running ``recipe`` like :func:`fused_elementwise`;
    ``constant[i]``: parameter ``i`` is a bound value (see ``specialize_attrs`` in ``_registry.py``)."""
    try:
        steps, n_params = compile_recipe(recipe)
        plan, _ = _plan(recipe, frozenset())
    except Exception:  # noqa: BLE001 - malformed: the generic kernel raises the error, per call
        return _generic(recipe)
    fns, attrs, positional, forms, quiet_needed = [], [], [], [], False
    for step in steps:
        direct = _direct_ufunc(step)
        bounds = None if direct else _bare_clip(step, steps)
        inline = None if direct or bounds else _INLINE_CAST if _inline_cast(step, steps) else \
            _INLINE_TAKE if _inline_take(step) else None
        own = getattr(step.fn, "specialize_attrs", None) if not (direct or bounds or inline) else None
        fixed = tuple(kind == "p" and i < len(constant) and constant[i] for kind, i in step.inputs)
        fns.append(direct[0] if direct else CLIP if bounds else own(step.attrs, fixed) if own else step.fn)
        attrs.append(bounds if bounds else step.attrs if step.attrs and not (direct or own or inline) else None)
        forms.append(_EXTRA if bounds else inline if inline else attrs[-1] is not None)
        positional.append(bool(bounds) or bool(direct) and positional_out(direct[0], len(step.inputs)))
        if direct and _per_channel(step, fixed, constant):     # read as a tile of the step's shape
            fns[-1], positional[-1] = tiled(direct[0], fixed.index(True), positional[-1]), True
        quiet_needed |= bool(direct and direct[1]) or inline == _INLINE_CAST
    holds = _holds(steps, plan)
    checked = _checked_params(recipe, steps, plan, n_params, constant)
    structure = tuple((step.inputs, forms[j], step.workspace, positional[j], holds[j]) for j, step in enumerate(steps))
    registers = tuple(i for i in range(n_params) if not (i < len(constant) and constant[i]))
    factory = _factory(structure, n_params, quiet_needed, checked, registers)
    holder: list = []
    call, bind = factory(*fns, *attrs, quiet, lambda inputs, out, ws: _slow(holder[0], inputs, out, ws),
                         np.ndarray, np.may_share_memory, _same_memory, _out_view, state_now, IGNORING)
    holder.append(_Slow(recipe, plan, holds, bind, call))
    return call


def _generic(recipe) -> Callable:
    def call(*inputs, out, workspace=None):
        fused_elementwise(*inputs, out=out, recipe=recipe, workspace=workspace)
    return call


#: the result dtypes a kernel's ``float_ufunc`` (``_registry.as_float_ufunc``) stands in for
_FLOAT_UFUNC_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _direct_ufunc(step):
    """(ufunc, needs quiet) when the step's kernel is that ufunc's call for its dtype, else None
    (a float step of a kernel with integer semantics of its own, ``divide``: its ``float_ufunc``)."""
    ufunc = getattr(step.fn, "ufunc", None)
    if ufunc is None and not step.workspace and step.dtype in _FLOAT_UFUNC_DTYPES:
        float_ufunc = getattr(step.fn, "float_ufunc", None)
        return None if float_ufunc is None else (float_ufunc, bool(step.fn.float_ufunc_quiet))
    if ufunc is None or step.workspace:
        return None
    if getattr(step.fn, "ufunc_low_float", True) is False and is_low_float(step.dtype) \
            and step.dtype != np.float16:
        return None
    return ufunc, bool(getattr(step.fn, "ufunc_quiet", False))


#: a step's attributes passed as positional operands before ``out`` (a bare clip's bounds)
_EXTRA = 2
#: a step that is the assignment ``v[...] = s`` in the generated source (a cast)
_INLINE_CAST = 3
#: a step that is the method call ``t.take(i, 0, v, "wrap")`` in the generated source
_INLINE_TAKE = 4
_BARE_CLIP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _bare_clip(step, steps) -> tuple | None:
    """``(lo, hi)`` (read-only 0-d arrays of the step's dtype) when the step is a float32/float64
    clip without NaN saturation of an earlier step's result, which has the step's dtype: the
    clip kernel's specialized call is then the clip ufunc with these bounds (the same call,
    without its Python frame and checks, ~0.35 us a step); else None."""
    attrs = step.attrs
    if step.fn is not _clip_kernel or step.workspace or step.dtype not in _BARE_CLIP_DTYPES \
            or set(attrs) != {"min", "max", "saturate_nan"} or attrs["saturate_nan"] \
            or (attrs["min"] is None and attrs["max"] is None) or len(step.inputs) != 1:
        return None
    kind, i = step.inputs[0]
    if kind != "s" or steps[i].dtype != step.dtype:
        return None
    low, high = attrs["min"], attrs["max"]
    return (scalar_array(-np.inf if low is None else low, step.dtype),
            scalar_array(np.inf if high is None else high, step.dtype))


def _inline_cast(step, steps) -> bool:
    """Whether the step is a cast of an earlier step's result between array types other than
    object: the astype kernel's specialized call is then ``out[...] = x`` (under ``quiet``: a
    VM run has warnings off already), which the generated source writes as a statement (no
    Python frame, no checks: ~0.15 us a step)."""
    if step.fn is not _astype_kernel or step.workspace or len(step.inputs) != 1 or step.dtype.kind == "O":
        return False
    kind, i = step.inputs[0]
    return kind == "s" and steps[i].dtype.kind != "O"


def _inline_take(step) -> bool:
    """Whether the step is a bounds-free look-up along axis 0 (``in_bounds``: the index is proven in
    range, the kernel's "wrap" mode): the kernel's call is then ``data.take(indices, 0, out,
    "wrap")``, which the generated source makes itself (no Python frame, no axis normalization:
    ~0.3 us a step)."""
    attrs = step.attrs
    return step.fn is _take_kernel and not step.workspace and len(step.inputs) == 2 \
        and set(attrs) == {"axis", "in_bounds"} and attrs["axis"] == 0 and attrs["in_bounds"] is True


def _per_channel(step, fixed: tuple, constant: tuple) -> bool:
    """Whether a binary step reads one bound constant of more than one value (known when the VM
    passes the bound values: :class:`._registry.BoundFlags`) and one other operand."""
    if len(fixed) != 2 or fixed.count(True) != 1:
        return False
    value = bound_value(constant, step.inputs[fixed.index(True)][1])
    return isinstance(value, np.ndarray) and value.size > 1


def _holds(steps, plan) -> tuple[str, ...]:
    """Per step where its result is held under ``plan``: ``out`` itself (it writes buffer 0 at
    ``out``'s shape and dtype), a view of ``out``'s bytes, or a temporary."""
    return tuple(_OUT if b == OUT and step.full and step.dtype == steps[-1].dtype
                 else _OUT_VIEW if b == OUT else _TEMPORARY for step, b in zip(steps, plan))


def _checked_params(recipe, steps, plan, n_params: int, constant: tuple) -> tuple[tuple[int, bool], ...]:
    """The parameters a new array of which must not overlap ``out``: those not bound (a constant is
    never ``out``) read by a step that writes buffer 0 or after one has; with whether that
    parameter being ``out`` itself leaves the plan as it is (then that exact alias is allowed)."""
    first = next(j for j, b in enumerate(plan) if b == OUT)
    read = {i for j, step in enumerate(steps) if j >= first or plan[j] == OUT
            for kind, i in step.inputs if kind == "p"}
    return tuple((i, _plan(recipe, frozenset({i})) == (plan, False)) for i in sorted(read)
                 if not (i < len(constant) and constant[i]))


def _same_memory(x, out) -> bool:
    """Whether ``x`` is ``out``'s memory with ``out``'s layout (an exact alias)."""
    return (x.shape == out.shape and x.strides == out.strides and x.dtype == out.dtype
            and x.__array_interface__["data"][0] == out.__array_interface__["data"][0])


def _out_view(out, spec):
    """The view of ``out``'s first bytes that a step writes: ``spec`` is (bytes, dtype, shape)."""
    size, dtype, shape = spec
    return out.reshape(-1).view(np.uint8)[:size].view(dtype).reshape(shape)


class _Slow:
    """What the slow path needs: the recipe, the plan the generated function runs, where each
    step's result is held, and the generated function's ``bind`` and ``call``."""

    __slots__ = ("recipe", "plan", "holds", "bind", "call")

    def __init__(self, recipe, plan, holds, bind, call):
        self.recipe, self.plan, self.holds, self.bind, self.call = recipe, plan, holds, bind, call


def _slow(state: _Slow, inputs: tuple, out, workspace) -> None:
    """Plan the call (the generic kernel's plan), keep its shapes and views in the generated
    function and run it; or hand the call to the generic kernel where the plan needs the
    thread's scratch or copies. A plan other than the generated function's (``out`` is an input
    read after ``out``'s first write: the memory planner's in-place reuse) is kept too, for
    calls on the same arrays."""
    inputs = tuple(x for x in inputs if x is not _MISSING)
    recipe = state.recipe
    if not isinstance(out, np.ndarray) or out.size == 0 or not out.flags.c_contiguous:
        state.bind(None)
        fused_elementwise(*inputs, out=out, recipe=recipe, workspace=workspace)
        return
    operands, aliased = split_aliases(inputs, out)
    prepared = prepare_call(recipe, operands, out, aliased)
    layouts = [((n,), np.uint8) for n in prepared.temporaries]
    used = scratch_nbytes(layouts)
    own_memory = not prepared.temporaries or (workspace is not None and workspace.nbytes >= used)
    if prepared.copy_aliased or not own_memory or any(a is not b for a, b in zip(operands, inputs)):
        state.bind(None)
        fused_elementwise(*inputs, out=out, recipe=recipe, workspace=workspace)
        return
    raws = [None]
    start = 0
    for n in prepared.temporaries:
        raws.append(workspace[start:start + n])
        start += -(-n // 64) * 64
    views, specs = [], []
    for step, b, shape in zip(prepared.steps, prepared.plan, prepared.shapes):
        spec = (nbytes(shape, step.dtype), step.dtype, shape)
        if b == OUT:
            same = shape == out.shape and step.dtype == out.dtype
            views.append(out if same else _out_view(out, spec))
        else:
            views.append(raws[b][:spec[0]].view(step.dtype).reshape(shape))
        specs.append(spec)
    rest = workspace[used:] if workspace is not None and workspace.nbytes >= used else None
    shapes = tuple(x.shape if isinstance(x, np.ndarray) else None for x in inputs)
    other = prepared.plan != state.plan
    state.bind((inputs, shapes, out, workspace, tuple(views), tuple(specs), rest, other))
    state.call(*inputs, out=out, workspace=workspace)


@lru_cache(maxsize=256)
def _factory(structure: tuple, n_params: int, quiet_needed: bool, checked: tuple, registers: tuple) -> Callable:
    """``factory(f0.., a0.., quiet, slow, ndarray, may_share, same, out_view, state_now, IGNORING)
    -> (call, bind)``
    for recipes of this structure: per step its inputs, whether it takes attributes (as keywords, or
    ``_EXTRA``: a tuple of positional operands before ``out``; ``_INLINE_CAST`` / ``_INLINE_TAKE``: the
    step is an assignment / a take method call), a
    workspace, its ``out`` positionally, and where its result is held under the recipe's plan;
    ``checked``: the parameters (index, exact alias allowed) a new array of which must not
    overlap ``out``.

    Every step writes its view ``v<j>`` (kept by ``bind``); a call on new arrays of the kept
    shapes remakes the views into ``out`` of the recipe's plan; a call bound to another plan
    (``ALT``: ``out`` is one of the inputs) plans again for a new ``out`` or a new array in
    place of the aliased input (``A<i>``), and takes a new array that does not overlap ``out``
    for one that did not either (attention's scores written over the dying mask, ``q`` and
    ``k`` views made anew each run): that plan depends only on which inputs are ``out``. The
    source is made from ints and flags only; every function, attribute dict, shape and view is
    a closure variable."""
    n = len(structure)
    holds = [s[4] for s in structure]
    params = [f"p{i}" for i in range(n_params)]
    kept, shapes = [f"L{i}" for i in range(n_params)], [f"S{i}" for i in range(n_params)]
    views = [f"v{j}" for j in range(n)]
    direct = [f"v{j}" for j in range(n) if holds[j] == _OUT]
    remade = [j for j in range(n) if holds[j] == _OUT_VIEW]
    specs = [f"K{j}" for j in remade]
    body = []
    for j, (inputs, has_attrs, has_ws, positional, _) in enumerate(structure):
        args = [f"p{i}" if kind == "p" else f"v{i}" for kind, i in inputs]
        if has_attrs == _INLINE_CAST:
            body.append(f"v{j}[...] = {args[0]}")
            continue
        if has_attrs == _INLINE_TAKE:
            body.append(f"{args[0]}.take({args[1]}, 0, v{j}, 'wrap')")
            continue
        args += [f"*a{j}"] * (has_attrs == _EXTRA)
        args += [f"v{j}"] if positional else [f"out=v{j}"]
        args += ["workspace=w"] * has_ws + [f"**a{j}"] * (has_attrs is True)
        body.append(f"f{j}({', '.join(args)})")
    valid = " or ".join(["ALT", "workspace is not W and not SAME_WORKSPACE(workspace, W)",
                         "out.__class__ is not ndarray", "out.shape != OS",
                         "out.dtype is not OD", "not out.flags.c_contiguous"])
    allowed = dict(checked)

    def overlaps(i: int) -> str:
        return f"may_share(p{i}, out)" + (f" and not same(p{i}, out)" if allowed[i] else "")
    overlap = " or ".join(overlaps(i) for i, _ in checked)
    aliased = [f"A{i}" for i in range(n_params)]
    state = kept + views + specs + ["O", "W", "w", "OS", "OD", "ALT"] + shapes + aliased
    slow_call = f"slow(({''.join(p + ', ' for p in params)}*rest), out, workspace)"
    indent = " " * (12 if quiet_needed else 8)
    source = "\n".join([
        f"def factory({', '.join([f'f{j}' for j in range(n)] + [f'a{j}' for j in range(n)])}, quiet, slow, "
        "ndarray, may_share, same, out_view, state_now, IGNORING):",
        f"    {' = '.join(state)} = MISSING",
        f"    def call({''.join(p + '=MISSING, ' for p in params)}*rest, out, workspace=None):",
        f"        nonlocal {', '.join(kept + direct + [f'v{j}' for j in remade] + ['O'])}",
        *(["        seen = False"] if overlap else []),
        "        if out is not O or workspace is not W:",
        f"            if {valid}:",
        f"                return {slow_call}",
        *([f"            if {overlap}:", f"                return {slow_call}", "            seen = True"]
          if overlap else []),
        *([f"            {' = '.join(direct)} = out"] if direct else []),
        *[f"            v{j} = out_view(out, K{j})" for j in remade],
        "            O = out",
        *[line for i in range(n_params) for line in (
            f"        if p{i} is not L{i}:",
            # another plan holds for a new array that, like the one it replaces, is not out's alias
            f"            if A{i} or p{i}.__class__ is not ndarray or ALT and may_share(p{i}, out)"
            f" or p{i}.shape != S{i}"
            + (f" or not seen and ({overlaps(i)})" if i in allowed else "") + ":",
            f"                return {slow_call}",
            f"            L{i} = p{i}")],
        *(["        if state_now() is IGNORING:"] if quiet_needed else []),
        *(indent + line for line in body),
        *(["        else:", "            with quiet():"] if quiet_needed else []),
        *(" " * 16 + line for line in body if quiet_needed),
        # an array that owns its memory (a model input or output, new every run) is not kept:
        # holding it past the call would keep its memory from the next run's allocation
        "        if out.base is None:",
        f"            {' = '.join(['O'] + direct + [f'v{j}' for j in remade])} = NOREF",
        *[line for i in registers for line in (f"        if p{i}.base is None:", f"            L{i} = NOREF")],
        "    def bind(state):",
        f"        nonlocal {', '.join(state)}",
        "        if state is None:",
        f"            {' = '.join(state)} = MISSING",
        "            return",
        f"        inputs, shapes, O, W, ({', '.join(views)},), specs, w, ALT = state",
        "        OS, OD = O.shape, O.dtype",
        *([f"        {', '.join(kept)}, = inputs[:{n_params}]",
           f"        {', '.join(shapes)}, = shapes[:{n_params}]"] if n_params else []),
        *[f"        A{i} = ALT and (L{i}.__class__ is not ndarray or may_share(L{i}, O))" for i in range(n_params)],
        *([f"        {', '.join(specs)}, = [specs[j] for j in REMADE]"] if specs else []),
        "    return call, bind"])
    namespace = {"MISSING": _MISSING, "NOREF": _NOREF, "REMADE": tuple(remade), "SAME_WORKSPACE": same_workspace}
    exec(compile(source, f"<fused_elementwise {n} steps>", "exec"), namespace)  # noqa: S102 (see the docstring)
    return namespace["factory"]
