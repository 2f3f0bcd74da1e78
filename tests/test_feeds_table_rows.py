"""Random ids for an archive stay below the rows of the embedding table they index: ``table_rows``
finds the tables a top-level ``take`` along axis 0 reads by an integer input (the fewest rows
where several do), and ``make_inputs`` draws below them (masks stay 0/1, other ints 0..7)."""

from __future__ import annotations

import numpy as np

import relaxpack
from relaxpack.feeds import make_inputs, table_rows
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
