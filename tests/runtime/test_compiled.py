"""Functions compiled to one Python function (runtime/compiled.py): the same results and
errors as the step interpreter, on branches and alternating shapes; the shape memo never
keeps an outgrown arena alive; what cannot be compiled safely stays interpreted."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.errors import BudgetError, InputError
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.bytecode import NO_DST, Call, Goto, Ret
from relaxpack.runtime.compiled import Resolved, compile_function
from relaxpack.runtime.shape_memo import arena_buffers


def if_model():
    """y = exp(x * x) if sum(x) > 0 else exp(-x), x of shape (n, 3)."""
    out = [h.make_tensor_value_info("t", T.FLOAT, ["n", 3])]
    then = h.make_graph([h.make_node("Mul", ["x", "x"], ["t"])], "then", [], out)
    other = h.make_graph([h.make_node("Neg", ["x"], ["t"])], "else", [], out)
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], keepdims=0), h.make_node("Greater", ["s", "zero"], ["c"]),
             h.make_node("If", ["c"], ["y0"], then_branch=then, else_branch=other),
             h.make_node("Exp", ["y0"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n", 3])], [h.make_tensor("zero", T.FLOAT, [], [0.0])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def reference(x: np.ndarray) -> np.ndarray:
    return np.exp(x * x) if x.sum() > 0 else np.exp(-x)


@pytest.fixture(scope="module")
def if_exe():
    return relaxpack.build(relaxpack.from_onnx(if_model()))


def test_the_if_model_compiles_with_a_shape_memo(if_exe):
    prepared = VirtualMachine(if_exe)._prepared[0]
    assert prepared.plain is not None and prepared.compiled is not prepared.plain


def test_compiled_and_interpreted_agree_on_both_branches_and_alternating_shapes(if_exe):
    rng = np.random.default_rng(0)
    compiled, interpreted = VirtualMachine(if_exe), VirtualMachine(if_exe)
    interpreted.compiled = False
    for n in (2, 5, 2, 1, 5, 7, 2):
        for sign in (1, -1):
            x = (sign * rng.uniform(0.1, 1.0, (n, 3))).astype(np.float32)
            got = compiled.run({"x": x})["y"]
            np.testing.assert_array_equal(got, interpreted.run({"x": x})["y"])
            np.testing.assert_allclose(got, reference(x), rtol=1e-6)


def test_the_shape_memo_never_keeps_an_outgrown_arena(if_exe):
    vm = VirtualMachine(if_exe)
    for n in (1, 2, 1, 64, 3, 1, 256, 2):
        x = np.ones((n, 3), np.float32)
        np.testing.assert_array_equal(vm.run({"x": x})["y"], reference(x))
        memo = vm._prepared[0].compiled.memo
        assert tuple([n]) in {key[:1] for key in memo}
        kept = arena_buffers([v for entry in memo.values() for v in entry])
        assert len(kept) == 1, "entries hold views into an arena that has since grown"


def test_input_errors_are_the_same_compiled_or_not(if_exe):
    messages = []
    for compiled in (True, False):
        vm = VirtualMachine(if_exe)
        vm.compiled = compiled
        with pytest.raises(InputError) as err:
            vm.run({"x": np.ones((2, 4), np.float32)})
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_a_function_name_of_any_characters_compiles():
    """The name only labels the compiled code (its file name, as ASCII), never its source."""
    memo, plain = compile_function([Ret(src=0)], {}, 1, "\x00'); import os #\n")
    assert memo is None
    assert plain.run(7) == 7 and "\\x00" in plain.run.__code__.co_filename


class _Int(int):
    def __format__(self, spec):
        return "0; import os"


def _ret_only(src):
    return compile_function([Ret(src=src)], {}, 1, "main")


def test_only_what_runs_the_same_is_compiled():
    call = Call(dst=NO_DST, func=0, args=(), kwargs=())
    noop = Resolved(lambda: None, (), (), NO_DST, "vm.builtin.identity")
    assert _ret_only(0)[1] is not None
    assert _ret_only(_Int(0)) == (None, None)                 # register text must be a plain int's
    assert compile_function([call], {0: noop}, 0, "f") == (None, None)      # would run off its end
    assert compile_function([Goto(offset=0), Ret(src=0)], {}, 1, "f") == (None, None)   # a loop of gotos


def _stops_at(vm, feeds) -> str:
    try:
        vm.run(feeds)
    except BudgetError as err:
        return str(err)
    return "ran to the end"


@pytest.mark.parametrize("sign", [1, -1])
def test_a_step_budget_stops_compiled_code_at_the_interpreters_instruction(if_exe, sign):
    """The counting variant counts what the interpreter's loop counts: every budget from 1 to
    past the end stops both at the same instruction, in either branch."""
    feeds = {"x": np.full((2, 3), sign * 0.5, np.float32)}
    seen = set()
    for steps in range(1, 40):
        compiled, interpreted = VirtualMachine(if_exe, max_steps=steps), VirtualMachine(if_exe, max_steps=steps)
        interpreted.compiled = False
        assert compiled._prepared[0].compiled is not None
        assert " (counting)" in compiled._prepared[0].compiled.run.__code__.co_filename
        outcome = _stops_at(compiled, feeds)
        assert outcome == _stops_at(interpreted, feeds), steps
        seen.add(outcome == "ran to the end")
    assert seen == {True, False}


def test_a_loop_body_compiled_with_counting_stops_at_the_step_budget():
    from tests.runtime.hostile import endless_loop
    vm = VirtualMachine(endless_loop(), max_steps=777)
    assert all(p.compiled is not None for p in vm._prepared)
    with pytest.raises(BudgetError, match=r"stopped in body after 778 instructions"):
        vm.run({"x": np.ones(2, np.float32)})


def test_each_branch_has_a_shape_memo_and_agrees_with_the_interpreter(if_exe):
    """The branches' arena views come from memos of their own, filled per shape; the results stay
    the interpreter's whichever branch and shape come, in any order."""
    vm = VirtualMachine(if_exe)
    compiled = vm._prepared[0].compiled
    assert len(compiled.memos) >= 3            # the top level and both branches
    interpreted = VirtualMachine(if_exe)
    interpreted.compiled = False
    rng = np.random.default_rng(1)
    for n in (3, 1, 3, 8, 1):
        for sign in (-1, 1, -1):
            x = (sign * rng.uniform(0.1, 1.0, (n, 3))).astype(np.float32)
            np.testing.assert_array_equal(vm.run({"x": x})["y"], interpreted.run({"x": x})["y"])
    filled = [memo for memo in compiled.memos[1:] if memo]
    assert len(filled) == 2 and all({key[:1] for key in memo} == {(1,), (3,), (8,)} for memo in filled)


