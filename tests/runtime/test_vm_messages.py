"""Run-time failures say what and where in one line (issue 20, item 18): a shape
program dividing by zero names its instruction, an empty MemoryError says it is
one, non-finite inputs run without numpy warnings, vm.run([...]) explains."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import ArchiveError, ExecutionError
from relaxpack.runtime import Executable, FuncEntry, VirtualMachine, register_func, unregister_func
from relaxpack.runtime.bytecode import Call, ParamInfo, Ret, VMFunction

TABLE = [FuncEntry("builtin", "vm.builtin.alloc_shape_heap"), FuncEntry("builtin", "vm.builtin.match_shape"),
         FuncEntry("builtin", "vm.builtin.eval_dim")]


def dividing(program) -> Executable:
    """main(x) evaluating ``program`` over x's two dims (heap slots 0 and 1)."""
    pattern = (("store", 0, "a", 0, None), ("store", 1, "b", 0, None))
    instrs = (Call(1, 0, (("i", 2),)),
              Call(-1, 1, (("i", pattern), ("i", "input 'x'"), ("i", 2), ("r", 0), ("r", 1))),
              Call(2, 2, (("i", program), ("i", 2), ("r", 1))),
              Ret(2))
    fn = VMFunction("main", (ParamInfo("x", "tensor", "float32", 2, ("a", "b")),), 3, instrs, outputs=("d",))
    return Executable({"main": fn}, list(TABLE), [], {"stage": "lower"})


def test_a_shape_program_dividing_by_zero_names_its_instruction():
    vm = VirtualMachine(dividing(("//", ("h", 0), ("h", 1))))
    assert vm.run({"x": np.zeros((6, 3), np.float32)})["d"] == 2
    with pytest.raises(ArchiveError, match=r"^main: instruction 2 \(vm\.builtin\.eval_dim\): shape program divides "
                                           r"6 by zero$"):
        vm.run({"x": np.zeros((6, 0), np.float32)})


def test_a_constant_zero_divisor_is_refused_when_the_vm_is_made():
    with pytest.raises(ArchiveError, match=r"main: instruction 2 \(vm\.builtin\.eval_dim\): shape program "
                                           r"\(h0 % 0\) divides by the constant 0"):
        VirtualMachine(dividing(("%", ("h", 0), 0)))


def test_an_empty_memory_error_says_what_it_is():
    def starved(x):
        raise MemoryError()
    register_func("test.starved", starved)
    try:
        fn = VMFunction("main", (ParamInfo("x", "tensor", "float32", 1, (2,)),), 2,
                        (Call(1, 0, (("r", 0),)), Ret(1)), outputs=("y",))
        vm = VirtualMachine(Executable({"main": fn}, [FuncEntry("func", "test.starved")], [], {}))
        with pytest.raises(ExecutionError, match=r"instruction 0 \(func\.test\.starved\) failed: MemoryError: "
                                                 r"out of memory$"):
            vm.run({"x": np.zeros(2, np.float32)})
    finally:
        unregister_func("test.starved")


def conv_model():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("MatMul", ["c", "m"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w, numpy_helper.from_array(np.eye(16, dtype=np.float32), "m")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("level", [0, 2])
def test_non_finite_inputs_run_without_numpy_warnings(level):
    from relaxpack.examples.onnx_models import transformer_block_onnx
    x = np.random.default_rng(1).standard_normal((1, 64, 16, 16)).astype(np.float32)
    x[0, 0, 5, 5], x[0, 1, 7, 7], x[0, 2, 1, 1] = np.inf, np.nan, -np.inf
    t = np.random.default_rng(2).standard_normal((2, 5, 32)).astype(np.float32)
    t.reshape(-1)[::7], t.reshape(-1)[::13] = np.inf, np.nan
    runs = [(conv_model(), {"x": x}), (transformer_block_onnx(), {"x": t})]
    for model, feeds in runs:
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = vm.run(feeds)
        assert not np.isfinite(next(iter(out.values()))).all()
    with warnings.catch_warnings(record=True) as seen:   # the caller's own numpy settings are left as they were
        warnings.simplefilter("always")
        np.log(np.zeros(1))
    assert seen
