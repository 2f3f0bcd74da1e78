"""Pictures of memory plans (packager/plan_plot.py): SVG with one rectangle per buffer."""

import xml.etree.ElementTree as ET

import onnx
import pytest

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.packager.plan_plot import plan_of, plan_svg, plot_plan
from relaxpack.runtime import load
from relaxpack.runtime.memory import Buffer, plan_memory

SVG = "{http://www.w3.org/2000/svg}"
EPS = 1e-6


def rects(svg: str) -> dict:
    """Buffer name -> (x0, x1, y0, y1) of its rectangle; every rect must be a buffer's."""
    root = ET.fromstring(svg)
    out = {}
    for r in root.iter(SVG + "rect"):
        assert r.get("class") == "buffer" and r.get("id", "").startswith("buffer-")
        x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
        assert w > 0 and h >= 0
        out[r.get("id")[len("buffer-"):]] = (x, x + w, y, y + h)
    return out


def assert_picture_of(buffers, offsets, svg):
    boxes = rects(svg)
    assert sorted(boxes) == sorted(b.name for b in buffers)       # one rect per buffer
    for i, a in enumerate(buffers):
        for b in buffers[i + 1:]:
            if not a.size or not b.size:
                continue
            (ax0, ax1, ay0, ay1), (bx0, bx1, by0, by1) = boxes[a.name], boxes[b.name]
            time_overlap = ax0 < bx1 - EPS and bx0 < ax1 - EPS
            assert time_overlap == a.live_with(b), (a, b)             # x is the lifetime
            if a.live_with(b):                                         # live together: apart in y
                assert ay1 <= by0 + EPS or by1 <= ay0 + EPS, (a, b, boxes[a.name], boxes[b.name])


def exe_of(model, dims=None):
    return relaxpack.build(relaxpack.from_onnx(model, dims=dims))


def test_a_hand_made_plan():
    buffers = [Buffer("a", 100, 0, 2), Buffer("b", 64, 1, 3), Buffer("c", 300, 3, 5), Buffer("d", 0, 4, 4),
               Buffer("e", 64, 4, 6)]
    offsets = plan_memory(buffers).offsets
    svg = plan_svg(buffers, offsets, "five buffers & a <title>")
    assert_picture_of(buffers, offsets, svg)
    root = ET.fromstring(svg)
    assert root.find(SVG + "title").text == "five buffers & a <title>"
    dashed = [line for line in root.iter(SVG + "line") if line.get("stroke-dasharray")]
    assert len(dashed) == 1 and dashed[0].get("class") == "lower-bound"


def test_pools_are_drawn_in_bands_of_their_own():
    buffers = [Buffer("a", 512, 0, 3, "fast"), Buffer("b", 256, 1, 2), Buffer("c", 512, 2, 4, "fast"),
               Buffer("d", 1024, 3, 5)]
    plan = plan_memory(buffers, pools={"fast": 1024})
    svg = plan_svg(buffers, plan.offsets, "two pools")
    assert_picture_of(buffers, plan.offsets, svg)
    assert "pool fast" in svg and "pool global" in svg
    dashed = [line for line in ET.fromstring(svg).iter(SVG + "line") if line.get("class") == "lower-bound"]
    assert len(dashed) == 2


def test_spec_entries_and_offset_lists_are_accepted():
    svg = plan_svg([(64, 0, 1), (64, 1, 2, "global")], [0, 64])
    assert sorted(rects(svg)) == ["0", "1"]


@pytest.mark.parametrize("case", ["small_cnn", "transformer", "inception_v1"])
def test_plans_of_models_at_their_bounds(case):
    if case == "small_cnn":
        exe = exe_of(small_cnn(), {"batch": (1, 8)})
    elif case == "transformer":
        exe = exe_of(transformer_block_onnx(), {"batch": (1, 4), "seq": (1, 128)})
    else:
        exe = exe_of(f"{onnx.__path__[0]}/backend/test/data/light/light_inception_v1.onnx")
    layout = plan_of(exe)
    figures, built = layout.figures, exe.metadata["memory_plan"]
    assert figures["buffers"] == built["buffers"] == len(layout.buffers)
    assert figures["lower_bound_bytes"] == built["lower_bound_bytes"]
    assert figures["arena_bytes"] == built["arena_bytes"]
    svg = plan_svg(layout.buffers, layout.offsets, case, labels=layout.labels)
    assert_picture_of(layout.buffers, layout.offsets, svg)
    # the lower-bound line is inside the arena: no rectangle is drawn above the arena's top
    root = ET.fromstring(svg)
    line_y = float(next(root.iter(SVG + "line")).get("y1"))
    assert min(y0 for _, _, y0, _ in rects(svg).values()) <= line_y + EPS
    titles = " ".join(r.find(SVG + "title").text for r in root.iter(SVG + "rect"))
    assert ("nn.attention" if case == "transformer" else "nn.conv") in titles


def test_plans_at_given_dims_and_after_loading(tmp_path):
    exe = exe_of(transformer_block_onnx(), {"batch": (1, 4), "seq": (1, 128)})
    small = plan_of(exe, {"batch": 1, "seq": 7})
    assert small.figures["dims"] == {"batch": 1, "seq": 7}
    assert small.figures["arena_bytes"] < plan_of(exe).figures["arena_bytes"] / 10
    assert_picture_of(small.buffers, small.offsets, plan_svg(small.buffers, small.offsets))
    exe.save(tmp_path / "m.rpk")
    loaded = plan_of(load(tmp_path / "m.rpk"), {"batch": 1, "seq": 7})
    assert [b.size for b in loaded.buffers] == [b.size for b in small.buffers]
    assert loaded.offsets == small.offsets


def test_plot_plan_writes_a_file(tmp_path):
    exe = exe_of(small_cnn(), {"batch": (1, 2)})
    layout = plot_plan(exe, tmp_path / "plan.svg")
    text = (tmp_path / "plan.svg").read_text()
    assert_picture_of(layout.buffers, layout.offsets, text)
    assert "batch=2" in ET.fromstring(text).find(SVG + "title").text


def test_dims_without_a_bound_need_a_value():
    exe = exe_of(small_cnn())
    with pytest.raises(RelaxpackError, match="'batch' has no upper bound"):
        plan_of(exe)
    assert plan_of(exe, {"batch": 3}).figures["dims"] == {"batch": 3}
    with pytest.raises(RelaxpackError, match="no dim"):
        plan_of(exe, {"batch": 3, "nope": 1})
    bounded = exe_of(small_cnn(), {"batch": (1, 8)})
    with pytest.raises(RelaxpackError, match="outside its range"):
        plan_of(bounded, {"batch": 9})


def test_a_function_without_planned_buffers_gives_an_empty_picture():
    from relaxpack.ir import parse
    mod = parse("""
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        y: R.Tensor((4,), "float32") = R.exp(x)
        return y
""")
    layout = plan_of(relaxpack.build(mod))
    assert layout.buffers == [] and layout.figures["arena_bytes"] == 0
    svg = plan_svg(layout.buffers, layout.offsets, "nothing")
    assert rects(svg) == {} and "no planned buffers" in svg


def test_the_overlap_check_sees_a_bad_plan():
    buffers = [Buffer("a", 128, 0, 2), Buffer("b", 128, 1, 3)]
    with pytest.raises(AssertionError):
        assert_picture_of(buffers, {"a": 0, "b": 64}, plan_svg(buffers, {"a": 0, "b": 64}))
