"""The one liveness model (passes/analysis/liveness.py): kill points through
aliases, in-place reuse of a dying input, workspaces, and its peak."""

from relaxpack.ir import parse
from relaxpack.passes.analysis.liveness import Liveness

from .helpers import program

CHAIN = program('x: R.Tensor((4, 256), "float32")', '(4, 256)', '''
a: R.Tensor((4, 256), "float32") = R.exp(x)
t: R.Tuple(R.Tensor((4, 256), "float32"), R.Tensor((4, 256), "float32")) = (a, x)
b: R.Tensor((4, 256), "float32") = R.abs(x)
u: R.Tensor((4, 256), "float32") = t[0]
c: R.Tensor((4, 256), "float32") = R.add(u, b)
d: R.Tensor((4, 256), "float32") = R.negative(c)
return d
''', dims=())


def test_a_buffer_dies_at_its_last_reader_through_aliases():
    lv = Liveness(parse(CHAIN)["main"])
    a, b, c, d = lv.buffers
    assert (a.alloc, a.last) == (0, 4)          # read through the tuple and its item, by c
    assert (b.alloc, b.last) == (2, 4)
    assert (c.alloc, c.last) == (4, 5)
    assert d.size == 0                           # the result is not counted
    assert lv.kill_points() == {4: [0, 1], 5: [2]}


def test_an_elementwise_binding_writes_over_an_input_dying_there():
    lv = Liveness(parse(CHAIN)["main"])
    assert lv.in_place_reuse() == {2: 0}         # c takes a's bytes (the first dying candidate)
    # a and b live together (8 KB); c reuses a's bytes, so the peak stays there
    assert lv.peak() == 2 * 4096


def test_a_workspace_is_live_at_its_binding_alone():
    text = program('x: R.Tensor((1, 8, 16, 16), "float32"), w: R.Tensor((8, 8, 3, 3), "float32")', '(1, 8, 16, 16)', '''
y: R.Tensor((1, 8, 16, 16), "float32") = R.nn.conv(x, w, padding=(1, 1, 1, 1))
z: R.Tensor((1, 8, 16, 16), "float32") = R.nn.relu(y)
return z
''', dims=())
    lv = Liveness(parse(text)["main"])
    assert list(lv.scratch) == [0] and lv.scratch[0] > 0
    assert lv.peak() == lv.buffers[0].size + lv.scratch[0]


def test_the_model_reads_the_ir_as_codegen_emits_it():
    # a tuple output is a buffer per field; an item of it reads nothing (its reader does);
    # a reshape of memory the function allocated is a view of it, not a buffer
    text = program('x: R.Tensor((4, 256), "float32")', '(1024,)', '''
s: R.Tuple(R.Tensor((2, 256), "float32"), R.Tensor((2, 256), "float32")) = R.call_tir("split", (x,), kernel_attrs=(("indices_or_sections", 2), ("axis", 0)), out_sinfo=[R.Tensor((2, 256), "float32"), R.Tensor((2, 256), "float32")])
a: R.Tensor((2, 256), "float32") = s[0]
b: R.Tensor((2, 256), "float32") = s[1]
e: R.Tensor((2, 256), "float32") = R.call_tir("exp", (a,), kernel_attrs=None, out_sinfo=R.Tensor((2, 256), "float32"))
f: R.Tensor((2, 256), "float32") = R.call_tir("add", (e, b), kernel_attrs=None, out_sinfo=R.Tensor((2, 256), "float32"))
r: R.Tensor((512,), "float32") = R.call_tir("reshape", (f, R.shape([512])), kernel_attrs=None, out_sinfo=R.Tensor((512,), "float32"))
g: R.Tensor((1024,), "float32") = R.call_tir("concat", ((r, r),), kernel_attrs=(("axis", 0),), out_sinfo=R.Tensor((1024,), "float32"))
return g
''', dims=())
    lv = Liveness(parse(text)["main"])
    s0, s1, e, f, g = lv.buffers
    assert (s0.last, s1.last) == (3, 4)         # each field dies at its own reader
    assert (f.alloc, f.last) == (4, 6)          # read through the view r by g
    assert [b.path for b in lv.buffers[:2]] == [(0,), (1,)]
    assert lv.in_place_reuse() == {2: 0, 3: 2}  # e over s[0]; f over e (b is another candidate)
