import pytest

from relaxpack.errors import PassError
from relaxpack.ir import BlockBuilder, Op, TensorStructInfo, Var, sym
from relaxpack.ir.equality import structural_equal
from relaxpack.ir.visitor import ExprMutator
from relaxpack.ops import make_call
from relaxpack.passes import (
    DumpIR, PassContext, PassTiming, PrintAfter, Sequential, function_pass, module_pass,
)

n = sym("n")


def exp_module():
    x = Var("x", TensorStructInfo((n, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.emit(make_call("exp", x))
            gv = bb.emit_output(make_call("exp", lv))
        bb.emit_func_output(gv)
    return bb.get()


class ExpToSigmoid(ExprMutator):
    def visit_call_(self, call):
        call = super().visit_call_(call)
        if call.op is Op.get("exp"):
            return make_call("sigmoid", *call.args)
        return call


@function_pass(name="ExpToSigmoid", opt_level=1)
def exp_to_sigmoid(func, mod, ctx):
    return ExpToSigmoid().visit_expr(func)


@function_pass(name="Nothing")
def nothing(func, mod, ctx):
    return func


def op_names(mod):
    return [b.value.op.name for b in mod["main"].body.blocks[0].bindings]


def test_function_pass_rewrites_and_keeps_unchanged_modules():
    mod = exp_module()
    assert nothing(mod) is mod
    out = exp_to_sigmoid(mod)
    assert op_names(out) == ["sigmoid", "sigmoid"]
    assert op_names(mod) == ["exp", "exp"]


def test_opt_level_and_disabled_passes_gate_running():
    mod = exp_module()
    with PassContext(opt_level=0):
        assert exp_to_sigmoid(mod) is mod
    with PassContext(opt_level=2, disabled_passes=["ExpToSigmoid"]):
        assert exp_to_sigmoid(mod) is mod


def test_sequential_runs_in_order_and_records_history():
    with PassContext() as ctx:
        out = Sequential([nothing, exp_to_sigmoid, nothing])(exp_module())
    assert ctx.history == ["Nothing", "ExpToSigmoid", "Nothing"]
    assert op_names(out) == ["sigmoid", "sigmoid"]


def test_timing_and_print_after():
    timing, printer = PassTiming(), PrintAfter(["ExpToSigmoid"])
    with PassContext(instruments=[timing, printer]):
        Sequential([nothing, exp_to_sigmoid])(exp_module())
    assert [name for name, _ in timing.timings] == ["Nothing", "ExpToSigmoid"]
    assert "total" in timing.render()
    assert len(printer.texts) == 1 and "R.sigmoid" in printer.texts[0][1]


def test_dump_ir_writes_one_file_per_pass(tmp_path):
    with PassContext(instruments=[DumpIR(tmp_path)]):
        Sequential([nothing, exp_to_sigmoid])(exp_module())
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["000_input.py", "001_Nothing.py", "002_ExpToSigmoid.py"]
    assert "R.sigmoid" in (tmp_path / "002_ExpToSigmoid.py").read_text()
    assert "R.sigmoid" not in (tmp_path / "000_input.py").read_text()


def test_well_formed_check_names_the_passes_that_ran():
    @module_pass(name="BreakIt")
    def break_it(mod, ctx):
        func = mod["main"]
        block = func.body.blocks[0]
        # drop the first binding: its var is then used without a definition
        broken = func.replace(body=func.body.replace(blocks=(block.replace(bindings=block.bindings[1:]),)))
        return mod.with_function("main", broken)

    with PassContext(check_well_formed=True):
        with pytest.raises(PassError) as err:
            Sequential([nothing, break_it])(exp_module())
    text = str(err.value)
    assert "after pass BreakIt" in text and "Nothing, BreakIt" in text and "before its definition" in text


def test_stage_requirements():
    @module_pass(name="Lowering", requires=["import", "optimize"], produces="lower")
    def lowering(mod, ctx):
        return mod

    mod = exp_module()
    lowered = lowering(mod)
    assert lowered.stage == "lower" and mod.stage == "import"
    with pytest.raises(PassError, match="needs a module at stage import/optimize"):
        lowering(lowered)
    with pytest.raises(PassError, match="unknown stage"):
        module_pass(name="Bad", produces="nowhere")(lambda mod, ctx: mod)


def test_pass_must_return_a_module():
    @module_pass(name="Broken")
    def broken(mod, ctx):
        return None

    with pytest.raises(PassError, match="returned a NoneType"):
        broken(exp_module())


def test_mutator_renames_vars_whose_struct_info_changes():
    class ExpToCastInt(ExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.op is Op.get("exp"):
                return make_call("astype", *call.args, dtype="float16")
            return call

    x = Var("x", TensorStructInfo((n, 4), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            lv = bb.emit(make_call("exp", x))
            gv = bb.emit_output(make_call("negative", lv))
        bb.emit_func_output(gv)
    mod = bb.get()
    new = ExpToCastInt().visit_expr(mod["main"])
    bindings = new.body.blocks[0].bindings
    assert bindings[0].var.struct_info.dtype == "float16"
    assert bindings[1].value.args[0] is bindings[0].var
    assert not structural_equal(new, mod["main"])
