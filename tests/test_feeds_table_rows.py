"""Random ids for an archive stay below the rows of the embedding table they index: ``table_rows``
finds the tables a top-level ``take`` along axis 0 reads by an integer input (the fewest rows
where several do), and ``make_inputs`` draws below them (other ints 0..7); an input named like a
mask is drawn as padding makes one."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.feeds import make_inputs, padding_mask, table_rows
from relaxpack.runtime import VirtualMachine

from .test_cli_commands import _embedding_model


def test_ids_are_drawn_below_the_rows_of_the_table_they_index(tmp_path):
    exe = relaxpack.build(relaxpack.from_onnx(str(_embedding_model(tmp_path / "emb.onnx"))), opt_level=2)
    assert table_rows(exe) == {"ids": 8, "types": 2}
    feeds = make_inputs(exe, {"batch": 4, "seq": 50}, np.random.default_rng(0))
    assert feeds["types"].max() == 1 and feeds["ids"].max() == 7 and feeds["ids"].min() == 0
    out = VirtualMachine(exe).run(feeds)["y"]
    assert out.shape == (4, 50, 4)
    flat = relaxpack.build(relaxpack.from_onnx(str(_embedding_model(tmp_path / "flat.onnx", True))), opt_level=2)
    assert "types" not in table_rows(flat)              # (read through a reshape: check's ONNX bounds)
    zeros = make_inputs(exe, {"batch": 1, "seq": 3}, np.random.default_rng(0), "zeros")
    assert not zeros["types"].any()


@pytest.mark.parametrize("shape", [(5, 9), (2, 3, 1), (7,), (), (3, 0)])
def test_a_padding_mask_is_ones_then_zeros_along_its_last_axis(shape):
    mask = padding_mask(shape, np.random.default_rng(len(shape)))
    assert mask.shape == shape and set(np.unique(mask)) <= {0, 1}
    if shape and shape[-1]:
        rows = mask.reshape(-1, shape[-1])
        assert (rows[:, 0] == 1).all()                      # no row masks its first key
        assert (np.diff(rows, axis=1) <= 0).all()           # ones, then zeros


def test_masks_are_drawn_as_padding_and_other_ints_stay_random():
    graph = helper.make_graph(
        [helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
         helper.make_node("Cast", ["ids"], ["i"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["m", "i"], ["y"])], "g",
        [helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = make_inputs(relaxpack.build(relaxpack.from_onnx(model), opt_level=2), {"batch": 64, "seq": 12},
                        np.random.default_rng(1))
    mask = feeds["attention_mask"]
    assert mask.dtype == np.int64 and (mask[:, 0] == 1).all() and (np.diff(mask, axis=1) <= 0).all()
    assert 1 < len(set(mask.sum(axis=1).tolist()))          # lengths vary by row
    assert feeds["ids"].max() > 1                           # ints 0..7, not a mask
