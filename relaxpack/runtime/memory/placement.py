"""Static placement of buffers in arenas, as TVM's unified static memory planner does.

Every algorithm maps buffers to byte offsets so that two buffers live at a
common instruction never overlap. The greedy ones fix an order and put each
buffer, in turn, at an offset among the already placed buffers it conflicts
with:

- ``greedy_by_size``: largest first, at the lowest offset where it fits
  (first fit);
- ``greedy_by_conflicts``: most conflicts first, first fit;
- ``best_fit``: largest first, into the smallest gap that holds it, else on
  top (TFLite's "greedy by size" offset planner; USMP has no best fit);
- ``hill_climb``: from the best placement so far, moves the buffer that
  ends highest before one of its conflicts in the first-fit order, keeping
  moves that do not grow the arena and, with a cooling probability, some
  that do (seeded; bounded by a deterministic amount of work and a time
  budget);
- ``exact`` (``exact.py``): branch and bound that proves optimality, for
  small pools.

:func:`plan_memory` runs them per pool, verifies every candidate and keeps
the smallest (ties: the earliest in ``algorithms``).

>>> from relaxpack.runtime.memory import Buffer, plan_memory
>>> plan = plan_memory([Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2), Buffer("c", 64, 2, 3)])
>>> plan.offsets, plan.pool_sizes
({'a': 64, 'b': 0, 'c': 64}, {'global': 128})

Complexity: with ``w`` the largest number of buffers live at once, a greedy
pass is O(n log n + n·w log w) (conflicts come from a sweep over time, each
buffer sorts its placed conflicts by offset); the verifier is O(n log n).
"""

from __future__ import annotations

import heapq
import logging
import math
import operator
import random
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from . import exact as _exact
from .verify import (GLOBAL, Buffer, Plan, PlanError, align_up, check_alignment, check_buffers,
                     find_overlap, lower_bound, peak_live, verify_plan)

log = logging.getLogger(__name__)

DEFAULT_ALGORITHMS = ("greedy_by_size", "greedy_by_conflicts", "best_fit", "hill_climb")
EXACT_LIMIT = 10                # pools with at most this many buffers also get the exact search
HILL_CLIMB_ITERATIONS = 5000
HILL_CLIMB_WORK = 1_000_000     # conflict visits: a deterministic bound on hill climbing
HILL_CLIMB_TEMPERATURE = 0.05   # chosen on random instances: ~1% better than 0 (plain climbing)
EXACT_NODES = _exact.EXACT_NODES


class Problem:
    """Buffers of one arena, indexed by name order, with aligned sizes and conflicts.

    ``conflicts[i]`` lists the buffers live together with ``i`` (zero-size
    buffers conflict with nothing). Built with one sweep over start times.
    """

    __slots__ = ("names", "sizes", "starts", "ends", "conflicts", "n")

    def __init__(self, buffers: Iterable[Buffer], alignment: int):
        bufs = sorted(buffers, key=lambda b: b.name)
        self.n = len(bufs)
        self.names = [b.name for b in bufs]
        self.sizes = [align_up(b.size, alignment) for b in bufs]
        self.starts = [b.start for b in bufs]
        self.ends = [b.end for b in bufs]
        self.conflicts: list[list[int]] = [[] for _ in bufs]
        ending: list[tuple[int, int]] = []
        live: dict[int, None] = {}     # ordered, so conflict lists are reproducible
        for i in sorted((i for i in range(self.n) if self.sizes[i]), key=self.starts.__getitem__):
            while ending and ending[0][0] < self.starts[i]:
                del live[heapq.heappop(ending)[1]]
            for j in live:
                self.conflicts[i].append(j)
                self.conflicts[j].append(i)
            live[i] = None
            heapq.heappush(ending, (self.ends[i], i))

    def peak(self, offsets: Sequence[int]) -> int:
        return max((o + s for o, s in zip(offsets, self.sizes)), default=0)

    def lower_bound(self) -> int:
        return peak_live(zip(self.sizes, self.starts, self.ends))

    def by_name(self, offsets: Sequence[int]) -> dict[str, int]:
        return dict(zip(self.names, offsets))

    def is_valid(self, offsets: Sequence[int]) -> bool:
        items = [(n, s, e, o, o + z) for n, s, e, o, z in
                 zip(self.names, self.starts, self.ends, offsets, self.sizes)]
        return all(o >= 0 for o in offsets) and find_overlap(items) is None