def nonzero_model():
    """y = exp(x * sum(nonzero(x > 0)) + 1) - 1 and z = x * x: the ops after NonZero (its count
    matched into the heap) have arena tensors of x's shape."""
    nodes = [h.make_node("Greater", ["x", "zero"], ["c"]), h.make_node("NonZero", ["c"], ["nz"]),
             h.make_node("Cast", ["nz"], ["f"], to=T.FLOAT), h.make_node("ReduceSum", ["f"], ["s"], keepdims=0),
             h.make_node("Mul", ["x", "s"], ["m"]), h.make_node("Add", ["m", "one"], ["a"]),
             h.make_node("Exp", ["a"], ["e"]), h.make_node("Sub", ["e", "one"], ["y"]),
             h.make_node("Mul", ["y", "x"], ["z"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 3])],
                     [h.make_tensor_value_info("z", T.FLOAT, ["n", 3])],
                     [h.make_tensor("zero", T.FLOAT, [], [0.0]), h.make_tensor("one", T.FLOAT, [], [1.0])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("level", [0, 2])
def test_a_memo_after_a_data_dependent_dim_agrees_with_the_interpreter(level):
    """After NonZero's match_shape writes the heap, a later memo keyed by the heap as it is there
    holds the shape and arena work up to the next write; results stay the interpreter's for
    every count of nonzeros (0 included), in any order."""
    from relaxpack.runtime.compiled import _structure
    from relaxpack.runtime.shape_memo import memo_plans
    exe = relaxpack.build(relaxpack.from_onnx(nonzero_model()), opt_level=level)
    vm = VirtualMachine(exe)
    prepared = vm._prepared[0]
    instrs = prepared.func.instructions
    plans = memo_plans(instrs, _structure(instrs, 0, len(instrs)), prepared.resolved)
    later = [p for p in plans if p.later]
    assert later and all(len(p.pcs) >= 2 for p in later)
    interpreted = VirtualMachine(exe)
    interpreted.compiled = False
    rng = np.random.default_rng(2)
    for n, p in ((4, 0.5), (4, 0.0), (2, 1.0), (4, 0.5), (7, 0.3), (2, 1.0), (1, 0.0), (4, 0.5)):
        x = np.where(rng.uniform(size=(n, 3)) < p, 0.1, -0.1).astype(np.float32)
        got = vm.run({"x": x})["z"]
        s = np.float32(np.argwhere(x > 0).sum())
        want = (np.exp(x * s + 1) - 1) * x
        np.testing.assert_array_equal(got, interpreted.run({"x": x})["z"])
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert any(store for store in prepared.compiled.memos[len(plans) - len(later):])


def test_branch_memos_reading_the_plans_around_them_agree_with_the_interpreter():
    """silero's If on the sample rate holds nested ifs whose arena views read the branch's plan:
    their memos key by that plan too (a memo with ``reads`` that is no later memo). Compiled and
    interpreted agree on both rates and alternating shapes."""
    from pathlib import Path

    from relaxpack.runtime.compiled import _structure
    from relaxpack.runtime.shape_memo import memo_plans
    zoo = Path(__file__).resolve().parents[1] / "models" / "zoo" / "silero_vad_like.onnx"
    exe = relaxpack.build(relaxpack.from_onnx(str(zoo)), opt_level=2)
    vm, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    prepared = vm._prepared[vm._index["main"]]
    instrs = prepared.func.instructions
    plans = memo_plans(instrs, _structure(instrs, 0, len(instrs)), prepared.resolved)
    assert any(p.reads and not p.later for p in plans) and any(p.later for p in plans)
    rng = np.random.default_rng(4)
    for batch, samples, rate in ((1, 64, 16000), (3, 32, 8000), (1, 64, 16000), (2, 32, 8000), (4, 64, 16000)):
        feeds = {"input": rng.standard_normal((batch, samples)).astype(np.float32),
                 "state": rng.standard_normal((2, batch, 16)).astype(np.float32), "sr": np.array(rate, np.int64)}
        got, want = vm.run(feeds), interpreted.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def reshape_model():
    """y = reshape(exp(x), (-1, 2, 3)) + 1 flattened: a reshape of an intermediate (an arena view)."""
    nodes = [h.make_node("Exp", ["x"], ["e"]), h.make_node("Reshape", ["e", "s3"], ["r"]),
             h.make_node("Add", ["r", "one"], ["a"]), h.make_node("Reshape", ["a", "s1"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", 6])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [h.make_tensor("s3", T.INT64, [3], [-1, 2, 3]), h.make_tensor("s1", T.INT64, [1], [-1]),
                      h.make_tensor("one", T.FLOAT, [], [1.0])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def test_reshape_views_of_the_arena_are_in_the_shape_memo():
    """A reshape view of an arena tensor depends on the shape heap alone: the memo holds it (no
    call per run); a reshape of a fresh output is not memoized. Results are the interpreter's on
    alternating and growing shapes, and an earlier output is never written again."""
    from relaxpack.runtime.compiled import _structure
    from relaxpack.runtime.shape_memo import memo_plans
    exe = relaxpack.build(relaxpack.from_onnx(reshape_model()), opt_level=0)
    vm, interpreted = VirtualMachine(exe), VirtualMachine(exe)
    interpreted.compiled = False
    prepared = vm._prepared[0]
    instrs = prepared.func.instructions
    plans = memo_plans(instrs, _structure(instrs, 0, len(instrs)), prepared.resolved)
    views = [pc for pc, r in prepared.resolved.items() if r.name == "vm.builtin.reshape_view"]
    memoized = {pc for p in plans for pc in p.pcs}
    assert len(views) == 2 and len([pc for pc in views if pc in memoized]) == 1
    rng = np.random.default_rng(5)
    kept = []
    for n in (2, 5, 2, 9, 1, 9, 2):
        x = rng.standard_normal((n, 6)).astype(np.float32)
        got = vm.run({"x": x})["y"]
        np.testing.assert_array_equal(got, interpreted.run({"x": x})["y"])
        np.testing.assert_allclose(got, (np.exp(x) + 1).reshape(-1), rtol=1e-6)
        kept.append((got, got.copy()))
    for got, copy in kept:
        np.testing.assert_array_equal(got, copy)


def test_tuples_are_made_and_read_inline_and_their_errors_name_the_instruction():
    """make_tuple and tuple_getitem (the builtins, no keywords) compile to the tuple display and the
    subscript they return: the same values, no call of either, and an index out of range still
    names its instruction (pc_of)."""
    from relaxpack.runtime.builtins import make_tuple, tuple_getitem
    from relaxpack.runtime.compiled import pc_of
    instrs = [Call(dst=2, func=0, args=(("r", 0), ("r", 1)), kwargs=()),
              Call(dst=3, func=1, args=(("r", 2), ("i", 1)), kwargs=()),
              Call(dst=4, func=0, args=(("r", 3), ("i", 7)), kwargs=()),
              Call(dst=5, func=0, args=(), kwargs=()),
              Call(dst=6, func=0, args=(("r", 4), ("r", 5), ("r", 0)), kwargs=()),
              Ret(src=6)]
    resolved = {0: Resolved(make_tuple, ((True, 0), (True, 1)), (), 2, "vm.builtin.make_tuple"),
                1: Resolved(tuple_getitem, ((True, 2), (False, 1)), (), 3, "vm.builtin.tuple_getitem"),
                2: Resolved(make_tuple, ((True, 3), (False, 7)), (), 4, "vm.builtin.make_tuple"),
                3: Resolved(make_tuple, (), (), 5, "vm.builtin.make_tuple"),
                4: Resolved(make_tuple, ((True, 4), (True, 5), (True, 0)), (), 6, "vm.builtin.make_tuple")}
    _, plain = compile_function(instrs, resolved, 2, "main")
    a, b = np.zeros(1), np.ones(2)
    got = plain.run(a, b)
    assert got == ((b, 7), (), a) and got[0][0] is b and got[2] is a
    held = [c.cell_contents for c in plain.run.__closure__ or ()]
    assert not any(v is make_tuple or v is tuple_getitem for v in held)
    resolved[1] = Resolved(tuple_getitem, ((True, 2), (False, 5)), (), 3, "vm.builtin.tuple_getitem")
    _, plain = compile_function(instrs, resolved, 2, "main")
    with pytest.raises(IndexError) as err:
        plain.run(a, b)
    assert pc_of(err.value.__traceback__, plain) == 1
