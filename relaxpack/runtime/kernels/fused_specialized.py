"""``fused_elementwise`` specialized to one instruction's recipe: a generated Python function.

The generic kernel (:mod:`.fused_elementwise`) works out per call which
buffer each step writes, makes the views and calls each step's kernel, all
from the recipe: 10-40 µs of Python on tensors of a few hundred values,
more than the unfused chain's calls. The VM instead asks, once per
instruction, for :func:`specialize` of the instruction's recipe, which
generates (once per shape of recipe: its steps' inputs and which take
attributes or a workspace, never the archive's strings) a function that
makes the steps' calls one after another. That function keeps the
last call's ``out``, ``workspace``, operands and the views into them:
when the next call passes the same arrays (an arena view is the same
object from run to run) it only makes the calls; otherwise it plans as the
generic kernel does (:func:`~.fused_elementwise.prepare_call`) and keeps
the new views. Where the plan needs the thread's scratch (no planned
workspace) or copies (an operand overlapping ``out``), the call goes to the
generic kernel.

A step whose kernel is a bare ufunc call (:func:`.registry.as_ufunc`) calls
the ufunc itself; those that need floating-point warnings off run inside one
:func:`~relaxpack.runtime.fpstate.quiet` for the whole chain. A step whose
kernel specializes (a producer conv: :mod:`.conv_small`) gets its own
specialized callable.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

from ..fpstate import quiet
from ._math import is_low_float
from .fused_elementwise import OUT, compile_recipe, fused_elementwise, nbytes, prepare_call, split_aliases
from ._workspace import scratch_nbytes

#: a parameter the call did not pass (the generic kernel then says so)
_MISSING = object()


def specialize(recipe, constant: tuple = ()) -> Callable:
    """``call(*inputs, out, workspace=None)`` running ``recipe`` like :func:`fused_elementwise`;
    ``constant[i]``: parameter ``i`` is a bound value (see ``specialize_attrs`` in ``_registry.py``)."""
    try:
        steps, n_params = compile_recipe(recipe)
    except Exception:  # noqa: BLE001 - malformed: the generic kernel raises the error, per call
        return _generic(recipe)
    fns, attrs, quiet_needed = [], [], False
    for step in steps:
        direct = _direct_ufunc(step)
        own = getattr(step.fn, "specialize_attrs", None) if not direct else None
        fixed = tuple(kind == "p" and i < len(constant) and constant[i] for kind, i in step.inputs)
        fns.append(direct[0] if direct else own(step.attrs, fixed) if own else step.fn)
        attrs.append(step.attrs if step.attrs and not direct and not own else None)
        quiet_needed |= bool(direct and direct[1])
    structure = tuple((step.inputs, attrs[j] is not None, step.workspace) for j, step in enumerate(steps))
    factory = _factory(structure, n_params, quiet_needed)
    holder: list = []
    call, bind = factory(*fns, *attrs, quiet, lambda inputs, out, ws: _slow(holder[0], inputs, out, ws))
    holder.append(_Slow(recipe, bind, call))
    return call


def _generic(recipe) -> Callable:
    def call(*inputs, out, workspace=None):
        fused_elementwise(*inputs, out=out, recipe=recipe, workspace=workspace)
    return call


def _direct_ufunc(step):
    """(ufunc, needs quiet) when the step's kernel is that ufunc's call for its dtype, else None."""
    ufunc = getattr(step.fn, "ufunc", None)
    if ufunc is None or step.workspace:
        return None
    if getattr(step.fn, "ufunc_low_float", True) is False and is_low_float(step.dtype) \
            and step.dtype != np.float16:
        return None
    return ufunc, bool(getattr(step.fn, "ufunc_quiet", False))


class _Slow:
    """What the slow path needs: the recipe, and the generated function's ``bind`` and ``call``."""

    __slots__ = ("recipe", "bind", "call")

    def __init__(self, recipe, bind, call):
        self.recipe, self.bind, self.call = recipe, bind, call


def _slow(state: _Slow, inputs: tuple, out, workspace) -> None:
    """Plan the call (the generic kernel's plan), keep its views in the generated function, run it;
    or hand the call to the generic kernel where the plan needs the thread's scratch or copies."""
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
    raws = [out.reshape(-1).view(np.uint8)]
    start = 0
    for n in prepared.temporaries:
        raws.append(workspace[start:start + n])
        start += -(-n // 64) * 64
    views = tuple(out if direct else raws[b][:nbytes(shape, step.dtype)].view(step.dtype).reshape(shape)
                  for step, b, shape, direct in zip(prepared.steps, prepared.plan, prepared.shapes, prepared.direct))
    rest = workspace[used:] if workspace is not None and workspace.nbytes >= used else None
    state.bind((inputs, out, workspace, views, rest))
    state.call(*inputs, out=out, workspace=workspace)


@lru_cache(maxsize=256)
def _factory(structure: tuple, n_params: int, quiet_needed: bool) -> Callable:
    """``factory(f0.., a0.., quiet, slow) -> (call, bind)`` for recipes of this structure.

    The source is made from ints and flags only: parameter and step indices, whether a step takes
    attributes or a workspace; every function, attribute dict and view is a closure variable."""
    n = len(structure)
    params = [f"p{i}" for i in range(n_params)]
    kept = [f"L{i}" for i in range(n_params)]
    views = [f"v{j}" for j in range(n)]
    body = []
    for j, (inputs, has_attrs, has_ws) in enumerate(structure):
        args = [f"p{i}" if kind == "p" else f"v{i}" for kind, i in inputs] + [f"out=v{j}"]
        args += ["workspace=w"] * has_ws + [f"**a{j}"] * has_attrs
        body.append(f"f{j}({', '.join(args)})")
    indent = " " * (16 if quiet_needed else 12)
    source = "\n".join([
        f"def factory({', '.join([f'f{j}' for j in range(n)] + [f'a{j}' for j in range(n)])}, quiet, slow):",
        f"    {' = '.join(kept + views + ['O', 'W', 'w'])} = MISSING",
        f"    def call({''.join(p + '=MISSING, ' for p in params)}*rest, out, workspace=None):",
        f"        if {' and '.join([f'p{i} is L{i}' for i in range(n_params)] + ['out is O', 'workspace is W'])}:",
        *(["            with quiet():"] if quiet_needed else []),
        *(indent + line for line in body),
        "            return",
        f"        slow(({''.join(p + ', ' for p in params)}*rest), out, workspace)",
        "    def bind(state):",
        f"        nonlocal {', '.join(kept + views + ['O', 'W', 'w'])}",
        "        if state is None:",
        f"            {' = '.join(kept + views + ['O', 'W', 'w'])} = MISSING",
        "            return",
        "        inputs, O, W, views, w = state",
        *([f"        {', '.join(kept)}, = inputs[:{n_params}]"] if n_params else []),
        f"        {', '.join(views)}, = views",
        "    return call, bind"])
    namespace = {"MISSING": _MISSING}
    exec(compile(source, f"<fused_elementwise {n} steps>", "exec"), namespace)  # noqa: S102 (see the docstring)
    return namespace["factory"]