def place(p: Problem, order: Sequence[int], offsets: list[int], best_fit: bool = False,
          cap: int | None = None) -> int:
    """Place the buffers of ``order`` in turn among the placed ones (offset >= 0);
    returns the number of conflicts visited (the work done).

    First fit takes the lowest offset where the buffer fits; best fit the
    smallest gap that holds it, else the top. With ``cap``, a buffer that
    cannot end at or below it is left unplaced (offset -1).
    """
    sizes, conflicts = p.sizes, p.conflicts
    for i in order:
        offsets[i] = -1
    work = 0
    for i in order:
        size = sizes[i]
        if not size:
            offsets[i] = 0
            continue
        nbrs = conflicts[i]
        work += len(nbrs)
        blocks = sorted([(offsets[j], offsets[j] + sizes[j]) for j in nbrs if offsets[j] >= 0])
        at = 0
        if best_fit:
            best_gap = None
            for lo, hi in blocks:
                gap = lo - at
                if gap >= size and (best_gap is None or gap < best_gap):
                    best, best_gap = at, gap
                if hi > at:
                    at = hi
            if best_gap is not None:
                at = best
        else:
            for lo, hi in blocks:
                if lo >= at + size:
                    break
                if hi > at:
                    at = hi
        offsets[i] = at if cap is None or at + size <= cap else -1
    return work


def _greedy(p: Problem, order: Sequence[int], best_fit: bool = False) -> list[int]:
    offsets = [-1] * p.n
    place(p, order, offsets, best_fit=best_fit)
    return offsets


def size_order(p: Problem) -> list[int]:
    """Largest first; then most conflicts; then by name (USMP's order)."""
    return sorted(range(p.n), key=lambda i: (-p.sizes[i], -len(p.conflicts[i]), i))


def conflicts_order(p: Problem) -> list[int]:
    """Most conflicts first; then largest; then by name (USMP's order)."""
    return sorted(range(p.n), key=lambda i: (-len(p.conflicts[i]), -p.sizes[i], i))


def offset_order(offsets: Sequence[int]) -> list[int]:
    """Buffers by offset: first fit in this order never places one higher
    than ``offsets`` did, so it turns any placement into an order."""
    return sorted(range(len(offsets)), key=lambda i: (offsets[i], i))


def _cascade(p: Problem, pos: Sequence[int], offsets: list[int], dirty: Iterable[int]) -> int:
    """Re-place, by first fit in the order given by ``pos``, the ``dirty``
    buffers and whatever their moves disturb; returns the conflicts visited.

    A buffer's first-fit offset depends only on the offsets of its conflicts
    that precede it, so only the successors of a buffer that moved need a
    look; going in order of position sees each one after all its
    predecessors settled.
    """
    sizes, conflicts = p.sizes, p.conflicts
    heap = [(pos[i], i) for i in dirty]
    heapq.heapify(heap)
    queued = {i for _, i in heap}
    work = 0
    while heap:
        here, i = heapq.heappop(heap)
        nbrs = conflicts[i]
        work += len(nbrs)
        size, at = sizes[i], 0
        for lo, hi in sorted([(offsets[j], offsets[j] + sizes[j]) for j in nbrs if pos[j] < here]):
            if lo >= at + size:
                break
            if hi > at:
                at = hi
        if at != offsets[i]:
            offsets[i] = at
            for j in nbrs:
                if pos[j] > here and j not in queued:
                    queued.add(j)
                    heapq.heappush(heap, (pos[j], j))
    return work


