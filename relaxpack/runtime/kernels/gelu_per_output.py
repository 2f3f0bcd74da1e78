"""A fused kernel's exact GELU, bound per instruction to the output it runs on.

A conv's or gemm's GELU (``activation="gelu"``, :func:`.fused.activation_fn`) runs in place on the
kernel's ``out``, an arena view that is the same object run after run. Of a small float32 GELU's
~8 us at 960 values (Whisper's front end, a transformer's MLP at a few tokens) ~1.6 us were the
Python around its numpy calls: the activation wrapper, the dtype and size checks, the table and
buffer look-ups, the reshapes. :func:`gelu_act` keeps :func:`._gelu_quad32.gelu_quad32_bound` for
the last such ``out`` (float32, C-contiguous, one chunk: at most ``CHUNK`` values) and calls it
straight; any other array takes :func:`.activation.gelu_in_place`. The same calls: bit for bit.
"""

from __future__ import annotations

import numpy as np

from ._gelu_quad32 import CHUNK, gelu_quad32_bound
from .activation import gelu_in_place


def gelu_act():
    """``act(out)``: the exact GELU of ``out`` in place (nothing for an empty one), one per instruction."""
    seen = [None, None]     # the last out that is a view (an arena's), its bound GELU

    def act(out: np.ndarray) -> None:
        if out is seen[0]:
            seen[1]()
        elif out.size == 0:
            return
        elif (out.dtype == np.float32 and out.base is not None and out.flags.c_contiguous
              and out.size <= CHUNK):
            seen[:] = out, gelu_quad32_bound(out, out)   # (an array owning its memory is not held)
            seen[1]()
        else:
            gelu_in_place(out)
    return act
