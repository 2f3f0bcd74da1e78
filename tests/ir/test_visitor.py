from relaxpack.examples import transformer_block
from relaxpack.ir import Op
from relaxpack.ir.visitor import ExprMutator, ExprVisitor


class CountOps(ExprVisitor):
    def __init__(self):
        self.ops = {}
        self.defs = 0

    def visit_call_(self, call):
        name = call.op.name
        self.ops[name] = self.ops.get(name, 0) + 1
        super().visit_call_(call)

    def visit_var_def(self, var):
        self.defs += 1


def test_visitor_sees_every_call_and_definition():
    mod = transformer_block()
    counter = CountOps()
    counter.visit_expr(mod["main"])
    assert counter.ops["matmul"] == 8      # q, k, v, scores, context, o, ff1, ff2
    assert counter.ops["nn.layer_norm"] == 2
    assert counter.ops["nn.softmax"] == 1
    bindings = sum(len(b.bindings) for b in mod["main"].body.blocks)
    assert counter.defs == bindings + 1    # + the parameter


def test_identity_mutator_returns_the_same_function():
    func = transformer_block()["main"]
    assert ExprMutator().visit_expr(func) is func


def test_mutator_rewrite_keeps_untouched_bindings():
    class ReluToGelu(ExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            return call.replace(op=Op.get("nn.gelu")) if call.op is Op.get("nn.relu") else call

    func = transformer_block()["main"]
    new = ReluToGelu().visit_expr(func)
    old_b, new_b = func.body.blocks[0].bindings, new.body.blocks[0].bindings
    assert new is not func
    changed = [i for i, (a, b) in enumerate(zip(old_b, new_b)) if a is not b]
    assert len(changed) == 1 and new_b[changed[0]].value.op.name == "nn.gelu"
