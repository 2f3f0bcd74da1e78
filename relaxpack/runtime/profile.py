"""Per-instruction timing: where a run of a bytecode function spends its time.

:func:`profile` runs a function of a :class:`VirtualMachine` ``repeat``
times with every instruction's prepared step wrapped in a timer, then puts
the plain steps back; the numbers are grouped by what an instruction calls
(its function-table label; a ``fused_elementwise`` call also names the ops
of its recipe, so a fused gemm + add and a fused GELU chain are apart).

>>> report = profile(vm, {"x": x}, repeat=10)     # doctest: +SKIP
>>> print(report.table())                        # doctest: +SKIP
    ms/run  share  calls/run  what
     2.310  61.2%         12  kernel.nn.gemm
     ...

The timers add about a microsecond per instruction: compare kernels with
each other, not a profiled run with a plain one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

from .bytecode import IMM, Call

#: recipe op names shown in a fused_elementwise label, at most
_RECIPE_NAMES = 6


@dataclass(frozen=True)
class ProfileEntry:
    """The time of all calls of one kind, over all runs."""

    label: str
    calls: int
    seconds: float


@dataclass(frozen=True)
class ProfileReport:
    """Per-label totals of ``runs`` runs, slowest first."""

    runs: int
    entries: tuple[ProfileEntry, ...]

    @property
    def total(self) -> float:
        """Seconds per run spent in instructions (timer overhead included)."""
        return sum(e.seconds for e in self.entries) / self.runs

    def table(self, limit: int | None = None) -> str:
        """A plain-text table: ms per run, share, calls per run, label."""
        total = sum(e.seconds for e in self.entries) or 1.0
        lines = ["    ms/run  share  calls/run  what"]
        for e in self.entries[:limit]:
            lines.append(f"{e.seconds / self.runs * 1e3:10.3f} {e.seconds / total:6.1%} "
                         f"{e.calls // self.runs:10d}  {e.label}")
        return "\n".join(lines)


def instruction_label(vm, ins) -> str:
    """What ``ins`` calls: its function-table label, and for a fused
    elementwise kernel the ops of its recipe (``kernel.fused_elementwise[nn.gemm+add]``)."""
    label = vm._label(ins)
    if isinstance(ins, Call):
        recipe = dict(ins.kwargs).get("recipe")
        if recipe is not None and recipe[0] == IMM and isinstance(recipe[1], (tuple, list)):
            ops = [str(step[0]) for step in recipe[1] if isinstance(step, (tuple, list)) and step]
            more = "+..." if len(ops) > _RECIPE_NAMES else ""
            label += f"[{'+'.join(ops[:_RECIPE_NAMES])}{more}]"
    return label


def profile(vm, inputs: Mapping[str, Any], function: str = "main", repeat: int = 10,
            warmup: int = 1) -> ProfileReport:
    """Run ``function`` on ``inputs`` ``warmup`` times untimed, then ``repeat``
    times with each instruction timed; returns the totals per label."""
    for _ in range(warmup):
        vm.run(inputs, function)
    prepared = vm._prepared[vm._index[function]]
    labels = [instruction_label(vm, ins) for ins in prepared.func.instructions]
    seconds = [0.0] * len(labels)
    counts = [0] * len(labels)
    plain = prepared.steps
    prepared.steps = [_timed(step, pc, seconds, counts) for pc, step in enumerate(plain)]
    try:
        for _ in range(repeat):
            vm.run(inputs, function)
    finally:
        prepared.steps = plain
    totals: dict[str, list] = {}
    for label, s, c in zip(labels, seconds, counts):
        entry = totals.setdefault(label, [0, 0.0])
        entry[0] += c
        entry[1] += s
    entries = sorted((ProfileEntry(label, c, s) for label, (c, s) in totals.items() if c),
                     key=lambda e: -e.seconds)
    return ProfileReport(repeat, tuple(entries))


def _timed(step, pc: int, seconds: list, counts: list):
    clock = time.perf_counter

    def timed(regs):
        start = clock()
        try:
            return step(regs)
        finally:
            seconds[pc] += clock() - start
            counts[pc] += 1
    return timed
