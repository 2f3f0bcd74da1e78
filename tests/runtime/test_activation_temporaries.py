"""In-place activations whose temporary is large (SCRATCH_TEMPORARY_BYTES and up) take it from the
thread's workspace instead of allocating it: the same values as the allocated path, element for
element (checked against halves of the array, each below the bar), for float32 and float64,
called on their own and nested in another kernel's scratch."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import activation as A
from relaxpack.runtime.kernels._workspace import Scratch

FUNCTIONS = {
    "silu": A.silu_in_place,
    "hard_swish_fn": lambda buf: A.hard_swish_in_place_fn(buf.dtype)(buf),
    "hard_swish_into": lambda buf: A.hard_swish_into(buf, buf),
    "hard_swish6": A.hard_swish6_in_place,
    "hard_swish6_fn": lambda buf: A.hard_swish6_in_place_fn(buf.dtype)(buf),
}


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_a_large_temporary_gives_the_allocated_paths_values(name, dtype, nested):
    fn = FUNCTIONS[name]
    itemsize = np.dtype(dtype).itemsize
    n = (A.SCRATCH_TEMPORARY_BYTES // itemsize // 6 + 17) * 6        # just past the bar; halves below it
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(n) * 5).astype(dtype)
    x[:6] = [0.0, -0.0, 3.0, -3.0, np.inf, -np.inf]
    halves = [x[:n // 2].copy(), x[n // 2:].copy()]
    whole = x.reshape(2, 3, -1).copy()                              # (any shape: a conv's map)
    with np.errstate(invalid="ignore"):                             # (SiLU of -inf: NaN either way)
        for half in halves:
            assert half.nbytes < A.SCRATCH_TEMPORARY_BYTES
            fn(half)
        if nested:
            with Scratch([((1000,), np.float32)]):
                fn(whole)
        else:
            fn(whole)
    np.testing.assert_array_equal(whole.reshape(-1), np.concatenate(halves))