def _hill_climb(p: Problem, start: Sequence[int], *, seed: int = 0,
                max_iterations: int = HILL_CLIMB_ITERATIONS, max_work: int = HILL_CLIMB_WORK,
                time_budget_s: float | None = None,
                temperature: float = HILL_CLIMB_TEMPERATURE) -> list[int]:
    """Improve the placement ``start`` by local search over the first-fit order.

    A move takes a buffer that ends at the top of the arena (chosen at
    random) and moves it, in the order, just before a random one of its
    conflicts that precede it; only the buffers the move disturbs are
    re-placed (:func:`_cascade`). Moves that do not grow the arena are kept,
    so plateaus are crossed; like USMP's hill climb, a move that grows it by
    ``d`` bytes is kept with probability ``exp(-d / (temperature * arena *
    (1 - progress)))`` (simulated annealing, cooling to pure hill climbing
    as the budget runs out). Returns the best placement seen. Stops at the
    lower bound, after ``max_iterations`` moves, after ``max_work`` conflict
    visits (both deterministic), or when the time budget is spent (a safety
    net that makes the result machine-dependent; logged).
    """
    sizes, conflicts = p.sizes, p.conflicts
    order = offset_order(start)
    offsets = _greedy(p, order)
    peak = p.peak(offsets)
    best, best_peak = list(offsets), peak
    bound = p.lower_bound()
    rng = random.Random(seed)
    deadline = None if time_budget_s is None else time.perf_counter() + time_budget_s
    pos = [0] * p.n
    for k, i in enumerate(order):
        pos[i] = k
    work = 0
    for iteration in range(max_iterations):
        if best_peak <= bound or work >= max_work:
            break
        if deadline is not None and time.perf_counter() > deadline:
            log.info("hill_climb: time budget spent after %d moves; the plan may differ "
                     "between machines", iteration)
            break
        top = rng.choice([i for i in range(p.n) if offsets[i] + sizes[i] == peak])
        old = pos[top]
        before = [j for j in conflicts[top] if pos[j] < old]
        if not before:
            continue
        k = pos[rng.choice(before)]
        trial = order[:k] + [top] + order[k:old] + order[old + 1:]
        trial_pos = pos[:]
        for m in range(k, old + 1):
            trial_pos[trial[m]] = m
        trial_offsets = offsets[:]
        work += _cascade(p, trial_pos, trial_offsets,
                         [top] + [j for j in conflicts[top] if k < trial_pos[j] <= old])
        trial_peak = max(map(operator.add, trial_offsets, sizes))
        heat = temperature * peak * (1 - max(iteration / max_iterations, work / max_work))
        if trial_peak <= peak or (heat > 0 and rng.random() < math.exp((peak - trial_peak) / heat)):
            order, pos, offsets, peak = trial, trial_pos, trial_offsets, trial_peak
            if peak < best_peak:
                best, best_peak = list(offsets), peak
    return best


# -- the algorithms, on Problems ---------------------------------------------------------------

def _run_greedy_by_size(p, start, budget):
    return _greedy(p, size_order(p))


def _run_greedy_by_conflicts(p, start, budget):
    return _greedy(p, conflicts_order(p))


def _run_best_fit(p, start, budget):
    return _greedy(p, size_order(p), best_fit=True)


def _run_hill_climb(p, start, budget):
    if start is None:
        start = min((_greedy(p, size_order(p)), _greedy(p, conflicts_order(p))), key=p.peak)
    return _hill_climb(p, start, **budget.get("hill_climb", {}))


def _run_exact(p, start, budget):
    if start is None:
        start = _run_hill_climb(p, None, budget)
    return _exact.search(p, start, **budget.get("exact", {}))[0]


_RUNNERS: dict[str, Callable] = {
    "greedy_by_size": _run_greedy_by_size,
    "greedy_by_conflicts": _run_greedy_by_conflicts,
    "best_fit": _run_best_fit,
    "hill_climb": _run_hill_climb,
    "exact": _run_exact,
}
_REFINEMENTS = ("hill_climb", "exact")   # start from the best so far; win only if smaller


def _public(name: str, doc: str):
    def algorithm(buffers: Iterable[Buffer], alignment: int = 64, **budget) -> dict[str, int]:
        p = Problem(check_buffers(buffers), check_alignment(alignment))
        return p.by_name(_RUNNERS[name](p, None, {name: budget} if budget else {}))
    algorithm.__name__ = algorithm.__qualname__ = name
    algorithm.__doc__ = doc + ("\n\nAll buffers share one arena (pools are ignored); returns "
                               "offsets by name.")
    return algorithm


greedy_by_size = _public("greedy_by_size", "Largest first, each at the lowest offset that fits.")
greedy_by_conflicts = _public("greedy_by_conflicts", "Most conflicts first, each at the lowest "
                              "offset that fits.")
best_fit = _public("best_fit", "Largest first, each into the smallest gap that holds it.")
hill_climb = _public("hill_climb", "Local search over the first-fit order, from the better of the "
                     "two greedy orders. Keywords: seed, max_iterations, max_work, time_budget_s.")
exact = _public("exact", "Branch and bound over first-fit orders: optimal when it completes "
                "within ``node_limit`` nodes.")

