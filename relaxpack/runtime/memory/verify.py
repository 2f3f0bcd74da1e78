"""Memory plans: the buffers they place, what makes a plan valid, how small it can be.

A :class:`Buffer` is a block of bytes live over an inclusive range of
instructions. A :class:`Plan` gives every buffer a byte offset in the arena
of its pool. A plan is valid when no two buffers of one pool are live at a
common instruction and overlap in address; :func:`verify_plan` checks that
with a sweep over time and names the first two buffers that collide.

>>> a = Buffer("a", 100, 0, 1); b = Buffer("b", 64, 1, 2); c = Buffer("c", 64, 2, 3)
>>> lower_bound([a, b, c])         # a (128 aligned bytes) and b are live together
{'global': 192}
>>> plan = Plan({"a": 0, "b": 128, "c": 0}, {"global": 192}, "by hand", {"global": 192})
>>> verify_plan([a, b, c], plan)   # raises PlanError if two live buffers overlap
"""

from __future__ import annotations

import bisect
import heapq
import numbers
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ...errors import RelaxpackError

GLOBAL = "global"
#: where a tensor may start in an arena, bytes: the compiler's plan, its
#: cost model (ReorderBindings) and the runtime's re-plans agree on it
ALIGNMENT = 64


class PlanError(RelaxpackError):
    """Buffers cannot be planned (malformed, or a pool too small), or a plan is invalid."""


