"""Per-instruction profiling: every call counted once per run under its
kernel's name, fused recipes named by their ops, the plain steps restored."""

from __future__ import annotations

import numpy as np

import relaxpack
from relaxpack.ir import BlockBuilder, Constant, TensorStructInfo, Var
from relaxpack.ops import make_call
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.profile import profile


def _module():
    x = Var("x", TensorStructInfo((4, 8), "float32"))
    w = Constant(np.full((8, 3), 0.25, np.float32))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(make_call("exp", bb.emit(make_call("add", x, Constant(np.float32(1))))))
            gv = bb.emit_output(make_call("matmul", h, w), "y")
        bb.emit_func_output(gv)
    return bb.get()


def test_profile_counts_each_kernel_call_once_per_run_and_restores_the_steps():
    exe = relaxpack.build(_module(), opt_level=2)
    vm = VirtualMachine(exe)
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    plain = list(vm._prepared[0].steps)
    report = profile(vm, {"x": x}, repeat=3)
    kernels = {e.label: e.calls for e in report.entries if e.label.startswith("kernel.")}
    assert kernels == {"kernel.fused_elementwise[add+exp]": 3, "kernel.matmul": 3}
    assert sum(kernels.values()) == 3 * exe.kernel_call_count()
    assert [e.seconds for e in report.entries] == sorted((e.seconds for e in report.entries), reverse=True)
    assert "kernel.matmul" in report.table() and report.total > 0
    assert vm._prepared[0].steps == plain
    np.testing.assert_allclose(vm.run({"x": x})["y"], np.exp(x + 1) @ np.full((8, 3), 0.25, np.float32),
                               rtol=1e-6)


def test_profile_times_the_compiled_run_whose_memo_skips_shape_only_values():
    """The profile runs the function as the VM does: its shape memo makes the mask and positions
    once per shape, so their kernels are not in a run's calls (the interpreter, which a VM counting
    steps uses, runs them every time); the VM's compiled function is put back."""
    from .test_shape_value_memo import mask_model
    exe = relaxpack.build(relaxpack.from_onnx(mask_model()), opt_level=0)
    x = np.random.default_rng(0).standard_normal((2, 5, 2)).astype(np.float32)
    vm = VirtualMachine(exe)
    compiled = vm._prepared[0].compiled
    report = profile(vm, {"x": x}, repeat=3)
    calls = {e.label: e.calls for e in report.entries}
    assert "kernel.range" not in calls and calls["kernel.nn.softmax"] == 3
    assert vm._prepared[0].compiled is compiled and vm.compiled
    counting = VirtualMachine(exe, max_steps=10 ** 6)
    interpreted = {e.label: e.calls for e in profile(counting, {"x": x}, repeat=3).entries}
    assert interpreted["kernel.range"] == 3 and interpreted["kernel.nn.softmax"] == 3
    want = counting.run({"x": x})
    for name, got in vm.run({"x": x}).items():
        np.testing.assert_array_equal(got, want[name])
