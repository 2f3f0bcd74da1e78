"""Families of hostile ONNX models for the model fuzzer (issue 20): built whole, not mutated.

``python scripts/model_fuzz_campaign.py --family NAME`` draws case ``i`` of a
family from ``random.Random(f"{seed}:{i}")``:

- ``fanout``: local functions calling the next level 1-4 times, up to 40
  levels (expanding to a few thousand nodes, or past the importer's bound);
- ``loops``: ONNX Loops with trip counts up to 2**63 - 1 (or none), conditions
  that stay true, scan outputs that grow (run on a VM with budgets);
- ``allocs``: ConstantOfShape, Expand, Tile and Range of static sizes up to
  2**40 elements (refused at build, or stopped by the memory budget at run);
- ``folds``: what constant folding must not blow up on: EyeLike of a large
  ConstantOfShape, Tile of a constant, a Range with constant bounds, and a
  catastrophic RegexFullMatch on a constant (converted only: Python's ``re``
  cannot be interrupted at run time, see docs/design-notes.md).
"""

from __future__ import annotations

import random

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

FAMILIES = ("fanout", "loops", "allocs", "folds")
SIZES = (0, 1, 3, 1000, 100_000, 1 << 20, 1 << 31, 1 << 40)


def _model(nodes, inputs, outputs, inits=(), functions=(), opset=18, extra_opsets=()):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    opsets = [h.make_opsetid("", opset), *(h.make_opsetid(d, 1) for d in extra_opsets)]
    return h.make_model(graph, opset_imports=opsets, ir_version=10, functions=list(functions))


def _const(name: str, array) -> object:
    return h.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def fanout(rng: random.Random):
    """(description, model, run): F0 calls F1 ``calls`` times, ..., the last applies one op."""
    calls = rng.choice([1, 2, 2, 3, 4])
    small = rng.random() < 0.5
    if calls == 1:
        levels = rng.randint(1, 40)
    else:   # a few thousand nodes, or past the importer's 2**20 (the mid range is a large model, not a case)
        levels = rng.randint(1, int(12 / np.log2(calls))) if small else rng.randint(int(21 / np.log2(calls)) + 2, 40)
    leaf = rng.choice(["Relu", "Neg", "Identity"])
    funcs = []
    for k in range(levels):
        if k == levels - 1:
            body = [h.make_node(leaf, ["x"], ["y"])]
        else:
            names = ["x"] + [f"t{j}" for j in range(calls - 1)] + ["y"]
            body = [h.make_node(f"F{k + 1}", [names[j]], [names[j + 1]], domain="local") for j in range(calls)]
        funcs.append(h.make_function("local", f"F{k}", ["x"], ["y"], body,
                                     [h.make_opsetid("", 18), h.make_opsetid("local", 1)]))
    model = _model([h.make_node("F0", ["x"], ["y"], domain="local")], [h.make_tensor_value_info("x", T.FLOAT, [4])],
                   [h.make_tensor_value_info("y", T.FLOAT, [4])], functions=funcs, extra_opsets=("local",))
    return f"{levels} levels of {calls} calls of {leaf}", model, True


def loops(rng: random.Random):
    """A Loop whose trip count and condition may never stop it, maybe scanning out its state."""
    trips = rng.choice([None, 0, 1, 5, 1 << 31, 1 << 62, (1 << 63) - 1])
    cond = rng.choice([None, True, False])
    stop_after = rng.choice([None, None, 3, 1000])       # None: the body keeps the condition true
    scan = rng.random() < 0.5
    body_nodes = [h.make_node("Add", ["x_in", "one"], ["x_out"])]
    if stop_after is None:
        body_nodes.append(h.make_node("Identity", ["c"], ["c_out"]))
    else:
        body_nodes += [_const("lim", np.array(stop_after, np.int64)), h.make_node("Less", ["i", "lim"], ["c_out"])]
    outs = [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [64])]
    if scan:
        body_nodes.append(h.make_node("Identity", ["x_out"], ["scan"]))
        outs.append(h.make_tensor_value_info("scan", T.FLOAT, [64]))
    body = h.make_graph(body_nodes, "body", [h.make_tensor_value_info("i", T.INT64, []),
                                             h.make_tensor_value_info("c", T.BOOL, []),
                                             h.make_tensor_value_info("x_in", T.FLOAT, [64])], outs,
                        [numpy_helper.from_array(np.ones((), np.float32), "one")])
    nodes = []
    if trips is not None:
        nodes.append(_const("M", np.array(trips, np.int64)))
    if cond is not None:
        nodes.append(_const("cond", np.array(cond)))
    nodes.append(h.make_node("Loop", ["M" if trips is not None else "", "cond" if cond is not None else "", "x"],
                             ["xf"] + (["scans"] if scan else []), body=body))
    outputs = [h.make_tensor_value_info("xf", T.FLOAT, [64])]
    if scan:
        outputs.append(h.make_tensor_value_info("scans", T.FLOAT, ["k", 64]))
    model = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [64])], outputs)
    return f"Loop M={trips} cond={cond} stop_after={stop_after} scan={scan}", model, True


