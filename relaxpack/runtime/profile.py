"""Per-instruction timing: where a run of a bytecode function spends its time.

:func:`profile` runs a function of a :class:`VirtualMachine` ``repeat``
times as the VM runs it, with every call timed, then puts the VM back: the
function compiled again with each callee wrapped in a timer, so its shape
memo skips what it memoizes (shapes, arena views, masks and position tables
made once per input shape) and kernels get the arrays they get in a plain run
(a memoized table frozen, :mod:`.frozen`). A function the compiler does not
take, or a VM that counts steps, is timed in the interpreter, every
instruction's step wrapped. The numbers are grouped by what an instruction
calls (its function-table label; a ``fused_elementwise`` call also names the
ops of its recipe, so a fused gemm + add and a fused GELU chain are apart).

>>> report = profile(vm, {"x": x}, repeat=10)     # doctest: +SKIP
>>> print(report.table())                        # doctest: +SKIP
    ms/run  share  calls/run  what
     2.310  61.2%         12  kernel.nn.gemm
     ...

The same time is also given per ONNX node (:attr:`ProfileReport.nodes`):
each instruction carries the span of the binding it came from (the archive's
``spans``; a fused kernel names all its nodes), so a slow kernel points back
at the model. With ``trace=True`` every timed instruction is also an event
of a Chrome trace in onnxruntime's profiler format
(:meth:`ProfileReport.write_chrome_trace`; open it in Perfetto or
chrome://tracing).

The timers add about a microsecond per instruction: compare kernels with
each other, not a profiled run with a plain one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from .bytecode import IMM, Call
from .safe_write import write_file

#: the node label of instructions no ONNX node made (input checks, shapes, the memory plan)
NO_NODE = "(no ONNX node)"

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
    """Totals of ``runs`` runs, slowest first: per kernel (``entries``) and per ONNX node (``nodes``);
    ``events`` holds the timed instructions as Chrome trace events when the profile was traced."""

    runs: int
    entries: tuple[ProfileEntry, ...]
    nodes: tuple[ProfileEntry, ...] = ()
    events: tuple[dict, ...] = ()

    def node_table(self, limit: int | None = None) -> str:
        """A plain-text table per ONNX node: ms per run, share, calls per run, node (and its kernels)."""
        return _table(self.nodes, self.runs, limit)

    def chrome_trace(self) -> list[dict]:
        """The trace as onnxruntime's profiler writes it: a list of complete ("X") events, times in µs."""
        return list(self.events)

    def write_chrome_trace(self, path) -> None:
        """Write :meth:`chrome_trace` as JSON to ``path`` (loadable by Perfetto and chrome://tracing)."""
        write_file(path, [json.dumps(self.chrome_trace(), indent=0).encode("utf-8")])

    @property
    def total(self) -> float:
        """Seconds per run spent in instructions (timer overhead included)."""
        return sum(e.seconds for e in self.entries) / self.runs

    def table(self, limit: int | None = None) -> str:
        """A plain-text table: ms per run, share, calls per run, label."""
        return _table(self.entries, self.runs, limit)


def _table(entries, runs: int, limit: int | None) -> str:
    total = sum(e.seconds for e in entries) or 1.0
    lines = ["    ms/run  share  calls/run  what"]
    for e in entries[:limit]:
        lines.append(f"{e.seconds / runs * 1e3:10.3f} {e.seconds / total:6.1%} {e.calls // runs:10d}  {e.label}")
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


#: node names shown for one fused instruction, at most
_SPAN_NAMES = 4


def node_label(sources, kernel: str) -> str:
    """The ONNX node(s) an instruction came from (``/layer0/MatMul + /layer0/Add``), or what it
    calls when no node made it."""
    if not sources:
        return f"{NO_NODE} {kernel}"
    shown = list(sources[:_SPAN_NAMES - 1]) if len(sources) > _SPAN_NAMES else list(sources)
    more = f" + {len(sources) - len(shown)} more" if len(shown) < len(sources) else ""
    return " + ".join(shown) + more


