"""Data-dependent ops: the ``dyn.*`` kernels, whose output shape the values decide.

Reshape to a computed shape, TopK of a run-time K, a Resize by run-time
scales: the importer cannot say the output's shape, so it calls the packed
kernel through ``call_packed`` with the output struct info it declares and
binds the result with ``match_cast`` to fresh dims
(``importers/onnx/converters/_dynamic.py``). Each such kernel is an op here,
flagged ``data_dependent``, with its attribute schema: ``call_packed``
checks its ``kernel_attrs`` against it, and the importer fills the defaults
from it, so the bytecode passes every attribute and no kernel repeats a
default. Where a graph op computes the same thing, its schema is the source
(minus the attributes that became run-time operands).

>>> make_call("call_packed", ExternFunc("dyn.topk"), x, k, sinfo_args=(out,),       # doctest: +SKIP
...           kernel_attrs=(("axis", -1), ("largest", True), ("sorted", True)))
"""

from __future__ import annotations

from typing import Any, Mapping

from ...errors import IRError
from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import StructInfo
from ..registry import REQUIRED, get_op_def, register_op
from . import algorithm, fold, image, signal  # noqa: F401  (the graph ops whose schemas some derive from)


def _declared_by_caller(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    raise IRError(f"R.{call.op.name} is data-dependent: call it through R.call_packed with its "
                  f"output's struct info in sinfo_args")


def _without(op: str, *operands: str) -> dict[str, Any]:
    """Graph op ``op``'s attributes, less those the data-dependent form takes as operands."""
    return {k: v for k, v in get_op_def(op).attrs.items() if k not in operands}


def register_data_dependent(name: str, num_args, attrs: Mapping[str, Any] | None = None, doc: str = "") -> None:
    """Define the data-dependent op whose packed kernel is ``name`` (a plugin's
    packed kernel needs one too: the IR calls no kernel that is not an op)."""
    register_op(name, infer=_declared_by_caller, attrs=attrs, num_args=num_args, data_dependent=True, doc=doc)


# ---------------------------------------------------------------- shapes
register_data_dependent("dyn.shape", 1, {"start": 0, "end": None}, "The shape of a tensor of unknown rank.")
register_data_dependent("dyn.size", 1, doc="The element count of a tensor of unknown rank.")
register_data_dependent("dyn.tensor_to_shape", 1, {"indices": REQUIRED, "what": REQUIRED},
                "Shape values read off a tensor, checked (the dims the importer lifts).")
register_data_dependent("dyn.reshape", 2, {"allowzero": False}, "Reshape to a run-time shape (ONNX Reshape).")
register_data_dependent("dyn.expand", 2, doc="Broadcast to a run-time shape (ONNX Expand).")
register_data_dependent("dyn.broadcast_pair", 2, {"dims": None},
                "Both operands broadcast to their common shape, which only the run can tell.")
register_data_dependent("dyn.full", 2, doc="A tensor of a run-time shape filled with a value (ONNX ConstantOfShape).")
register_data_dependent("dyn.squeeze", 2, doc="Squeeze run-time axes (ONNX Squeeze).")
register_data_dependent("dyn.squeeze_ones", 1, {"rank": REQUIRED, "what": REQUIRED},
                "Squeeze the dims of size 1 of a tensor whose shape only the run knows.")
register_data_dependent("dyn.unsqueeze", 2, doc="Unsqueeze run-time axes (ONNX Unsqueeze).")

# ---------------------------------------------------------------- indexing and padding
register_data_dependent("dyn.slice", (3, None), {"parts": ()},
                "Slice by run-time starts, ends and the optional axes and steps ``parts`` names (ONNX Slice).")
register_data_dependent("dyn.split", 2, {"axis": REQUIRED, "count": REQUIRED}, "Split by run-time sizes (ONNX Split).")
register_data_dependent("dyn.pad", (2, None), {"parts": (), **_without("pad", "pads")},
                "Pad by run-time pads and the optional value and axes ``parts`` names (ONNX Pad).")
register_data_dependent("dyn.tile", 2, doc="Tile by run-time repeats (ONNX Tile).")

# ---------------------------------------------------------------- algorithms
register_data_dependent("dyn.topk", 2, _without("topk", "k"), "TopK of a run-time K (ONNX TopK).")
register_data_dependent("dyn.one_hot", 3, _without("one_hot", "depth"), "OneHot of a run-time depth (ONNX OneHot).")
register_data_dependent("dyn.range", 3, doc="Range of run-time bounds (ONNX Range).")
register_data_dependent("dyn.reduce", 2, {"op": REQUIRED, "keepdims": True, "noop_with_empty_axes": False},
                "A reduction over run-time axes (ONNX Reduce*).")

# ---------------------------------------------------------------- images, signals, folds
register_data_dependent("dyn.resize", (2, 3), {"given_is": REQUIRED, "axes": REQUIRED, "policy": "stretch",
                                       "legacy": False, **_without("image.resize", "axes", "scales", "roi")},
                "Resize by run-time scales or sizes (and a run-time roi) (ONNX Resize, Upsample).")
register_data_dependent("dyn.image_decoder", 1, {"pixel_format": "RGB"}, "Decode an image (ONNX ImageDecoder).")
register_data_dependent("dyn.dft", (1, None), {"runtime": (), "axis": None, **_without("signal.dft", "axis")},
                "DFT whose axis or length ``runtime`` names as operands (ONNX DFT).")
register_data_dependent("dyn.stft", (1, None), {"runtime": (), "frame_step": None, **_without("signal.stft", "frame_step")},
                "STFT whose step, window or length ``runtime`` names as operands (ONNX STFT).")
register_data_dependent("dyn.mel_weight_matrix", 5, {"dtype": "float32"},
                "The mel filter bank of run-time sizes (ONNX MelWeightMatrix).")
register_data_dependent("dyn.max_unpool", 3, _without("nn.max_unpool", "output_shape"),
                "MaxUnpool to a run-time output shape (ONNX MaxUnpool).")
register_data_dependent("dyn.col2im", 3, _without("nn.col2im", "image_shape", "block_shape"),
                "Col2Im of a run-time image and block shape (ONNX Col2Im).")

# ---------------------------------------------------------------- graph ops shaped at run time
register_data_dependent("dyn.apply", (0, None), {"kernel": REQUIRED, "dtype": REQUIRED, "attrs": ()},
                "Graph op ``kernel`` with ``attrs`` into an output the run allocates (Legalize: an operand "
                "of unknown rank).")
