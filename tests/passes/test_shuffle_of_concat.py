"""ConcatOfSplit's shuffle_of_concat rule: a channel shuffle of a concat is one concat of the
parts with a unit axis after the concat's, along it (before/after texts, the same values), and the
places it must not fire."""

from __future__ import annotations

import pytest

from relaxpack.passes.concat_of_split import concat_of_split_pass

from .helpers import assert_rewrites, assert_same_results, assert_unchanged
from .test_convert_layout import program

NHWC = 'a: R.Tensor(("n", 5, 7, 6), "float32"), b: R.Tensor(("n", 5, 7, 6), "float32")'
NHWC3 = NHWC + ', c: R.Tensor(("n", 5, 7, 6), "float32")'
NCHW = 'a: R.Tensor(("n", 6, 5, 7), "float32"), b: R.Tensor(("n", 6, 5, 7), "float32")'

CASES = {
    # ShuffleNet channels last: two branches, groups 2
    "channels_last": ((NHWC, '("n", 5, 7, 12)'), """
cat = R.concat((a, b), axis=3)
lv = R.reshape(cat, R.shape([n, 5, 7, 2, 6]))
lv1 = R.permute_dims(lv, axes=(0, 1, 2, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, 5, 7, 12]))
return lv2
""", """
lv2 = R.reshape(R.concat((R.expand_dims(a, axis=4), R.expand_dims(b, axis=4)), axis=4), R.shape([n, 5, 7, 12]))
return lv2
"""),
    # three parts, the axis negative
    "three_parts": ((NHWC3, '("n", 5, 7, 18)'), """
cat = R.concat((a, b, c), axis=-1)
lv = R.reshape(cat, R.shape([n, 5, 7, 3, 6]))
lv1 = R.permute_dims(lv, axes=(0, 1, 2, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, 5, 7, 18]))
return lv2
""", """
lv2 = R.reshape(R.concat((R.expand_dims(a, axis=4), R.expand_dims(b, axis=4), R.expand_dims(c, axis=4)),
                         axis=4), R.shape([n, 5, 7, 18]))
return lv2
"""),
    # channels first (as exported): the concat along 1, the swap of axes 1 and 2
    "channels_first": ((NCHW, '("n", 12, 5, 7)'), """
cat = R.concat((a, b), axis=1)
lv = R.reshape(cat, R.shape([n, 2, 6, 5, 7]))
lv1 = R.permute_dims(lv, axes=(0, 2, 1, 3, 4))
lv2 = R.reshape(lv1, R.shape([n, 12, 5, 7]))
return lv2
""", """
lv2 = R.reshape(R.concat((R.expand_dims(a, axis=2), R.expand_dims(b, axis=2)), axis=2), R.shape([n, 12, 5, 7]))
return lv2
"""),
    # the dims before the concat's axis reshaped (H and W read the other way round, as a reshape whose
    # dims are not proved the concat's does): the one reshape keeps their flat index too
    "prefix_reshaped": (('a: R.Tensor(("n", "h", "w", 6), "float32"), b: R.Tensor(("n", "h", "w", 6), "float32")',
                         '("n", "w", "h", 12)'), """
cat = R.concat((a, b), axis=3)
lv = R.reshape(cat, R.shape([n, w, h, 2, 6]))
lv1 = R.permute_dims(lv, axes=(0, 1, 2, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, w, h, 12]))
return lv2
""", """
lv2 = R.reshape(R.concat((R.expand_dims(a, axis=4), R.expand_dims(b, axis=4)), axis=4), R.shape([n, w, h, 12]))
return lv2
"""),
}


@pytest.mark.parametrize("name", CASES)
def test_shuffle_of_concat(name):
    (params, ret), before, expected = CASES[name]
    mod, out = assert_rewrites(concat_of_split_pass, program(params, ret, before), program(params, ret, expected))
    assert_same_results(mod, out, [{"n": 1, "h": 3, "w": 2}, {"n": 3, "h": 1, "w": 4}, {"n": 0, "h": 2, "w": 2},
                                   {"n": 2, "h": 0, "w": 3}], rtol=0, atol=0)


UNCHANGED = {
    # the concat is also read elsewhere
    "concat_read_elsewhere": (NHWC, '("n", 5, 7, 12)', """
cat = R.concat((a, b), axis=3)
lv = R.reshape(cat, R.shape([n, 5, 7, 2, 6]))
lv1 = R.permute_dims(lv, axes=(0, 1, 2, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, 5, 7, 12]))
lv3 = R.add(lv2, cat)
return lv3"""),
    # groups that are not the concat's parts (3 groups of 4 over two parts of 6)
    "groups_not_parts": (NHWC, '("n", 5, 7, 12)', """
cat = R.concat((a, b), axis=3)
lv = R.reshape(cat, R.shape([n, 5, 7, 3, 4]))
lv1 = R.permute_dims(lv, axes=(0, 1, 2, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, 5, 7, 12]))
return lv2"""),
    # a transpose that also swaps H and W
    "other_swap": ('a: R.Tensor(("n", 5, 5, 6), "float32"), b: R.Tensor(("n", 5, 5, 6), "float32")',
                   '("n", 5, 5, 12)', """
cat = R.concat((a, b), axis=3)
lv = R.reshape(cat, R.shape([n, 5, 5, 2, 6]))
lv1 = R.permute_dims(lv, axes=(0, 2, 1, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, 5, 5, 12]))
return lv2"""),
    # the result's dims before the concat's axis are not the first reshape's (a reshape of its own)
    "prefix_not_merged_back": ('a: R.Tensor(("n", "h", "w", 6), "float32"), b: R.Tensor(("n", "h", "w", 6), "float32")',
                               '("n", "h", "w", 12)', """
cat = R.concat((a, b), axis=3)
lv = R.reshape(cat, R.shape([n, w, h, 2, 6]))
lv1 = R.permute_dims(lv, axes=(0, 1, 2, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, h, w, 12]))
return lv2"""),
    # a dim after the concat's axis not the concat's (channels first: H and W read the other way round)
    "suffix_reshaped": ('a: R.Tensor(("n", 6, "h", "w"), "float32"), b: R.Tensor(("n", 6, "h", "w"), "float32")',
                        '("n", 12, "w", "h")', """
cat = R.concat((a, b), axis=1)
lv = R.reshape(cat, R.shape([n, 2, 6, w, h]))
lv1 = R.permute_dims(lv, axes=(0, 2, 1, 3, 4))
lv2 = R.reshape(lv1, R.shape([n, 12, w, h]))
return lv2"""),
    # the first reshape splits the concat's axis the other way round from the parts (6 = 2 x 3 per part)
    "uneven_parts": ('a: R.Tensor(("n", 5, 7, 4), "float32"), b: R.Tensor(("n", 5, 7, 8), "float32")',
                     '("n", 5, 7, 12)', """
cat = R.concat((a, b), axis=3)
lv = R.reshape(cat, R.shape([n, 5, 7, 2, 6]))
lv1 = R.permute_dims(lv, axes=(0, 1, 2, 4, 3))
lv2 = R.reshape(lv1, R.shape([n, 5, 7, 12]))
return lv2"""),
}


@pytest.mark.parametrize("name", UNCHANGED)
def test_shuffle_of_concat_leaves_alone(name):
    params, ret, body = UNCHANGED[name]
    assert_unchanged(concat_of_split_pass, program(params, ret, body))
