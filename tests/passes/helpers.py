"""What the pass tests share: programs in the text format, running a pass
under a checking context, Before/Expected assertions (run twice, for
idempotence) and the numerical check of before against after.

>>> mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)   # doctest: +SKIP
>>> assert_same_results(mod, out, [{"n": 1}, {"n": 3}])                         # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

import relaxpack
from relaxpack.ir import parse
from relaxpack.ir.dims import evaluate
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ir.expr import Call
from relaxpack.ir.struct_info import TensorStructInfo
from relaxpack.ir.visitor import ExprVisitor
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.passes import PassContext, Sequential
from relaxpack.passes.dead_code_elimination import dead_code_elimination
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.dtypes import numpy_dtype


def program(params: str, ret: str, body: str, dtype: str = "float32", dims: tuple[str, ...] = ("n",)) -> str:
    """A one-function module in the text format: ``main(params) ->
    R.Tensor(ret, dtype)`` declaring the symbolic ``dims``, with ``body``
    (bindings and a return, one per line) as its statements."""
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    declared = "".join(f"        {d} = T.int64()\n" for d in dims)
    return f'''
@I.ir_module
class Module:
    @R.function
    def main({params}) -> R.Tensor({ret}, "{dtype}"):
{declared}{lines}
'''


def with_dce(pass_) -> Sequential:
    """``pass_`` then DeadCodeElimination: a rule-table pass leaves the
    bindings it rewrote away for DCE, and its tests expect them gone."""
    return Sequential([pass_, dead_code_elimination], name=f"{pass_.info.name}+DCE")


def run_pass(pass_, mod, **config):
    """``pass_`` applied under a context that checks well-formedness after each pass."""
    with PassContext(opt_level=3, check_well_formed=True, config=config):
        return pass_(mod)


def assert_rewrites(pass_, before: str, expected: str, stage: str = "optimize", **config):
    """``pass_`` turns the program ``before`` into ``expected`` (texts), leaving
    the module at ``stage``, and running it again changes nothing (idempotence)."""
    mod = parse(before)
    check_well_formed(mod)
    out = run_pass(pass_, mod, **config)
    assert_structural_equal(out, parse(expected).with_attrs(stage=stage))
    assert_structural_equal(run_pass(pass_, out, **config), out)
    return mod, out


def assert_unchanged(pass_, text: str, **config):
    """``pass_`` leaves the program alone (only the stage changes)."""
    mod = parse(text)
    check_well_formed(mod)
    out = run_pass(pass_, mod, **config)
    assert_structural_equal(out, mod.with_attrs(stage="optimize"))
    return mod


def random_inputs(mod, dims: dict, seed: int | np.random.Generator = 0, low=-3, high=3) -> dict:
    """Random arrays for ``mod``'s main parameters with symbolic dims set by
    ``dims``: normal floats, integers in ``[low, high)``, fair booleans."""
    rng = np.random.default_rng(seed)       # a Generator passes through as it is
    out = {}
    for p in mod["main"].params:
        sinfo = p.struct_info
        assert isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None, p
        shape = tuple(evaluate(d, dims) for d in sinfo.shape)
        dtype = numpy_dtype(sinfo.dtype)
        if dtype == np.bool_:
            out[p.name_hint] = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            out[p.name_hint] = rng.integers(low, high, shape).astype(dtype)
        else:
            out[p.name_hint] = rng.standard_normal(shape).astype(dtype)
    return out


def assert_same_results(before, after, dims_list=(), *, feeds=(), seed: int = 0, rtol=1e-6, atol=1e-6,
                        **input_kw):
    """``before`` and ``after``, both built with relaxpack.build at -O0, give
    the same outputs (names, order, shapes and values) on random inputs at
    each assignment of the symbolic dims in ``dims_list``, and on ``feeds``."""
    vm_before = VirtualMachine(relaxpack.build(before, opt_level=0))
    vm_after = VirtualMachine(relaxpack.build(after, opt_level=0))
    cases = [random_inputs(before, dims, seed, **input_kw) for dims in dims_list] + list(feeds)
    assert cases, "nothing to compare on"
    for inputs in cases:
        want, got = vm_before.run(inputs), vm_after.run(inputs)
        assert list(want) == list(got)
        for name in want:
            assert np.asarray(got[name]).shape == np.asarray(want[name]).shape, name
            np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), rtol=rtol, atol=atol)


def ops_of(mod) -> list[str]:
    """The op names called in ``main``, in binding order."""
    return ops_of_function(mod["main"])


def ops_of_function(func) -> list[str]:
    """The op names called in ``func`` (a fused primitive function, say), in binding order."""
    names = []

    class Ops(ExprVisitor):
        def visit_call_(self, call: Call):
            names.append(getattr(call.op, "name", "?"))
            super().visit_call_(call)

    Ops().visit_expr(func)
    return names


def products_of(func) -> list[tuple[str, str]]:
    """``(op name, result dtype)`` of each ``matmul`` / ``nn.gemm`` call in ``func``, in binding
    order: whether an integer product runs as an exact float product or stays integer."""
    found = []

    class Products(ExprVisitor):
        def visit_call_(self, call: Call):
            if getattr(call.op, "name", None) in ("matmul", "nn.gemm"):
                found.append((call.op.name, call.struct_info.dtype))
            super().visit_call_(call)

    Products().visit_expr(func)
    return found

def count_bindings(mod) -> int:
    """Bindings in all functions, If branches included."""
    class Count(ExprVisitor):
        n = 0

        def visit_binding(self, binding):
            self.n += 1
            super().visit_binding(binding)

    counter = Count()
    for _, func in mod.items():
        counter.visit_expr(func)
    return counter.n


def ops_used(mod) -> list[str]:
    """The op (or extern function) names called in every function, in binding order."""
    names = []

    class Ops(ExprVisitor):
        def visit_call_(self, call: Call):
            names.append(getattr(call.op, "name", None) or getattr(call.op, "global_symbol", "?"))
            super().visit_call_(call)

    for _, func in mod.items():
        Ops().visit_expr(func)
    return names


def kernel_calls(mod) -> int:
    return relaxpack.build(mod, opt_level=0).kernel_call_count()
