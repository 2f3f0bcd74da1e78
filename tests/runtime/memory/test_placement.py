"""Static memory placement: hand examples, optimality, the verifier, pools, scale."""

import itertools
import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxpack.errors import RelaxpackError
from relaxpack.runtime.memory import (ALGORITHMS, DEFAULT_ALGORITHMS, Buffer, Plan, PlanError,
                                     align_up, exact, greedy_by_size, hill_climb, lower_bound,
                                     naive_bytes, plan_memory, verify_plan)

A = 64   # the default alignment


# -- independent references: brute force, no code shared with the planner ----------------------

def overlapping_pairs(buffers, plan, alignment=A):
    """Every pair of buffers of one pool that are live together and overlap in address."""
    pairs = []
    for a, b in itertools.combinations(buffers, 2):
        if plan.pool_of.get(a.name, a.pool) != plan.pool_of.get(b.name, b.pool):
            continue
        if not (a.start <= b.end and b.start <= a.end):
            continue
        oa, ob = plan.offsets[a.name], plan.offsets[b.name]
        ta, tb = oa + align_up(a.size, alignment), ob + align_up(b.size, alignment)
        if oa < tb and ob < ta and oa < ta and ob < tb:   # empty ranges overlap nothing
            pairs.append((a.name, b.name))
    return pairs


def live_bytes_peak(buffers, alignment=A):
    times = range(min(b.start for b in buffers), max(b.end for b in buffers) + 1)
    return max(sum(align_up(b.size, alignment) for b in buffers if b.start <= t <= b.end)
               for t in times)


def first_fit_peak(buffers, order, alignment=A):
    placed = []    # (buffer, offset)
    for b in order:
        size, at = align_up(b.size, alignment), 0
        for c, off in sorted(((c, o) for c, o in placed if c.live_with(b)), key=lambda x: x[1]):
            if off >= at + size:
                break
            at = max(at, off + align_up(c.size, alignment))
        placed.append((b, at))
    return max(o + align_up(b.size, alignment) for b, o in placed)


def brute_force_optimum(buffers, alignment=A):
    """Minimum over all orders of first fit (some order of first fit is optimal)."""
    return min(first_fit_peak(buffers, order, alignment) for order in itertools.permutations(buffers))


def grid_optimum(buffers, alignment=A):
    """Minimum over every assignment of aligned offsets: no theory needed."""
    total = sum(align_up(b.size, alignment) for b in buffers)
    best = total
    slots = range(0, total, alignment)
    for offs in itertools.product(slots, repeat=len(buffers)):
        plan = Plan(dict(zip((b.name for b in buffers), offs)), {"global": 10**9}, "grid", {})
        peak = max(o + align_up(b.size, alignment) for b, o in zip(buffers, offs))
        if peak < best and not overlapping_pairs(buffers, plan, alignment):
            best = peak
    return best


def arena(buffers, offsets, alignment=A):
    return max((offsets[b.name] + align_up(b.size, alignment) for b in buffers), default=0)


def random_buffers(rng, n, horizon=None, max_len=6, max_units=16, unit=A):
    horizon = horizon or n
    out = []
    for k in range(n):
        start = rng.randrange(horizon)
        out.append(Buffer(f"t{k}", rng.randint(1, max_units) * unit - rng.randrange(unit),
                          start, start + rng.randrange(max_len)))
    return out


def single_pool_plan(buffers, offsets, alignment=A):
    size = arena(buffers, offsets, alignment)
    return Plan(dict(offsets), {"global": size}, "test", {})


# -- hand examples with a known optimum ---------------------------------------------------------

def test_chain_shares_the_first_and_last_buffer():
    # a -> b -> c: a dies where b is made, so c can reuse a's bytes
    bufs = [Buffer("a", 1000, 0, 1), Buffer("b", 1000, 1, 2), Buffer("c", 1000, 2, 3)]
    plan = plan_memory(bufs)
    assert plan.offsets["a"] == plan.offsets["c"] != plan.offsets["b"]
    assert plan.pool_sizes == {"global": 2048} == plan.lower_bound
    assert plan.optimal == {"global": True}
    assert naive_bytes(bufs) == 3072 and plan.ratio() == 1.0


def test_diamond_reaches_its_lower_bound():
    # 0: x = f()   1: l = g(x)   2: r = h(x)   3: y = k(l, r)
    bufs = [Buffer("x", 256, 0, 2), Buffer("l", 128, 1, 3), Buffer("r", 128, 2, 3),
            Buffer("y", 256, 3, 3)]
    plan = plan_memory(bufs)
    assert lower_bound(bufs) == {"global": 512}
    assert plan.pool_sizes == {"global": 512}
    assert plan.offsets["x"] == plan.offsets["y"]     # the only pair that may share
    verify_plan(bufs, plan)


