"""The ``fused_elementwise`` kernel: a recipe of elementwise steps in one call.

The recipe (format in ``ops/definitions/fused_elementwise.py``) lists the
steps of a fused function; each step runs the op's own kernel
(``KERNELS[op].fn(*ins, out=buf, **attrs)``), so every op keeps one
implementation. Intermediates live in ``out`` itself and temporaries of at
most ``out``'s element count (from the planned ``workspace`` the VM hands
the kernel, sized by :func:`workspace_bound`, or else the thread's
workspace, :mod:`._workspace`); a producer step's own scratch follows them
in ``workspace``. :func:`plan_buffers` decides,
once per recipe, which buffer each step writes: a step writes over an input
that dies there when the recipe marks it ``inplace`` (an elementwise op,
same shape and dtype); a smaller intermediate (one that broadcasts into a
later step) takes a prefix of its buffer. A chain then runs entirely in
``out``; a tree such as ``exp(x) + tanh(x)`` needs the temporary for one
operand while the other waits in ``out``.

The inputs are never written. The memory planner may hand the kernel an
``out`` that *is* one of its inputs (the op is elementwise: the output may
reuse an input that dies there); the plan then keeps that input in ``out``
until its last read. Plans are cached per recipe and aliasing.

>>> recipe = (("exp", (("p", 0),), (), "float32", True, (True,)),
...           ("add", (("s", 0), ("p", 1)), (), "float32", True, (True, False)))
>>> x, y = np.zeros((2, 3), np.float32), np.ones(3, np.float32)
>>> out = np.empty((2, 3), np.float32)
>>> fused_elementwise(x, y, out=out, recipe=recipe)
>>> out
array([[2., 2., 2.],
       [2., 2., 2.]], dtype=float32)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np

from ...errors import ShapeError
from ..dtypes import numpy_dtype
from ._registry import get_kernel, register_kernel
from ._workspace import Scratch, aligned, scratch_nbytes

OUT = 0  # buffer 0 is ``out``; 1, 2, ... are temporaries
#: recipes are small (FuseOps makes at most 64 steps); an archive's are bounded
MAX_STEPS = 1024


@dataclass(frozen=True)
class _Step:
    fn: Callable
    inputs: tuple[tuple[str, int], ...]
    attrs: dict
    dtype: np.dtype
    full: bool
    inplace: tuple[bool, ...]
    workspace: bool = False     # the kernel takes ``workspace=`` (a producer such as nn.conv)


def _recipe_error(message: str) -> ShapeError:
    return ShapeError(f"fused_elementwise: malformed recipe: {message}")


@lru_cache(maxsize=512)
def compile_recipe(recipe: tuple) -> tuple[tuple[_Step, ...], int]:
    """The steps with their kernels resolved, and the number of parameters read."""
    if not isinstance(recipe, tuple) or not 0 < len(recipe) <= MAX_STEPS:
        raise _recipe_error(f"it must be a tuple of 1 to {MAX_STEPS} steps")
    steps, n_params = [], 0
    for j, step in enumerate(recipe):
        if not (isinstance(step, tuple) and len(step) == 6):
            raise _recipe_error(f"step {j} must be (op, inputs, attrs, dtype, full, inplace)")
        op, inputs, attrs, dtype, full, inplace = step
        kernel = get_kernel(op) if isinstance(op, str) else None
        if kernel is None or not kernel.dps:
            raise _recipe_error(f"step {j}: {op!r} is not a destination-passing kernel")
        if not (isinstance(inputs, tuple) and isinstance(inplace, tuple) and len(inputs) == len(inplace)):
            raise _recipe_error(f"step {j}: inputs and inplace must be tuples of one length")
        for ref in inputs:
            ok = (isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[1], int)
                  and not isinstance(ref[1], bool) and ref[1] >= 0
                  and (ref[0] == "p" or (ref[0] == "s" and ref[1] < j)))
            if not ok:
                raise _recipe_error(f"step {j}: input {ref!r} is neither ('p', i) nor ('s', j) of an earlier step")
            if ref[0] == "p":
                n_params = max(n_params, ref[1] + 1)
        try:
            attr_dict = dict(attrs)
        except (TypeError, ValueError):
            raise _recipe_error(f"step {j}: attrs must be (name, value) pairs") from None
        if not isinstance(dtype, str):
            raise _recipe_error(f"step {j}: the dtype must be a name, got {dtype!r}")
        steps.append(_Step(kernel.fn, inputs, attr_dict, numpy_dtype(dtype), bool(full),
                           tuple(bool(f) for f in inplace), kernel.takes_workspace))
    return tuple(steps), n_params


@lru_cache(maxsize=1024)
def plan_buffers(recipe: tuple, aliased: frozenset = frozenset(), buffers: int = 2) -> tuple[int, ...] | None:
    """The buffer each step of ``recipe`` writes (0 is ``out``, 1.. temporaries),
    using at most ``buffers`` buffers; None if they do not suffice.

    ``aliased`` are parameters that are ``out`` itself: ``out`` holds them
    until their last read. A step may write a buffer whose values are all
    dead, or hold only inputs of the step that die there and that it may
    write over. Buffer 0 takes no step wider than ``out``'s dtype (it has
    ``out``'s bytes); the last step writes buffer 0. Among the plans, the
    first in lexicographic order: as much as possible in ``out``.
    """
    steps, _ = compile_recipe(recipe)
    n = len(steps)
    last: dict[tuple, int] = {("s", n - 1): n}
    for j, step in enumerate(steps):
        for ref in step.inputs:
            last[ref] = j
    width = steps[-1].dtype.itemsize
    start = tuple(frozenset(aliased if b == OUT else ()) for b in range(buffers))
    start = tuple(frozenset(("p", i) for i in slot) for slot in start)
    failed: set = set()

    def writable(held: frozenset, j: int) -> bool:
        step = steps[j]
        return all(key in step.inputs and last.get(key, -1) == j
                   and all(ok for ref, ok in zip(step.inputs, step.inplace) if ref == key) for key in held)

    def search(j: int, state: tuple) -> tuple[int, ...] | None:
        if j == n:
            return ()
        state = tuple(frozenset(k for k in held if last.get(k, -1) >= j) for held in state)
        if (j, state) in failed:
            return None
        for b in ((OUT,) if j == n - 1 else range(buffers)):
            if b == OUT and steps[j].dtype.itemsize > width:
                continue
            if not writable(state[b], j):
                continue
            rest = search(j + 1, state[:b] + (frozenset({("s", j)}),) + state[b + 1:])
            if rest is not None:
                return (b,) + rest
        failed.add((j, state))
        return None

    return search(0, start)


@lru_cache(maxsize=1024)
def _plan(recipe: tuple, aliased: frozenset) -> tuple[tuple[int, ...], bool]:
    """A plan with as few buffers as possible; True when the aliased inputs
    must be copied first (no plan can keep them in ``out``)."""
    n = len(recipe)
    for buffers in range(2, n + 2):
        plan = plan_buffers(recipe, aliased, buffers)
        if plan is not None:
            return plan, False
    return plan_buffers(recipe, frozenset(), n + 1), True


@dataclass(frozen=True)
class _Prepared:
    """What a call of one recipe with given shapes needs, worked out once:
    the steps, the buffer each writes, the shape of each value, the
    temporaries' sizes, and whether the aliased inputs are copied first."""

    steps: tuple[_Step, ...]
    plan: tuple[int, ...]
    shapes: tuple[tuple, ...]
    temporaries: tuple[int, ...]
    copy_aliased: bool
    direct: tuple[bool, ...]        # the step writes ``out`` itself (its shape and dtype)


