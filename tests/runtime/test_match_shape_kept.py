"""match_shape per instruction (builtins.py): a pattern without "eq" entries keeps the stores of
each array shape that matched; every call must leave the heap and raise exactly as the checks do."""

from __future__ import annotations

import re

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.runtime.builtins import match_shape, _match_shape_specialize

PATTERN = [["store", 0, "n", 1, 8], 3, None, ["store", 2, "m", 0, None]]


def _both(pattern, value, heap_size=4):
    """(the specialized call's heap or error, the general builtin's) from the same start heap."""
    results = []
    for fn in (_match_shape_specialize(pattern, "match_cast of 'x'", heap_size), None):
        heap = [-1] * heap_size
        try:
            (fn or (lambda v, h: match_shape(pattern, "match_cast of 'x'", heap_size, v, h)))(value, heap)
            results.append(heap)
        except ShapeError as err:
            results.append(str(err))
    return results


def test_kept_stores_alternate_with_shapes_and_failures_are_never_kept():
    call = _match_shape_specialize(PATTERN, "match_cast of 'x'", 4)
    shapes = [(2, 3, 5, 7), (4, 3, 1, 0), (2, 3, 5, 7), (9, 3, 1, 1), (2, 4, 1, 1), (1, 3, 0, 6), (4, 3, 1, 0)]
    for shape in shapes * 2:
        value = np.zeros(shape, np.float32)
        heap = [-1] * 4
        want = [-1] * 4
        try:
            match_shape(PATTERN, "match_cast of 'x'", 4, value, want)
        except ShapeError as err:
            with pytest.raises(ShapeError, match=re.escape(str(err))):
                call(value, heap)
            continue
        assert call(value, heap) is value and heap == want == [shape[0], -1, shape[3], -1]


@pytest.mark.parametrize("value", [np.zeros((2, 3, 4, 5))[:, :, ::2], np.zeros((2, 3, 0, 1)).T.T, (2, 3, 4, 5),
                                   np.zeros((2, 3, 4))])
def test_strided_empty_and_non_array_values_match_as_the_builtin(value):
    for _ in range(2):
        got, want = _both(PATTERN, value)
        assert got == want


def test_an_eq_entry_is_checked_against_the_heap_every_call():
    pattern = [["store", 0, "n", 0, None], ["eq", ["h", 1], "k"]]
    call = _match_shape_specialize(pattern, "match_cast of 'x'", 2)
    value = np.zeros((5, 3))
    heap = [0, 3]
    call(value, heap)
    assert heap == [5, 3]
    heap[1] = 4                                  # the same shape, another k: not kept, it fails
    with pytest.raises(ShapeError, match="k = 4"):
        call(value, heap)


def test_a_kept_shape_replays_its_stores_into_a_new_heap():
    call = _match_shape_specialize([["store", 0, "n", 0, None]], "x", 2)
    call(np.zeros((5,)), [0, 0])
    heap = [0, 7]
    assert call(np.zeros((5,)), heap) is not None and heap == [5, 7]
