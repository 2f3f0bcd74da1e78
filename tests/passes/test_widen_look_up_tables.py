"""WidenLookUpTables (passes/widen_look_up_tables.py): a look-up whose index is a bounded
``round(y)`` shifted and clipped reads a table widened to the index's whole range instead of the
clip, the same elements bit for bit at every value of the quantized input (each end of the bound,
the clip's both sides, -0.0, an empty batch); the int64 index through int32; lookalikes (a clip,
add or index read elsewhere, an unbounded or unrounded value, a table too wide, a take that
checks its indices) stay."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.widen_look_up_tables import MARGIN, MAX_ENTRIES, _widened, widen_look_up_tables
from relaxpack.runtime import VirtualMachine

from .helpers import ops_of, program, run_pass

PARAMS = 'u: R.Tensor(("n",), "int8")'
TABLE = np.linspace(-3.0, 5.0, 256).astype(np.float32)
INT_TABLE = (np.arange(256) * 7 - 900).astype(np.int32)


def _const(table: np.ndarray) -> str:
    return f'R.const({table.tolist()}, "{table.dtype}")'


def _chain(scale: float = 2.5, zp: float | None = 100.0, lo: float = 0.0, hi: float = 255.0,
           cast: str = "int64", rounded: bool = True, in_bounds: bool = True, tail: str = "return lv6",
           ret: str = '("n",)', dtype: str = "float32", extra: str = "") -> str:
    """``take(TABLE, astype(clip(round(u * scale) + zp, lo, hi), cast))`` of an int8 ``u``
    (``|round(u * scale)| <= 128 * scale``)."""
    body = f"""
lv = R.astype(u, dtype="float32")
lv1 = R.multiply(lv, R.const({scale}, "float32"))
lv2 = {"R.round(lv1)" if rounded else "R.negative(lv1)"}
{f'lv3 = R.add(lv2, R.const({zp}, "float32"))' if zp is not None else ""}
lv4 = R.clip({"lv3" if zp is not None else "lv2"}, min={lo}, max={hi}, saturate_nan=True)
lv5 = R.astype(lv4, dtype="{cast}")
lv6 = R.take({_const(TABLE)}, lv5, axis=0, in_bounds={in_bounds})
{extra}{tail}
"""
    return program(PARAMS, ret, body, dtype=dtype)


def _run(mod, u):
    result = VirtualMachine(relaxpack.build(mod, opt_level=0)).run({"u": u})
    return [np.asarray(v) for v in result.values()]


def _assert_same_bits(before, after):
    for u in (np.arange(-128, 128, dtype=np.int8), np.zeros(0, np.int8)):
        for want, got in zip(_run(before, u), _run(after, u), strict=True):
            assert want.dtype == got.dtype and want.shape == got.shape
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def _tables(mod) -> list[np.ndarray]:
    """The constant tables the look-ups of ``main`` read, in binding order."""
    return [b.value.args[0].data for block in mod["main"].body.blocks for b in block.bindings
            if getattr(getattr(b.value, "op", None), "name", None) == "take"]


@pytest.mark.parametrize("zp", [100.0, 0.0, 255.0, -7.0, None])
@pytest.mark.parametrize("lo, hi", [(0.0, 255.0), (3.0, 200.0), (255.0, 255.0)])
def test_the_clip_goes_into_a_widened_table_with_the_same_results(zp, lo, hi):
    """round(u * 2.5) in [-320, 318]: both sides clipped, the widened table covers [-K, K]."""
    mod = parse(_chain(zp=zp, lo=lo, hi=hi))
    out = run_pass(widen_look_up_tables, mod)
    ops = ops_of(out)
    assert "clip" not in ops and ops.count("add") == 1
    assert ops[-3:] == ["astype", "astype", "take"]          # int64 through int32
    (table,) = _tables(out)
    k = (table.size - 1) // 2
    assert table.size == 2 * k + 1 and 320 <= k <= MAX_ENTRIES
    _assert_same_bits(mod, out)


def test_the_widened_table_is_the_table_at_the_clipped_shift():
    table = np.arange(10, 20, dtype=np.float32)
    got = _widened(table, 3, 1, 8, 5)
    want = table[np.clip(np.arange(11) - 5 + 3, 1, 8)]
    np.testing.assert_array_equal(got, want)
    assert got.flags.c_contiguous and got.dtype == table.dtype


def test_every_look_up_of_the_index_gets_its_own_table():
    """A float and an int32 table read through one index: both widened, both the same values."""
    second = f"lv7 = R.take({_const(INT_TABLE)}, lv5, axis=0, in_bounds=True)\n"
    text = _chain(extra=second, tail="gv = (lv6, lv7)\nreturn gv").replace(
        '-> R.Tensor(("n",), "float32")', '-> R.Tuple(R.Tensor(("n",), "float32"), R.Tensor(("n",), "int32"))')
    mod = parse(text)
    out = run_pass(widen_look_up_tables, mod)
    assert "clip" not in ops_of(out)
    tables = _tables(out)
    assert [t.dtype for t in tables] == [np.float32, np.int32] and tables[0].size == tables[1].size > 256
    _assert_same_bits(mod, out)


def test_an_int32_index_keeps_its_one_cast():
    mod = parse(_chain(cast="int32"))
    out = run_pass(widen_look_up_tables, mod)
    assert ops_of(out)[-3:] == ["add", "astype", "take"]
    _assert_same_bits(mod, out)


@pytest.mark.parametrize("case", ["clip read", "add read", "index read", "unrounded", "unbounded scale",
                                  "checked take", "uint8 index", "beyond the table"])
def test_lookalikes_are_kept(case):
    kwargs, extra, tail, ret = {}, "", "return lv6", '("n",)'
    if case in ("clip read", "add read", "index read"):
        var = {"clip read": "lv4", "add read": "lv3", "index read": "lv5"}[case]
        dtype = "int64" if case == "index read" else "float32"
        tail = f"gv = (lv6, {var})\nreturn gv"
        text = _chain(tail=tail).replace(
            '-> R.Tensor(("n",), "float32")',
            f'-> R.Tuple(R.Tensor(("n",), "float32"), R.Tensor(("n",), "{dtype}"))')
    else:
        kwargs = {"unrounded": {"rounded": False}, "unbounded scale": {"scale": 200.0},
                  "checked take": {"in_bounds": False}, "uint8 index": {"cast": "uint8", "zp": 100.0},
                  "beyond the table": {"hi": 256.0}}[case]
        text = _chain(**kwargs, extra=extra, ret=ret)
    mod = parse(text)
    out = run_pass(widen_look_up_tables, mod)
    assert "clip" in ops_of(out) and [t.size for t in _tables(out)] == [256]


def test_the_largest_bound_is_the_table_limit():
    """2K + 1 entries at most, K = ceil(B (1 + 1/16)) + 2: round(u * 60) (B = 7680, K = 8162) widens,
    round(u * 61) (B = 7808, K = 8298) does not."""
    assert MAX_ENTRIES == 1 << 14 and MARGIN == 1 / 16
    for scale, widened in ((60.0, True), (61.0, False)):
        mod = parse(_chain(scale=scale))
        out = run_pass(widen_look_up_tables, mod)
        assert ("clip" not in ops_of(out)) == widened
        if widened:
            _assert_same_bits(mod, out)