#: (id(recipe), out shape and dtype, aliased inputs, input shapes) -> (recipe, _Prepared);
#: the recipe is kept in the entry, so its id is not reused while the entry lives
_PREPARED: dict[tuple, tuple] = {}
_PREPARED_MAX = 4096


def _checked_steps(recipe, inputs, out: np.ndarray) -> tuple[_Step, ...]:
    """The compiled steps of ``recipe``, checked against the call's parameter count and ``out``'s dtype."""
    try:
        steps, n_params = compile_recipe(recipe)
    except TypeError:       # unhashable: not the plain tuples the IR and archives hold
        raise _recipe_error(f"it must hold only tuples and plain values, got {recipe!r:.200}") from None
    if n_params > len(inputs):
        raise ShapeError(f"fused_elementwise: the recipe reads {n_params} parameters, the call passes {len(inputs)}")
    if steps[-1].dtype != out.dtype:
        raise ShapeError(f"fused_elementwise: the recipe computes {steps[-1].dtype}, out is {out.dtype}")
    return steps


def prepare_call(recipe: tuple, inputs: list, out: np.ndarray, aliased: frozenset) -> _Prepared:
    """The :class:`_Prepared` of this call: from the cache when the same
    recipe object met the same shapes (the VM passes an instruction's recipe
    as one object, so no nested tuple is hashed per call)."""
    key = (id(recipe), out.shape, out.dtype.str, aliased,
           *(x.shape if isinstance(x, np.ndarray) else np.shape(x) for x in inputs))
    hit = _PREPARED.get(key)
    if hit is not None and hit[0] is recipe:
        return hit[1]
    steps = _checked_steps(recipe, inputs, out)
    plan, copy_aliased = _plan(recipe, aliased)
    shapes: list[tuple] = []
    for step in steps:
        shapes.append(out.shape if step.full else np.broadcast_shapes(
            *(np.shape(inputs[i]) if kind == "p" else shapes[i] for kind, i in step.inputs)))
    if shapes[-1] != out.shape:
        raise ShapeError(f"fused_elementwise: the result has shape {shapes[-1]}, out has {out.shape}")
    if any(b == OUT and nbytes(shape, s.dtype) > out.nbytes for s, b, shape in zip(steps, plan, shapes)):
        raise ShapeError(f"fused_elementwise: an intermediate is larger than out {out.shape}")
    # temporaries as large as their largest value
    sizes = tuple(max(nbytes(shape, s.dtype) for s, p, shape in zip(steps, plan, shapes) if p == b)
                  for b in range(1, max(plan) + 1))
    direct = tuple(b == OUT and shape == out.shape and s.dtype == out.dtype
                   for s, b, shape in zip(steps, plan, shapes))
    prepared = _Prepared(steps, plan, tuple(shapes), sizes, copy_aliased, direct)
    if len(_PREPARED) >= _PREPARED_MAX:
        _PREPARED.clear()
    _PREPARED[key] = (recipe, prepared)
    return prepared


