"""Reshapes of intermediates are views (``vm.builtin.reshape_view``), not copies; of an input or
a constant they stay copies, so no output ever aliases memory the caller or the weights own."""

import numpy as np

import relaxpack
from relaxpack.ir import BlockBuilder, Constant, ShapeExpr, TensorStructInfo, Var, sym
from relaxpack.ops import make_call
from relaxpack.runtime import VirtualMachine

n = sym("n")
W = np.arange(12, dtype=np.float32).reshape(3, 4) / 10


def module(reshape_input: bool, reshape_constant: bool):
    """exp(x) reshaped and used twice (once in place-able), plus optional reshapes of x and W."""
    x = Var("x", TensorStructInfo((n, 6), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            e = bb.emit(make_call("exp", x))
            r = bb.emit(make_call("reshape", e, ShapeExpr((n, 2, 3))))
            s = bb.emit(make_call("add", r, Constant(np.float32(1))))         # may write over r (dies here)
            flat = bb.emit(make_call("reshape", s, ShapeExpr((n * 6,))))
            outs = [flat]
            if reshape_input:
                outs.append(bb.emit(make_call("reshape", x, ShapeExpr((n * 6,)))))
            if reshape_constant:
                outs.append(bb.emit(make_call("expand_dims", Constant(W), axis=(0,))))
            gv = bb.emit_output(outs[0] if len(outs) == 1 else relaxpack.ir.Tuple(outs), "y")
        bb.emit_func_output(gv)
    return bb.get()


def test_intermediate_reshapes_are_views_and_outputs_stay_fresh():
    exe = relaxpack.build(module(False, False), opt_level=0)
    text = exe.as_text()
    assert text.count("vm.builtin.reshape_view(") == 2 and "kernel.reshape" not in text
    vm = VirtualMachine(exe)
    results = []
    for rows in (2, 3, 2):
        x = np.random.default_rng(rows).standard_normal((rows, 6)).astype(np.float32)
        y = vm.run({"x": x})["y"]
        np.testing.assert_allclose(y, (np.exp(x) + 1).reshape(-1), rtol=1e-6)
        results.append((y, y.copy()))
    for y, copy in results:                  # a later run never writes an earlier output
        np.testing.assert_array_equal(y, copy)


def test_reshapes_of_inputs_and_constants_are_copies():
    exe = relaxpack.build(module(True, True), opt_level=0)
    text = exe.as_text()
    assert "kernel.reshape(%0" in text and "kernel.expand_dims(c[" in text
    x = np.ones((2, 6), np.float32)
    y, flat_x, w = VirtualMachine(exe).run({"x": x})["y"]
    assert not np.shares_memory(flat_x, x) and not any(np.shares_memory(w, c) for c in exe.constants)
    np.testing.assert_array_equal(w[0], W)


def split_module(tuple_of_input: bool):
    """exp(x) split in two pieces (their tuple planned memory), each piece reshaped; with
    ``tuple_of_input`` also a tuple of x and exp(x) whose first item (x itself) is reshaped."""
    x = Var("x", TensorStructInfo((n, 6), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            e = bb.emit(make_call("exp", x))
            parts = bb.emit(make_call("split", e, indices_or_sections=2, axis=1))
            first = bb.emit(make_call("reshape", bb.emit(relaxpack.ir.TupleGetItem(parts, 0)), ShapeExpr((n * 3,))))
            second = bb.emit(make_call("expand_dims", bb.emit(relaxpack.ir.TupleGetItem(parts, 1)), axis=(0,)))
            outs = [bb.emit(make_call("add", first, Constant(np.float32(1)))),
                    bb.emit(make_call("multiply", second, Constant(np.float32(2))))]
            if tuple_of_input:
                pair = bb.emit(relaxpack.ir.Tuple([x, e]))
                item = bb.emit(relaxpack.ir.TupleGetItem(pair, 0))
                outs.append(bb.emit(make_call("add", bb.emit(make_call("reshape", item, ShapeExpr((n * 6,)))),
                                              Constant(np.float32(0)))))
            gv = bb.emit_output(relaxpack.ir.Tuple(outs), "y")
        bb.emit_func_output(gv)
    return bb.get()


def test_reshapes_of_split_pieces_are_views():
    """A split's pieces are memory the function allocated (its planned tuple), so reshapes of its
    items are views like any intermediate's; results right over runs of other sizes, and a later
    run never writes an earlier output."""
    exe = relaxpack.build(split_module(False), opt_level=0)
    text = exe.as_text()
    assert text.count("vm.builtin.reshape_view(") == 2, text
    assert "kernel.reshape(" not in text and "kernel.expand_dims(" not in text
    vm = VirtualMachine(exe)
    results = []
    for rows in (2, 3, 1, 2):
        x = np.random.default_rng(rows).standard_normal((rows, 6)).astype(np.float32)
        first, second = vm.run({"x": x})["y"]
        e = vm.run({"x": x})["y"][0] - 1        # (the same exp: compared below against numpy's)
        np.testing.assert_allclose(e, np.exp(x[:, :3]).reshape(-1), rtol=1e-6)
        np.testing.assert_array_equal(first, (e + np.float32(1)))
        np.testing.assert_allclose(second, 2 * np.exp(x[None, :, 3:]), rtol=1e-6)
        results.append([(a, a.copy()) for a in (first, second)])
    for pairs in results:
        for a, copy in pairs:
            np.testing.assert_array_equal(a, copy)


def test_a_tuple_holding_an_input_keeps_its_items_copies():
    """A tuple of the input and an intermediate is not memory the function allocated as a whole:
    a reshape of its input item stays a copy (no kernel may write over the caller's array), the
    split pieces' reshapes views."""
    exe = relaxpack.build(split_module(True), opt_level=0)
    text = exe.as_text()
    assert text.count("vm.builtin.reshape_view(") == 2 and text.count("kernel.reshape(") == 1, text
    x = np.ones((2, 6), np.float32)
    flat_x = VirtualMachine(exe).run({"x": x})["y"][-1]
    assert not np.shares_memory(flat_x, x)
    np.testing.assert_array_equal(flat_x, x.reshape(-1))
