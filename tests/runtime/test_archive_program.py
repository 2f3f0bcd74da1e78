"""The loader's checks of what an archive's program does (issue 20, items 4, 7 and 11):
memory plans against the bytecode's liveness, call graphs of bounded cost,
allocations from immediates. Each hostile archive is refused at load, quickly,
with one ArchiveError naming the function at fault."""

import json
import time

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ArchiveError
from relaxpack.runtime import VirtualMachine, load
from relaxpack.runtime.bytecode import Call
from relaxpack.runtime.memory.liveness import value_lifetimes
from relaxpack.runtime.program_check import MAX_CALL_COST, MAX_CALL_DEPTH
from tests.runtime.hostile import call_cycle, call_dag, huge_heap, save_unchecked, static_alloc
from tests.runtime.test_archive import reseal

rng = np.random.default_rng(0)


@pytest.fixture(scope="module")
def transformer():
    from relaxpack.examples.onnx_models import transformer_block_onnx
    exe = relaxpack.build(relaxpack.from_onnx(transformer_block_onnx()), opt_level=2)
    return exe, {"x": rng.standard_normal((2, 7, 32)).astype(np.float32)}


def plan_instruction(manifest):
    """(function, pc) of main's plan_arena call in a parsed manifest."""
    table = manifest["func_table"]
    fn = next(f for f in manifest["functions"] if f["name"] == "main")
    for pc, ins in enumerate(fn["instructions"]):
        if ins[0] == "call" and table[ins[2]] == ["builtin", "vm.builtin.plan_arena"]:
            return fn, pc
    raise AssertionError("no plan_arena")


def views(manifest, fn):
    """pc -> buffer index of main's arena_tensor calls."""
    table = manifest["func_table"]
    return {pc: ins[3][0][1] for pc, ins in enumerate(fn["instructions"])
            if ins[0] == "call" and table[ins[2]] == ["builtin", "vm.builtin.arena_tensor"]}


def load_error(path) -> str:
    with pytest.raises(ArchiveError) as info:
        load(path)
    return str(info.value)


# ---------------------------------------------------------------- memory plans (item 4)
def test_a_shortened_lifetime_is_refused(transformer, tmp_path):
    exe, inputs = transformer
    path = tmp_path / "m.rpk"
    exe.save(path)

    def shorten(m):
        fn, pc = plan_instruction(m)
        spec = fn["instructions"][pc][3][0][1]
        i = max(range(len(spec)), key=lambda k: spec[k][2] - spec[k][1])   # the longest-lived buffer
        assert spec[i][2] - spec[i][1] >= 2
        spec[i][2] = spec[i][1] + 1
    reseal(path, shorten)
    message = load_error(path)
    assert "memory plan of function 'main'" in message and "is declared live over" in message


def test_two_live_values_in_one_buffer_are_refused(transformer, tmp_path):
    exe, _ = transformer
    path = tmp_path / "m.rpk"
    exe.save(path)
    main = exe.functions["main"]
    used = value_lifetimes(main.instructions, exe.func_table, lambda pc, ins: isinstance(ins, Call)
                           and exe.func_table[ins.func].name == "vm.builtin.arena_tensor")

    def share(m):
        fn, pc = plan_instruction(m)
        spec = fn["instructions"][pc][3][0][1]
        made = views(m, fn)
        # two views used at once; point the second at the first's buffer, whose lifetime then covers both
        for a in made:
            for b in made:
                if made[a] != made[b] and a in used.first and b in used.first \
                        and used.first[a] < used.first[b] < used.last[a]:
                    fn["instructions"][b][3][0][1] = made[a]
                    spec[made[a]][1] = min(spec[made[a]][1], spec[made[b]][1])
                    spec[made[a]][2] = max(spec[made[a]][2], spec[made[b]][2])
                    return
        raise AssertionError("no overlapping pair")
    reseal(path, share)
    assert "holds two values live together" in load_error(path)


def test_a_returned_view_and_a_leaked_plan_are_refused(transformer, tmp_path):
    exe, _ = transformer
    for what in ("view", "plan"):
        path = tmp_path / f"{what}.rpk"
        exe.save(path)

        def leak(m):
            fn, pc = plan_instruction(m)
            ret = fn["instructions"][-1]
            assert ret[0] == "ret"
            ret[1] = fn["instructions"][pc][1] if what == "plan" else fn["instructions"][min(views(m, fn))][1]
        reseal(path, leak)
        assert ("may be returned" if what == "view" else "reads the plan's register") in load_error(path)


