"""The op record is the single source of truth: ops, kernels and converters agree.

Every kernel is an op's (the bytecode calls no kernel around ``ops/``), every
op that Legalize lowers has its kernel, a kernel returns new values exactly
when its op is data-dependent, a kernel's keyword arguments are its op's
attributes, and every op name a converter emits is registered, graph ops as
graph ops and data-dependent ones through ``packed_call``.
"""

import ast
import inspect
from pathlib import Path

import pytest

from relaxpack.ir.op import get_op_def, registered_ops
from relaxpack.passes.legalize import CONTROL_FLOW, INTRINSICS
from relaxpack.runtime.kernels import KERNELS

IMPORTERS = Path(__file__).resolve().parents[2] / "relaxpack" / "importers"

#: kernels whose attributes arrive as ``**attrs`` and are forwarded, with the reason
FORWARDING = {
    "nn.rnn": "the three recurrent kernels share one driver (_layer) that takes the attributes",
    "nn.gru": "the three recurrent kernels share one driver (_layer) that takes the attributes",
    "nn.lstm": "the three recurrent kernels share one driver (_layer) that takes the attributes",
    "dyn.resize": "image.resize's interpolation attributes go on to the image.resize kernel",
}
#: the kernel's own parameters that are not attributes
PLUMBING = {"out", "workspace"}
#: a plan's allocations and kill points (PlanMemory's): codegen translates them, no kernel runs them
MEMORY = {"memory.alloc_tensor", "memory.kill_tensor"}


def _keywords(fn) -> dict[str, inspect.Parameter]:
    """A kernel's attribute parameters: its keyword-only ones (the operands come first, positional)."""
    params = inspect.signature(fn).parameters.values()
    return {p.name: p for p in params if p.name not in PLUMBING and p.kind is p.KEYWORD_ONLY}


def _var_keyword(fn) -> bool:
    return any(p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())


def test_every_kernel_is_an_op():
    assert sorted(set(KERNELS) - set(registered_ops())) == []


def test_every_op_legalize_lowers_has_a_kernel():
    lowered = set(registered_ops()) - INTRINSICS - CONTROL_FLOW - MEMORY
    assert sorted(lowered - set(KERNELS)) == []


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_a_kernel_returns_new_values_exactly_when_its_op_is_data_dependent(name):
    assert KERNELS[name].dps is not get_op_def(name).data_dependent


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_keywords_are_the_op_attributes(name):
    fn, attrs = KERNELS[name].fn, get_op_def(name).attrs
    keywords = _keywords(fn)
    if name in FORWARDING:
        assert _var_keyword(fn) and set(keywords) <= set(attrs)
        return
    assert not _var_keyword(fn), f"{name}: takes **kwargs; name the op's attributes"
    assert sorted(keywords) == sorted(attrs)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernels_take_required_attributes(name):
    """No kernel repeats its op's defaults: the bytecode passes every attribute (design notes, Layers)."""
    defaulted = [k for k, p in _keywords(KERNELS[name].fn).items() if p.default is not p.empty]
    assert defaulted == [], f"{name} repeats its op's defaults for {defaulted}"


# ---------------------------------------------------------------- converters

#: emitting function -> how the op it names is called (its first string argument names the op)
EMITTERS = {"call": "graph", "make_call": "graph", "_inferred": "any", "_per_tensor": "graph",
            "_layer": "graph", "packed_call": "packed", "_packed": "packed", "_unknown_rank": "packed",
            "ExternFunc": "kernel"}


def _emitted() -> list[tuple[str, str, str]]:
    """(file:line, emitter, op name) for every op a converter names literally."""
    found = []
    for path in sorted(IMPORTERS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if func not in EMITTERS:
                continue
            names = [a.value for a in node.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if names:
                found.append((f"{path.name}:{node.lineno}", func, names[0]))
    return found


def test_the_scan_finds_the_converters_ops():
    names = {name for _, _, name in _emitted()}
    assert {"add", "nn.conv", "dyn.reshape", "dyn.tensor_to_shape", "nonzero", "sequence.insert"} <= names


@pytest.mark.parametrize("where, emitter, name", _emitted())
def test_converters_emit_registered_ops(where, emitter, name):
    opdef = get_op_def(name)
    if EMITTERS[emitter] == "graph" and name not in INTRINSICS:
        assert not opdef.data_dependent, f"{where}: {name} is data-dependent; emit it with packed_call"
    elif EMITTERS[emitter] == "packed":
        assert opdef.data_dependent, f"{where}: {name} is a graph op; emit it as one"
