"""Exact placement for small pools: branch and bound over first-fit orders.

Why searching orders is enough: take any placement and place its buffers by
first fit in order of their offsets (ties by index). Each buffer lands no
higher than before, because everything placed before it lay below it. Repeat:
offsets only decrease, so this stops at a placement that first fit in its own
offset order reproduces, and no larger than where it started. Applied to an
optimal placement, this gives an optimal placement whose buffers, in that
order, get strictly increasing keys ``(first-fit offset, index)``.

So the search builds orders one buffer at a time, only appending a buffer
whose key exceeds the last one's, and prunes a branch when its arena so far,
or the last offset plus the largest buffer still to place (which lands no
lower), or the pool's lower bound, reaches the best arena found. Starting
from the heuristics' best, it stops at once when that meets the lower bound.
Each node costs O(n · w); the node limit keeps the worst case bounded, and
the result says whether the search completed (the plan is then optimal).
"""

from __future__ import annotations

from typing import Sequence

EXACT_NODES = 200_000


class _OutOfNodes(Exception):
    pass


def search(p, start: Sequence[int], node_limit: int = EXACT_NODES) -> tuple[list[int], bool]:
    """The smallest placement of problem ``p`` found, starting from ``start``,
    and whether it is proven optimal.

    ``p`` has ``n``, ``sizes`` (aligned), ``conflicts`` (lists of indices),
    ``lower_bound()`` and ``peak(offsets)`` (``placement.Problem``).
    """
    sizes, conflicts = p.sizes, p.conflicts
    best = list(start)
    best_peak = p.peak(best)
    bound = p.lower_bound()
    if best_peak <= bound:
        return best, True
    todo = [i for i in range(p.n) if sizes[i]]
    offsets = [-1] * p.n
    for i in range(p.n):
        if not sizes[i]:
            offsets[i] = 0
    nodes = 0

    def first_fit(i: int) -> int:
        size, at = sizes[i], 0
        for lo, hi in sorted((offsets[j], offsets[j] + sizes[j]) for j in conflicts[i]
                             if offsets[j] >= 0):
            if lo >= at + size:
                break
            at = max(at, hi)
        return at

    def dfs(remaining: list[int], last: tuple[int, int], peak: int) -> None:
        nonlocal best, best_peak, nodes
        if not remaining:
            best, best_peak = list(offsets), peak
            return
        by_size = sorted(remaining, key=lambda i: -sizes[i])
        for i in remaining:
            at = first_fit(i)
            if (at, i) <= last:
                continue
            rest = by_size[0] if by_size[0] != i else (by_size[1] if len(by_size) > 1 else None)
            reach = max(peak, at + sizes[i], bound, at + sizes[rest] if rest is not None else 0)
            if reach >= best_peak:
                continue
            nodes += 1
            if nodes > node_limit:
                raise _OutOfNodes
            offsets[i] = at
            dfs([j for j in remaining if j != i], (at, i), max(peak, at + sizes[i]))
            offsets[i] = -1
            if best_peak <= bound:
                return

    try:
        dfs(todo, (-1, -1), 0)
    except _OutOfNodes:
        return best, False
    return best, True