def test_a_view_larger_than_its_buffer_is_refused_when_made(transformer, tmp_path):
    exe, inputs = transformer
    path = tmp_path / "m.rpk"
    exe.save(path)

    def shrink(m):
        fn, pc = plan_instruction(m)
        fn["instructions"][pc][3][0][1][0][0] = 64      # buffer 0 planned for 64 bytes
    reseal(path, shrink)
    with pytest.raises(ArchiveError, match="was planned for 64"):
        VirtualMachine(load(path)).run(inputs)


def test_archives_the_compiler_makes_pass_the_plan_check(transformer, tmp_path):
    from relaxpack.examples.onnx_models import small_cnn
    cnn = relaxpack.build(relaxpack.from_onnx(small_cnn()))
    for exe in (transformer[0], cnn):
        exe.save(tmp_path / "ok.rpk")                    # save runs the loader's checks too
        load(tmp_path / "ok.rpk")
    out = VirtualMachine(load(tmp_path / "ok.rpk")).run({"input": np.ones((1, 3, 32, 32), np.float32)})
    assert np.isfinite(out["logits"]).all()


def test_a_lying_plan_is_not_saved(transformer, tmp_path):
    from relaxpack.runtime.bytecode import VMFunction
    exe, _ = transformer
    fn = exe.functions["main"]
    pc = next(i for i, ins in enumerate(fn.instructions) if isinstance(ins, Call)
              and exe.func_table[ins.func].name == "vm.builtin.plan_arena")
    ins = fn.instructions[pc]
    spec = tuple((size, start, start, pool) for size, start, end, pool in ins.args[0][1])
    lying = Call(ins.dst, ins.func, ((ins.args[0][0], spec),) + ins.args[1:], ins.kwargs)
    instrs = fn.instructions[:pc] + (lying,) + fn.instructions[pc + 1:]
    bad = relaxpack.runtime.Executable({"main": VMFunction(fn.name, fn.params, fn.num_registers, instrs, fn.outputs,
                                                            fn.dim_ranges, fn.attrs)}, exe.func_table, exe.constants)
    with pytest.raises(ArchiveError, match="cannot save: memory plan"):
        bad.save(tmp_path / "bad.rpk")


# ---------------------------------------------------------------- call graphs (item 7)
def test_a_binary_call_dag_60_deep_is_refused_at_once(tmp_path):
    save_unchecked(call_dag(60), tmp_path / "dag.rpk")
    t0 = time.perf_counter()
    message = load_error(tmp_path / "dag.rpk")
    assert time.perf_counter() - t0 < 5
    assert "may run" in message and f"more than {MAX_CALL_COST}" in message


def test_a_small_call_dag_loads_and_runs(tmp_path):
    save_unchecked(call_dag(8), tmp_path / "dag.rpk")
    x = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal(VirtualMachine(load(tmp_path / "dag.rpk")).run({"x": x})["y"], x)


def test_call_cycles_and_deep_chains_are_refused(tmp_path):
    save_unchecked(call_cycle(3), tmp_path / "cycle.rpk")
    assert "cycle (f0 -> f1 -> f2 -> f0)" in load_error(tmp_path / "cycle.rpk")
    save_unchecked(call_dag(MAX_CALL_DEPTH + 1, fanout=1), tmp_path / "deep.rpk")
    assert f"more than {MAX_CALL_DEPTH}" in load_error(tmp_path / "deep.rpk")


# ---------------------------------------------------------------- allocations (item 11)
def test_a_shape_heap_larger_than_its_dims_is_refused(tmp_path):
    save_unchecked(huge_heap(400_000_000), tmp_path / "heap.rpk")
    assert "a shape heap of 400000000 slots" in load_error(tmp_path / "heap.rpk")


def test_a_static_tensor_over_the_limit_is_refused(tmp_path):
    save_unchecked(static_alloc((1 << 20, 1 << 20)), tmp_path / "big.rpk")
    assert "a static tensor of shape (1048576, 1048576) float32 needs" in load_error(tmp_path / "big.rpk")
    save_unchecked(static_alloc((2, -1)), tmp_path / "neg.rpk")
    assert "is not a list of dims" in load_error(tmp_path / "neg.rpk")


def test_manifest_edits_reach_the_program_checks(tmp_path):
    """The same refusals for a re-sealed manifest of an archive relaxpack wrote."""
    save_unchecked(static_alloc((4,)), tmp_path / "m.rpk")
    load(tmp_path / "m.rpk")

    def grow(m):
        m["functions"][0]["instructions"][0][3][1][1] = [1 << 40]
    reseal(tmp_path / "m.rpk", grow)
    assert "needs 4398046511104 bytes" in load_error(tmp_path / "m.rpk")
    assert json  # (the manifest is JSON; reseal re-encodes it)
