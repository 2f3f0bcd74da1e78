"""Run-time checks of the dim relations a model was converted assuming.

What the importer could neither prove nor refute it assumed (ir/gradual.py:
a ``match_cast`` to a representative dim); codegen writes each such relation
as an entry of a ``vm.builtin.check_dims`` call::

    [node, lhs, rhs, condition, lhs program, rhs program, [[name, slot], ...]]

``node`` is the ONNX node that needs it, ``lhs``/``rhs`` the two dims as
text, ``condition`` the relation in plain words (``"h % 8 < 4"``), the
programs compute the dims from the shape heap and ``[name, slot]`` pairs name
the dims whose values a failure reports. A check over the inputs' dims runs
right after the input checks (``when == "inputs"``) and remembers the dims it
passed, so it costs once per new input shape; one over dims known only at
run time runs where its node runs (``when == "node"``). A failure is a
one-line :class:`ShapeError`.
"""

from __future__ import annotations

from ..errors import ArchiveError, ShapeError
from .builtins import builtin, specializable
from .shape_program import compile_program

#: Check placements: after the input checks, or at the node's binding.
WHEN = ("inputs", "node")
#: Input shapes a check remembers as passed (then it starts over).
REMEMBERED = 1024


@builtin("vm.builtin.check_dims")
def check_dims(spec, when: str, heap_size: int, heap) -> None:
    """Fail with a ShapeError unless every relation of ``spec`` holds on ``heap``."""
    _check_dims_specialize(spec, when, heap_size)(heap)


def _check_dims_specialize(spec, when: str, heap_size: int):
    if when not in WHEN:
        raise ArchiveError(f"check_dims: unknown placement {when!r}")
    if not isinstance(spec, (list, tuple)) or not spec:
        raise ArchiveError("check_dims takes a non-empty list of relations")
    checks = [_compile_entry(entry, heap_size) for entry in spec]
    slots = sorted({slot for *_, used in checks for slot in used})
    passed: set[tuple] = set()

    def check(heap) -> None:
        key = tuple(heap[s] for s in slots)
        if key in passed:
            return
        for test, _ in checks:
            test(heap)
        if len(passed) >= REMEMBERED:
            passed.clear()
        passed.add(key)
    return check


specializable(check_dims, 3, _check_dims_specialize)


def _compile_entry(entry, heap_size: int):
    if not isinstance(entry, (list, tuple)) or len(entry) != 7:
        raise ArchiveError(f"check_dims: malformed relation {entry!r}")
    node, lhs, rhs, condition, lhs_prog, rhs_prog, names = entry
    if not all(isinstance(t, str) for t in (node, lhs, rhs, condition)):
        raise ArchiveError(f"check_dims: malformed relation {entry!r}")
    if not isinstance(names, (list, tuple)) or not all(
            isinstance(n, (list, tuple)) and len(n) == 2 and isinstance(n[0], str) and type(n[1]) is int
            and 0 <= n[1] < heap_size for n in names):
        raise ArchiveError(f"check_dims: malformed dim names {names!r}")
    left, right = compile_program(lhs_prog, heap_size), compile_program(rhs_prog, heap_size)
    where = f"ONNX node {node!r}" if node else "the model"
    said = f"{lhs} == {rhs}" + ("" if condition in ("", f"{lhs} == {rhs}") else f", i.e. {condition}")

    def test(heap) -> None:
        a, b = left(heap), right(heap)
        if a != b:
            values = ", ".join(f"{name} = {heap[slot]}" for name, slot in names if name not in (lhs, rhs))
            raise ShapeError(f"{where} assumes {said}; for this call {lhs} = {a} and {rhs} = {b}"
                             + (f" ({values})" if values else ""))
    return test, [slot for _, slot in names]


def assumptions_of(exe) -> list[dict]:
    """Every relation the executable checks: node, the two dims, the
    condition in plain words, the function and when it runs (for ``inspect``)."""
    out = []
    for fname, fn in exe.functions.items():
        for ins in fn.instructions:
            func = getattr(ins, "func", None)
            if not isinstance(func, int) or exe.func_table[func].name != "vm.builtin.check_dims":
                continue
            (_, spec), (_, when) = ins.args[0], ins.args[1]
            for node, lhs, rhs, condition, *_ in spec:
                out.append({"function": fname, "node": node, "lhs": lhs, "rhs": rhs,
                            "condition": condition or f"{lhs} == {rhs}", "when": when})
    return out


__all__ = ["assumptions_of", "check_dims"]