def profile(vm, inputs: Mapping[str, Any], function: str = "main", repeat: int = 10,
            warmup: int = 1, trace: bool = False) -> ProfileReport:
    """Run ``function`` on ``inputs`` ``warmup`` times untimed, then ``repeat``
    times with each call timed; returns the totals per kernel and per
    ONNX node, and with ``trace`` every timed call as a trace event."""
    prepared = vm._prepared[vm._index[function]]
    labels = [instruction_label(vm, ins) for ins in prepared.func.instructions]
    nodes = [node_label(sources, label) for sources, label in zip(prepared.func.instruction_spans(), labels)]
    seconds = [0.0] * len(labels)
    counts = [0] * len(labels)
    recorder = _Recorder(labels, nodes) if trace else None
    timed = _timed_compiled(vm, prepared, seconds, counts, recorder)
    saved = prepared.steps, prepared.compiled, prepared.plain, prepared.stack_need, vm.compiled
    if timed is not None:       # the function as it runs, its memo's stores filled by the warm-up
        prepared.compiled, prepared.plain = timed
        prepared.stack_need = 0     # (its timers' frames: measured again, frame_stack.py)
    try:
        for _ in range(warmup):
            vm.run(inputs, function)
        if timed is None:       # the interpreter's steps (see compiled.py)
            prepared.steps = [_timed_call(step, pc, seconds, counts, recorder) for pc, step in enumerate(saved[0])]
            vm.compiled = False
        seconds[:], counts[:] = [0.0] * len(labels), [0] * len(labels)
        if recorder is not None:
            recorder.events.clear()
        for _ in range(repeat):
            if recorder is None:
                vm.run(inputs, function)
            else:
                with recorder.run():
                    vm.run(inputs, function)
    finally:
        prepared.steps, prepared.compiled, prepared.plain, prepared.stack_need, vm.compiled = saved
    events = tuple(recorder.events) if recorder is not None else ()
    return ProfileReport(repeat, _totals(labels, seconds, counts), _totals(nodes, seconds, counts, labels), events)


def _timed_compiled(vm, prepared, seconds: list, counts: list, recorder) -> tuple | None:
    """(what runs, the same without the memo) of ``prepared``'s function compiled again with every
    callee timed, as the VM compiles it; None where the VM runs it in the interpreter or counts
    its steps (then the interpreter's steps are timed)."""
    from .compiled import compile_function

    if not vm.compiled or prepared.compiled is None or vm._counting is not None:
        return None
    func = prepared.func
    resolved = {pc: dataclasses.replace(r, fn=_timed_call(r.fn, pc, seconds, counts, recorder))
                for pc, r in prepared.resolved.items()}
    memo, plain = compile_function(func.instructions, resolved, len(func.params), func.name)
    return None if plain is None else (memo or plain, plain)


def _timed_call(fn, pc: int, seconds: list, counts: list, recorder: "_Recorder | None"):
    """``fn`` (instruction ``pc``'s callee, or its interpreter step) timed: its calls' seconds and
    count added up, each call an event of ``recorder`` where given."""
    clock = time.perf_counter

    def timed(*args, **kwargs):
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            end = clock()
            seconds[pc] += end - start
            counts[pc] += 1
            if recorder is not None:
                recorder.instruction(pc, start, end)
    return timed


def _totals(keys, seconds, counts, kernels=None) -> tuple[ProfileEntry, ...]:
    """Per key, slowest first; with ``kernels``, each key also names the kernels it ran."""
    totals: dict[str, list] = {}
    for i, (key, s, c) in enumerate(zip(keys, seconds, counts)):
        entry = totals.setdefault(key, [0, 0.0, []])
        entry[0] += c
        entry[1] += s
        if kernels is not None and c and kernels[i].startswith("kernel.") and kernels[i] not in entry[2]:
            entry[2].append(kernels[i])
    return tuple(sorted((ProfileEntry(_with_kernels(key, ks) if not key.startswith(NO_NODE) else key, c, s)
                         for key, (c, s, ks) in totals.items() if c), key=lambda e: -e.seconds))


def _with_kernels(key: str, kernels: list[str]) -> str:
    return f"{key}  [{', '.join(k.removeprefix('kernel.') for k in kernels)}]" if kernels else key


class _Recorder:
    """Collects timed instructions as Chrome trace events (onnxruntime's profiler format)."""

    def __init__(self, labels: list[str], nodes: list[str]):
        self.labels, self.nodes = labels, nodes
        self.events: list[dict] = []
        self.origin = time.perf_counter()
        self.pid, self.tid = os.getpid(), threading.get_native_id()
        self.runs = 0

    def event(self, category: str, name: str, start: float, end: float, args: dict) -> dict:
        return {"cat": category, "pid": self.pid, "tid": self.tid, "dur": round((end - start) * 1e6),
                "ts": round((start - self.origin) * 1e6), "ph": "X", "name": name, "args": args}

    def instruction(self, pc: int, start: float, end: float) -> None:
        node = self.nodes[pc] if not self.nodes[pc].startswith(NO_NODE) else self.labels[pc]
        self.events.append(self.event("Node", f"{node}_kernel_time", start, end,
                                      {"op_name": self.labels[pc], "node_index": pc, "provider": "relaxpack"}))

    @contextlib.contextmanager
    def run(self):
        """Around one run: a "model_run" event, as onnxruntime records each ``run``."""
        start = time.perf_counter()
        yield
        self.events.append(self.event("Session", "model_run", start, time.perf_counter(), {"run": self.runs}))
        self.runs += 1

