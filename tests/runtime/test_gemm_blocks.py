"""gemm_blocks.py: a conv's GEMM in column blocks under OpenBLAS's small-matrix bar; the blocks
cover the columns once, and the blocked product is the product (checked against float64)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import gemm_blocks
from relaxpack.runtime.kernels.gemm_blocks import (BLOCK_MULTIPLE, MAX_BLOCKS, MIN_BLOCK_COLUMNS,
                                                   SMALL_GEMM_PRODUCTS, block_calls, blocked_matmul,
                                                   column_blocks)


@pytest.mark.parametrize("rows, depth, columns", [
    (16, 147, 1578), (8, 144, 2688), (8, 72, 2688), (16, 288, 688), (32, 288, 416), (16, 144, 704),
    (8, 144, 2689), (3, 5, 100_001)])
def test_blocks_cover_the_columns_once_each_under_the_bar(rows, depth, columns):
    blocks = column_blocks(rows, depth, columns)
    assert blocks is not None and 1 < len(blocks) <= MAX_BLOCKS
    assert blocks[0].start == 0 and blocks[-1].stop == columns
    assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))
    widths = [s.stop - s.start for s in blocks]
    assert all(w % BLOCK_MULTIPLE == 0 and w >= MIN_BLOCK_COLUMNS for w in widths[:-1])
    assert all(0 < rows * depth * w <= SMALL_GEMM_PRODUCTS for w in widths)


@pytest.mark.parametrize("rows, depth, columns", [
    (16, 144, 416),         # small already: one call
    (32, 576, 176),         # blocks would be narrower than MIN_BLOCK_COLUMNS
    (96, 96, 8192),         # more than MAX_BLOCKS blocks
    (0, 10, 10**7), (8, 0, 10**7), (8, 8, 0)])
def test_one_call_where_blocks_do_not_pay(rows, depth, columns):
    assert column_blocks(rows, depth, columns) is None
    a, b, out = np.ones((rows, depth)), np.ones((depth, columns)), np.empty((rows, columns))
    assert block_calls(a, b, out) == [(a, b, out)]


def test_the_bar_is_where_one_call_stops_being_small():
    assert column_blocks(10, 10, SMALL_GEMM_PRODUCTS // 100) is None
    assert column_blocks(10, 10, SMALL_GEMM_PRODUCTS // 100 + 1) is not None


@pytest.mark.parametrize("a_shape, b_shape", [
    ((8, 144), (144, 2688)),                # one image
    ((1, 8, 72), (3, 1, 72, 2690)),         # a batch of 3, odd columns (the last block is the rest)
    ((2, 8, 72), (2, 2, 72, 1800)),         # two groups, a batch of 2
    ((2, 8, 72), (0, 2, 72, 1800)),         # an empty batch
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_blocked_product_is_the_product(a_shape, b_shape, dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    assert column_blocks(a_shape[-2], a_shape[-1], b_shape[-1]) is not None
    out = np.full(np.broadcast_shapes(a_shape[:-1] + (1,), b_shape[:-2] + (1, b_shape[-1])), np.nan, dtype)
    blocked_matmul(a, b, out)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    tol = 1e-4 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.sqrt(a_shape[-1]))


# (data, weight, attrs) of convs whose GEMM takes blocks: the strided method's one copy (3x3/2),
# wide rows (stride 1, padded), wide rows from phases (the 7x7/2 stem), a batch, groups, odd sizes
BLOCKED_CONVS = [
    ((1, 16, 64, 40), (8, 16, 3, 3), dict(strides=(1, 1), padding=(1, 1, 1, 1))),
    ((3, 16, 45, 39), (8, 16, 3, 3), dict(strides=(1, 1), padding=(1, 1, 1, 1))),
    ((1, 3, 61, 96), (16, 3, 7, 7), dict(strides=(2, 2), padding=(3, 3, 3, 3))),
    ((1, 16, 100, 100), (8, 16, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),
    ((2, 32, 31, 27), (16, 16, 3, 3), dict(groups=2, strides=(1, 1), padding=(1, 1, 1, 1))),
    ((1, 16, 40, 43), (8, 16, 3, 3), dict(strides=(1, 1), padding=(2, 2, 2, 2), dilation=(2, 2))),
    ((1, 32, 32, 20), (16, 32, 3, 3), dict(strides=(1, 1), padding=(1, 1, 1, 1))),       # stacked rows
]


@pytest.mark.parametrize("activation", [None, "relu", "silu"], ids=str)
@pytest.mark.parametrize("data, weight, attrs", BLOCKED_CONVS, ids=str)
def test_a_blocked_conv_is_the_reference_conv_and_its_runner_the_kernel(data, weight, attrs, activation,
                                                                       monkeypatch):
    """The runner (conv_small) and the generic kernel make the same blocked calls (bit for bit),
    and both are the float64 conv (ONNX's reference evaluator's arithmetic) to float32 rounding."""
    from relaxpack.runtime.kernels.nn import _prepared_conv

    from .test_kernels_conv_small import CONV_BIAS_ACT, full_attrs, out_for, workspace_for
    from relaxpack.runtime.kernels import conv_small
    made = []
    real = gemm_blocks.column_blocks
    spy = lambda *shape: made.append(real(*shape)) or made[-1]     # noqa: E731
    monkeypatch.setattr(gemm_blocks, "column_blocks", spy)          # (block_calls, blocked_matmul call it)
    monkeypatch.setattr(conv_small, "column_blocks", spy)           # (imported by name)
    attrs = full_attrs(attrs, activation)
    assert _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"],
                          attrs["groups"], "NCHW")[0].method == "strided"
    rng = np.random.default_rng(1)
    x = rng.standard_normal(data).astype(np.float32)
    w = (rng.standard_normal(weight) / np.sqrt(np.prod(weight[1:]))).astype(np.float32)
    b = rng.standard_normal(weight[0]).astype(np.float32)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, True, True))
    out, ws = out_for(data, weight, attrs, "float32"), workspace_for(data, weight, attrs, "float32")
    call(x, w, b, out=out, workspace=ws)
    assert any(m is not None for m in made)                  # the GEMM took blocks
    want = out_for(data, weight, attrs, "float32")
    CONV_BIAS_ACT(x, w, b, out=want, **attrs)
    np.testing.assert_array_equal(out, want)
    exact = out_for(data, weight, attrs, "float64")
    CONV_BIAS_ACT(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), out=exact, **attrs)
    np.testing.assert_allclose(out, exact, rtol=1e-5, atol=1e-5)


# stride-1 wide convs that halve their channels: kernel rows stacked (conv_wide.stacks_rows), with a
# batch, 5 kernel rows, dilation, groups, uneven padding; and one just past the span bar (not stacked)
STACKED_CONVS = [
    ((1, 32, 32, 20), (16, 32, 3, 3), dict(padding=(1, 1, 1, 1)), True),
    ((2, 64, 22, 10), (32, 64, 3, 3), dict(padding=(1, 1, 1, 1)), True),
    ((1, 32, 40, 21), (8, 32, 5, 3), dict(padding=(2, 1, 2, 1)), True),
    ((1, 16, 41, 30), (8, 16, 3, 3), dict(padding=(2, 2, 2, 2), dilation=(2, 2)), True),
    ((3, 32, 30, 17), (16, 16, 3, 3), dict(groups=2, padding=(1, 0, 1, 2)), True),
    ((1, 32, 12, 28), (16, 32, 3, 3), dict(padding=(1, 1, 1, 1)), False),              # span 1.17x the columns
    ((1, 32, 32, 20), (17, 32, 3, 3), dict(padding=(1, 1, 1, 1)), False),              # more than half
    ((1, 16, 16, 24), (8, 16, 3, 3), dict(padding=(1, 1, 1, 1)), False),               # a small GEMM already
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("fixed", [True, False], ids=["bound", "register"])
@pytest.mark.parametrize("activation", [None, "relu", "silu"], ids=str)
@pytest.mark.parametrize("data, weight, attrs, stacked", STACKED_CONVS, ids=str)
def test_stacked_kernel_rows_are_the_reference_conv_and_the_runner_the_kernel(data, weight, attrs, stacked,
                                                                            activation, fixed, dtype):
    """The runner and the generic kernel stack the same rows (bit for bit each other, a weight
    computed at run time restacked every call); both are the float64 conv to float rounding."""
    from relaxpack.runtime.kernels.conv_wide import stacks_rows
    from relaxpack.runtime.kernels.nn import _prepared_conv

    from .test_kernels_conv_small import CONV_BIAS_ACT, full_attrs, out_for, workspace_for
    attrs = full_attrs(attrs, activation)
    plan = _prepared_conv(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
                          "NCHW")[0]
    assert plan.method == "strided" and plan.strided.wide is not None
    assert stacks_rows(plan, data[1], weight[0]) == stacked
    rng = np.random.default_rng(2)
    w = (rng.standard_normal(weight) / np.sqrt(np.prod(weight[1:]))).astype(dtype)
    b = rng.standard_normal(weight[0]).astype(dtype)
    call = CONV_BIAS_ACT.specialize_attrs(attrs, (False, fixed, True))
    out, ws = out_for(data, weight, attrs, dtype), workspace_for(data, weight, attrs, dtype)
    for round_ in range(3):
        x = rng.standard_normal(data).astype(dtype)
        if not fixed:
            w = (rng.standard_normal(weight) / np.sqrt(np.prod(weight[1:]))).astype(dtype)
        call(x, w, b, out=out, workspace=ws)
        want = out_for(data, weight, attrs, dtype)
        CONV_BIAS_ACT(x, w, b, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
        exact = out_for(data, weight, attrs, "float64")
        CONV_BIAS_ACT(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), out=exact, **attrs)
        tol = 1e-5 if dtype == "float32" else 2e-3
        np.testing.assert_allclose(out.astype(np.float64), exact, rtol=tol, atol=tol)
        ws[:] = 0xCD
