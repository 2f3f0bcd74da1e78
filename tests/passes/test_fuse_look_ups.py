"""FuseOps with table look-ups (``is_table_lookup``): a ``take`` of a constant 1-D table joins the
elementwise chain that makes its index, as the recipe's last step or inside it; any other ``take``
stays a kernel call of its own. Each case runs the module before and after FuseOps and compares
the bits (a look-up's result is the table's entry, whatever the buffers)."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.ir.expr import Call, Function, GlobalVar
from relaxpack.ir.visitor import ExprVisitor
from relaxpack.passes import PassContext
from relaxpack.passes.fuse_ops import fuse_ops
from relaxpack.passes.lower_fused import lower_fused_functions
from relaxpack.runtime import VirtualMachine

from .helpers import ops_of, ops_of_function, program

TABLE = [float(v) for v in (np.arange(256) % 97) * 0.5 - 7.0]
INT_TABLE = [int(v) for v in (np.arange(256) * 7919) % 1000 - 500]


def _fused(mod) -> list[list[str]]:
    """The op names of each fused function ``main`` calls, in call order."""
    found = []

    class Calls(ExprVisitor):
        def visit_call_(self, call: Call):
            if isinstance(call.op, GlobalVar) and isinstance(mod[call.op.name_hint], Function):
                found.append(ops_of_function(mod[call.op.name_hint]))
            super().visit_call_(call)

    Calls().visit_expr(mod["main"])
    return found


def fuse_and_compare(text: str, sizes=(0, 1, 7, 300)):
    """FuseOps on ``text``; the fused and lowered module computes the same bits as the original on
    inputs that reach every table entry, NaN and the clip bounds included."""
    mod = parse(text)
    with PassContext(opt_level=2, check_well_formed=True):
        out = fuse_ops(mod)
        lowered = lower_fused_functions(out)
    plain, fused = (VirtualMachine(relaxpack.build(m, opt_level=0)) for m in (mod, lowered))
    rng = np.random.default_rng(0)
    for n in sizes:
        x = rng.uniform(-300, 300, size=(n, 4)).astype(np.float32)
        x.ravel()[:min(x.size, 6)] = [np.nan, -0.0, 255.0, 0.5, np.inf, -np.inf][:min(x.size, 6)]
        want, got = plain.run({"x": x}), fused.run({"x": x})
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
            assert got[name].dtype == want[name].dtype
    return out


def _lookup(table: str, tail: str = "", index_dtype: str = "int64", ret: str = "float32") -> str:
    cast, index = ('lv4 = R.astype(lv3, dtype="int64")', "lv4") if index_dtype == "int64" else ("", "lv3")
    return program('x: R.Tensor(("n", 4), "float32")', '("n", 4)', f"""
lv = R.multiply(x, R.const(0.75, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="int32")
{cast}
lv5 = R.take({table}, {index}, axis=0, in_bounds=True)
{tail or "lv6 = lv5"}
return lv6
""", dtype=ret)


def test_a_look_up_ends_the_chain_that_makes_its_index():
    out = fuse_and_compare(_lookup(f'R.const({TABLE}, "float32")'))
    assert _fused(out) == [["multiply", "round", "clip", "astype", "astype", "take"]]
    assert "take" not in ops_of(out)


def test_a_look_up_inside_a_chain():
    """Inside a chain a look-up is one more step; its group keeps to one temporary (the int64 index
    and x's multiply would need two, so the index's own chain stays apart)."""
    out = fuse_and_compare(_lookup(f'R.const({TABLE}, "float32")',
                                   tail='lv6 = R.add(lv5, R.multiply(x, R.const(2.0, "float32")))'))
    assert _fused(out) == [["multiply", "round", "clip", "astype"], ["astype", "take", "multiply", "add"]]


def test_a_look_up_by_an_index_of_the_results_dtype():
    """int32 entries by an int32 index (the result's dtype and shape): the recipe marks the look-up
    not in place, so the index and the result get buffers of their own."""
    out = fuse_and_compare(_lookup(f'R.const({INT_TABLE}, "int32")', index_dtype="int32", ret="int32"))
    assert _fused(out) == [["multiply", "round", "clip", "astype", "take"]]


def test_a_look_up_may_take_a_second_temporary():
    """The input of the result's shape and dtype may become ``out`` (the memory planner), so the
    int32 and int64 casts of the index need two temporaries: allowed when the group ends in a
    look-up, whose own kernel call it saves."""
    text = program('x: R.Tensor(("n", 4), "float32")', '("n", 4)', f"""
p = R.nn.softmax(x, axis=-1)
lv = R.multiply(p, R.const(255.0, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="int32")
lv4 = R.astype(lv3, dtype="int64")
lv5 = R.take(R.const({TABLE}, "float32"), lv4, axis=0, in_bounds=True)
return lv5
""")
    out = fuse_and_compare(text)
    assert _fused(out) == [["multiply", "round", "clip", "astype", "astype", "take"]]


@pytest.mark.parametrize("case, table, index", [
    ("a table of rows", f'R.const({[[v, -v] for v in TABLE]}, "float32")', "lv4"),
    ("a table that is an input", "x1", "lv4"),
])
def test_other_takes_stay_calls_of_their_own(case, table, index):
    params = 'x: R.Tensor(("n", 4), "float32"), x1: R.Tensor((256,), "float32")'
    ret = '("n", 4, 2)' if "rows" in case else '("n", 4)'
    text = program(params, ret, f"""
lv = R.multiply(x, R.const(0.75, "float32"))
lv1 = R.round(lv)
lv2 = R.clip(lv1, min=0.0, max=255.0, saturate_nan=True)
lv3 = R.astype(lv2, dtype="int32")
lv4 = R.astype(lv3, dtype="int64")
lv5 = R.take({table}, {index}, axis=0, in_bounds=True)
return lv5
""")
    with PassContext(opt_level=2, check_well_formed=True):
        out = fuse_ops(parse(text))
    assert "take" in ops_of(out), case
    assert all("take" not in ops for ops in _fused(out)), case


def test_a_look_up_that_broadcasts_into_the_group_stays_apart(caplog):
    """A look-up smaller than the group's result (QLinearWhere's table of a broadcast operand) would
    be a step of another shape than ``full``: it stays out of that group (the log says why) and ends
    its index's own."""
    caplog.set_level("DEBUG", logger="relaxpack.passes.fuse_ops")
    text = program('x: R.Tensor(("n", 4), "float32"), y: R.Tensor((4,), "float32")', '("n", 4)', f"""
lv = R.round(y)
lv1 = R.clip(lv, min=0.0, max=255.0, saturate_nan=True)
lv2 = R.astype(lv1, dtype="int64")
lv3 = R.take(R.const({TABLE}, "float32"), lv2, axis=0, in_bounds=True)
lv4 = R.add(x, lv3)
lv5 = R.exp(lv4)
return lv5
""")
    with PassContext(opt_level=2, check_well_formed=True):
        out = fuse_ops(parse(text))
    assert _fused(out) == [["round", "clip", "astype", "take"], ["add", "exp"]]
    assert "lv3 stays out of lv5's group: the look-up lv3 gives" in caplog.text
