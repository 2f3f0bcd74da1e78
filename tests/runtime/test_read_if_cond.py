"""``vm.builtin.read_if_cond``: an If's condition is one value of any rank (its 0-d array
fast path and the general one agree)."""

import numpy as np
import pytest

from relaxpack.errors import ShapeError
from relaxpack.runtime.builtins import read_if_cond


@pytest.mark.parametrize("value,want", [
    (np.array(True), True), (np.array(False), False), (np.array(0, np.int64), False),
    (np.array(2.5, np.float32), True), (np.array(np.nan), True), (np.array(-0.0), False),
    (np.array([True]), True), (np.array([[0]], np.int64), False), (True, True), (0, False),
    (np.bool_(True), True), (np.ones((1, 1, 1), bool)[:, :, 0], True),
])
def test_one_value_of_any_rank_or_kind(value, want):
    assert read_if_cond(value) is want


@pytest.mark.parametrize("value", [np.array([True, False]), np.zeros((0,), bool), np.ones((2, 1), bool)])
def test_not_one_value_is_a_shape_error(value):
    with pytest.raises(ShapeError, match="must hold one value"):
        read_if_cond(value)
