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
