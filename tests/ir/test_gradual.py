"""Gradual shape checking in the BlockBuilder (ir/gradual.py) and the passes:
an unproven equality becomes a match_cast to the representative; passes keep
it; codegen checks it after the input checks, once per input shape."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.ir import BlockBuilder, TensorStructInfo, Var, parse
from relaxpack.ir.dims import sym
from relaxpack.ir.equality import structural_equal
from relaxpack.ir.expr import Tuple
from relaxpack.ops.registry import make_call
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.assumptions import assumptions_of


def _concat_module(gradual: bool, skip_rows):
    h = sym("h")
    x = Var("x", TensorStructInfo((2, h), "float32"))
    skip = Var("skip", TensorStructInfo((3, h), "float32"))
    bb = BlockBuilder(gradual=gradual)
    with bb.function("main", [x, skip]):
        with bb.dataflow():
            down = bb.emit(make_call("strided_slice", x, axes=(1,), begin=(0,), end=(2**62,), strides=(4,)))
            up = bb.emit(make_call("concat", Tuple((down, down)), axis=1))
            half = bb.emit(make_call("strided_slice", skip, axes=(1,), begin=(0,), end=(2**62,), strides=(skip_rows,)))
            lv = bb.emit(make_call("concat", Tuple((up, half)), axis=0))
            gv = bb.emit_output(lv)
        bb.emit_func_output(gv)
    return bb.get()


EXPECTED = """
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((2, "h"), "float32"), skip: R.Tensor((3, "h"), "float32")) -> R.Tensor((5, "(h + 1) // 2"), "float32"):
        h = T.int64()
        with R.dataflow():
            down: R.Tensor((2, "(h + 3) // 4"), "float32") = R.strided_slice(x, axes=(1,), begin=(0,), end=(4611686018427387904,), strides=(4,))
            up: R.Tensor((2, "2 * ((h + 3) // 4)"), "float32") = R.concat((down, down), axis=1)
            half: R.Tensor((3, "(h + 1) // 2"), "float32") = R.strided_slice(skip, axes=(1,), begin=(0,), end=(4611686018427387904,), strides=(2,))
            up_1: R.Tensor((2, "(h + 1) // 2"), "float32") = R.match_cast(up, R.Tensor((2, "(h + 1) // 2"), "float32"))
            lv: R.Tensor((5, "(h + 1) // 2"), "float32") = R.concat((up_1, half), axis=0)
            gv: R.Tensor((5, "(h + 1) // 2"), "float32") = lv
            R.output(gv)
        return gv
"""


def test_strict_builder_refuses_what_the_gradual_one_assumes():
    with pytest.raises(ShapeError, match="not provably equal"):
        _concat_module(gradual=False, skip_rows=2)
    mod = _concat_module(gradual=True, skip_rows=2)
    assert structural_equal(mod, parse(EXPECTED)), mod.script()
    assert structural_equal(parse(mod.script()), mod)


def test_a_relation_false_for_every_value_is_refused_even_gradually():
    h = sym("h")
    a = Var("a", TensorStructInfo((2, 2 * h), "float32"))
    b = Var("b", TensorStructInfo((2, 2 * h + 1), "float32"))
    bb = BlockBuilder(gradual=True)
    with pytest.raises(ShapeError, match="!="):
        with bb.function("main", [a, b]):
            bb.emit(make_call("concat", Tuple((a, b)), axis=0))


@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_passes_keep_the_assumption_and_the_run_checks_it_once_per_shape(opt_level):
    mod = _concat_module(gradual=True, skip_rows=2)
    exe = relaxpack.build(mod, opt_level=opt_level)
    (assumed,) = assumptions_of(exe)
    assert (assumed["condition"], assumed["when"]) == ("h % 4 in {0, 3}", "inputs")
    text = exe.as_text()
    lines = text.splitlines()
    check_at = next(i for i, line in enumerate(lines) if "check_dims" in line)
    plan_at = next((i for i, line in enumerate(lines) if "plan_arena" in line), len(lines))
    assert check_at < plan_at          # checked before the memory plan, right after the inputs
    vm = VirtualMachine(exe)
    rng = np.random.default_rng(0)
    for h in (4, 8, 3, 4, 11):           # 2 * ((h + 3) // 4) == (h + 1) // 2: h % 4 in {0, 3}
        x, skip = rng.standard_normal((2, h)).astype(np.float32), rng.standard_normal((3, h)).astype(np.float32)
        want = np.concatenate([np.concatenate([x[:, ::4], x[:, ::4]], axis=1), skip[:, ::2]], axis=0)
        np.testing.assert_array_equal(vm["main"](x, skip), want)
    with pytest.raises(ShapeError, match=r"assumes 2 \* \(\(h \+ 3\) // 4\) == \(h \+ 1\) // 2, i\.e\. h % 4 in \{0, 3\}; "
                                         r"for this call 2 \* \(\(h \+ 3\) // 4\) = 4 and \(h \+ 1\) // 2 = 3 \(h = 5\)"):
        vm["main"](np.zeros((2, 5), np.float32), np.zeros((3, 5), np.float32))


@pytest.mark.parametrize("members, words", [
    ({0, 3}, "h % 32 in {0, 3}"), ({0, *range(17, 32)}, "h % 32 in {0, 17..31}"),
    ({1, 2, 3, 5, 7, 8, 9, 10}, "h % 32 in {1..3, 5, 7..10}"), ({2, 3}, "h % 32 in {2, 3}")])
def test_residues_in_words_write_runs_as_ranges(members, words):
    """A YOLO's sizes read 'h % 32 in {0, 17..31}', not sixteen numbers."""
    from relaxpack.ir.dim_relations import _residue_words
    assert _residue_words("h", 32, frozenset(members)) == words
