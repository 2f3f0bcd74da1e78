"""The VM's dispatch fast paths: specialized call steps, reused arena views,
the arena plan reused while the dims stay the same."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import BlockBuilder, Constant, TensorStructInfo, Var, sym
from relaxpack.ops import make_call
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime import vm as vm_module
from relaxpack.runtime.bytecode import NO_DST

OPS = {"add": np.add, "multiply": np.multiply, "subtract": np.subtract, "maximum": np.maximum}


def chain_module(length: int, shape=(4,)):
    """``length`` elementwise ops in a chain, each with a constant operand."""
    x = Var("x", TensorStructInfo(shape, "float32"))
    c = Constant(np.full(shape[-1:], 0.5, np.float32))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for i in range(length):
                h = bb.emit(make_call(list(OPS)[i % 4], h, c))
            gv = bb.emit_output(h, "y")
        bb.emit_func_output(gv)
    return bb.get()


def chain_reference(x: np.ndarray, length: int) -> np.ndarray:
    c = np.float32(0.5)
    for i in range(length):
        x = OPS[list(OPS)[i % 4]](x, c)
    return x


def test_a_chain_of_1000_elementwise_ops_at_O0_runs_one_kernel_call_each():
    exe = relaxpack.build(chain_module(1000), opt_level=0)
    assert exe.kernel_call_count() == 1000          # nothing fused at -O0
    vm = VirtualMachine(exe)
    x = np.linspace(-2, 2, 4).astype(np.float32)
    for _ in range(3):                               # views and plans reused across runs
        np.testing.assert_array_equal(vm.run({"x": x})["y"], chain_reference(x, 1000))


def test_symbolic_dims_alternating_between_runs_replan_and_reuse():
    n = sym("n")
    x = Var("x", TensorStructInfo((n, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(make_call("multiply", x, Constant(np.full(3, 2.0, np.float32))))
            b = bb.emit(make_call("exp", a))
            c = bb.emit(make_call("add", b, a))
            gv = bb.emit_output(make_call("tanh", c), "y")
        bb.emit_func_output(gv)
    vm = VirtualMachine(relaxpack.build(bb.get(), opt_level=0))
    rng = np.random.default_rng(0)
    outputs = []
    for rows in (3, 5, 3, 1, 5, 5):
        x_value = rng.standard_normal((rows, 3)).astype(np.float32)
        out = vm.run({"x": x_value})["y"]
        want = np.tanh(np.exp(2 * x_value) + 2 * x_value)
        np.testing.assert_allclose(out, want, rtol=1e-6)
        outputs.append((out, out.copy()))
    for out, copy in outputs:                       # a later run never writes an earlier output
        np.testing.assert_array_equal(out, copy)


# ---------------------------------------------------------------- call steps


def recorder():
    calls = []

    def fn(*args, **kwargs):
        calls.append((args, kwargs))
        return "result"
    return fn, calls


def generic_step(fn, args, kwargs, dst, nxt):
    """The reference semantics of a call step (what the generic path does)."""
    def step(regs):
        values = [regs[v] if is_reg else v for is_reg, v in args]
        kw = {k: regs[v] if is_reg else v for k, is_reg, v in kwargs}
        result = fn(*values, **kw)
        if dst != NO_DST:
            regs[dst] = result
        return nxt
    return step


OPERANDS = [
    [], [(True, 0)], [(False, "const")], [(True, 1), (False, 2.5)], [(False, None), (True, 0)],
    [(True, 0), (True, 1), (True, 2)], [(True, 0), (False, 1), (True, 1), (False, (3,)), (True, 2), (False, 0)],
    [(True, 0)] * 7,                                                  # more than the fast path takes
]
KWARGS = [
    [], [("out", True, 2)], [("axis", False, -1)], [("out", True, 1), ("axis", False, 0), ("keep", False, True)],
    [("out", True, 2), ("scale", True, 0)],                           # a register kwarg besides out
]


@pytest.mark.parametrize("dst", [NO_DST, 3])
@pytest.mark.parametrize("kwargs", KWARGS, ids=str)
@pytest.mark.parametrize("args", OPERANDS, ids=str)
def test_specialized_steps_call_like_the_generic_one(args, kwargs, dst):
    fn, calls = recorder()
    want_fn, want_calls = recorder()
    regs = ["r0", "r1", "r2", None]
    want_regs = list(regs)
    step = vm_module._make_call_step(fn, args, kwargs, dst, 17, "label")
    assert step(regs) == 17
    assert generic_step(want_fn, args, kwargs, dst, 17)(want_regs) == 17
    assert calls == want_calls
    assert regs == want_regs


def test_step_sources_are_made_from_operand_kinds_only():
    fn, calls = recorder()
    odd = "x=1); import os; print(("                                 # a hostile attribute name
    step = vm_module._make_call_step(fn, [(True, 0), (False, 1)], [("out", True, 1), (odd, False, 2)],
                                     NO_DST, 1, "label")
    step([10, 20])
    assert calls == [((10, 1), {"out": 20, odd: 2})]
    for kinds, *flags in vm_module._STEP_FACTORIES:
        assert set(kinds) <= {"r", "c"} and all(isinstance(f, bool) for f in flags)


@pytest.mark.parametrize("compiled", [True, False])
def test_kernel_failures_still_name_the_instruction(compiled):
    """Compiled (compiled.py) or interpreted, a kernel's failure names its instruction and ONNX node."""
    from relaxpack.errors import ExecutionError, InputError
    from relaxpack.runtime import register_func, unregister_func
    x = Var("x", TensorStructInfo((2, 3), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.emit_output(make_call("add", x, Constant(np.ones(3, np.float32))), "y")
        bb.emit_func_output(gv)
    exe = relaxpack.build(bb.get(), opt_level=0)

    def boom(lhs, rhs, *, out):
        if lhs[0, 0] == 7:
            raise ValueError("boom")
        np.add(lhs, rhs, out=out)
    register_func("add", boom, dps=True, override=True)
    try:
        vm = VirtualMachine(exe)
        vm.compiled = compiled
        assert (vm._prepared[0].compiled is not None) and vm.compiled == compiled
        with pytest.raises(InputError):
            vm.run({"x": np.ones((2, 4), np.float32)})
        pc = next(i for i, label in enumerate(vm._prepared[0].labels) if label == "kernel.add")
        with pytest.raises(ExecutionError, match=rf"instruction {pc} \(kernel.add\) failed: ValueError: boom"):
            vm.run({"x": np.full((2, 3), 7, np.float32)})
        np.testing.assert_array_equal(vm.run({"x": np.ones((2, 3), np.float32)})["y"], np.full((2, 3), 2))
    finally:
        unregister_func("add")


def test_a_kernel_with_specialize_attrs_is_specialized_once_per_instruction():
    """The VM calls ``specialize_attrs`` with an instruction's bound attributes when it prepares it,
    then calls what that returns with the operands, ``out`` and ``workspace`` only."""
    made = []

    def kernel(*inputs, out, **attrs):
        raise AssertionError("the generic kernel is not called")

    def specialize(attrs, constant):
        made.append((attrs, constant))

        def call(*inputs, out, workspace=None):
            assert workspace is None
            np.add(inputs[0], attrs["shift"], out=out)
        return call
    kernel.specialize_attrs = specialize
    fn, kwargs = vm_module._specialize_kernel(kernel, [(True, 0), (False, "c")], [("out", True, 1), ("shift", False, 2.0)])
    assert made == [({"shift": 2.0}, (False, True))] and kwargs == [("out", True, 1)]
    regs = [np.ones(3), np.empty(3)]
    step = vm_module._make_call_step(fn, [(True, 0)], kwargs, NO_DST, 5, "label")
    for _ in range(2):
        assert step(regs) == 5
    np.testing.assert_array_equal(regs[1], 3.0)
    assert len(made) == 1
    # an attribute held in a register is a per-call value: the kernel stays generic
    assert vm_module._specialize_kernel(kernel, [(True, 0)], [("out", True, 1), ("shift", True, 0)])[0] is kernel


def test_binary_ufunc_kernels_run_as_bare_ufuncs_with_out_positional():
    """add/multiply/... calls are the ufunc itself, out positional (maximum keeps the keyword:
    numpy 2 warns otherwise); compiled and interpreted results are the reference's, no warning."""
    import warnings
    exe = relaxpack.build(chain_module(12), opt_level=0)
    vm = VirtualMachine(exe)
    fns = {r.name: r.fn for r in vm._prepared[0].resolved.values()}
    assert fns["add"] is np.add and fns["multiply"] is np.multiply and fns["maximum"] is not np.maximum
    x = np.linspace(-2, 2, 4).astype(np.float32)
    interpreted = VirtualMachine(exe)
    interpreted.compiled = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for machine in (vm, interpreted):
            np.testing.assert_array_equal(machine.run({"x": x})["y"], chain_reference(x, 12))