def test_greedy_can_lose_and_the_refinements_recover():
    bufs = [Buffer("a", 2 * A, 2, 2), Buffer("b", 2 * A, 2, 3), Buffer("c", 4 * A, 3, 5),
            Buffer("d", 2 * A, 1, 2), Buffer("e", 4 * A, 0, 1)]
    for name in ("greedy_by_size", "greedy_by_conflicts", "best_fit"):
        assert arena(bufs, ALGORITHMS[name](bufs)) == 8 * A
    assert brute_force_optimum(bufs) == 6 * A == lower_bound(bufs)["global"]
    assert arena(bufs, hill_climb(bufs)) == arena(bufs, exact(bufs)) == 6 * A
    plan = plan_memory(bufs)
    assert plan.pool_sizes["global"] == 6 * A and plan.algorithm == "hill_climb"


def test_exact_search_proves_an_optimum_above_the_lower_bound():
    # single-instruction buffers pin the others to the arena's edges: no placement reaches
    # the 9 units live at once, 10 is optimal (found by search, minimized by hand)
    u = A
    bufs = [Buffer("b0", 2 * u, 2, 4), Buffer("b1", 2 * u, 3, 5), Buffer("b3", 2 * u, 0, 3),
            Buffer("b4", 3 * u, 5, 5), Buffer("f1", 7 * u, 1, 1), Buffer("f2", 5 * u, 2, 2),
            Buffer("f4", 5 * u, 4, 4), Buffer("f5", 4 * u, 5, 5)]
    assert lower_bound(bufs) == {"global": 9 * u}
    assert brute_force_optimum(bufs) == 10 * u
    plan = plan_memory(bufs)
    assert plan.pool_sizes == {"global": 10 * u} and plan.optimal == {"global": True}
    assert plan.ratio() == 10 / 9
    assert not plan_memory(bufs, exact_limit=0, max_iterations=0).optimal["global"]


def test_typical_cnn_chain_meets_the_lower_bound():
    # conv stages halve the spatial size and double channels; every conv has a one-instruction
    # workspace; a residual block keeps its input alive across two convs
    bufs, t = [], 0
    hw, ch = 112, 32
    prev = None
    for stage in range(4):
        for block in range(2):
            skip = prev
            for conv in range(2):
                name = f"s{stage}b{block}c{conv}"
                bufs.append(Buffer(f"{name}_ws", ch * 9 * 4, t, t))
                bufs.append(Buffer(name, hw * hw * ch * 4, t, t + 1))
                t += 1
            if skip is not None:   # the residual input lives until the add
                bufs = [Buffer(b.name, b.size, b.start, t) if b.name == skip else b for b in bufs]
            bufs.append(Buffer(f"{name}_add", hw * hw * ch * 4, t, t + 1))
            prev = f"{name}_add"
            t += 1
        hw, ch = hw // 2, ch * 2
    plan = plan_memory(bufs)
    verify_plan(bufs, plan)
    assert plan.pool_sizes == plan.lower_bound
    assert plan.pool_sizes["global"] < naive_bytes(bufs) / 3


# -- every algorithm, every candidate -----------------------------------------------------------

@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_each_algorithm_produces_a_valid_plan(name):
    rng = random.Random(7)
    for n in (1, 2, 5, 9, 30, 120):
        bufs = random_buffers(rng, n)
        offsets = ALGORITHMS[name](bufs)
        assert set(offsets) == {b.name for b in bufs}
        assert all(o % A == 0 for o in offsets.values())
        verify_plan(bufs, single_pool_plan(bufs, offsets))
        assert not overlapping_pairs(bufs, single_pool_plan(bufs, offsets))
        assert arena(bufs, offsets) >= live_bytes_peak(bufs)


def test_the_winner_is_never_larger_than_any_candidate():
    rng = random.Random(11)
    for n in (4, 12, 40, 150):
        for _ in range(5):
            bufs = random_buffers(rng, n)
            plan = plan_memory(bufs)
            candidates = plan.candidates["global"]
            assert plan.pool_sizes["global"] == min(candidates.values())
            assert candidates[plan.algorithm] == plan.pool_sizes["global"]
            # the deterministic greedy algorithms are the same inside and outside the planner
            for name in ("greedy_by_size", "greedy_by_conflicts", "best_fit"):
                assert candidates[name] == arena(bufs, ALGORITHMS[name](bufs))
                assert plan.pool_sizes["global"] <= candidates[name]


