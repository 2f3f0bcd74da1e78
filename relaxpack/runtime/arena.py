"""Arenas at run time: an exact memory plan for each concrete shape, cached.

The compiler leaves in the bytecode, for every planned buffer, a program for
its size in bytes (over the shape heap) and its lifetime in instructions.
``vm.builtin.plan_arena`` evaluates the sizes once the inputs' dims are
known, plans offsets for that shape (cached per tuple of sizes) and hands out
an :class:`ArenaPlan`; ``vm.builtin.arena_tensor`` then gives each buffer as
a view into the arena. One arena per pool, kept by the VM between calls and
grown when a larger shape needs it; it never holds inputs or outputs.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import ArchiveError
from .builtins import builtin, negative_dim, negative_dim_error, specializable
from .dtypes import numpy_dtype
from .memory import ALIGNMENT, Buffer, plan_memory
from .shape_program import compile_program

#: The algorithms used per concrete shape: the fast ones (the compiler ran
#: the full set, refinements included, for the plan at the dims' bounds).
RUNTIME_ALGORITHMS = ("greedy_by_size", "greedy_by_conflicts", "best_fit")


class ArenaPlan:
    """The arenas, offsets and planned sizes (bytes) for one concrete shape."""

    __slots__ = ("offsets", "arenas", "sizes")

    def __init__(self, offsets: list[int], arenas: list[np.ndarray], sizes: tuple[int, ...]):
        self.offsets = offsets
        self.arenas = arenas
        self.sizes = sizes


class _ArenaState:
    """Per-VM (per prepared instruction) cache of plans and the arena buffers."""

    def __init__(self, spec, caps, heap_size: int):
        if not isinstance(spec, (list, tuple)) or not all(
                isinstance(b, (list, tuple)) and len(b) == 4 for b in spec):
            raise ArchiveError("plan_arena takes a list of [size program, start, end, pool] buffers")
        if not isinstance(caps, (list, tuple)) or not all(
                isinstance(c, (list, tuple)) and len(c) == 2 and isinstance(c[0], str) and isinstance(c[1], int)
                for c in caps):
            raise ArchiveError("plan_arena takes a list of [pool, bytes] bounds")
        self.caps = {name: cap for name, cap in caps}
        self.sizes = [compile_program(b[0], heap_size) for b in spec]
        self.lifetimes = [(_int(b[1]), _int(b[2])) for b in spec]
        self.pools = sorted({str(b[3]) for b in spec} | {"global"})
        self.pool_index = [self.pools.index(str(b[3])) for b in spec]
        self.cache: dict[tuple, tuple[list[int], list[int], list[int]]] = {}
        self.buffers: list[np.ndarray] = [np.empty(0, np.uint8) for _ in self.pools]
        self.plan_seconds = 0.0
        self.last_dims: tuple | None = None      # the shape heap of the last call, and its plan
        self.last_plan: ArenaPlan | None = None
        #: called with the bytes an arena is about to grow by (a VM's memory budget), or None
        self.reserve = None

    def plan(self, heap) -> ArenaPlan:
        dims = tuple(heap)
        if dims == self.last_dims:      # the sizes are functions of the dims alone
            return self.last_plan
        sizes = tuple(fn(heap) for fn in self.sizes)
        entry = self.cache.get(sizes)
        if entry is None:
            entry = self.cache[sizes] = self._place(sizes)
        offsets, pool_of, pool_bytes = entry
        for i, need in enumerate(pool_bytes):
            if self.buffers[i].nbytes < need:
                if self.reserve is not None:
                    self.reserve(need - self.buffers[i].nbytes)
                self.buffers[i] = np.empty(need, np.uint8)
        self.last_dims = dims
        self.last_plan = ArenaPlan(offsets, [self.buffers[p] for p in pool_of], sizes)
        return self.last_plan

    def _place(self, sizes) -> tuple[list[int], list[int], list[int]]:
        """Offsets, the pool each buffer ended in (bounded pools spill to global), pool sizes."""
        t0 = time.perf_counter()
        buffers = [Buffer(str(i), max(int(s), 0), start, end, self.pools[self.pool_index[i]])
                   for i, (s, (start, end)) in enumerate(zip(sizes, self.lifetimes))]
        plan = plan_memory(buffers, ALIGNMENT, pools=self.caps, algorithms=RUNTIME_ALGORITHMS, exact_limit=0)
        offsets = [plan.offsets[str(i)] for i in range(len(buffers))]
        pool_of = [self.pools.index(plan.pool_of.get(str(i), buffers[i].pool)) for i in range(len(buffers))]
        pool_bytes = [plan.pool_sizes.get(p, 0) for p in self.pools]
        self.plan_seconds += time.perf_counter() - t0
        return offsets, pool_of, pool_bytes


def _int(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ArchiveError(f"plan_arena: bad lifetime bound {v!r}")
    return v


@builtin("vm.builtin.plan_arena")
def plan_arena(spec, caps, heap_size: int, heap) -> ArenaPlan:
    """Plan the buffers of ``spec`` for the dims in ``heap``; ``caps`` bound pools."""
    return _ArenaState(spec, caps, heap_size).plan(heap)


def _plan_arena_specialize(spec, caps, heap_size: int):
    state = _ArenaState(spec, caps, heap_size)

    def plan(heap) -> ArenaPlan:
        return state.plan(heap)
    plan.state = state  # statistics: shapes planned (len(state.cache)), planning time
    return plan


specializable(plan_arena, 3, _plan_arena_specialize)


@builtin("vm.builtin.arena_tensor")
def arena_tensor(index: int, dtype: str, plan: ArenaPlan, shape) -> np.ndarray:
    """Buffer ``index`` of the plan as an array of ``shape`` and ``dtype``."""
    np_dtype = numpy_dtype(dtype)
    if np_dtype.hasobject:
        raise ArchiveError(f"arena_tensor: {dtype} tensors hold references and cannot live in a byte arena")
    nbytes = int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize
    _check_fits(index, nbytes, plan, shape)
    offset = plan.offsets[index]
    return plan.arenas[index][offset:offset + nbytes].view(np_dtype).reshape(shape)


def _check_fits(index: int, nbytes: int, plan: ArenaPlan, shape) -> None:
    """A view never reaches past its buffer into another (the loader checks lifetimes, this the sizes),
    nor has a negative dim (its reshape would take the -1 for a dim to infer)."""
    if nbytes <= 0 and negative_dim(shape):
        raise negative_dim_error(shape)
    if not 0 <= index < len(plan.sizes):
        raise ArchiveError(f"arena_tensor: buffer {index} is not in the plan's {len(plan.sizes)} buffers")
    if nbytes > plan.sizes[index]:
        raise ArchiveError(f"arena_tensor: a view of shape {tuple(shape)} takes {nbytes} bytes, its buffer "
                           f"{index} was planned for {plan.sizes[index]}")


def _arena_tensor_specialize(index: int, dtype: str):
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ArchiveError(f"arena_tensor: bad buffer index {index!r}")
    np_dtype = numpy_dtype(dtype)
    if np_dtype.hasobject:
        raise ArchiveError(f"arena_tensor: {dtype} tensors hold references and cannot live in a byte arena")
    itemsize = np_dtype.itemsize
    last = [None, -1, None, None]       # arena, offset, shape -> the view made for them

    def view(plan: ArenaPlan, shape) -> np.ndarray:
        arena, offset = plan.arenas[index], plan.offsets[index]
        if arena is last[0] and offset == last[1] and shape == last[2]:
            return last[3]              # the same buffer as in the previous run: reuse its view
        n = 1
        for d in shape:
            n *= d
        _check_fits(index, n * itemsize, plan, shape)
        array = arena[offset:offset + n * itemsize].view(np_dtype).reshape(shape)
        last[:] = arena, offset, shape, array
        return array
    return view


specializable(arena_tensor, 2, _arena_tensor_specialize)
