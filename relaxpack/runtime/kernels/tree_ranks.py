"""Tree ensembles on small batches by threshold ranks: per feature one count, one table row.

:func:`.tree_gemm.bits_scores` tests every node (``I x T`` comparisons, a
select and an AND over the nodes per call). Every node reading feature
``f`` tests ``x[f]`` against a value, so all of them are decided by one
number: how many of ``f``'s test values (sorted, then ``+inf``) are at
least ``x[f]`` (``c``, 0 exactly when ``x[f]`` is NaN). At convert time,
for each feature and each ``c``, the AND of the tested nodes' leaf masks
(the node's held mask where ``c`` says it holds, else its failed one) is
one table row of ``T`` uint64; a call then makes one comparison per test
value, one count per feature, gathers ``F`` rows and ANDs them: the bit
left per tree is the leaf reached, as in the masks of ``tree_gemm``. The
leaf weights are summed in the same order, so the scores are
``bits_scores``' bit for bit (the tests compare them).

How each node becomes a condition on ``c`` (``L`` values, ``w`` the ``k``-th):

- ``x <= t``: ``c >= L - k`` with ``w = t``;
- ``-x <= t`` (the masks' negated columns) is ``x >= -t``, i.e. not
  ``x <= w`` with ``w`` the float64 just below ``-t``, and not NaN:
  ``1 <= c < L - k``; ``t = +inf`` is "not NaN" (``c >= 1``);
- a NaN threshold holds for no ``x``.

The comparisons are made in float64 as the masks make them; a float32
``x`` is compared with each value rounded down to float32, which decides
``x <= w`` exactly without converting ``x``.

Where the table stays small (:class:`UnionTables`) the counts are not made by
comparisons at all: one ``searchsorted`` of the samples in the union of all
features' values gives each ``x[f]`` its position there, which fixes ``f``'s
count; a table by (feature, position) holds the row that count selects. Four
numpy calls to the AND instead of six, and no ``S x N`` comparisons (0.5-0.85x
the time on the zoo's forests at batch 1-64).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..fpstate import quiet
from .ml import RowTiles

#: table rows x trees the ranks keep at most (uint64 each: 2 MiB)
MAX_TABLE_VALUES = 1 << 18
_ONE = np.uint64(1)
_F32 = np.dtype(np.float32)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True, eq=False)
class TreeRanks:
    """The tables of one ensemble; see the module docstring."""

    feature: np.ndarray     # intp (S,): the column of x each test value reads (grouped by feature)
    values: np.ndarray      # float64 (S,): per feature its test values ascending, then +inf
    values32: np.ndarray    # float32 (S,): the same rounded down to float32 (for a float32 x)
    starts: np.ndarray      # intp (U,): where each used feature's values start
    rows: np.ndarray        # intp (U,): where each used feature's table rows start
    table: np.ndarray       # uint64 (R, T): per feature and count, the leaves left possible per tree
    #: values a sample costs here beyond what the masks' ``I x T`` cost (``S + U x T - I x T``):
    #: fewer calls win on small batches, the masks' fewer values on large ones (see :func:`use_ranks`)
    extra: int = 0
    #: the positions form (see :func:`union_tables`), None where its table would be too large
    union: "UnionTables | None" = None

    def __post_init__(self):
        # the same as columns (S, 1) / (U, 1), against samples along the last axis
        object.__setattr__(self, "values_col", self.values[:, None])
        object.__setattr__(self, "values_col32", self.values32[:, None])
        object.__setattr__(self, "rows_col", self.rows[:, None])


def tree_ranks(column: np.ndarray, threshold: np.ndarray, held_mask: np.ndarray, failed_mask: np.ndarray,
               features: int) -> TreeRanks | None:
    """The tables from the leaf masks' node arrays (:class:`.tree_gemm.TreeBits`, ``(I, T)``:
    ``column`` is the feature, plus ``features`` where the node reads ``-x``); None when the
    tables would be too large or no node tests anything (the masks then serve)."""
    held_mask, failed_mask = held_mask.reshape(column.shape), failed_mask.reshape(column.shape)
    threshold = threshold.reshape(column.shape)
    existing = held_mask[0] | failed_mask[0]                       # the real leaves of each tree
    tests: dict[int, list] = {}
    for i, t in zip(*np.nonzero(held_mask != failed_mask)):       # padding nodes keep both: no test
        col, value = int(column[i, t]), float(threshold[i, t])
        tests.setdefault(col % features, []).append((t, *_condition(col >= features, value),
                                                      held_mask[i, t], failed_mask[i, t]))
    count = column.shape[1]
    used = sorted(tests)
    cuts = [np.unique([w for _, kind, w, _, _ in tests[f] if kind in ("le", "inv")] + [np.inf]) for f in used]
    if not used or sum(len(c) + 1 for c in cuts) * count > MAX_TABLE_VALUES:
        return None
    tables = []
    for f, values in zip(used, cuts):
        size = len(values)
        rows = np.full((size + 1, count), _ALL)
        c = np.arange(size + 1)
        for t, kind, w, held, failed in tests[f]:
            k = int(np.searchsorted(values, w)) if kind in ("le", "inv") else size - 1
            holds = {"le": c >= size - k, "inv": (c >= 1) & (c < size - k), "nonnan": c >= 1,
                     "never": np.zeros(size + 1, bool)}[kind]
            rows[:, t] &= np.where(holds, held, failed)
        tables.append(rows)
    tables[0] &= existing
    values = np.concatenate(cuts)
    sizes = np.array([len(v) for v in cuts])
    return TreeRanks(np.repeat(np.array(used, np.intp), sizes), values, _down_to_float32(values),
                     np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.intp),
                     np.concatenate(([0], np.cumsum(sizes + 1)[:-1])).astype(np.intp), np.concatenate(tables),
                     values.size + len(used) * count - column.size, union_tables(used, cuts, tables))


@dataclass(frozen=True, eq=False)
class UnionTables:
    """The ranks read through one sorted array: every feature's test values lie in ``values``
    (their union, ascending, ``+inf`` last), so ``p``, the count of ``values`` below ``x[f]``
    (one ``searchsorted`` for all features and samples; ``len(values)`` exactly for NaN, which
    numpy sorts last), decides how many of ``f``'s own values are at least ``x[f]``: ``table``
    holds per feature and ``p`` the row the counts table has there."""

    values: np.ndarray      # float64 (V,): the union of the features' test values, ascending
    columns: np.ndarray | int   # intp (U,): the used features, or their count when they are 0 .. U - 1
    starts: np.ndarray      # intp (U, 1): feature j's rows start at j * (V + 1)
    table: np.ndarray       # uint64 (U * (V + 1), T)


def union_tables(used: list[int], cuts: list[np.ndarray], tables: list[np.ndarray]) -> UnionTables | None:
    """The positions form of the per-feature tables (``cuts[j]``: feature ``used[j]``'s values with
    ``+inf``; ``tables[j]``: its rows by count), None when it would hold more than
    :data:`MAX_TABLE_VALUES` table values."""
    union = np.unique(np.concatenate(cuts))
    positions = union.size + 1
    if len(used) * positions * tables[0].shape[1] > MAX_TABLE_VALUES:
        return None
    rows = []
    for values, table in zip(cuts, tables):
        below = np.searchsorted(values, union, side="left")         # own values below union[p]
        count = np.append(values.size - below, 0)                    # p = V: NaN, no value at least it
        rows.append(table[count])
    columns = len(used) if used == list(range(len(used))) else np.array(used, np.intp)
    return UnionTables(union, columns, (np.arange(len(used), dtype=np.intp) * positions)[:, None],
                       np.concatenate(rows))


#: a batch takes the ranks while its samples times :attr:`TreeRanks.extra` stay under this
#: (measured with samples along the last axis: 0.65-0.95x the masks' time at batch 1-128 on the
#: zoo's forests, gradient boosting's shallow trees, whose tables are wide for their few nodes,
#: included: 0.8x at batch 128, samples x extra 26624)
RANKS_MAX_EXTRA = 1 << 15


def use_ranks(ranks: TreeRanks | None, samples: int) -> bool:
    """Whether a batch of ``samples`` runs by ``ranks`` rather than by the leaf masks."""
    return ranks is not None and samples * ranks.extra <= RANKS_MAX_EXTRA


def _condition(negated: bool, t: float) -> tuple[str, float]:
    """(kind, value) of a node testing ``x <= t`` (``-x <= t`` when ``negated``): see the module docstring."""
    if t != t:
        return "never", 0.0
    if not negated:
        return ("nonnan", 0.0) if t == np.inf else ("le", t)
    if t == np.inf:
        return "nonnan", 0.0
    return "inv", math.nextafter(-t, -math.inf)


def _down_to_float32(values: np.ndarray) -> np.ndarray:
    """Each value as the largest float32 not above it (``x <= v`` for every float32 ``x`` alike)."""
    with quiet():
        down = values.astype(np.float32)
    above = down.astype(np.float64) > values
    down[above] = np.nextafter(down[above], np.float32(-np.inf))
    return down


def rank_scores(ranks: TreeRanks, weights: np.ndarray, offsets: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The summed leaf weights, float64 ``(N, K)``, of samples ``x`` ``(N, F)``: ``weights``
    ``(T * L, K)`` and ``offsets`` ``(T, 1)`` as :class:`.tree_gemm.TreeBits` keeps them.

    Samples run along the last axis (features or test values along the first): the AND of the
    gathered table rows runs over the outer axis, passes over contiguous rows where the
    samples-first layout reduced across strided columns (3-4x the time at batch 64)."""
    union = ranks.union
    if union is not None:
        xt = x.T[:union.columns] if type(union.columns) is int else x.T.take(union.columns, axis=0)
        rows = union.values.searchsorted(xt)                                   # (U, N)
        rows += union.starts
        left = np.bitwise_and.reduce(union.table.take(rows, axis=0), axis=0)  # (N, T): one bit per tree
    else:
        left = _left_by_counts(ranks, x)
    left -= _ONE
    leaf = np.bitwise_count(left.T) + offsets                                  # (T, N): the bit's position
    return np.add.reduce(weights.take(leaf, axis=0), axis=0)                   # (T, N, K) -> (N, K)


