"""Legalize: graph ops become kernel calls (call_tir into an output the
caller allocates, or dyn.apply when only the run knows the output's shape).
Before/Expected texts, a second run that changes nothing, and the legalized
module run as it is against the graph ops built by ``relaxpack.build``."""

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import PassError
from relaxpack.ir import parse
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.packager.codegen import codegen
from relaxpack.passes import PassContext
from relaxpack.passes.legalize import legalize
from relaxpack.runtime import VirtualMachine

from .helpers import program


def legalized(text: str, expected: str):
    """Legalize ``text``, check it reads ``expected`` (at stage lower), and
    that legalizing the kernel calls again changes nothing."""
    mod = parse(text)
    with PassContext(check_well_formed=True):
        out = legalize(mod)
        assert_structural_equal(out, parse(expected).with_attrs(stage="lower"))
        again = legalize(out.with_attrs(stage="optimize"))    # kernel calls are already legal
    assert_structural_equal(again, out)
    return mod, out


def assert_runs_alike(graph, lowered, feeds):
    """The legalized module, code-generated as it is, computes what ``build`` makes of the graph ops."""
    want_vm, got_vm = VirtualMachine(relaxpack.build(graph, opt_level=0)), VirtualMachine(codegen(lowered))
    for feed in feeds:
        want, got = want_vm.run(feed), got_vm.run(feed)
        assert list(got) == list(want)
        for name in want:
            assert got[name].shape == want[name].shape
            np.testing.assert_array_equal(got[name], want[name])


def test_graph_ops_become_calls_of_their_kernels_with_their_attributes():
    params, ret = 'x: R.Tensor(("n", 4), "float32"), y: R.Tensor((4,), "float32")', '("n", 4)'
    before = program(params, ret, """
lv = R.add(x, y)
lv1 = R.nn.softmax(lv, axis=-1)
return lv1
""")
    expected = program(params, ret, """
lv = R.call_tir("add", (x, y), kernel_attrs=None, out_sinfo=R.Tensor(("n", 4), "float32"))
lv1 = R.call_tir("nn.softmax", (lv,), kernel_attrs=(("axis", -1),), out_sinfo=R.Tensor(("n", 4), "float32"))
return lv1
""")
    mod, out = legalized(before, expected)
    rng = np.random.default_rng(0)
    assert_runs_alike(mod, out, [{"x": rng.standard_normal((n, 4)).astype(np.float32),
                                  "y": rng.standard_normal(4).astype(np.float32)} for n in (1, 5, 0)])


UNKNOWN_RANK = '''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(dtype="float32", ndim=-1), y: R.Tensor((4,), "float32")) -> R.Tensor(dtype="float32", ndim=-1):
{body}
'''


def test_ops_on_an_operand_of_unknown_rank_are_shaped_by_the_run():
    before = UNKNOWN_RANK.format(body="""\
        lv = R.nn.relu(x)
        lv1 = R.add(lv, y)
        lv2 = R.sum(lv1, axis=[-1], keepdims=False)
        return lv2""")
    expected = UNKNOWN_RANK.format(body="""\
        lv = R.call_pure_packed("dyn.apply", x, kernel_attrs=(("kernel", "nn.relu"), ("dtype", "float32"),
                                                               ("attrs", ())), sinfo_args=R.Tensor("float32"))
        lv1 = R.call_pure_packed("dyn.apply", lv, y, kernel_attrs=(("kernel", "add"), ("dtype", "float32"),
                                                                   ("attrs", ())), sinfo_args=R.Tensor("float32"))
        lv2 = R.call_pure_packed("dyn.apply", lv1, kernel_attrs=(("kernel", "sum"), ("dtype", "float32"),
                                 ("attrs", (("axis", (-1,)), ("keepdims", False)))), sinfo_args=R.Tensor("float32"))
        return lv2""")
    mod, out = legalized(before, expected)
    rng = np.random.default_rng(1)
    assert_runs_alike(mod, out, [{"x": rng.standard_normal(shape).astype(np.float32),
                                  "y": rng.standard_normal(4).astype(np.float32)}
                                 for shape in ((4,), (3, 4), (2, 3, 4))])


def test_an_output_the_run_cannot_shape_is_refused_naming_where_the_rank_was_lost():
    mod = parse('''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(dtype="float32", ndim=-1)) -> R.Tensor(dtype="float32", ndim=-1):
        lv = R.nn.relu(x)
        lv1 = R.unique(lv)
        return lv1
''')
    with pytest.raises(PassError, match=r"^R\.unique needs the rank of its operand, unknown here: .*'x'"):
        legalize(mod)