def test_ties_go_to_the_earliest_algorithm():
    bufs = [Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2)]
    assert plan_memory(bufs, algorithms=("best_fit", "greedy_by_size")).algorithm == "best_fit"
    assert plan_memory(bufs, algorithms=("greedy_by_size", "best_fit")).algorithm == "greedy_by_size"


# -- optimality of the exact search --------------------------------------------------------------

def test_exact_search_matches_brute_force_over_permutations():
    rng = random.Random(3)
    for _ in range(60):
        n = rng.randint(2, 6)
        bufs = random_buffers(rng, n, horizon=n, max_len=4, max_units=8)
        optimum = brute_force_optimum(bufs)
        assert arena(bufs, exact(bufs)) == optimum
        plan = plan_memory(bufs)
        assert plan.pool_sizes["global"] == optimum and plan.optimal["global"]


def test_first_fit_orders_reach_the_grid_optimum():
    # the premise of the exact search, checked against every aligned offset assignment
    rng = random.Random(5)
    for _ in range(25):
        bufs = random_buffers(rng, 4, horizon=3, max_len=3, max_units=3)
        assert brute_force_optimum(bufs) == grid_optimum(bufs) == arena(bufs, exact(bufs))


def test_exact_search_stops_at_its_node_limit_with_a_valid_plan():
    rng = random.Random(9)
    bufs = random_buffers(rng, 10, horizon=6, max_len=5)
    offsets = exact(bufs, node_limit=1)
    verify_plan(bufs, single_pool_plan(bufs, offsets))


def test_hill_climb_is_seeded_and_respects_its_budgets():
    rng = random.Random(13)
    bufs = random_buffers(rng, 200, max_len=20)
    assert hill_climb(bufs, seed=1) == hill_climb(bufs, seed=1)
    for budget in (dict(time_budget_s=0.0), dict(max_iterations=0), dict(max_work=0)):
        offsets = hill_climb(bufs, **budget)
        verify_plan(bufs, single_pool_plan(bufs, offsets))
        assert arena(bufs, offsets) <= arena(bufs, greedy_by_size(bufs))


# -- the verifier against brute force ------------------------------------------------------------

intervals = st.lists(st.tuples(st.integers(0, 8 * A), st.integers(0, 12), st.integers(0, 5)),
                     min_size=1, max_size=14)


def buffers_from(spec):
    return [Buffer(f"b{k}", size, start, start + length) for k, (size, start, length) in enumerate(spec)]


@settings(max_examples=150, deadline=None)
@given(intervals)
def test_every_plan_is_valid_and_a_corrupted_one_is_rejected(spec):
    bufs = buffers_from(spec)
    plan = plan_memory(bufs)
    verify_plan(bufs, plan)
    assert overlapping_pairs(bufs, plan) == []
    assert plan.pool_sizes.get("global", 0) >= plan.lower_bound.get("global", 0)
    assert plan.lower_bound.get("global", 0) == live_bytes_peak(bufs)
    assert plan.pool_sizes.get("global", 0) <= naive_bytes(bufs)

    conflicting = [(a, b) for a, b in itertools.combinations(bufs, 2)
                   if a.live_with(b) and a.size and b.size]
    if conflicting:   # move one buffer onto another it lives with
        a, b = conflicting[0]
        offsets = {**plan.offsets, b.name: plan.offsets[a.name]}
        bad = single_pool_plan(bufs, offsets)
        assert (a.name, b.name) in overlapping_pairs(bufs, bad) or \
            (b.name, a.name) in overlapping_pairs(bufs, bad)
        with pytest.raises(PlanError) as err:
            verify_plan(bufs, bad)
        named = {n for n in offsets if repr(n) in str(err.value).split(":")[0]}
        assert any(named == set(pair) for pair in overlapping_pairs(bufs, bad))


@settings(max_examples=200, deadline=None)
@given(intervals, st.randoms(use_true_random=False))
def test_verifier_agrees_with_brute_force_on_arbitrary_offsets(spec, rnd):
    bufs = buffers_from(spec)
    offsets = {b.name: rnd.randrange(6) * A for b in bufs}
    plan = single_pool_plan(bufs, offsets)
    if overlapping_pairs(bufs, plan):
        with pytest.raises(PlanError, match="overlap"):
            verify_plan(bufs, plan)
    else:
        verify_plan(bufs, plan)