def rank_scorer(ranks: TreeRanks, weights: np.ndarray, offsets: np.ndarray, base: np.ndarray | None = None):
    """:func:`rank_scores` of these tables as a function of ``x`` alone, what it reads bound once
    (an instruction's calls share it: its attribute lookups and branches were ~0.5 us a call).
    Three targets gather from weights padded to four columns (numpy's take copies rows of 8,
    16 or 32 bytes by a specialized loop, 24-byte rows by a generic one: 0.55x the gather at
    batch 64); the padding column is never read, and the others sum as before. Trees of at most
    8 leaves take :func:`_byte_scorer`, of at most 56 :func:`_hashed_scorer` where it finds its
    modulus.

    ``base`` (float64 ``(K,)``, K >= 3 targets): the scorer of ``rank_scores(...) + base`` by the
    byte form, the base row gathered as one more tree's and added last by the same reduction
    (the sum ``scores + base`` makes, bit for bit: the trees' rows reduce over the outer axis one
    after the other), or None where that form does not apply."""
    union = ranks.union
    targets = weights.shape[1]
    if base is not None and (union is None or targets < 3 or base.shape != (targets,)):
        return None
    if union is None:
        return lambda x: rank_scores(ranks, weights, offsets, x)
    if targets == 3:
        weights = np.concatenate((weights, np.zeros((weights.shape[0], 1))), axis=1)
        base = None if base is None else np.append(base, 0.0)
    # (the starts repeated per batch size: a same-shape add, where the (U, 1) column broadcast)
    search, starts, columns = union.values.searchsorted, RowTiles(union.starts, axis=1), union.columns
    by_bytes = _byte_scorer(union.table, weights, offsets, base)
    leading = type(columns) is int
    if by_bytes is not None:
        search32 = _down_to_float32(union.values).searchsorted
        return _byte_score(search, search32, starts, union.starts[:, 0].copy(), columns, leading, by_bytes,
                           offsets.shape[0] + (base is not None), targets)
    if base is not None:
        return None
    take_weights, and_reduce, add_reduce, count = weights.take, np.bitwise_and.reduce, np.add.reduce, np.bitwise_count
    hashed = _hashed_scorer(union.table, weights, offsets)
    if hashed is not None:
        rows_of, take_weights, modulus = hashed[0].take, hashed[1].take, hashed[2]

        def score(x):
            rows = search(x.T[:columns] if leading else x.T.take(columns, axis=0))   # (U, N)
            rows += starts(rows.shape[1])
            left = and_reduce(rows_of(rows, axis=0), 0)                               # (N, T): t << 56 | 2 ** leaf
            left %= modulus                                                           # its weights row
            # (remainders below the modulus, viewed as int64: numpy 2.0-2.1's take refuses uint64 indices)
            scores = add_reduce(take_weights(left.T.view(np.int64), axis=0), 0)       # (T, N, K') -> (N, K')
            return scores[:, :3] if targets == 3 else scores
        return score
    rows_of = union.table.take

    def score(x):
        rows = search(x.T[:columns] if leading else x.T.take(columns, axis=0))       # (U, N)
        rows += starts(rows.shape[1])
        left = and_reduce(rows_of(rows, axis=0), 0)                                   # (N, T)
        left -= _ONE
        scores = add_reduce(take_weights(count(left.T) + offsets, axis=0), 0)        # (T, N, K') -> (N, K')
        return scores[:, :3] if targets == 3 else scores
    return score


