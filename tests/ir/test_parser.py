"""The parser on hand-written texts, its error messages, and round-trip
properties over generated names, spans, constants and attributes."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxpack.errors import ParseError
from relaxpack.ir import (
    BlockBuilder, Constant, DataflowVar, Function, IRModule, SeqExpr, ShapeExpr, TensorStructInfo,
    Var, parse, sym,
)
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ops import make_call

batch, seq, n = sym("batch"), sym("seq"), sym("n")


def module_text(body: str, params: str = 'x: R.Tensor(("n", 4), "float32")',
                ret: str = 'R.Tensor(("n", 4), "float32")', deco: str = "@R.function") -> str:
    lines = ["@I.ir_module", "class Module:", f"    {deco}", f"    def main({params}) -> {ret}:"]
    lines += ["        " + line for line in body.strip("\n").splitlines()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------- golden text
def test_golden_text():
    x = Var("x", TensorStructInfo((n, 4), "float32"))
    bb = BlockBuilder()
    bb.analyzer.set_range("n", 1, 64)
    with bb.function("main", [x], attrs={"Primitive": True}):
        with bb.dataflow():
            with bb.span("/Exp"):
                lv = bb.emit(make_call("exp", x))
            gv = bb.emit_output(make_call("add", lv, Constant(np.array([0.5, 1.0, 2.0, -1.0], "float32"))))
        bb.emit_func_output(gv)
    assert bb.get().script() == '''\
# relaxpack IR (read it back with relaxpack.ir.parse)
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("n", 4), "float32")) -> R.Tensor(("n", 4), "float32"):
        n = T.int64(lower=1, upper=64)
        R.func_attr({"Primitive": True})
        with R.dataflow():
            lv: R.Tensor(("n", 4), "float32") = R.exp(x)  # span: /Exp
            gv: R.Tensor(("n", 4), "float32") = R.add(lv, R.const([0.5, 1.0, 2.0, -1.0], "float32"))
            R.output(gv)
        return gv
'''


# --------------------------------------------------------------------- hand-written texts
def test_hand_written_text_matches_the_built_module():
    text = '''
# from relaxpack.ir import I, R, T
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("batch", "seq", 64), "float32"), w: R.Tensor((64, 64), "float32")) -> R.Tensor(("batch", "seq * 64"), "float32"):
        batch = T.int64()
        seq = T.int64(lower=1, upper=512)
        with R.dataflow():
            lv0 = R.matmul(x, w)                                   # span: /layer0/MatMul
            lv1 = R.add(lv0, R.const([0.5], "float32"))
            lv2 = R.nn.softmax(R.exp(lv1))
            gv = R.reshape(lv2, R.shape([batch, seq * 64]))
            R.output(gv)
        return gv
'''
    x = Var("x", TensorStructInfo((batch, seq, 64), "float32"))
    w = Var("w", TensorStructInfo((64, 64), "float32"))
    bb = BlockBuilder()
    bb.analyzer.set_range("seq", 1, 512)
    with bb.function("main", [x, w]):
        with bb.dataflow():
            lv0 = bb.emit(make_call("matmul", x, w))
            lv1 = bb.emit(make_call("add", lv0, Constant(np.array([0.5], "float32"))))
            e = bb.emit(make_call("exp", lv1))
            lv2 = bb.emit(make_call("nn.softmax", e))
            gv = bb.emit_output(make_call("reshape", lv2, ShapeExpr((batch, seq * 64))))
        bb.emit_func_output(gv)
    mod = parse(text)
    assert_structural_equal(mod, bb.get())
    first = mod["main"].body.blocks[0].bindings[0]
    assert first.span.sources == ("/layer0/MatMul",)
    assert isinstance(first.var, DataflowVar) and first.var.name_hint == "lv0"


def test_lenient_spellings():
    text = module_text('''
"""a docstring"""
n = T.int64()
y: R.Tensor = R.exp(x)
z: R.Object() = R.str("s")
s: R.Shape = R.shape([n, 4])
t: R.Tensor(shape=("n", 4), dtype="float32") = R.negative(x, )
return t
''', params='x: R.Tensor(("n", 4), "float32")', deco="@R.function(pure=True)")
    text = "import numpy\n" + text
    func = parse(text)["main"]
    assert func.body.blocks[0].bindings[0].var.struct_info == TensorStructInfo()
    assert func.body.blocks[0].bindings[3].var.struct_info == TensorStructInfo((n, 4), "float32")


def test_op_attribute_defaults_are_filled_in():
    text = module_text("y = R.nn.softmax(x)\nreturn y")
    call = parse(text)["main"].body.blocks[0].bindings[0].value
    assert dict(call.attrs) == {"axis": -1}


def test_unannotated_binding_gets_the_inferred_struct_info():
    text = module_text("y = R.matmul(x, R.const([[1.0], [2.0], [3.0], [4.0]], \"float32\"))\nreturn y",
                       ret='R.Tensor(("n", 1), "float32")')
    y = parse(text)["main"].body.blocks[0].bindings[0].var
    assert y.struct_info == TensorStructInfo((n, 1), "float32")


def test_dim_declarations_need_not_cover_struct_info_strings():
    text = module_text('y: R.Tensor(("n", 4), "float32") = R.exp(x)\nreturn y')
    mod = parse(text)
    assert "dim_ranges" not in mod["main"].attrs
    assert "        n = T.int64()\n" in mod.script()     # the printer declares every dim it uses


# --------------------------------------------------------------------- errors
ERRORS = [
    ("syntax", "@I.ir_module\nclass Module:\n    def main(:\n", r"^line 3: invalid syntax"),
    ("unknown op", module_text("y = R.fooo(x)\nreturn y"), r"^line 5: unknown op R\.fooo$"),
    ("undefined var", module_text("y = R.exp(q)\nreturn y"), r"^line 5: undefined var 'q'$"),
    ("bad struct info", module_text("y: R.Tensr((1,)) = R.exp(x)\nreturn y"),
     r"^line 5: expected struct info \(R\.Tensor.*got R\.Tensr\(\(1,\)\)"),
    ("bad dtype", module_text('y: R.Tensor((1,), "float33") = R.exp(x)\nreturn y'), r"^line 5: unknown dtype 'float33'"),
    ("bad dim string", module_text('y: R.Tensor(("n +",), "float32") = R.exp(x)\nreturn y'),
     r"^line 5: cannot parse dim 'n \+'"),
    ("undeclared dim", module_text("s = R.shape([n, 4])\nreturn x"), r"^line 5: undefined symbolic dim 'n'"),
    ("dim used as var", module_text("n = T.int64()\ny = R.exp(n)\nreturn y"), r"^line 6: 'n' is a symbolic dim"),
    ("missing return", module_text("y = R.exp(x)"), r"^line 5: function 'main' must end with `return <expr>`"),
    ("return not last", module_text("return x\nreturn x"), r"^line 5: `return` must be the last statement"),
    ("output of unbound", module_text("with R.dataflow():\n    y = R.exp(x)\n    R.output(z)\nreturn y"),
     r"^line 7: R\.output names 'z', which this dataflow block does not bind"),
    ("dataflow var escapes", module_text("with R.dataflow():\n    y = R.exp(x)\nreturn y"),
     r"^line 7: undefined var 'y'"),
    ("impure in dataflow", module_text('with R.dataflow():\n    y = R.call_packed("f", x)\n    R.output(y)\nreturn x'),
     r"^line 6: impure call R\.call_packed inside a dataflow block"),
    ("shape error", module_text('y = R.add(x, R.const([1.0, 2.0, 3.0], "float32"))\nreturn y'), r"^line 5: .*add"),
    ("unknown attribute", module_text("y = R.nn.softmax(x, axs=1)\nreturn y"),
     r"^line 5: R\.nn\.softmax has no attribute\(s\) \['axs'\]"),
    ("const without dtype", module_text("y = R.add(x, R.const([1.0]))\nreturn y"), r"^line 5: R\.const needs a dtype"),
    ("float in int const", module_text('y = R.const([1.5], "int32")\nreturn x'), r"^line 5: 1\.5 is not a valid int"),
    ("ragged const", module_text('y = R.const([[1.0], [1.0, 2.0]], "float32")\nreturn x'),
     r"^line 5: bad constant of dtype float32"),
    ("if without else", module_text("if x:\n    y = x\nreturn x"), r"^line 5: an `if` needs an `else` branch"),
    ("if different names", module_text("if x:\n    y = x\nelse:\n    z = x\nreturn x"),
     r"^line 8: both branches must assign the same var"),
    ("bare string", module_text('y = R.call_tir(x, "k", out_sinfo=R.Tensor((1,), "float32"))\nreturn y'),
     r'^line 5: a string is not an expression here; write R\.str\("k"\)'),
    ("defined twice", module_text("y = R.exp(x)\ny = R.exp(x)\nreturn y"), r"^line 6: var 'y' is defined twice"),
    ("reserved name", module_text("cls = R.exp(x)\nreturn x"), r"^line 5: 'cls' is a reserved name"),
    ("dim not at top", module_text("with R.dataflow():\n    n = T.int64()\nreturn x"),
     r"^line 6: declare symbolic dims and function attributes at the top"),
    ("nested dataflow", module_text("with R.dataflow():\n    with R.dataflow():\n        pass\nreturn x"),
     r"^line 6: dataflow blocks cannot be nested"),
    ("unknown function", module_text("y = cls.nope(x)\nreturn y"), r"^line 5: the module has no function 'nope'"),
    ("bad span", module_text("y = R.exp(x)  # span: [1, 2]\nreturn y"), r"^line 5: bad span comment"),
    ("no return annotation", module_text("return x").replace(' -> R.Tensor(("n", 4), "float32")', ""),
     r"^line 4: function 'main' needs a return annotation"),
    ("no param annotation", module_text("return x", params="x"), r"^line 4: parameter 'x' needs a struct info"),
    ("no decorator", module_text("return x", deco="@R.func"), r"^line 3: function 'main' must be decorated"),
    ("bad metadata", module_text('return R.const(metadata["c0"])') + 'metadata = {"c0": R.tensor_data("float32", (2,), "AAAA")}\n',
     r'^line 6: bad data for metadata\[\'c0\'\]: 3 bytes of data for shape \(2,\)'),
    ("two classes", "@I.ir_module\nclass A:\n    pass\n@I.ir_module\nclass B:\n    pass\n",
     r"^line 5: expected one @I.ir_module class, found 2"),
    ("stray statement", "x = 1\n", r"^line 1: expected a module class"),
    ("match_cast in expr", module_text('y = R.exp(R.match_cast(x, R.Tensor(ndim=2)))\nreturn y'),
     r"^line 5: R\.match_cast\(\.\.\.\) is not allowed here"),
    ("wrong sinfo keyword", module_text('y = R.call_tir("k", (x,), sinfo_args=R.Tensor((1,), "float32"))\nreturn y'),
     r"^line 5: R\.call_tir takes out_sinfo=, not sinfo_args="),
    ("negative index", module_text("y = x[-1]\nreturn y"), r"^line 5: a tuple index must be a non-negative"),
    ("func_attr twice", module_text('R.func_attr({})\nR.func_attr({"a": 1})\nreturn x'),
     r"^line 6: write the function attributes once"),
    ("dim_ranges twice", module_text('R.func_attr({"dim_ranges": (("n", 1, 2),)})\nn = T.int64(lower=1)\nreturn x'),
     r"^line 4: dim_ranges is given both"),
    ("bad range", module_text("n = T.int64(lower=5, upper=2)\nreturn x"), r"^line 4: empty range for 'n': 5 > 2"),
    ("index out of range", module_text("t = (x,)\ny = t[3]\nreturn y"), r"^line 6: tuple index 3 out of range"),
]


@pytest.mark.parametrize("text, pattern", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_parse_errors(text, pattern):
    with pytest.raises(ParseError, match=pattern):
        parse(text)


def test_parse_rejects_non_text():
    with pytest.raises(ParseError, match="parse expects a str"):
        parse(b"@I.ir_module")
    with pytest.raises(ParseError):
        parse("x = 1\0\n")


# --------------------------------------------------------------------- properties
def chain_module(hints, sources):
    x = Var("x", TensorStructInfo((n, 2), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            cur = x
            for hint in hints:
                with bb.span(*sources):
                    cur = bb.emit(make_call("exp", cur), hint)
            gv = bb.emit_output(cur, hints[0])
        bb.emit_func_output(gv)
    return bb.get()


def check_round_trip(mod):
    text = mod.script()
    back = parse(text)
    assert_structural_equal(back, mod)
    assert back.script() == text
    return back


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=8), min_size=1, max_size=5), st.lists(st.text(max_size=10), max_size=3))
def test_any_names_and_span_sources_round_trip(hints, sources):
    back = check_round_trip(chain_module(hints, sources))
    assert back["main"].body.blocks[0].bindings[0].span.sources == tuple(sources)


float_arrays = st.sampled_from(["float16", "float32", "float64"]).flatmap(
    lambda dtype: st.lists(st.floats(width=16 if dtype == "float16" else 32 if dtype == "float32" else 64),
                           min_size=0, max_size=20).map(lambda v: np.array(v, dtype=dtype)))


@settings(max_examples=80, deadline=None)
@given(float_arrays)
def test_float_constants_round_trip_bit_exactly(data):
    bb = BlockBuilder()
    with bb.function("main", []):
        bb.emit_func_output(bb.emit(Constant(data), "c"))
    back = check_round_trip(bb.get())
    got = back["main"].body.blocks[0].bindings[0].value.data
    assert got.dtype == data.dtype and got.shape == data.shape and got.tobytes() == data.tobytes()


attr_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=8)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True), attr_values, max_size=4))
def test_function_attributes_round_trip(attrs):
    attrs.pop("dim_ranges", None)
    x = Var("x", TensorStructInfo((2,), "float32"))
    func = Function((x,), SeqExpr((), x), x.struct_info, attrs=attrs)
    back = check_round_trip(IRModule({"main": func}))
    assert _same_attrs(back["main"].attrs, func.attrs)


def _same_attrs(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, (tuple, list)) or hasattr(a, "items"):
        items_a = list(a.items()) if hasattr(a, "items") else list(a)
        items_b = list(b.items()) if hasattr(b, "items") else list(b)
        return type(a) is type(b) and len(items_a) == len(items_b) and all(
            _same_attrs(x, y) for x, y in zip(items_a, items_b))
    return type(a) is type(b) and a == b
