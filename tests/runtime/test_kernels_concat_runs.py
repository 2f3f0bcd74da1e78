"""The specialized concat's kept copies as whole runs (kernels/manipulate.py, ``_as_runs``).

A concat of arena views keeps one copy per part; where a part's values from the concat axis on are
one contiguous run in the part and in the output, the copy moves void items of that run. The
contract: the same bytes as ``np.concatenate`` on every axis, dtype and shape (odd sizes, empty
parts, a strided part, strings), call after call, also after the parts change in place.
"""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels.manipulate import _as_runs, _specialize_concat


def _arena_views(shapes, dtype, rng):
    """Parts and an output as views of one arena (the VM hands instructions such views)."""
    sizes = [int(np.prod(s)) for s in shapes]
    arena = np.zeros(sum(sizes) + 8 * len(sizes) + 8, dtype)
    views, start = [], 3
    for shape, size in zip(shapes, sizes):
        views.append(arena[start:start + size].reshape(shape))
        start += size + 5
    for v in views[:-1]:
        v[...] = (rng.standard_normal(v.shape) * 50).astype(dtype) if dtype != np.bool_ else rng.random(v.shape) > 0.5
    return views[:-1], views[-1]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8, np.bool_])
@pytest.mark.parametrize("shapes,axis", [
    ([(1, 7, 5, 3), (1, 7, 5, 13)], 3),            # channels last: runs of a pixel's channels
    ([(2, 3, 4, 5), (2, 1, 4, 5), (2, 6, 4, 5)], 1),  # channels first: runs of whole planes
    ([(3, 4), (5, 4)], 0),                          # the first axis: each part one run
    ([(1, 9, 9, 0), (1, 9, 9, 4)], 3),               # an empty part
    ([(2, 1, 3, 1), (2, 1, 3, 2)], -1),
])
def test_kept_copies_are_the_bytes_of_concatenate(dtype, shapes, axis):
    rng = np.random.default_rng(len(shapes))
    out_shape = list(shapes[0])
    out_shape[axis] = sum(s[axis] for s in shapes)
    parts, out = _arena_views(shapes + [tuple(out_shape)], dtype, rng)
    call = _specialize_concat({"axis": axis}, ())
    for round_ in range(3):                         # the first call, then the kept copies
        out[...] = 0
        call(tuple(parts), out=out)
        np.testing.assert_array_equal(out, np.concatenate(parts, axis=axis))
        for p in parts:                             # the arena's values change between runs
            p[...] = np.roll(p, 1) if p.size else p


def test_channels_last_parts_are_copied_as_runs():
    rng = np.random.default_rng(1)
    parts, out = _arena_views([(1, 6, 6, 32), (1, 6, 6, 16), (1, 6, 6, 48)], np.float32, rng)
    dst, src = _as_runs(out[..., :32], parts[0], 3)
    assert dst.dtype.kind == "V" and dst.dtype.itemsize == 32 * 4 and dst.shape == src.shape == (1, 6, 6)
    assert np.shares_memory(dst, out) and np.shares_memory(src, parts[0])


def test_strided_parts_and_strings_are_copied_as_they_are():
    rng = np.random.default_rng(2)
    parts, out = _arena_views([(1, 4, 4, 8), (1, 4, 4, 8)], np.float32, rng)
    strided = parts[0][:, :, :, ::2]
    assert _as_runs(out[..., :4], strided, 3)[1] is strided
    words = np.array([["a", "bc"], ["def", "g"]], dtype=object)
    target = np.empty((2, 4), dtype=object)
    assert _as_runs(target[:, :2], words, 1)[1] is words
    call = _specialize_concat({"axis": 1}, ())
    call((words, words), out=target)
    assert target.tolist() == [["a", "bc", "a", "bc"], ["def", "g", "def", "g"]]