def test_verifier_names_what_is_wrong():
    bufs = [Buffer("a", 64, 0, 1), Buffer("b", 64, 1, 2)]
    good = Plan({"a": 0, "b": 64}, {"global": 128}, "hand", {"global": 128})
    verify_plan(bufs, good)
    cases = [
        (Plan({"a": 0, "b": 0}, {"global": 128}, "hand", {}), "'a' and 'b' overlap"),
        (Plan({"a": 0}, {"global": 128}, "hand", {}), "no offset for buffer 'b'"),
        (Plan({"a": 0, "b": 64, "z": 0}, {"global": 128}, "hand", {}), "unknown buffer"),
        (Plan({"a": 0, "b": 96}, {"global": 256}, "hand", {}), "multiple of 64"),
        (Plan({"a": 0, "b": 64}, {"global": 64}, "hand", {}), "ends past"),
        (Plan({"a": 0, "b": 64}, {"global": 128, "fast": 64}, "hand", {}, {"b": "fast"}), "spill"),
    ]
    for plan, message in cases:
        with pytest.raises(PlanError, match=message):
            verify_plan(bufs, plan)
    with pytest.raises(PlanError, match="over its bound"):
        verify_plan(bufs, good, pools={"global": 100})


# -- pools and spilling --------------------------------------------------------------------------

def test_a_pool_that_fits_keeps_everything():
    bufs = [Buffer("a", 1000, 0, 1, "fast"), Buffer("b", 1000, 1, 2, "fast"), Buffer("g", 5000, 0, 2)]
    plan = plan_memory(bufs, pools={"fast": 2048})
    assert plan.pool_of == {"a": "fast", "b": "fast", "g": "global"}
    assert plan.pool_sizes == {"fast": 2048, "global": 5056}
    verify_plan(bufs, plan, pools={"fast": 2048})


def test_bounded_pool_spills_to_global():
    rng = random.Random(17)
    bufs = [Buffer(b.name, b.size, b.start, b.end, "fast" if k % 3 else "global")
            for k, b in enumerate(random_buffers(rng, 60, max_len=10))]
    cap = 4 * 1024
    plan = plan_memory(bufs, pools={"fast": cap})
    verify_plan(bufs, plan, pools={"fast": cap})
    assert overlapping_pairs(bufs, plan) == []
    assert plan.pool_sizes["fast"] <= cap
    spilled = [b for b in bufs if b.pool == "fast" and plan.pool_of[b.name] == "global"]
    kept = [b for b in bufs if plan.pool_of[b.name] == "fast"]
    assert spilled and kept
    assert all(plan.pool_of[b.name] == "global" for b in bufs if b.pool == "global")
    # spilling is deterministic, whatever order the buffers come in
    assert plan_memory(list(reversed(bufs)), pools={"fast": cap}) == plan
    # each spilled buffer really had no room: its lowest slot among the kept ones ends past the cap
    for b in spilled:
        size, at = align_up(b.size, A), 0
        for off, top in sorted((plan.offsets[k.name], plan.offsets[k.name] + align_up(k.size, A))
                               for k in kept if k.live_with(b)):
            if off >= at + size:
                break
            at = max(at, top)
        assert at + size > cap, b


@settings(max_examples=100, deadline=None)
@given(intervals, st.lists(st.booleans(), min_size=14, max_size=14), st.integers(0, 16 * A))
def test_spilling_plans_are_valid(spec, in_fast, cap):
    bufs = [Buffer(b.name, b.size, b.start, b.end, "fast" if fast else "global")
            for b, fast in zip(buffers_from(spec), in_fast)]
    plan = plan_memory(bufs, pools={"fast": cap})
    verify_plan(bufs, plan, pools={"fast": cap})
    assert overlapping_pairs(bufs, plan) == []
    assert plan.pool_sizes.get("fast", 0) <= cap
    assert all(plan.pool_of[b.name] in (b.pool, "global") for b in bufs)
    for pool, size in plan.pool_sizes.items():
        assert size >= plan.lower_bound[pool]


def test_buffer_larger_than_its_pool_spills_and_pool_can_empty():
    bufs = [Buffer("big", 10_000, 0, 3, "fast"), Buffer("small", 100, 1, 2, "fast")]
    plan = plan_memory(bufs, pools={"fast": 1024})
    assert plan.pool_of == {"big": "global", "small": "fast"}
    plan = plan_memory(bufs, pools={"fast": 0})
    assert plan.pool_of == {"big": "global", "small": "global"}
    assert "fast" not in plan.pool_sizes
    verify_plan(bufs, plan, pools={"fast": 0})