ALGORITHMS: dict[str, Callable[..., dict[str, int]]] = {
    "greedy_by_size": greedy_by_size, "greedy_by_conflicts": greedy_by_conflicts,
    "best_fit": best_fit, "hill_climb": hill_climb, "exact": exact,
}


# -- planning a pool ---------------------------------------------------------------------------

@dataclass
class _PoolPlan:
    problem: Problem
    offsets: list[int]
    size: int
    algorithm: str
    optimal: bool
    candidates: list[tuple[str, list[int]]]   # every valid candidate, in preference order


def _plan_pool(bufs: list[Buffer], alignment: int, algorithms: Sequence[str], budget: dict,
               exact_limit: int) -> _PoolPlan:
    p = Problem(bufs, alignment)
    bound = p.lower_bound()
    nonzero = sum(1 for s in p.sizes if s)
    names = list(algorithms)
    if nonzero <= exact_limit and "exact" not in names:
        names.append("exact")
    best: tuple[str, list[int], int] | None = None
    candidates: list[tuple[str, list[int]]] = []
    optimal = False
    for name in names:
        if name in _REFINEMENTS and best is not None and best[2] <= bound:
            continue          # nothing left to improve
        start = best[1] if best else None
        if name == "exact":   # the one that can prove its result optimal
            if start is None:
                start = _run_hill_climb(p, None, budget)
            offsets, optimal = _exact.search(p, start, **budget.get("exact", {}))
        else:
            offsets = _RUNNERS[name](p, start, budget)
        if not p.is_valid(offsets):   # an internal bug; never let it through
            log.error("memory placement %s produced an invalid plan; ignored", name)
            continue
        size = p.peak(offsets)
        candidates.append((name, offsets))
        log.debug("memory placement %s: %d bytes (lower bound %d)", name, size, bound)
        if best is None or size < best[2]:
            best = (name, offsets, size)
    if best is None:
        raise PlanError("no placement algorithm produced a valid plan")
    return _PoolPlan(p, best[1], best[2], best[0], optimal or best[2] <= bound, candidates)


def _fit_under(pp: _PoolPlan, cap: int) -> tuple[list[int], str]:
    """Offsets (-1: spilled) keeping as many bytes as possible at or below ``cap``.

    For every candidate placement: keep the buffers that end at or below the
    cap, where they are; then offer the others, largest first (ties by name),
    the lowest slot among the kept buffers they conflict with, if it ends at
    or below the cap. The candidate that keeps the most bytes wins (ties:
    fewest spilled buffers, then preference order).
    """
    p = pp.problem
    best = None
    for name, offsets in pp.candidates:
        kept = [o if o + s <= cap else -1 for o, s in zip(offsets, p.sizes)]
        for i in sorted((i for i in range(p.n) if kept[i] < 0), key=lambda i: (-p.sizes[i], i)):
            place(p, [i], kept, cap=cap)
        score = (sum(s for o, s in zip(kept, p.sizes) if o >= 0), -kept.count(-1))
        if best is None or score > best[0]:
            best = (score, kept, name)
    return best[1], best[2]


def _spill(pp: _PoolPlan, bufs: list[Buffer], cap: int, alignment: int, algorithms, budget,
           exact_limit) -> tuple[_PoolPlan | None, list[Buffer]]:
    """The plan of the buffers a pool bounded to ``cap`` keeps, and those it spills.

    The kept buffers are planned afresh too; the cut placement (named
    ``<algorithm>+spill``) stays unless a fresh plan is smaller.
    """
    p = pp.problem
    chosen, winner = _fit_under(pp, cap)
    spilled = {p.names[i] for i in range(p.n) if chosen[i] < 0}
    kept = [b for b in bufs if b.name not in spilled]
    spilled_bufs = [b for b in bufs if b.name in spilled]
    if not kept:
        return None, spilled_bufs
    again = _plan_pool(kept, alignment, algorithms, budget, exact_limit)
    at = dict(zip(p.names, chosen))
    cut = [at[n] for n in again.problem.names]
    size = again.problem.peak(cut)
    candidates = [(f"{winner}+spill", cut)] + again.candidates
    if size <= again.size:
        again = _PoolPlan(again.problem, cut, size, f"{winner}+spill",
                          again.optimal or size <= again.problem.lower_bound(), candidates)
    else:
        again.candidates = candidates
    return again, spilled_bufs


