"""Pictures of memory plans: every buffer a rectangle over time and address, in SVG.

x is the instruction index (a buffer spans its lifetime, both ends
included), y the byte offset in its arena (offset 0 at the bottom; several
pools are stacked, each in its own band). The dashed line is the lower
bound: the most bytes live at one instruction, which no plan can beat. A
buffer's colour says which kernel writes it (the legend under the plot
names them; kernel scratch has a colour of its own) and the largest buffers
carry their name, kernel and size. The SVG is plain text built with the
standard library: open it in a browser (hovering a rectangle shows the
buffer, its size and lifetime).

>>> layout = plan_of(exe)                                           # doctest: +SKIP
>>> svg = plan_svg(layout.buffers, layout.offsets, "main", labels=layout.labels)  # doctest: +SKIP
>>> plot_plan(exe, "plan.svg")                                      # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Sequence
from xml.sax.saxutils import escape, quoteattr

from ..errors import RelaxpackError
from ..runtime.bytecode import IMM, REG, Call
from ..runtime.memory import (
    ALIGNMENT, DEFAULT_ALGORITHMS, Buffer, align_up, lower_bound, naive_bytes, plan_memory,
)
from ..runtime.safe_write import write_file
from ..runtime.shape_program import compile_program

WIDTH, PLOT_HEIGHT = 960, 420
LEFT, RIGHT, TOP, BOTTOM = 84, 24, 56, 44
POOL_GAP = 24
_PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f")
_OTHER, _SCRATCH = "#bab0ac", "#d3d3d3"     # kernels past the palette's; kernel workspaces
LABELED = 6                                 # the largest buffers get a label even where it does not fit
LEGEND_ROW, LEGEND_COLUMNS = 16, 3


# ---------------------------------------------------------------- the plan of an executable
@dataclass
class PlanLayout:
    """A memory plan: the buffers (named by their index in the ``plan_arena``
    spec), their offsets in their pool's arena, what writes each buffer
    (``labels``, kernel names) and the figures: ``arena_bytes``,
    ``lower_bound_bytes``, ``naive_bytes`` (these buffers without sharing;
    the build's figure also counts each tensor written in place over
    another), ``buffers``, ``algorithm``, ``pool_sizes`` and ``dims`` (the
    dim values the sizes were taken at)."""

    buffers: list[Buffer]
    offsets: dict[str, int]
    figures: dict
    labels: dict[str, str] = field(default_factory=dict)


def plan_of(exe, shape_env: Mapping[str, int] | None = None, function: str = "main",
            algorithms: Sequence[str] = DEFAULT_ALGORITHMS) -> PlanLayout:
    """Re-plan ``function`` of ``exe`` from its ``vm.builtin.plan_arena`` instruction.

    Dims take their value from ``shape_env`` or else their upper bound; a dim
    with neither is an error. With the default ``algorithms`` (the
    compiler's) and the bounds, the arena is the one in
    ``exe.metadata["memory_plan"]``; the VM plans each concrete shape with
    ``relaxpack.runtime.arena.RUNTIME_ALGORITHMS``. A function without
    planned buffers gives an empty layout.

    >>> plan_of(exe, {"seq": 128}).figures["arena_bytes"]           # doctest: +SKIP
    """
    fn = exe.function(function)
    names = [f.name if f.kind == "builtin" else "" for f in exe.func_table]
    at = next((pc for pc, ins in enumerate(fn.instructions)
               if isinstance(ins, Call) and names[ins.func] == "vm.builtin.plan_arena"), None)
    if at is None:
        return PlanLayout([], {}, _figures([], {}, None, {}))
    spec, caps, heap_size = _plan_operands(fn.instructions[at])
    dims = _dim_values(fn.instructions[:at], names, dict(shape_env or {}), function)
    heap = [0] * max(heap_size, 1)
    for slot, (name, value) in dims.items():
        heap[slot] = value
    buffers = [Buffer(str(i), max(int(compile_program(prog, len(heap))(heap)), 0), start, end, str(pool))
               for i, (prog, start, end, pool) in enumerate(spec)]
    plan = plan_memory(buffers, ALIGNMENT, pools=caps, algorithms=algorithms) if buffers else None
    if plan:  # a buffer a bounded pool cannot hold lives in "global"
        buffers = [dataclasses.replace(b, pool=plan.pool_of.get(b.name, b.pool)) for b in buffers]
    offsets = dict(plan.offsets) if plan else {}
    values = {name: value for name, value in dims.values()}
    return PlanLayout(buffers, offsets, _figures(buffers, offsets, plan, values),
                      _labels(fn.instructions, exe.func_table, len(spec)))


def _plan_operands(ins) -> tuple[list, dict, int]:
    """The buffers' spec, the pools' bounds and the heap size of a plan_arena call
    (``spec, heap_size, heap`` or, with bounded pools, ``spec, caps, heap_size, heap``)."""
    imms = [value for kind, value in ins.args if kind == IMM]
    spec, heap_size = imms[0], imms[-1]
    caps = {name: cap for name, cap in imms[1]} if len(imms) == 3 else {}
    return list(spec), caps, heap_size


def _dim_values(entry, names, env: dict, function: str) -> dict[int, tuple[str, int]]:
    """Heap slot -> (dim name, value) for every dim the inputs store."""
    out: dict[int, tuple[str, int]] = {}
    for ins in entry:
        if not isinstance(ins, Call) or names[ins.func] != "vm.builtin.match_shape":
            continue
        for item in ins.args[0][1]:
            if isinstance(item, (list, tuple)) and len(item) == 5 and item[0] == "store":
                _, slot, name, lo, hi = item
                value = env.get(name, hi)
                if value is None:
                    raise RelaxpackError(f"{function}: dim {name!r} has no upper bound; give its value to picture "
                                         f"the plan (--dim {name}=N, or shape_env={{{name!r}: N}})")
                if isinstance(value, bool) or not isinstance(value, int) or value < (lo or 0) \
                        or (hi is not None and value > hi):
                    raise RelaxpackError(f"{function}: dim {name!r} = {value!r} is outside its range "
                                         f"[{lo}, {'inf' if hi is None else hi}]")
                out[slot] = (name, value)
    unknown = sorted(set(env) - {name for name, _ in out.values()})
    if unknown:
        raise RelaxpackError(f"{function} has no dim(s) named {', '.join(map(repr, unknown))}")
    return out


def _labels(instructions, table, count: int) -> dict[str, str]:
    """Buffer name -> the kernels writing it (several when written in place);
    a kernel's workspace is labelled ``"<kernel> workspace"``."""
    regs: dict[int, int] = {}       # register -> buffer index
    for ins in instructions:
        if isinstance(ins, Call) and table[ins.func].name == "vm.builtin.arena_tensor" \
                and table[ins.func].kind == "builtin":
            regs[ins.dst] = ins.args[0][1]
    writers: dict[int, list[str]] = {i: [] for i in range(count)}
    for ins in instructions:
        if not isinstance(ins, Call) or table[ins.func].kind == "builtin":
            continue
        name = table[ins.func].name
        for key, (kind, value) in ins.kwargs:
            label = {"out": name, "workspace": f"{name} workspace"}.get(key)
            if label and kind == REG and value in regs and label not in writers[regs[value]]:
                writers[regs[value]].append(label)
    return {str(i): "+".join(w) for i, w in writers.items() if w}


def _figures(buffers, offsets, plan, dims) -> dict:
    return {"buffers": len(buffers),
            "arena_bytes": plan.arena_bytes if plan else 0,
            "lower_bound_bytes": sum(lower_bound(buffers, ALIGNMENT).values()) if buffers else 0,
            "naive_bytes": naive_bytes(buffers, ALIGNMENT),
            "algorithm": plan.algorithm if plan else None,
            "pool_sizes": dict(plan.pool_sizes) if plan else {},
            "dims": dims}


def plot_plan(exe, path, shape_env: Mapping[str, int] | None = None, function: str = "main",
              title: str | None = None) -> PlanLayout:
    """Write the SVG picture of ``function``'s plan to ``path``; returns the layout."""
    layout = plan_of(exe, shape_env, function)
    dims = ", ".join(f"{k}={v}" for k, v in sorted(layout.figures["dims"].items()))
    title = title or f"{function}: memory plan" + (f" at {dims}" if dims else "")
    write_file(path, [plan_svg(layout.buffers, layout.offsets, title, labels=layout.labels).encode()])
    return layout


# ---------------------------------------------------------------- the picture
def plan_svg(buffers: Sequence, offsets: Mapping[str, int] | Sequence[int], title: str = "memory plan",
             *, labels: Mapping[str, str] | None = None, alignment: int = ALIGNMENT) -> str:
    """An SVG picture of a plan: one ``<rect>`` per buffer, nothing else drawn with rects.

    ``buffers`` are :class:`~relaxpack.runtime.memory.Buffer` s or
    ``(size, start, end[, pool])`` entries like a ``plan_arena`` spec's with
    evaluated sizes (named by index); ``offsets`` maps names to offsets (or
    lists them in order). Rectangles of buffers live at a common instruction
    never overlap when the offsets are a valid plan.

    >>> svg = plan_svg([Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2)], {"a": 0, "b": 64})
    >>> svg.count("<rect ")
    2
    """
    bufs = [b if isinstance(b, Buffer) else Buffer(str(i), *b) for i, b in enumerate(buffers)]
    if not isinstance(offsets, Mapping):
        offsets = {b.name: o for b, o in zip(bufs, offsets)}
    missing = [b.name for b in bufs if b.name not in offsets]
    if missing:
        raise RelaxpackError(f"plan_svg: no offset for buffer(s) {', '.join(missing[:5])}")
    labels = labels or {}
    colors, legend = _colors(bufs, labels)
    largest = {b.name for b in sorted(bufs, key=lambda b: (-b.size, b.name))[:LABELED] if b.size}
    pools = sorted({b.pool for b in bufs}, key=lambda p: (p != "global", p))
    size = {p: max([offsets[b.name] + align_up(b.size, alignment) for b in bufs if b.pool == p] + [1])
            for p in pools}
    bound = lower_bound(bufs, alignment) if bufs else {}
    t0 = min((b.start for b in bufs), default=0)
    t1 = max((b.end + 1 for b in bufs), default=1)
    plot_w = WIDTH - LEFT - RIGHT
    xs = plot_w / max(t1 - t0, 1)
    ys = (PLOT_HEIGHT - POOL_GAP * (len(pools) - 1)) / max(sum(size.values()), 1)
    legend_top = TOP + PLOT_HEIGHT + BOTTOM
    height = legend_top + LEGEND_ROW * -(-len(legend) // LEGEND_COLUMNS) + 8

    def x(t):
        return LEFT + (t - t0) * xs

    band_bottom, y = {}, TOP
    for p in reversed(pools):          # "global" lowest
        y += size[p] * ys
        band_bottom[p] = y
        y += POOL_GAP

    def yy(pool, offset):
        return band_bottom[pool] - offset * ys

    arena = sum(size.values()) if bufs else 0
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
           f'<title>{escape(title)}</title>',
           f'<text x="{LEFT}" y="20" font-size="15" font-weight="bold">{escape(title)}</text>',
           f'<text x="{LEFT}" y="38" fill="#555">{len(bufs)} buffers; arena {_bytes(arena)}, lower bound '
           f'{_bytes(sum(bound.values()))}, without sharing {_bytes(naive_bytes(bufs, alignment))}</text>']
    if not bufs:
        out.append(f'<text x="{LEFT}" y="{TOP + 20}">no planned buffers</text>')
    boxes = {}
    for b in bufs:
        off = offsets[b.name]
        x0, x1 = _r(x(b.start)), _r(x(b.end + 1))
        top, bottom = _r(yy(b.pool, off + b.size)), _r(yy(b.pool, off))
        label = labels.get(b.name, "")
        tip = (f"buffer {b.name}{': ' + label if label else ''}; {_bytes(b.size)} at offset {off}"
               f"{' in ' + b.pool if len(pools) > 1 else ''}; instructions {b.start}..{b.end}")
        out.append(f'<rect class="buffer" id={quoteattr("buffer-" + b.name)} x="{x0}" y="{top}" '
                   f'width="{_r(x1 - x0)}" height="{_r(bottom - top)}" fill="{colors[b.name]}" '
                   f'fill-opacity="0.85" stroke="#333" stroke-width="0.4">'
                   f'<title>{escape(tip)}</title></rect>')
        boxes[b.name] = (x0, x1, top, bottom)
    placed: list[tuple] = []
    for b in sorted(bufs, key=lambda b: (-b.size, b.name)):     # the largest get the free places first
        out += _buffer_label(b, labels.get(b.name, ""), b.name in largest, boxes[b.name], placed)
    for p in pools:
        out += _axes(p, size[p], bound.get(p, 0), band_bottom[p], ys, len(pools) > 1)
    out += _time_axis(t0, t1, x, TOP + PLOT_HEIGHT)
    out += _legend(legend, legend_top)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _category(label: str) -> str:
    """What a buffer's colour stands for: the first kernel writing it, or kernel scratch."""
    first = label.split("+")[0] if label else ""
    return "kernel workspace (scratch)" if first.endswith(" workspace") else (first or "(no writer)")


def _colors(bufs, labels) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Buffer name -> colour, and the legend: (colour, category) with the categories that hold
    the most bytes first; those past the palette share one colour ("other kernels")."""
    total: dict[str, int] = {}
    for b in bufs:
        category = _category(labels.get(b.name, ""))
        total[category] = total.get(category, 0) + b.size
    order = sorted((c for c in total if not c.startswith("kernel workspace")), key=lambda c: (-total[c], c))
    color = {c: _PALETTE[i] for i, c in enumerate(order[:len(_PALETTE)])}
    legend = [(color[c], c) for c in order[:len(_PALETTE)]]
    if len(order) > len(_PALETTE):
        legend.append((_OTHER, f"{len(order) - len(_PALETTE)} other kernels"))
    if any(c.startswith("kernel workspace") for c in total):
        color["kernel workspace (scratch)"] = _SCRATCH
        legend.append((_SCRATCH, "kernel workspace (scratch)"))
    return {b.name: color.get(_category(labels.get(b.name, "")), _OTHER) for b in bufs}, legend


def _buffer_label(b, label: str, large: bool, box, placed: list) -> list[str]:
    """The buffer's name and kernel inside its rectangle where they fit; the largest buffers
    also get their size, above or below the rectangle when the text does not fit inside (where
    no other label is). ``placed`` collects the labels' boxes."""
    x0, x1, top, bottom = box
    text = f"{b.name} {label}".strip() + (f" {_bytes(b.size)}" if large else "")
    width = 6.5 * len(text) + 4
    if x1 - x0 >= width and bottom - top >= 13:
        placed.append(((x0 + x1 - width) / 2, (x0 + x1 + width) / 2, (top + bottom) / 2 - 8, (top + bottom) / 2 + 6))
        return [f'<text class="buffer-label" x="{_r((x0 + x1) / 2)}" y="{_r((top + bottom) / 2 + 4)}" '
                f'text-anchor="middle" pointer-events="none">{escape(text)}</text>']
    if not large:
        return []
    x = min(x0 + 2, WIDTH - RIGHT - width)
    for y in (top - 3, bottom + 12):
        spot = (x, x + width, y - 11, y + 3)
        if y - 11 >= TOP - 16 and not any(_overlap(spot, other) for other in placed):
            placed.append(spot)
            return [f'<text class="buffer-label" x="{_r(x)}" y="{_r(y)}" font-weight="bold" stroke="#fff" '
                    f'stroke-width="3" paint-order="stroke" pointer-events="none">{escape(text)}</text>']
    return []


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _legend(legend: list[tuple[str, str]], top: float) -> list[str]:
    """Colour swatches (squares drawn as paths: every rect is a buffer) and what each colour is."""
    width = (WIDTH - LEFT - RIGHT) / LEGEND_COLUMNS
    out = []
    for i, (color, name) in enumerate(legend):
        x = _r(LEFT + (i % LEGEND_COLUMNS) * width)
        y = _r(top + (i // LEGEND_COLUMNS) * LEGEND_ROW)
        out.append(f'<g class="legend"><path d="M{x} {y} h10 v10 h-10 z" fill="{color}" fill-opacity="0.85" '
                   f'stroke="#333" stroke-width="0.4"/><text x="{_r(x + 14)}" y="{_r(y + 9)}">{escape(name)}'
                   f'</text></g>')
    return out


def _axes(pool, size, bound, bottom, ys, named) -> list[str]:
    top = bottom - size * ys
    right = WIDTH - RIGHT
    out = [f'<path d="M{LEFT} {_r(top)} V{_r(bottom)} H{right}" fill="none" stroke="#000"/>',
           f'<text x="{LEFT - 6}" y="{_r(bottom)}" text-anchor="end">0</text>',
           f'<text x="{LEFT - 6}" y="{_r(top + 9)}" text-anchor="end">{_bytes(size)}</text>']
    if named:
        out.append(f'<text x="{right}" y="{_r(top - 4)}" text-anchor="end" fill="#555">'
                   f'pool {escape(pool)}</text>')
    if bound:
        yb = _r(bottom - bound * ys)
        out += [f'<line class="lower-bound" x1="{LEFT}" y1="{yb}" x2="{right}" y2="{yb}" stroke="#c00" '
                f'stroke-width="1.2" stroke-dasharray="6 4"/>',
                f'<text x="{right}" y="{_r(yb - 4)}" text-anchor="end" fill="#c00">lower bound '
                f'{_bytes(bound)}</text>']
    return out


def _time_axis(t0, t1, x, y) -> list[str]:
    step = _nice_step((t1 - t0) / 8)
    out = [f'<text x="{_r((LEFT + WIDTH - RIGHT) / 2)}" y="{y + 36}" text-anchor="middle">instruction</text>']
    t = -(-t0 // step) * step
    while t <= t1:
        out.append(f'<text x="{_r(x(t))}" y="{y + 16}" text-anchor="middle">{t}</text>')
        t += step
    return out


def _nice_step(raw: float) -> int:
    step = 1
    while step * 10 <= raw:
        step *= 10
    for k in (1, 2, 5, 10):
        if step * k >= raw:
            return step * k
    return step * 10


def _bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _r(v: float) -> float:
    """Coordinates rounded once, so that touching rectangles share an edge exactly."""
    return round(v, 3)


__all__ = ["PlanLayout", "plan_of", "plan_svg", "plot_plan"]
