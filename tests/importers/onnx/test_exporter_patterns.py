"""Symbolic-dim patterns real exporters write (issue 15, item 4): Slice, Range,
ConstantOfShape, Tile, Pad, Resize, TopK, Split, Squeeze/Unsqueeze and CumSum
with operands computed from Shape; Where broadcasting unknown dims; NonZero
then GatherND/Reshape; attention with a KV cache that may be empty. Each
model converts once with ``from_onnx(model)`` and no dims and matches
onnxruntime at -O0 and -O2 at several shapes, 0-size ones where the model
allows them (onnxruntime refuses some: they are left out and say why)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import relaxpack
from relaxpack.ir.dims import format_dim
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.assumptions import assumptions_of

from . import exporter_patterns as patterns
from .backend_case import assert_close

ort.set_default_logger_severity(3)

#: builder -> the dims its feeds function takes, per run
CASES = {
    "slice_from_shape": [(1, 5), (2, 8), (3, 2), (0, 4), (2, 0)],
    "range_then_gather": [(1, 5), (2, 8), (3, 1), (0, 4), (2, 0)],
    "constant_of_shape_from_concat": [(1, 5), (2, 8), (0, 3), (2, 0)],
    "where_broadcasting_unknown_dims": [(1, 5), (2, 8), (3, 1)],     # a row of the mask is never all False
    "tile_symbolic_repeats": [(1, 5), (2, 8), (0, 3), (2, 0)],
    "pad_symbolic_pads": [(1, 5), (2, 8), (3, 7), (0, 3), (2, 0)],
    "resize_sizes_from_shape": [(1, 5), (2, 8), (0, 3), (1, 0)],
    "topk_k_from_shape": [(1, 5), (2, 8), (3, 1), (0, 4)],          # k = s // 2 + 1 <= s needs s >= 1
    "nonzero_then_gather": [(1, 5), (2, 8), (0, 3)],
    "split_sizes_from_shape": [(1, 5), (2, 8), (3, 2), (0, 4)],      # sizes (s - 2, 2) need s >= 2
    "squeeze_unsqueeze_axes_inputs": [(1, 5), (2, 8), (0, 3), (2, 0)],
    "cumsum_symbolic_axis": [(1, 5), (2, 8), (0, 3), (2, 0)],
    "attention_with_past": [(1, 3, 0), (2, 1, 4), (1, 4, 2), (0, 2, 1), (1, 1, 0)],
    "roll_by_slices": [(1, 5), (2, 9), (1, 1), (0, 4), (2, 0)],
    "gpt2_positions_after_past": [(1, 3, 0), (2, 1, 4), (1, 4, 2), (0, 2, 1), (1, 0, 3)],
    # a 0 batch is left out: onnxruntime cannot Reshape (0, 4, 4) with a -1
    "window_partition_after_pad": [(1, 5), (2, 8), (3, 7), (1, 1)],
    "resize_to_skip_then_concat": [(1, 3), (2, 5), (1, 1)],
    "topk_indices_gather_other": [(1, 5), (2, 2), (3, 8), (0, 4)],
    "split_then_concat_back": [(1, 5), (2, 8), (3, 2), (0, 4)],
    "expand_to_other_shape": [(1, 5), (2, 8), (3, 1), (0, 3)],
    "pad_to_stride_then_conv": [(1, 5), (2, 16), (1, 9), (0, 4)],
    "tile_then_matmul": [(1, 5), (2, 8), (0, 3), (2, 0)],
    "hf_causal_mask_with_past": [(1, 3, 0), (2, 1, 4), (1, 4, 2), (0, 2, 1), (1, 1, 0)],
    "channel_shuffle_after_strided_conv": [(1, 5), (2, 8), (1, 1), (0, 3)],
    "truncating_div_of_a_negative_size": [(1, 5), (2, 2), (1, 1), (0, 3), (2, 0)],
}


def _converted(name):
    model, feeds = getattr(patterns, name)()
    return model, feeds, relaxpack.from_onnx(model)


@pytest.mark.parametrize("name", sorted(CASES))
def test_pattern_converts_without_dims_and_matches_onnxruntime(name):
    model, feeds, mod = _converted(name)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    vms = [(level, VirtualMachine(relaxpack.build(mod, opt_level=level))) for level in (0, 2)]
    for dims in CASES[name]:
        inputs = feeds(*dims)
        want = session.run(None, inputs)
        for level, vm in vms:
            got = vm.run(inputs)
            assert len(got) == len(want)
            for (out, value), expected in zip(got.items(), want):
                where = f"{name} {out} at -O{level}, dims {dims}"
                assert value.shape == expected.shape and value.dtype == expected.dtype, where
                assert_close(value, expected, 1e-5, 1e-5, where)


def _output_dims(mod):
    ret = mod["main"].ret_struct_info
    fields = ret.fields if hasattr(ret, "fields") else (ret,)
    return [tuple(format_dim(d) for d in f.shape) for f in fields]


@pytest.mark.parametrize("name, dims", [
    ("pad_symbolic_pads", [("b", "s + (3 * s) % 4", "4")]),
    ("pad_to_stride_then_conv", [("n", "4", "(h + (7 * h) % 8 + 1) // 2", "(w + (7 * w) % 8 + 1) // 2")]),
    ("window_partition_after_pad", [("b", "s", "4")]),
    ("tile_symbolic_repeats", [("b", "s + 1", "4")]),
    ("tile_then_matmul", [("b", "s", "4")]),
    ("split_sizes_from_shape", [("b", "s - 2", "4"), ("b", "2", "4")]),
    ("split_then_concat_back", [("b", "s", "4")]),
])
def test_amounts_computed_from_shapes_give_exact_dims(name, dims):
    """Pads, repeats and split sizes computed from Shape are dim expressions: the output dims
    are exact, so what meets the input again needs no assumption and no run-time broadcast."""
    _, _, mod = _converted(name)
    assert _output_dims(mod) == dims
    assert "dyn.broadcast_pair" not in mod.script()
    assert assumptions_of(relaxpack.build(mod)) == []


def test_kv_cache_mask_length_is_an_assumption_named_by_node():
    """GPT-2's mask spans past + new tokens under a name of its own: assumed, and checked."""
    model, feeds, mod = _converted("gpt2_positions_after_past")
    vm = VirtualMachine(relaxpack.build(mod))
    inputs = feeds(1, 3, 2)
    inputs["mask"] = np.ones((1, 4), np.int64)
    with pytest.raises(relaxpack.RelaxpackError, match=r"^ONNX node '/y' assumes .* == s; .* \(p = 2, total = 4\)"):
        vm.run(inputs)



def test_a_channel_shuffle_after_a_strided_conv_stays_static():
    """``(h - 1) / 2 + 1`` with ONNX's truncating Div is the exact ``max(h - 1, 0) // 2 + 1``
    (DimAnalyzer.trunc_div): the shuffle's views are reshapes of known dims, with no run-time
    shape kernel and no assumption."""
    _, _, mod = _converted("channel_shuffle_after_strided_conv")
    assert _output_dims(mod) == [("n", "4", "max(h - 1, 0) // 2 + 1", "max(w - 1, 0) // 2 + 1")]
    assert "dyn." not in mod.script() and "dim_ranges" not in mod["main"].attrs
    assert assumptions_of(relaxpack.build(mod)) == []
