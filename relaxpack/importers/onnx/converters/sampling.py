"""GridSample, RoiAlign and DeformConv: ops that sample at computed positions.

GridSample-16 spells the modes ``bilinear``/``bicubic`` and takes 4-D input
only; opset 20 renames them ``linear``/``cubic`` and allows any number of
spatial dims. The IR op uses the later names.
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ._shape_common import unsupported

# ---------------------------------------------------------------- GridSample

_GRID_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}
_GRID_MODES_20 = {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}
_PADDING_MODES = ("zeros", "border", "reflection")


@register_converter("", "GridSample", since_opset=16)
def grid_sample_v16(ctx, x, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    if x.ndim >= 0 and x.ndim != 4:
        raise unsupported(ctx, f"a rank-{x.ndim} input: GridSample-16 samples 4-D (N, C, H, W) input only")
    return _grid_sample(ctx, x, grid, align_corners, mode, padding_mode, _GRID_MODES_16)


@register_converter("", "GridSample", since_opset=20)
def grid_sample_v20(ctx, x, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    return _grid_sample(ctx, x, grid, align_corners, mode, padding_mode, _GRID_MODES_20)


def _grid_sample(ctx, x, grid, align_corners, mode: str, padding_mode: str, modes: dict[str, str]):
    if mode not in modes:
        raise unsupported(ctx, f"mode {mode!r} (this opset has {', '.join(modes)})")
    if padding_mode not in _PADDING_MODES:
        raise unsupported(ctx, f"padding_mode {padding_mode!r} (expected one of {', '.join(_PADDING_MODES)})")
    return make_call("image.grid_sample", ctx.expr(x), ctx.expr(grid), method=modes[mode],
                     padding_mode=padding_mode, align_corners=bool(align_corners))