def plan_memory(buffers: Iterable[Buffer], alignment: int = 64,
                pools: Mapping[str, int | None] | None = None,
                algorithms: Sequence[str] = DEFAULT_ALGORITHMS, time_budget_s: float = 1.0, *,
                seed: int = 0, exact_limit: int = EXACT_LIMIT,
                max_iterations: int = HILL_CLIMB_ITERATIONS, max_work: int = HILL_CLIMB_WORK,
                exact_nodes: int = EXACT_NODES) -> Plan:
    """Place every buffer in the arena of its pool; the smallest verified plan wins.

    ``pools`` bounds pools in bytes (``None``: unbounded; pools not named are
    unbounded). Buffers that a bounded pool cannot hold spill to ``"global"``
    (see :func:`_fit_under`); a bounded ``"global"`` that is too small is an
    error. Pools of at most ``exact_limit`` non-empty buffers also run the
    exact search. ``time_budget_s`` is a safety net for each hill climb, whose
    deterministic bounds are ``max_iterations`` and ``max_work``.

    >>> plan = plan_memory([Buffer("a", 1000, 0, 1, "fast"), Buffer("b", 1000, 1, 2, "fast")],
    ...                    pools={"fast": 1024})
    >>> plan.pool_of, plan.pool_sizes
    ({'a': 'fast', 'b': 'global'}, {'fast': 1024, 'global': 1024})
    """
    alignment = check_alignment(alignment)
    buffers = check_buffers(buffers)
    algorithms = tuple(dict.fromkeys(algorithms))
    if not algorithms:
        raise PlanError("no memory placement algorithm given")
    for name in algorithms:
        if name not in _RUNNERS:
            raise PlanError(f"unknown memory placement algorithm {name!r}; "
                            f"known: {sorted(_RUNNERS)}")
    caps = dict(pools or {})
    for pool, cap in caps.items():
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 0):
            raise PlanError(f"pool {pool!r}: bound must be a non-negative int or None, not {cap!r}")
    budget = {"hill_climb": dict(seed=seed, max_iterations=max_iterations, max_work=max_work,
                                 time_budget_s=time_budget_s),
              "exact": dict(node_limit=exact_nodes)}

    groups: dict[str, list[Buffer]] = {}
    for b in buffers:
        groups.setdefault(b.pool, []).append(b)
    groups.setdefault(GLOBAL, [])
    # bounded pools first, so that what they spill is planned with "global", which comes last
    plans: dict[str, _PoolPlan] = {}
    for pool in sorted(groups, key=lambda pool: (pool == GLOBAL, caps.get(pool) is None, pool)):
        bufs = groups[pool]
        if not bufs:
            continue
        pp = _plan_pool(bufs, alignment, algorithms, budget, exact_limit)
        cap = caps.get(pool)
        if cap is not None and pp.size > cap:
            if pool == GLOBAL:
                raise PlanError(f"pool 'global' is bounded to {cap} bytes, but its buffers need "
                                f"{pp.size} (at least {pp.problem.lower_bound()})")
            pp, spilled = _spill(pp, bufs, cap, alignment, algorithms, budget, exact_limit)
            log.info("pool %r (%d bytes) cannot hold %d buffer(s); they spill to %r",
                     pool, cap, len(spilled), GLOBAL)
            groups[GLOBAL].extend(spilled)
        if pp is not None:
            plans[pool] = pp

    offsets: dict[str, int] = {}
    pool_of: dict[str, str] = {}
    for pool, pp in plans.items():
        for n, o in zip(pp.problem.names, pp.offsets):
            offsets[n], pool_of[n] = o, pool
    winners = {pool: plans[pool].algorithm for pool in sorted(plans)}
    summary = (next(iter(winners.values())) if len(set(winners.values())) == 1
               else ",".join(f"{k}={v}" for k, v in winners.items()))
    plan = Plan(offsets={b.name: offsets[b.name] for b in buffers},
                pool_sizes={pool: plans[pool].size for pool in sorted(plans)},
                algorithm=summary,
                lower_bound=lower_bound(buffers, alignment, pool_of),
                pool_of={b.name: pool_of[b.name] for b in buffers},
                algorithms=winners,
                optimal={pool: plans[pool].optimal for pool in sorted(plans)},
                candidates={pool: {name: plans[pool].problem.peak(offsets)
                                   for name, offsets in plans[pool].candidates}
                            for pool in sorted(plans)})
    verify_plan(buffers, plan, alignment, pools=caps)
    return plan
