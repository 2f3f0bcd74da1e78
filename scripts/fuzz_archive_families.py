"""Families of hostile archives for ``scripts/fuzz_archive.py --family NAME`` (issue 20).

Each family makes one case from a random generator: the archive's files, the
inputs to run it on, and, when the archive must answer exactly as a seed did
whenever it loads (``lifetimes``), the seed's outputs. The hand-made programs
come from ``tests/runtime/hostile.py``; ``tools`` is the fuzz_archive module
(its ``parts``, ``reseal`` and ``dump`` re-seal an edited manifest).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from dataclasses import dataclass

import numpy as np

from tests.runtime import hostile

X_INPUTS = {"x": np.ones(2, np.float32)}
FAMILIES = ("dags", "loops", "allocs", "lifetimes", "powers")


@dataclass
class FamilyCase:
    description: str
    files: dict                     # file name -> bytes
    inputs: dict
    expected: dict | None = None    # outputs it must give if it loads and runs
    parse_dims: bool = False        # parse its input shapes as tools do


def make_case(family: str, rng, seeds, tools) -> FamilyCase:
    if family in ("dags", "loops", "allocs"):
        make = {"dags": hostile.random_call_graph, "loops": hostile.random_loop,
                "allocs": hostile.random_allocation}[family]
        description, exe = make(rng)
        return FamilyCase(description, {tools.NAME: _unchecked_bytes(exe)}, X_INPUTS)
    seed = rng.choice([s for s in seeds if len(s.files) == 1])    # linked archives: one file to edit
    data = seed.files[tools.NAME]
    manifest = json.loads(tools.parts(data)[0])
    if family == "lifetimes":
        description = _edit_plan(rng, manifest)
        return FamilyCase(description, {tools.NAME: tools.reseal(data, tools.dump(manifest))}, seed.inputs,
                          expected=seed.outputs)
    if family == "powers":
        texts = _edit_shapes(rng, manifest)
        return FamilyCase(f"input dims {texts}"[:300], {tools.NAME: tools.reseal(data, tools.dump(manifest))},
                          seed.inputs, parse_dims=True)
    raise ValueError(f"unknown family {family!r}; families: {', '.join(FAMILIES)}")


def _unchecked_bytes(exe) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "case.rpk")
        hostile.save_unchecked(exe, path)
        with open(path, "rb") as f:
            return f.read()


# ---------------------------------------------------------------- lifetimes
def _plans(manifest):
    """(function, pc of plan_arena, {view pc: buffer index}) of each planned function."""
    table = manifest["func_table"]
    out = []
    for fn in manifest["functions"]:
        calls = [(pc, ins) for pc, ins in enumerate(fn["instructions"]) if ins[0] == "call"]
        plans = [pc for pc, ins in calls if table[ins[2]] == ["builtin", "vm.builtin.plan_arena"]]
        views = {pc: ins[3][0][1] for pc, ins in calls if table[ins[2]] == ["builtin", "vm.builtin.arena_tensor"]}
        if plans:
            out.append((fn, plans[0], views))
    return out


def _edit_plan(rng, manifest) -> str:
    plans = _plans(manifest)
    if not plans:
        return "no plan to edit"
    fn, at, views = rng.choice(plans)
    spec = fn["instructions"][at][3][0][1]
    i = rng.randrange(len(spec))
    edits = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        how = rng.choice(["shorten", "shorten", "shift", "widen", "move", "size", "swap"])
        start, end = spec[i][1], spec[i][2]
        if how == "shorten":
            spec[i][2] = rng.randint(start, end)
        elif how == "shift":
            d = rng.randint(-3, 3)
            spec[i][1], spec[i][2] = max(0, start + d), max(0, end + d)
        elif how == "widen":
            spec[i][1], spec[i][2] = max(0, start - rng.randint(0, 5)), end + rng.randint(0, 5)
        elif how == "move" and views:
            pc = rng.choice(sorted(views))
            i = rng.randrange(len(spec))
            fn["instructions"][pc][3][0][1] = i
        elif how == "size":
            spec[i][0] = rng.choice([0, 64, spec[i][0], ["*", spec[i][0], 2]])
        elif how == "swap":
            j = rng.randrange(len(spec))
            spec[i], spec[j] = spec[j], spec[i]
        edits.append(f"{how} buffer {i} of {fn['name']}")
    return ", ".join(edits)


# ---------------------------------------------------------------- powers
def _edit_shapes(rng, manifest) -> list[str]:
    """Random dim text for one or two dims of the entry's inputs (the signature and the function agree)."""
    entry = next(fn for fn in manifest["functions"] if fn["name"] == manifest["entry"])
    shaped = [k for k, p in enumerate(entry["params"]) if p["shape"]]
    texts = []
    for k in rng.sample(shaped, min(len(shaped), rng.randint(1, 2))):
        j = rng.randrange(len(entry["params"][k]["shape"]))
        texts.append(hostile.random_dim_text(rng))
        for params in (manifest["inputs"], entry["params"]):
            params[k]["shape"][j] = texts[-1]
    return texts


def parse_input_dims(exe) -> str:
    """What a tool does with the archive's input shapes: parse each dim, evaluate it at 2."""
    from relaxpack.ir.dims import evaluate, free_vars, parse_dim
    out = io.StringIO()
    for p in exe.function("main" if "main" in exe.functions else next(iter(exe.functions))).params:
        for d in p.shape or ():
            if isinstance(d, str):
                dim = parse_dim(d)
                out.write(f"{evaluate(dim, {v: 2 for v in free_vars(dim)})} ")
    return out.getvalue()