def _byte_score(search, search32, starts, starts_row, columns, leading: bool, by_bytes: tuple, read: int,
                targets: int):
    """The byte form's ``score(x)``: the first ``read`` lanes of the AND of the rows (the trees', and
    the base row's lane after them where :func:`_byte_scorer` made one) index the weights. One
    float32 sample searches the union's values rounded down to float32 (``search32``): a float32
    ``x`` is above ``w`` exactly when it is above the largest float32 not above ``w``, so the
    positions are the same without converting ``x`` (~0.25 us of the row's search)."""
    rows_of, take_weights, lane = by_bytes[0].take, by_bytes[1].take, by_bytes[2]
    and_reduce, add_reduce = np.bitwise_and.reduce, np.add.reduce

    def score(x):
        if x.shape[0] == 1:
            return _one_row(x[0])
        rows = search(x.T[:columns] if leading else x.T.take(columns, axis=0))   # (U, N)
        rows += starts(rows.shape[1])
        index = and_reduce(rows_of(rows, axis=0), 0).view(lane)[:, :read]        # (N, T): 256 t + 2 ** leaf
        scores = add_reduce(take_weights(index.T, axis=0), 0)                      # (T, N, K') -> (N, K')
        return scores[:, :3] if targets == 3 else scores

    def _one_row(sample):
        # one sample on 1-d arrays, no sample axis (~0.5 us of a batch of one's ~5.7): the same
        # rows, the same AND, and the weights' (T, K') rows reduced as the batch path's
        # (T, 1, K') (numpy drops the unit axis: the same loop, the same bits)
        rows = (search32 if sample.dtype is _F32 else search)(sample[:columns] if leading else
                                                              sample.take(columns))   # (U,)
        rows += starts_row
        index = and_reduce(rows_of(rows, axis=0), 0).view(lane)[:read]            # (T,)
        scores = add_reduce(take_weights(index, axis=0), 0)                        # (T, K') -> (K',)
        return scores[None, :3] if targets == 3 else scores[None]
    return score