def align_up(size: int, alignment: int) -> int:
    """``size`` rounded up to a multiple of ``alignment``."""
    return -(-size // alignment) * alignment


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass(frozen=True, slots=True)
class Buffer:
    """``size`` bytes live from instruction ``start`` to ``end``, both inclusive.

    A kernel's scratch workspace is a buffer with ``start == end``.
    """

    name: str
    size: int
    start: int
    end: int
    pool: str = GLOBAL

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise PlanError(f"buffer name must be a non-empty string, not {self.name!r}")
        for attr in ("size", "start", "end"):
            value = getattr(self, attr)
            if not _is_int(value):
                raise PlanError(f"buffer {self.name!r}: {attr} must be an int, not {value!r} "
                                f"(plan symbolic sizes at their upper bounds)")
            object.__setattr__(self, attr, int(value))
        if self.size < 0:
            raise PlanError(f"buffer {self.name!r}: negative size {self.size}")
        if self.start > self.end:
            raise PlanError(f"buffer {self.name!r}: live range [{self.start}, {self.end}] is empty")
        if not isinstance(self.pool, str) or not self.pool:
            raise PlanError(f"buffer {self.name!r}: pool must be a non-empty string, "
                            f"not {self.pool!r}")

    def live_with(self, other: "Buffer") -> bool:
        """Whether the two buffers are live at a common instruction."""
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class Plan:
    """Where every buffer lives: an offset into the arena of its pool.

    ``pool_of`` is each buffer's final pool: its own, or ``"global"`` when a
    bounded pool could not hold it (a missing name means its own pool).
    ``lower_bound`` is, per final pool, the largest total of aligned bytes live
    at one instruction; no plan of those buffers can be smaller.
    ``algorithms`` names each pool's winning algorithm, ``candidates`` gives
    the arena bytes of every valid candidate per pool, and ``optimal`` says
    whether a pool's size is proven minimal (it meets the lower bound, or the
    exact search completed).
    """

    offsets: dict[str, int]
    pool_sizes: dict[str, int]
    algorithm: str
    lower_bound: dict[str, int]
    pool_of: dict[str, str] = field(default_factory=dict)
    algorithms: dict[str, str] = field(default_factory=dict)
    optimal: dict[str, bool] = field(default_factory=dict)
    candidates: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def arena_bytes(self) -> int:
        """Total bytes of all arenas."""
        return sum(self.pool_sizes.values())

    def ratio(self, pool: str | None = None) -> float:
        """Arena bytes over the lower bound (of ``pool``, or of all pools); 1.0 is optimal.

        >>> Plan({"a": 0}, {"global": 128}, "greedy_by_size", {"global": 128}).ratio()
        1.0
        """
        if pool is None:
            arena, bound = self.arena_bytes, sum(self.lower_bound.values())
        else:
            arena, bound = self.pool_sizes.get(pool, 0), self.lower_bound.get(pool, 0)
        return arena / bound if bound else 1.0


def check_buffers(buffers: Iterable[Buffer]) -> list[Buffer]:
    """The buffers as a list; raises :class:`PlanError` on a non-Buffer or a repeated name."""
    out, seen = [], set()
    for b in buffers:
        if not isinstance(b, Buffer):
            raise PlanError(f"expected a Buffer, got {type(b).__name__}: {b!r}")
        if b.name in seen:
            raise PlanError(f"buffer name {b.name!r} appears more than once")
        seen.add(b.name)
        out.append(b)
    return out


def check_alignment(alignment) -> int:
    if not _is_int(alignment) or alignment <= 0:
        raise PlanError(f"alignment must be a positive int, not {alignment!r}")
    return int(alignment)


def naive_bytes(buffers: Iterable[Buffer], alignment: int = 64) -> int:
    """Bytes used without sharing: the sum of all aligned sizes.

    >>> naive_bytes([Buffer("a", 100, 0, 1), Buffer("b", 64, 2, 3)])
    192
    """
    alignment = check_alignment(alignment)
    return sum(align_up(b.size, alignment) for b in buffers)


def peak_live(intervals: Iterable[tuple[int, int, int]]) -> int:
    """Largest total ``size`` of ``(size, start, end)`` intervals live at one instruction."""
    events = []
    for size, start, end in intervals:
        if size:
            events.append((start, size))
            events.append((end + 1, -size))
    events.sort()   # at equal times frees (negative) come before allocations
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def lower_bound(buffers: Iterable[Buffer], alignment: int = 64,
                pool_of: Mapping[str, str] | None = None) -> dict[str, int]:
    """Per pool, the largest total of aligned bytes live at one instruction.

    ``pool_of`` overrides buffers' pools (e.g. after spilling).

    >>> lower_bound([Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2), Buffer("c", 64, 2, 3)])
    {'global': 128}
    """
    alignment = check_alignment(alignment)
    pool_of = pool_of or {}
    groups: dict[str, list[tuple[int, int, int]]] = {}
    for b in buffers:
        groups.setdefault(pool_of.get(b.name, b.pool), []).append(
            (align_up(b.size, alignment), b.start, b.end))
    return {pool: peak_live(items) for pool, items in sorted(groups.items())}


def find_overlap(items: Sequence[tuple[str, int, int, int, int]]) -> tuple[int, int] | None:
    """Indices of two items ``(name, start, end, offset, top)`` live together whose
    address ranges ``[offset, top)`` overlap, or None.

    Sweeps over time keeping the live blocks sorted by offset: a new block can
    only overlap its neighbours in that order, because the live blocks are
    disjoint (or the sweep has already stopped). Two blocks live together are
    both live when the later one starts, so checking each block as it starts
    finds every collision. O(n log n) comparisons.
    """
    order = sorted((i for i in range(len(items)) if items[i][4] > items[i][3]),
                   key=lambda i: items[i][1])
    ending: list[tuple[int, int]] = []    # heap of (end, index) of live blocks
    offs: list[int] = []                  # offsets of live blocks, sorted; distinct
    live: list[int] = []                  # their indices, in the same order
    for i in order:
        _, start, _, off, top = items[i]
        while ending and ending[0][0] < start:
            _, j = heapq.heappop(ending)
            k = bisect.bisect_left(offs, items[j][3])
            del offs[k], live[k]
        k = bisect.bisect_left(offs, off)
        if k < len(offs) and offs[k] < top:
            return live[k], i
        if k > 0 and items[live[k - 1]][4] > off:
            return live[k - 1], i
        offs.insert(k, off)
        live.insert(k, i)
        heapq.heappush(ending, (items[i][2], i))
    return None


def verify_plan(buffers: Iterable[Buffer], plan: Plan, alignment: int = 64, *,
                pools: Mapping[str, int | None] | None = None) -> None:
    """Raise :class:`PlanError` unless ``plan`` places every buffer validly.

    Checks: every buffer (and nothing else) has an aligned, non-negative
    offset; it stays in its own pool or spilled to ``"global"``; it ends
    within its pool's arena; arenas respect the bounds in ``pools``; and no
    two buffers of a pool live at a common instruction overlap in address.
    The error for a collision names both buffers.
    """
    alignment = check_alignment(alignment)
    buffers = check_buffers(buffers)
    names = {b.name for b in buffers}
    extra = sorted(set(plan.offsets) - names)
    if extra:
        raise PlanError(f"plan places unknown buffer(s) {extra[:5]}")
    for pool, size in (pools or {}).items():
        if size is not None and plan.pool_sizes.get(pool, 0) > size:
            raise PlanError(f"pool {pool!r} is {plan.pool_sizes[pool]} bytes, "
                            f"over its bound of {size}")
    groups: dict[str, list[tuple[str, int, int, int, int]]] = {}
    for b in buffers:
        if b.name not in plan.offsets:
            raise PlanError(f"plan has no offset for buffer {b.name!r}")
        off = plan.offsets[b.name]
        pool = plan.pool_of.get(b.name, b.pool)
        if pool not in (b.pool, GLOBAL):
            raise PlanError(f"buffer {b.name!r} of pool {b.pool!r} is placed in pool {pool!r}; "
                            f"a buffer may only spill to {GLOBAL!r}")
        if not _is_int(off) or off < 0 or off % alignment:
            raise PlanError(f"buffer {b.name!r}: offset {off!r} is not a non-negative "
                            f"multiple of {alignment}")
        top = off + align_up(b.size, alignment)
        if b.size and top > plan.pool_sizes.get(pool, 0):
            raise PlanError(f"buffer {b.name!r} at [{off}, {top}) ends past the "
                            f"{plan.pool_sizes.get(pool, 0)}-byte arena of pool {pool!r}")
        groups.setdefault(pool, []).append((b.name, b.start, b.end, off, top))
    for pool, items in groups.items():
        hit = find_overlap(items)
        if hit is not None:
            (na, sa, ea, oa, ta), (nb, sb, eb, ob, tb) = items[hit[0]], items[hit[1]]
            raise PlanError(f"buffers {na!r} and {nb!r} overlap in pool {pool!r}: "
                            f"{na!r} at [{oa}, {ta}) live [{sa}, {ea}], "
                            f"{nb!r} at [{ob}, {tb}) live [{sb}, {eb}]")
