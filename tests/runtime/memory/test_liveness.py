"""Liveness on the bytecode (runtime/memory/liveness.py): one linear pass, the same
answer as following every alias set by hand, and each field of a tuple its own
lifetime (a Split into 10,000 outputs plans, saves and runs)."""

import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from relaxpack.runtime import FuncEntry
from relaxpack.runtime.bytecode import NO_DST, Call, If, Ret
from relaxpack.runtime.memory.liveness import FRESH_BUILTINS, value_lifetimes

TABLE = [FuncEntry("builtin", "vm.builtin.alloc_tensor"), FuncEntry("builtin", "vm.builtin.make_tuple"),
         FuncEntry("builtin", "vm.builtin.tuple_getitem"), FuncEntry("kernel", "add"),
         FuncEntry("builtin", "vm.builtin.identity"), FuncEntry("vm", "f"), FuncEntry("builtin", "vm.builtin.shape_of")]
ALLOC, TUPLE, ITEM, KERNEL, IDENTITY, VMCALL, SHAPE = range(7)


def is_alloc(pc, ins):
    return ins.func == ALLOC


def reference(instrs):
    """Alias sets followed by hand, quadratic: register -> the leaves it may hold; a
    register made by make_tuple (and written once) also keeps each field's set."""
    holds: dict[int, set] = {}
    tuples: dict[int, list] = {}       # register -> per field, the set it held when made (if one write)
    first, last, escaping = {}, {}, set()

    def use(values, pc):
        for leaf in values:
            first.setdefault(leaf, pc)
            last[leaf] = pc
    for pc, ins in enumerate(instrs):
        if isinstance(ins, Ret):
            use(holds.get(ins.src, set()), pc)
            escaping |= holds.get(ins.src, set())
            continue
        if isinstance(ins, If):
            use(holds.get(ins.cond, set()), pc)
            continue
        new: set = set()
        fields = None
        if ins.func == ITEM and tuples.get(ins.args[0][1]) is not None \
                and ins.args[1][1] < len(tuples[ins.args[0][1]]):
            new = set(tuples[ins.args[0][1]][ins.args[1][1]])
        else:
            regs = [v for k, v in ins.args if k == "r"] + [v for _, (k, v) in ins.kwargs if k == "r"]
            for r in regs:
                use(holds.get(r, set()), pc)
            if ins.func == ALLOC:
                new = {pc}
            elif ins.func == TUPLE:
                fields = [set(holds.get(r, set())) for r in regs]
                new = set().union(*fields)
            elif TABLE[ins.func].name not in FRESH_BUILTINS and ins.dst != NO_DST:
                new = set().union(*(holds.get(r, set()) for r in regs))
        if ins.dst != NO_DST:
            twice = ins.dst in holds
            holds[ins.dst] = holds.get(ins.dst, set()) | new
            tuples[ins.dst] = None if twice else fields
    return first, last, escaping


def random_program(rng: random.Random, n: int):
    instrs, defined = [], [0]           # register 0 is the input
    for pc in range(n):
        kind = rng.choice([ALLOC, ALLOC, TUPLE, ITEM, KERNEL, IDENTITY, VMCALL, SHAPE])
        dst = rng.choice(defined) if rng.random() < 0.1 else len(defined) + 100
        src = [("r", rng.choice(defined)) for _ in range(rng.randint(1, 3))]
        if kind == ALLOC:
            ins = Call(dst, ALLOC, (("i", "float32"), ("i", (2,))))
        elif kind == ITEM:
            ins = Call(dst, ITEM, (src[0], ("i", rng.randint(0, 2))))
        elif kind == KERNEL:
            ins = Call(NO_DST if rng.random() < 0.8 else dst, KERNEL, tuple(src), (("out", src[0]),))
        else:
            ins = Call(dst, kind, tuple(src))
        instrs.append(ins)
        if ins.dst != NO_DST and ins.dst not in defined:
            defined.append(ins.dst)
    instrs.append(Ret(rng.choice(defined)))
    return instrs


@pytest.mark.parametrize("seed", range(200))
def test_the_linear_pass_agrees_with_alias_sets_followed_by_hand(seed):
    rng = random.Random(seed)
    instrs = random_program(rng, rng.randint(1, 40))
    got = value_lifetimes(instrs, TABLE, is_alloc)
    first, last, escaping = reference(instrs)
    # the same uses; a field taken from a tuple is precise in both (a tuple of an unknown
    # item of a register written twice falls back to everything it may hold)
    assert got.first == first and got.last == last and got.escaping == escaping, instrs


def test_each_field_of_a_tuple_has_its_own_lifetime():
    n = 1000
    instrs = [Call(1 + i, ALLOC, (("i", "float32"), ("i", (2,)))) for i in range(n)]
    instrs.append(Call(n + 1, TUPLE, tuple(("r", 1 + i) for i in range(n))))
    for i in range(n):                          # take item i, use it at once
        instrs.append(Call(n + 2 + i, ITEM, (("r", n + 1), ("i", i))))
        instrs.append(Call(NO_DST, KERNEL, (("r", n + 2 + i),), (("out", ("r", 0)),)))
    instrs.append(Ret(0))
    lt = value_lifetimes(instrs, TABLE, is_alloc)
    tuple_pc = n
    for i in range(n):
        assert lt.first[i] == tuple_pc and lt.last[i] == n + 2 + 2 * i
    assert not lt.escaping


def test_a_split_into_10000_outputs_builds_saves_and_runs(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    import relaxpack
    from relaxpack.runtime import VirtualMachine, load
    n = 10_000
    graph = helper.make_graph([helper.make_node("Split", ["x"], [f"o{i}" for i in range(n)], axis=0, num_outputs=n)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 4])],
                              [helper.make_tensor_value_info(f"o{i}", TensorProto.FLOAT, [1, 4]) for i in range(n)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    relaxpack.build(relaxpack.from_onnx(model)).save(tmp_path / "split.rpk")
    x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    out = VirtualMachine(load(tmp_path / "split.rpk")).run({"x": x})
    assert len(out) == n
    for i in (0, 1, n // 2, n - 1):
        np.testing.assert_array_equal(out[f"o{i}"], x[i:i + 1])
    assert onnx  # the model is plain ONNX


def test_more_outputs_than_an_archive_holds_are_refused_before_building(tmp_path):
    script = textwrap.dedent("""
        from onnx import TensorProto, helper
        import relaxpack
        from relaxpack.errors import ArchiveError
        n = 70_000
        graph = helper.make_graph([helper.make_node("Split", ["x"], [f"o{i}" for i in range(n)], axis=0,
                                                    num_outputs=n)], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, 4])],
                                  [helper.make_tensor_value_info(f"o{i}", TensorProto.FLOAT, [1, 4]) for i in range(n)])
        mod = relaxpack.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10))
        try:
            relaxpack.build(mod)
        except ArchiveError as err:
            print("refused:", err)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: function 'main' has 70000 outputs; an archive holds at most 65536" in done.stdout