def test_bounded_global_that_is_too_small_is_an_error():
    bufs = [Buffer("a", 1000, 0, 1), Buffer("b", 1000, 1, 2)]
    with pytest.raises(PlanError, match="'global' is bounded to 1024"):
        plan_memory(bufs, pools={"global": 1024})
    assert plan_memory(bufs, pools={"global": 2048}).pool_sizes == {"global": 2048}


def test_pools_are_planned_separately():
    bufs = [Buffer("a", 64, 0, 5, "x"), Buffer("b", 64, 0, 5, "y"), Buffer("c", 64, 0, 5)]
    plan = plan_memory(bufs)
    assert plan.offsets == {"a": 0, "b": 0, "c": 0}
    assert plan.pool_sizes == {"global": 64, "x": 64, "y": 64} == plan.lower_bound


# -- inputs, errors, details ----------------------------------------------------------------------

def test_alignment_rounds_sizes_and_offsets():
    bufs = [Buffer("a", 1, 0, 1), Buffer("b", 130, 1, 2), Buffer("c", 0, 0, 2)]
    plan = plan_memory(bufs, alignment=128)
    assert all(o % 128 == 0 for o in plan.offsets.values())
    assert plan.pool_sizes == {"global": 384} == plan.lower_bound
    assert naive_bytes(bufs, alignment=128) == 384 and naive_bytes(bufs) == 64 + 192
    verify_plan(bufs, plan, alignment=128)


def test_input_order_does_not_matter():
    rng = random.Random(19)
    bufs = random_buffers(rng, 80, max_len=12)
    shuffled = list(bufs)
    rng.shuffle(shuffled)
    assert plan_memory(bufs) == plan_memory(shuffled)


def test_empty_input_and_zero_sizes():
    assert plan_memory([]).pool_sizes == {}
    plan = plan_memory([Buffer("z", 0, 0, 0)])
    assert plan.offsets == {"z": 0} and plan.pool_sizes == {"global": 0}
    assert plan.ratio() == 1.0


@pytest.mark.parametrize("make, message", [
    (lambda: Buffer("a", -1, 0, 0), "negative size"),
    (lambda: Buffer("a", 1, 3, 2), "empty"),
    (lambda: Buffer("a", 1.5, 0, 0), "must be an int"),
    (lambda: Buffer("", 1, 0, 0), "non-empty"),
    (lambda: plan_memory([Buffer("a", 1, 0, 0), Buffer("a", 2, 0, 0)]), "more than once"),
    (lambda: plan_memory([Buffer("a", 1, 0, 0)], algorithms=("magic",)), "unknown memory placement"),
    (lambda: plan_memory([Buffer("a", 1, 0, 0)], alignment=0), "alignment"),
    (lambda: plan_memory([Buffer("a", 1, 0, 0)], pools={"fast": -1}), "bound"),
])
def test_errors_are_plan_errors(make, message):
    with pytest.raises(PlanError, match=message) as err:
        make()
    assert isinstance(err.value, RelaxpackError)


def test_ratio_and_lower_bound_report():
    bufs = [Buffer("a", 64, 0, 0), Buffer("b", 64, 1, 1)]
    plan = Plan({"a": 0, "b": 64}, {"global": 128}, "hand", lower_bound(bufs))
    assert plan.ratio() == 2.0 and plan.ratio("global") == 2.0 and plan.ratio("none") == 1.0


# -- scale ---------------------------------------------------------------------------------------

def test_five_thousand_buffers_complete(capsys):
    rng = random.Random(23)
    bufs = random_buffers(rng, 5000, max_len=30, max_units=256)
    for name in ("greedy_by_size", "greedy_by_conflicts", "best_fit"):
        t0 = time.perf_counter()
        offsets = ALGORITHMS[name](bufs)
        elapsed = time.perf_counter() - t0
        verify_plan(bufs, single_pool_plan(bufs, offsets))
        print(f"{name}: {elapsed:.3f} s")
    t0 = time.perf_counter()
    plan = plan_memory(bufs)
    elapsed = time.perf_counter() - t0
    verify_plan(bufs, plan)
    with capsys.disabled():
        print(f"\n5000 buffers: plan_memory {elapsed:.3f} s, {plan.algorithm}, "
              f"ratio {plan.ratio():.4f}")
    assert set(plan.candidates["global"]) == set(DEFAULT_ALGORITHMS) or plan.optimal["global"]
