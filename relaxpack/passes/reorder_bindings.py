"""ReorderBindings: an evaluation order with a lower peak of live tensor bytes.

The bytecode runs the bindings in their IR order, so that order decides how
many bytes are live at once (the memory plan's lower bound). Finishing one
branch before starting the next frees its temporaries early (peak 13 KB ->
9 KB)::

    a1 = add(x, c4)        # (4, 256) f32      b1 = multiply(x, c8)
    b1 = multiply(x, c8)   # (8, 256) f32  ->  b2 = max(b1, axis=0)
    a2 = sum(a1, axis=0)                       a1 = add(x, c4)
    b2 = max(b1, axis=0)                       a2 = sum(a1, axis=0)
    c = add(a2, b2)                            c = add(a2, b2)

Independent bindings move within a block, never across barriers (impure
calls, ``If``; branches are reordered as blocks of their own) nor past the
``match_cast`` binding a dim they use. Costs come from the one liveness
model (passes/analysis/liveness.py); the search (exact on short runs, list
schedules refined in windows on long ones) keeps a run's order unless the
new one is strictly better, so the pass is idempotent. Why and how: the
"ReorderBindings" entry of docs/design-notes.md.

>>> mod = reorder_bindings(mod)                                 # doctest: +SKIP
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field

from ..ir.expr import Binding, Function, If, MatchCast, SeqExpr
from .analysis.liveness import REPRESENTATIVE_DIM, Liveness, binding_dims, is_barrier, peak_live_bytes, vars_in
from .core.infra import function_pass

log = logging.getLogger(__name__)

#: runs of at most this many bindings get the exact search
EXACT_LIMIT = 24
#: the exact search gives up (for the list schedulers) past this many ready sets
EXACT_STATES = 20_000
#: widths of the windows the list schedules are refined in, widest first
WINDOWS = (24, 16, 10)
#: the exact search in a window gives up past this many ready sets
WINDOW_STATES = 5_000
#: refining one run visits at most this many ready sets in all its windows
REFINE_STATES = 100_000


# ---------------------------------------------------------------- one run of bindings
@dataclass
class _Problem:
    """A run of bindings to order: node ``i`` is the run's ``i``-th binding.

    Buffer ``j`` has ``sizes[j]`` bytes and ``readers[j]`` (a bit set of
    nodes; a node allocating it counts as a reader); it is freed after its
    last reader if ``freeable[j]`` (nothing after the run reads it). ``base``
    is the bytes of buffers from before the run that die in it.
    """

    n: int
    deps: list[int]             # per node: bit set of nodes that must run first
    alloc: list[int]            # per node: bytes it allocates
    reads: list[list[int]]      # per node: buffers it reads (or allocates)
    in_place: list[list[int]]   # per node: buffers it may write over
    sizes: list[int] = field(default_factory=list)
    readers: list[int] = field(default_factory=list)
    freeable: list[bool] = field(default_factory=list)
    own: list[int | None] = field(default_factory=list)   # per node: the buffer it allocates
    base: int = 0
    scratch: list[int] = field(default_factory=list)     # per node: its workspace bytes (live while it runs)

    def step(self, done: int, live: int, i: int) -> int:
        """Live bytes while node ``i`` runs after the nodes in ``done``."""
        for j in self.in_place[i]:
            if self.freeable[j] and self.readers[j] & ~done == 1 << i:
                return live + self.scratch[i]
        return live + self.alloc[i] + self.scratch[i]

    def after(self, done: int, live: int, i: int) -> int:
        """Live bytes after node ``i`` ran (``done`` without ``i``)."""
        rest = ~(done | 1 << i)
        freed = sum(self.sizes[j] for j in self.reads[i] if self.freeable[j] and not self.readers[j] & rest)
        return live + self.alloc[i] - freed

    def peak(self, order, done: int = 0, live: int | None = None) -> int:
        """The peak of running ``order`` after the nodes in ``done`` (``live`` bytes then)."""
        peak = live = self.base if live is None else live
        for i in order:
            peak = max(peak, self.step(done, live, i))
            live = self.after(done, live, i)
            done |= 1 << i
        return peak


def _problem(run: list[Binding], lv: Liveness) -> _Problem:
    n = len(run)
    first, last = lv.position[run[0]], lv.position[run[-1]]
    node_of_var = {b.var: k for k, b in enumerate(run)}
    node_at = {lv.position[b]: k for k, b in enumerate(run)}
    deps, casts = [0] * n, []          # casts: (node, dims it names)
    for k, b in enumerate(run):
        for v in vars_in(b.value):
            if v in node_of_var:
                deps[k] |= 1 << node_of_var[v]
        dims = binding_dims(b)
        for m, cast_dims in casts:
            if dims & cast_dims:
                deps[k] |= 1 << m
        if isinstance(b, MatchCast):
            if casts:
                deps[k] |= 1 << casts[-1][0]
            casts.append((k, lv.new_dims[b]))
    p = _Problem(n, deps, [0] * n, [[] for _ in range(n)], [[] for _ in range(n)], own=[None] * n,
                 scratch=[lv.scratch.get(lv.position[b], 0) for b in run])
    local: dict[int, int] = {}
    for i, buf in enumerate(lv.buffers):
        if not buf.size or max(buf.readers) < first or buf.alloc > last:
            continue
        inside = buf.alloc >= first
        freeable = max(buf.readers) <= last
        if not inside and not freeable:
            continue                    # lives through the whole run
        j = local[i] = len(p.sizes)
        mask = 0
        for pos in buf.readers:
            if first <= pos <= last:
                mask |= 1 << node_at[pos]
                if j not in p.reads[node_at[pos]]:
                    p.reads[node_at[pos]].append(j)
        p.sizes.append(buf.size)
        p.readers.append(mask)
        p.freeable.append(freeable)
        if inside:
            p.alloc[node_at[buf.alloc]] = buf.size
            p.own[node_at[buf.alloc]] = j
        else:
            p.base += buf.size
    for pos, cands in lv.in_place.items():
        if first <= pos <= last:
            p.in_place[node_at[pos]] = [local[i] for i in cands if i in local]
    return p


class _TooLarge(Exception):
    pass


def _exact(p: _Problem, nodes, done: int = 0, live: int | None = None,
           limit: int = EXACT_STATES, spent: list[int] | None = None) -> list[int]:
    """``nodes`` (all runnable once ``done`` ran) in an order of smallest peak: of those,
    the one that runs earliest what comes first in ``nodes`` (lexicographically
    smallest). A memoized search over the sets already run; past ``limit``
    sets it raises :class:`_TooLarge`. ``spent[0]`` counts the sets visited."""
    live = p.base if live is None else live
    full = done
    for i in nodes:
        full |= 1 << i
    best: dict[int, int] = {full: 0}     # set run -> smallest peak of running the rest

    def solve(done: int, live: int) -> int:
        if done in best:
            return best[done]
        if len(best) > limit:
            raise _TooLarge
        value = None
        for i in nodes:
            if done >> i & 1 or p.deps[i] & ~done:
                continue
            cost = p.step(done, live, i)
            if value is not None and cost >= value:
                continue
            rest = solve(done | 1 << i, p.after(done, live, i))
            value = max(cost, rest) if value is None else min(value, max(cost, rest))
        best[done] = value
        return value

    try:
        target, order = solve(done, live), []
        while done != full:
            i = next(i for i in nodes if not (done >> i & 1 or p.deps[i] & ~done)
                     and p.step(done, live, i) <= target
                     and solve(done | 1 << i, p.after(done, live, i)) <= target)
            order.append(i)
            live, done = p.after(done, live, i), done | 1 << i
        return order
    finally:
        if spent is not None:
            spent[0] += len(best)


def _refine(p: _Problem, order) -> list[int]:
    """``order`` with windows around its peak steps reordered exactly while that lowers them.

    The nodes before a window have run and those after it wait, whatever the
    order inside, so a window's new order changes only the costs inside it: a
    window whose peak drops below the run's peak takes one peak step away.
    At most :data:`REFINE_STATES` ready sets are visited in all.
    """
    order, spent = list(order), [0]
    while spent[0] < REFINE_STATES:
        costs, prefix = _costs(p, order)
        peak = max(costs)
        if not any(_lower_window(p, order, t, prefix, peak, spent)
                   for t, c in enumerate(costs) if c == peak):
            break
    return order


def _lower_window(p: _Problem, order: list[int], t: int, prefix, peak: int, spent: list[int]) -> bool:
    """Reorders a window around step ``t`` so that its peak drops below ``peak``, if one can."""
    for width in WINDOWS:
        lo, hi = max(0, t - width // 2), min(len(order), t + (width + 1) // 2)
        done, live = prefix[lo]
        limit = min(WINDOW_STATES, REFINE_STATES - spent[0])
        if limit <= 0:
            return False
        try:
            window = _exact(p, order[lo:hi], done, live, limit, spent)
        except _TooLarge:
            continue
        if p.peak(window, done, live) < peak:
            order[lo:hi] = window
            return True
    return False


def _costs(p: _Problem, order) -> tuple[list[int], list[tuple[int, int]]]:
    """Live bytes while each node of ``order`` runs, and (done, live) before each."""
    done, live, costs, prefix = 0, p.base, [], []
    for i in order:
        prefix.append((done, live))
        costs.append(p.step(done, live, i))
        live, done = p.after(done, live, i), done | 1 << i
    return costs, prefix


def _users(p: _Problem) -> list[list[int]]:
    users = [[] for _ in range(p.n)]
    for i, d in enumerate(p.deps):
        for j in _bits(d):
            users[j].append(i)
    return users


def _bits(mask: int):
    while mask:
        yield (mask & -mask).bit_length() - 1
        mask &= mask - 1


def _forward_schedule(p: _Problem) -> list[int]:
    """XLA's list scheduler: repeatedly run the ready node that grows the live
    bytes least (frees the most), then the one first in the run."""
    remaining = [bin(m).count("1") for m in p.readers]

    def net(i):
        return p.alloc[i] - sum(p.sizes[j] for j in p.reads[i] if p.freeable[j] and remaining[j] == 1), i

    def update(i, done):
        for j in p.reads[i]:
            remaining[j] -= 1
            if remaining[j] == 1 and p.freeable[j]:   # its last reader now frees it
                yield from _bits(p.readers[j] & ~done)
    return _list_schedule(p, _users(p), [bin(d).count("1") for d in p.deps], net, update)


def _reverse_schedule(p: _Problem) -> list[int]:
    """A list schedule built from the end: repeatedly place, before the nodes placed
    so far, the node (all of whose users are placed) that leaves the fewest
    bytes live before it. Producers land right before their first consumer,
    which the forward rule misses for values without inputs (weights an op
    materializes, e.g.)."""
    live = [not f for f in p.freeable]   # live where the nodes placed so far begin

    def net(i):
        grow = sum(p.sizes[j] for j in p.reads[i] if j != p.own[i] and not live[j])
        ends = p.sizes[p.own[i]] if p.own[i] is not None and live[p.own[i]] else 0
        return grow - ends, -i

    def update(i, done):
        for j in p.reads[i]:
            if live[j] != (j != p.own[i]):
                live[j] = j != p.own[i]
                yield from _bits(p.readers[j] & ~done)
    deps = [list(_bits(d)) for d in p.deps]   # built backwards: a node's deps wait for it
    return _list_schedule(p, deps, [len(u) for u in _users(p)], net, update)[::-1]


def _list_schedule(p: _Problem, users, waiting, net, update) -> list[int]:
    """Repeatedly take the ready node of smallest ``net``; ``update(i, done)``
    applies taking ``i`` and yields the nodes whose ``net`` it may change."""
    key = {i: net(i) for i in range(p.n) if not waiting[i]}
    heap = [(k, i) for i, k in key.items()]
    heapq.heapify(heap)
    done, order = 0, []
    while heap:
        k, i = heapq.heappop(heap)
        if key.get(i) != k:
            continue                                 # stale: taken, or its net changed
        del key[i]
        order.append(i)
        done |= 1 << i
        changed = set(update(i, done))
        for u in users[i]:
            waiting[u] -= 1
            if not waiting[u]:
                changed.add(u)
        for u in changed:
            if not waiting[u] and not done >> u & 1:
                key[u] = net(u)
                heapq.heappush(heap, (key[u], u))
    return order


def _best_order(p: _Problem) -> list[int]:
    if p.n <= EXACT_LIMIT:
        try:
            return _exact(p, range(p.n))
        except _TooLarge:
            log.debug("ReorderBindings: %d bindings have too many ready sets; list scheduling", p.n)
    start = min((list(range(p.n)), _forward_schedule(p), _reverse_schedule(p)), key=p.peak)
    return _refine(p, start)


# ---------------------------------------------------------------- the pass
class _Reorderer:
    def __init__(self, func: Function, mod):
        self.lv = Liveness(func, mod)
        self.runs = self.improved = 0

    def seq(self, seq: SeqExpr) -> SeqExpr:
        return seq.replace(blocks=tuple(self.block(b) for b in seq.blocks))

    def block(self, block):
        out: list[Binding] = []
        run: list[Binding] = []
        for b in block.bindings:
            if is_barrier(b):
                out += self.reorder(run)
                run = []
                if isinstance(b.value, If):
                    node = b.value
                    b = b.replace(value=node.replace(true_branch=self.seq(node.true_branch),
                                                     false_branch=self.seq(node.false_branch)))
                out.append(b)
            else:
                run.append(b)
        out += self.reorder(run)
        return block.replace(bindings=tuple(out))

    def reorder(self, run: list[Binding]) -> list[Binding]:
        if len(run) < 2:
            return run
        self.runs += 1
        p = _problem(run, self.lv)
        if not any(p.alloc) and not p.base:
            return run
        order = _best_order(p)
        before, after = p.peak(range(p.n)), p.peak(order)
        if after >= before:
            return run
        self.improved += 1
        log.debug("ReorderBindings: a run of %d bindings from %r: peak %d -> %d bytes",
                  p.n, run[0].var.name_hint, before, after)
        return [run[i] for i in order]


@function_pass(name="ReorderBindings", opt_level=1, requires=("import", "optimize", "lower"))
def reorder_bindings(func, mod, ctx):
    """Reorder independent bindings to lower the peak of live tensor bytes (see the module doc)."""
    r = _Reorderer(func, mod)
    body = r.seq(func.body)
    if body is func.body:
        return func
    new = func.replace(body=body)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("ReorderBindings: %d of %d runs reordered; peak live bytes %d -> %d",
                  r.improved, r.runs, r.lv.peak(), peak_live_bytes(new, mod))
    return new


__all__ = ["reorder_bindings", "peak_live_bytes", "REPRESENTATIVE_DIM", "EXACT_LIMIT", "EXACT_STATES"]
