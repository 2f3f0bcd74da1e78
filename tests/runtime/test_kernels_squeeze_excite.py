"""nn.squeeze_excite: an SE block in one kernel, in either layout, against its definition in float64
numpy; and the shapes its inference refuses."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.errors import RelaxpackError

from .test_kernels_registry import rand, run_kernel


def _reference(x, w1, b1, w2, b2, channels_last: bool):
    x64 = x.astype(np.float64)
    axes = (1, 2) if channels_last else (2, 3)
    s = x64.mean(axis=axes)
    h = np.maximum(s @ w1 + b1, 0)
    g = 1 / (1 + np.exp(-(h @ w2 + b2)))
    return x64 * (g[:, None, None, :] if channels_last else g[:, :, None, None])


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(2, 5, 7, 6), (1, 1, 1, 6), (3, 4, 4, 6), (0, 3, 3, 6),
                                   (2, 16, 8, 6), (1, 11, 11, 6), (0, 16, 8, 6)])   # around the tiled gate
def test_squeeze_excite_is_its_definition(shape, dtype, layout):
    rng = np.random.default_rng(0)
    x = rand(rng, shape if layout == "NHWC" else (shape[0], 6, *shape[1:3]), dtype)
    w1, b1 = rand(rng, (6, 3), dtype), rand(rng, (3,), dtype)
    w2, b2 = rand(rng, (3, 6), dtype), rand(rng, (6,), dtype)
    got = run_kernel("nn.squeeze_excite", x, w1, b1, w2, b2, act1="relu", act2="sigmoid", data_layout=layout)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, _reference(x, w1, b1, w2, b2, layout == "NHWC"), rtol=tol, atol=tol)


def test_shapes_that_do_not_fit_are_refused():
    rng = np.random.default_rng(1)
    x = rand(rng, (1, 4, 4, 6), "float32")
    w1, b1, b2 = rand(rng, (6, 3), "float32"), rand(rng, (3,), "float32"), rand(rng, (6,), "float32")
    with pytest.raises(RelaxpackError, match="w2's rows"):
        run_kernel("nn.squeeze_excite", x, w1, b1, rand(rng, (4, 6), "float32"), b2, act1="relu", act2="sigmoid")
    with pytest.raises(RelaxpackError, match="unknown activation"):
        run_kernel("nn.squeeze_excite", x, w1, b1, rand(rng, (3, 6), "float32"), b2, act1="swish", act2="sigmoid")


@pytest.mark.parametrize("shape", [(2, 16, 8, 6), (1, 31, 48, 16), (3, 2, 9, 8, 5)])
def test_a_tiled_gate_is_the_broadcast_bit_for_bit_call_after_call(shape, monkeypatch):
    """From TILED_GATE_MIN_PIXELS pixels a channels-last block multiplies by its gate tiled along a
    row: the broadcast's products, for inputs and outputs that are the same views run after run."""
    from relaxpack.runtime.kernels import get_kernel, squeeze_excite
    kernel = get_kernel("nn.squeeze_excite").fn
    rng = np.random.default_rng(4)
    c = shape[-1]
    w1, b1, w2, b2 = (rand(rng, s, "float32") for s in ((c, 3), (3,), (3, c), (c,)))
    attrs = dict(act1="relu", act2="sigmoid", data_layout="NHWC")
    call = kernel.specialize_attrs(attrs, (False, True, True, True, True))
    x = np.empty(int(np.prod(shape)) + 1, np.float32)[1:].reshape(shape)
    out = np.empty(x.size + 1, np.float32)[1:].reshape(shape)
    for _ in range(3):
        x[...] = rand(rng, shape, "float32")
        call(x, w1, b1, w2, b2, out=out)
        monkeypatch.setattr(squeeze_excite, "TILED_GATE_MIN_PIXELS", 1 << 30)
        want = run_kernel("nn.squeeze_excite", x, w1, b1, w2, b2, **attrs)
        monkeypatch.undo()
        np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("acts", [("silu", "sigmoid"), ("relu", ("hard_sigmoid", 1 / 6, 0.5)),
                                  ("sigmoid", "silu"), (None, None)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(1, 2, 3, 7), (3, 2, 3, 7), (1, 16, 8, 5), (2, 1, 1, 7), (0, 2, 3, 7),
                                   (1, 2, 3, 192), (1, 4, 6, 1000)])
def test_bound_weights_run_the_unbound_blocks_bits(shape, dtype, acts):
    """With bound (constant) weights a block tiles its biases, multiplies one image by np.dot and a
    SiLU's or sigmoid's weights negated: the bits of the same block with weights it may not copy."""
    from relaxpack.runtime.kernels import get_kernel
    kernel = get_kernel("nn.squeeze_excite").fn
    rng = np.random.default_rng(5)
    c = shape[-1]
    r = max(4, c // 4)
    w1, b1, w2, b2 = (rand(rng, s, dtype) * 3 for s in ((c, r), (r,), (r, c), (c,)))
    attrs = dict(act1=acts[0], act2=acts[1], data_layout="NHWC")
    bound = kernel.specialize_attrs(attrs, (False, True, True, True, True))
    unbound = kernel.specialize_attrs(attrs, (False, False, False, False, False))
    for _ in range(2):
        x = rand(rng, shape, dtype) * 4
        got, want = np.empty_like(x), np.empty_like(x)
        bound(x, w1, b1, w2, b2, out=got)
        unbound(x, w1, b1, w2, b2, out=want)
        np.testing.assert_array_equal(got, want)
