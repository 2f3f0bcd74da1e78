"""The VM end to end on modules built in code: numerics, symbolic dims,
input checking, control flow, the bytecode listing."""

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import InputError
from relaxpack.ir import BlockBuilder, Constant, If, ShapeExpr, TensorStructInfo, Var, sym
from relaxpack.ops import make_call
from relaxpack.runtime import VirtualMachine

n, m = sym("n"), sym("m")
rng = np.random.default_rng(0)
W = rng.standard_normal((4, 8)).astype(np.float32)
B = rng.standard_normal(8).astype(np.float32)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def dense_softmax_module(ranges=None):
    x = Var("x", TensorStructInfo((n, 4), "float32"))
    bb = BlockBuilder()
    for name, (lo, hi) in (ranges or {}).items():
        bb.analyzer.set_range(name, lo, hi)
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(make_call("add", make_call("matmul", x, Constant(W)), Constant(B)))
            y = bb.emit(make_call("nn.softmax", h, axis=-1))
            flat = bb.emit(make_call("reshape", y, ShapeExpr((n * 8,))))
            gv = bb.emit_output(flat, "y")
        bb.emit_func_output(gv)
    return bb.get()


@pytest.mark.parametrize("batch", [1, 3, 17, 0])
def test_one_build_runs_at_every_batch(batch):
    vm = VirtualMachine(relaxpack.build(dense_softmax_module()))
    x = rng.standard_normal((batch, 4)).astype(np.float32)
    out = vm.run({"x": x})
    np.testing.assert_allclose(out["y"], softmax(x @ W + B).reshape(-1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vm["main"](x), out["y"])


def test_inputs_are_checked_and_errors_name_the_input():
    vm = VirtualMachine(relaxpack.build(dense_softmax_module(ranges={"n": (1, 8)})))
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(InputError, match=r"unknown input\(s\) \['z'\]"):
        vm.run({"x": x, "z": x})
    with pytest.raises(InputError, match=r"missing input\(s\) \['x'\]"):
        vm.run({})
    with pytest.raises(InputError, match="input 'x': has dtype float64, expected float32"):
        vm.run({"x": x.astype(np.float64)})
    with pytest.raises(InputError, match="input 'x': has rank 3"):
        vm.run({"x": x[None]})
    with pytest.raises(InputError, match="input 'x': dim 1 is 5, expected 4"):
        vm.run({"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(InputError, match=r"input 'x': dim 0 \(n\) is 9, outside its range 1..8"):
        vm.run({"x": np.zeros((9, 4), np.float32)})
    with pytest.raises(InputError, match=r"dim 0 \(n\) is 0, outside its range 1..8"):
        vm.run({"x": np.zeros((0, 4), np.float32)})


def test_dims_shared_between_inputs_must_agree():
    x = Var("x", TensorStructInfo((n, 4), "float32"))
    y = Var("y", TensorStructInfo((n, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            gv = bb.emit_output(make_call("add", x, y), "sum")
        bb.emit_func_output(gv)
    vm = VirtualMachine(relaxpack.build(bb.get()))
    a = np.ones((3, 4), np.float32)
    np.testing.assert_array_equal(vm.run({"x": a, "y": a})["sum"], 2 * a)
    with pytest.raises(InputError, match=r"input 'y': dim 0 is 2, but n = 3"):
        vm.run({"x": a, "y": a[:2]})


def test_dim_expression_inputs_are_checked_after_all_inputs():
    # y's first dim is 2 * n, defined by x which comes after it
    y = Var("y", TensorStructInfo((2 * n,), "float32"))
    x = Var("x", TensorStructInfo((n,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [y, x]):
        with bb.dataflow():
            gv = bb.emit_output(make_call("concat", make_call_tuple(x, x), axis=0), "xx")
            gv2 = bb.emit_output(make_call("add", gv, y), "out")
        bb.emit_func_output(gv2)
    vm = VirtualMachine(relaxpack.build(bb.get()))
    xs = np.arange(3, dtype=np.float32)
    out = vm.run({"y": np.ones(6, np.float32), "x": xs})["out"]
    np.testing.assert_array_equal(out, np.concatenate([xs, xs]) + 1)
    with pytest.raises(InputError, match=r"input 'y': dim 0 is 5, but 2 \* n = 6"):
        vm.run({"y": np.ones(5, np.float32), "x": xs})


def make_call_tuple(*fields):
    from relaxpack.ir import Tuple
    return Tuple(fields)


def test_if_takes_each_branch():
    cond = Var("c", TensorStructInfo((), "bool"))
    x = Var("x", TensorStructInfo((n,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [cond, x]):
        bb.begin_scope()
        then = bb.end_scope(bb.emit(make_call("exp", x)))
        bb.begin_scope()
        other = bb.end_scope(bb.emit(make_call("negative", x)))
        out = bb.emit(If(cond, then, other), "out")
        bb.emit_func_output(out)
    vm = VirtualMachine(relaxpack.build(bb.get()))
    xs = np.array([0.0, 1.0], np.float32)
    np.testing.assert_allclose(vm.run({"c": np.array(True), "x": xs})["out"], np.exp(xs))
    np.testing.assert_allclose(vm.run({"c": np.array(False), "x": xs})["out"], -xs)


def test_bytecode_listing_shows_kernel_calls_in_dps():
    exe = relaxpack.build(dense_softmax_module(), opt_level=0)  # unfused: one kernel per op
    text = exe.as_text()
    assert "call kernel.matmul(%0, c[0], out=%" in text
    assert "call kernel.nn.softmax(" in text and "axis=-1" in text
    assert exe.kernel_call_count() == 3 and "vm.builtin.reshape_view(" in text   # the reshape is a view
    assert exe.signature() == "main(x: float32(n, 4)) -> y: float32(8 * n)"


def test_transformer_block_runs_with_symbolic_batch_and_seq():
    from relaxpack.examples import transformer_block
    vm = VirtualMachine(relaxpack.build(transformer_block()))
    for batch, seq in [(1, 1), (3, 7), (2, 128)]:
        x = rng.standard_normal((batch, seq, 64)).astype(np.float32)
        out = vm.run({"x": x})["out"]
        assert out.shape == (batch, seq, 64)
        # each position is layer-normalized: mean 0, variance 1 over the features
        np.testing.assert_allclose(out.mean(-1), 0, atol=1e-5)
        np.testing.assert_allclose(out.var(-1), 1, atol=1e-3)


def test_a_tuple_item_argument_reaches_the_kernel_as_one_array():
    from relaxpack.ir import parse
    mod = parse('''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2,), "float32"), y: R.Tensor((2,), "float32")) -> R.Tensor((2,), "float32"):
        t = (x, y)
        z = R.add(x, t[1])
        return z
''')
    out = VirtualMachine(relaxpack.build(mod)).run({"x": np.ones(2, np.float32), "y": np.full(2, 3, np.float32)})
    np.testing.assert_array_equal(out["z"], [4, 4])


def test_the_reshape_of_a_view_is_the_same_object_run_after_run():
    """Kernels keep their views of an input by identity; a reshaped arena view stays one object."""
    import gc

    from relaxpack.runtime import builtins

    reshape = builtins.BUILTINS["vm.builtin.reshape_view"]
    owner = np.arange(24.0)
    view = owner[:]
    first = reshape(view, (2, 3, 4))
    assert reshape(view, (2, 3, 4)) is first and first.base is owner
    other = reshape(view, (6, 4))
    assert other.shape == (6, 4) and reshape(view, (6, 4)) is other
    assert reshape(owner, (4, 6)) is not reshape(owner, (4, 6))        # an array owning its memory: fresh
    assert reshape(owner[:], (2, 12)) is not reshape(owner[:], (2, 12))  # another view object: fresh
    np.testing.assert_array_equal(first.reshape(-1), owner)
    key = id(view)
    del view
    gc.collect()
    assert key not in builtins._RESHAPED                                   # gone with its value