@register_kernel("fused_elementwise")
def fused_elementwise(*inputs, out, recipe, workspace=None):
    """Run the steps of ``recipe`` on ``inputs`` (its parameters) into ``out``;
    ``workspace`` (when given) holds the temporaries, then the scratch of the
    steps whose kernels take one (they run one after another)."""
    if out.size == 0:
        _checked_steps(recipe, inputs, out)
        return
    if not out.flags.c_contiguous:
        # intermediates reinterpret out's bytes; a strided out gets a compact stand-in
        result = np.empty(out.shape, out.dtype)
        fused_elementwise(*(np.array(x) if np.may_share_memory(x, out) else x for x in inputs),
                          out=result, recipe=recipe, workspace=workspace)
        np.copyto(out, result)
        return
    inputs, aliased = split_aliases(inputs, out)
    prepared = prepare_call(recipe, inputs, out, aliased)
    if prepared.copy_aliased:
        inputs = [x.copy() if i in aliased else x for i, x in enumerate(inputs)]
    if not prepared.temporaries:
        _run(prepared, inputs, out, [], workspace)
        return
    layouts = [((n,), np.uint8) for n in prepared.temporaries]
    used = scratch_nbytes(layouts)
    rest = workspace[used:] if workspace is not None and workspace.nbytes >= used else None
    with Scratch(layouts, workspace) as temporaries:
        _run(prepared, inputs, out, temporaries, rest)


def _run(prepared: _Prepared, inputs: list, out: np.ndarray, temporaries, rest) -> None:
    """The steps, each into ``out`` or its planned buffer (``temporaries``:
    the byte buffers 1, 2, ...); ``rest``: workspace for the steps' own scratch."""
    raws = None
    values: list[np.ndarray] = []
    for step, b, shape, direct in zip(prepared.steps, prepared.plan, prepared.shapes, prepared.direct):
        args = [inputs[i] if kind == "p" else values[i] for kind, i in step.inputs]
        if direct:
            dst = out
        else:
            if raws is None:
                raws = [out.reshape(-1).view(np.uint8), *temporaries]
            dst = raws[b][:nbytes(shape, step.dtype)].view(step.dtype).reshape(shape)
        if step.workspace and rest is not None:
            step.fn(*args, out=dst, workspace=rest, **step.attrs)
        else:
            step.fn(*args, out=dst, **step.attrs)
        values.append(dst)


def workspace_bound(recipe: tuple, out_size, aliasable) -> int:
    """Bytes that hold the temporaries of ``recipe`` for an ``out`` of
    ``out_size`` elements, whichever of the parameters ``aliasable`` the
    memory plan makes ``out`` itself (none, or one of them): per such choice
    the plan's temporaries, each at most ``out_size`` elements of the widest
    step dtype. ``out_size`` may be symbolic (the compiler's dims).

    >>> recipe = (("exp", (("p", 0),), (), "float32", True, (True,)),
    ...           ("tanh", (("p", 0),), (), "float32", True, (True,)),
    ...           ("add", (("s", 0), ("s", 1)), (), "float32", True, (True, True)))
    >>> workspace_bound(recipe, 100, [0])      # exp(x) waits in a temporary while tanh(x) runs
    448
    """
    steps, _ = compile_recipe(recipe)
    width = max(s.dtype.itemsize for s in steps)
    choices = [frozenset()] + [frozenset({i}) for i in aliasable]
    count = max(max(_plan(recipe, a)[0]) for a in choices)
    return count * aligned(out_size * width)


def nbytes(shape: tuple, dtype: np.dtype) -> int:
    count = dtype.itemsize
    for d in shape:
        count *= d
    return count


def split_aliases(inputs, out: np.ndarray) -> tuple[list, frozenset]:
    """The inputs, with those that overlap ``out`` partially copied, and the
    indices of those that are ``out`` itself."""
    inputs, aliased = list(inputs), set()
    for i, x in enumerate(inputs):
        if not isinstance(x, np.ndarray) or not np.may_share_memory(x, out):
            continue
        if (x.shape == out.shape and x.dtype == out.dtype and x.strides == out.strides
                and x.__array_interface__["data"][0] == out.__array_interface__["data"][0]):
            aliased.add(i)
        else:
            inputs[i] = x.copy()
    return inputs, frozenset(aliased)


def _specialize(attrs: dict, constant: tuple):
    """The kernel for one instruction's recipe (``specialize_attrs``, see the VM): a generated function."""
    from .fused_specialized import specialize
    return specialize(attrs.get("recipe"), constant)


fused_elementwise.specialize_attrs = _specialize