#: the most leaves per tree, and trees, the hashed form holds: a tree's number in a word's top
#: byte, its leaves in the 56 bits below
HASH_LEAVES, HASH_TREES = 56, 256
#: the hashed weights table's rows are at most this many times the weights' (else the bit counts),
#: and the words searched at most this many (the search, once per process and tree shape, costs
#: up to ~10 ms at 1024 words, as much as the rest of the ensemble's tables)
HASH_MAX_SPREAD, HASH_MAX_WORDS = 16, 1024


def _hashed_scorer(table: np.ndarray, weights: np.ndarray, offsets: np.ndarray):
    """Trees of at most 56 leaves, at most 256 of them: ``(table with tree t's number in the top
    byte of its column, weights by remainder, the modulus M)``, None otherwise or when no M up to
    :data:`HASH_MAX_SPREAD` times the leaves gives distinct remainders (or the table would pass
    :data:`MAX_TABLE_VALUES`). Every row of tree ``t`` holds ``t`` in the top byte, so the AND
    of the rows keeps it: the word left is ``t << 56 | 2 ** leaf``, and its remainder by M (the
    least under which the ``T x L`` such words have distinct remainders, found once) is the row
    of a weights table laid out by remainder (zero elsewhere). One remainder where the bit's
    position took three calls (a subtract, a count, a uint8 + intp add): ~0.8 us a call at
    batches 1-7. The same rows, the same sums."""
    trees = offsets.shape[0]
    leaves = weights.shape[0] // trees if trees else 0
    if not trees or trees > HASH_TREES or leaves > HASH_LEAVES or trees * leaves > HASH_MAX_WORDS:
        return None
    tree, words = _words(trees, leaves)
    modulus = _modulus(trees, leaves, min(HASH_MAX_SPREAD * words.size, MAX_TABLE_VALUES // weights.shape[1]))
    if modulus is None:
        return None
    by_remainder = np.zeros((modulus, weights.shape[1]))
    by_remainder[words % np.uint64(modulus)] = weights
    low = np.uint64((1 << HASH_LEAVES) - 1)
    return (table & low) | tree.reshape(1, -1), by_remainder, np.uint64(modulus)


def _words(trees: int, leaves: int) -> tuple[np.ndarray, np.ndarray]:
    """(each tree's number in the top byte, (T, 1)), the words ``t << 56 | 2 ** k`` (row ``t * L + k``)."""
    tree = np.arange(trees, dtype=np.uint64)[:, None] << np.uint64(HASH_LEAVES)
    return tree, (tree | (np.uint64(1) << np.arange(leaves, dtype=np.uint64))).reshape(-1)


@functools.lru_cache(maxsize=64)
def _modulus(trees: int, leaves: int, most: int) -> int | None:
    """:func:`_distinct_modulus` of :func:`_words` (which depend on the counts alone: kept per
    process), the words in a fixed shuffled order (prefixes then mix trees, and rule candidates
    out sooner: 2-5x faster than tree by tree)."""
    words = _words(trees, leaves)[1]
    return _distinct_modulus(np.random.default_rng(0).permutation(words), most)


def _distinct_modulus(words: np.ndarray, most: int) -> int | None:
    """The least M from ``len(words)`` to ``most`` under which ``words`` have distinct remainders,
    or None. Candidates go in blocks, each through prefixes of ``words`` of growing length (a
    collision among the first words rules M out before the whole set is sorted for it)."""
    n = words.size
    block = max(1, (1 << 18) // max(n, 1))
    for start in range(n, most + 1, block):
        candidates = np.arange(start, min(start + block, most + 1), dtype=np.uint64)
        for size in (min(n, 64), min(n, 512), n):
            remainders = np.sort(words[:size] % candidates[:, None], axis=1)
            candidates = candidates[(remainders[:, 1:] != remainders[:, :-1]).all(axis=1)]
            if not candidates.size:
                break
        if candidates.size:
            return int(candidates[0])
    return None


#: leaves per tree the byte form holds
BYTE_LEAVES = 8


def _byte_scorer(table: np.ndarray, weights: np.ndarray, offsets: np.ndarray, base: np.ndarray | None = None):
    """Trees of at most 8 leaves (gradient boosting's usual depth 3) as one byte each: ``(table
    packed into uint64 words of lanes, weights by (tree, byte), the lane dtype)``, None for
    larger trees or a weight table above :data:`MAX_TABLE_VALUES`. Tree ``t``'s lane holds its
    mask byte under ``t`` (``256 t + mask``: uint16 lanes, four a word, up to 256 trees, else
    uint32): every row holds the same ``t`` there, so the AND of the words keeps it and the lane
    left is ``256 t + 2 ** leaf``, the row of ``t``'s 256 weight rows (zero but at the powers of
    two) to gather, with no index arithmetic (the bit's position took three calls, an offset
    added to the byte one). Built and read as lanes, so the byte order of the machine's words
    never matters. ``base`` (a row of the weights' width): one more lane after the trees', the
    same in every row, ``256 T``, the row of the weights where ``base`` is appended (a word more
    where the trees fill theirs); None where that lane does not fit."""
    trees = offsets.shape[0]
    leaves = weights.shape[0] // trees if trees else 0
    if not trees or leaves > BYTE_LEAVES or trees * 256 * weights.shape[1] > MAX_TABLE_VALUES:
        return None
    lane = np.dtype(np.uint16 if trees <= LANE16_MAX_TREES else np.uint32)
    lanes = trees + (base is not None)
    if base is not None and (256 * trees > np.iinfo(lane).max or base.shape != (weights.shape[1],)):
        return None
    per_word = 8 // lane.itemsize
    packed = np.zeros((table.shape[0], -(-lanes // per_word) * per_word), lane)
    # (a leaf's bit is below 8: the rest of the mask is never left)
    packed[:, :trees] = (table & np.uint64(0xFF)).astype(lane) | (np.arange(trees, dtype=lane) << lane.type(8))
    by_byte = np.zeros((trees, 256, weights.shape[1]))
    by_byte[:, np.left_shift(1, np.arange(leaves))] = weights.reshape(trees, leaves, -1)
    by_byte = by_byte.reshape(trees * 256, -1)
    if base is not None:
        packed[:, trees] = 256 * trees
        by_byte = np.concatenate((by_byte, base.reshape(1, -1)))
    return packed.view(np.uint64), by_byte, lane


#: the most trees whose lane number fits a uint16 lane's high byte
LANE16_MAX_TREES = 256


def _left_by_counts(ranks: TreeRanks, x: np.ndarray) -> np.ndarray:
    """The leaves left per tree, uint64 ``(N, T)``, by comparing every test value."""
    if x.dtype == np.float32:
        values = ranks.values_col32
    else:
        values = ranks.values_col
        if x.dtype != np.float64:
            x = x.astype(np.float64)
    at_least = np.less_equal(x.T.take(ranks.feature, axis=0), values)          # (S, N)
    counts = np.add.reduceat(at_least, ranks.starts, axis=0, dtype=np.intp) if x.shape[0] else \
        np.empty((ranks.starts.size, 0), np.intp)
    counts += ranks.rows_col
    return np.bitwise_and.reduce(ranks.table.take(counts, axis=0), axis=0)


__all__ = ["TreeRanks", "UnionTables", "rank_scorer", "rank_scores", "tree_ranks", "union_tables", "use_ranks"]