def allocs(rng: random.Random):
    """A static shape from constants, up to 2**40 elements, made by one of four ops."""
    dims = [rng.choice(SIZES) for _ in range(rng.randint(1, 3))]
    op = rng.choice(["ConstantOfShape", "Expand", "Tile", "Range"])
    x = h.make_tensor_value_info("x", T.FLOAT, [1])
    if op == "ConstantOfShape":
        nodes = [_const("s", np.array(dims, np.int64)), h.make_node("ConstantOfShape", ["s"], ["z"]),
                 h.make_node("Add", ["z", "x"], ["y"])]
    elif op == "Expand":
        nodes = [_const("s", np.array(dims, np.int64)), h.make_node("Expand", ["x", "s"], ["y"])]
    elif op == "Tile":
        nodes = [_const("r", np.array(dims[:1], np.int64)), h.make_node("Tile", ["x", "r"], ["y"])]
    else:
        nodes = [_const("a", np.array(0.0, np.float32)), _const("b", np.array(float(dims[0]), np.float32)),
                 _const("d", np.array(1.0, np.float32)), h.make_node("Range", ["a", "b", "d"], ["r"]),
                 h.make_node("Add", ["r", "x"], ["y"])]
    model = _model(nodes, [x], [h.make_tensor_value_info("y", T.FLOAT, None)])
    return f"{op} of {dims}", model, True


def folds(rng: random.Random):
    """Constant inputs whose folding would be huge or would not end."""
    kind = rng.choice(["eye", "tile", "range", "regex"])
    n = rng.choice([10, 5000, 20000, 100_000])
    if kind == "eye":
        nodes = [_const("s", np.array([n, n], np.int64)), h.make_node("ConstantOfShape", ["s"], ["z"]),
                 h.make_node("EyeLike", ["z"], ["y"], k=rng.randint(-2, 2))]
        out, run = T.FLOAT, n <= 5000
    elif kind == "tile":
        nodes = [_const("c", np.arange(16, dtype=np.float32)), _const("r", np.array([n * n], np.int64)),
                 h.make_node("Tile", ["c", "r"], ["y"])]
        out, run = T.FLOAT, n <= 5000
    elif kind == "range":
        nodes = [_const("a", np.array(0, np.int64)), _const("b", np.array(n * n, np.int64)),
                 _const("d", np.array(1, np.int64)), h.make_node("Range", ["a", "b", "d"], ["y"])]
        out, run = T.INT64, n <= 5000
    else:
        text = b"a" * rng.choice([10, 40, 1000]) + b"!"
        nodes = [h.make_node("Constant", [], ["s"], value=h.make_tensor("s", T.STRING, [1], [text])),
                 h.make_node("RegexFullMatch", ["s"], ["y"], pattern=rng.choice(["(a+)+$", "(a|aa)+$", "a*!"]))]
        out, run = T.BOOL, False       # converted only: a backtracking match cannot be interrupted
    model = _model(nodes, [], [h.make_tensor_value_info("y", out, None)], opset=20)
    return f"{kind} of {n}", model, run


def make(family: str, rng: random.Random):
    """(description, model, whether to run it) for case ``rng`` of ``family``."""
    return {"fanout": fanout, "loops": loops, "allocs": allocs, "folds": folds}[family](rng)


__all__ = ["FAMILIES", "make"]
