"""A fuzzer of malformed ONNX models: valid seed models, mutated.

>>> case = make_case(seed=0, index=5, root=tmp_path)      # writes root/model/model.onnx (+ side files)
>>> result = check_case(case)                              # None, or what went wrong

Every mutated model goes through ``relaxpack.from_onnx`` + ``relaxpack.build``
(-O0 and -O2, and one VM run when its inputs are small) and through
``relaxpack convert`` (in-process, tests/cli_helpers.py). A case passes when each either
succeeds or raises a :class:`~relaxpack.errors.RelaxpackError` with a clear
message (the CLI: exit code 1 and one ``error:`` line), within the time
limit, without MemoryError (the campaign runs under an address-space limit)
and without opening any file outside the model's folder: each case has a
sentinel file beside that folder, and an audit hook records every ``open``.
"""

from __future__ import annotations

import os
import random
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from relaxpack.errors import RelaxpackError

from . import mutations_ops as M

SENTINEL_BYTES = b"SENTINEL-must-never-be-read" * 64
#: a run's budgets: a model may loop forever or allocate without end (ONNX allows both)
BUDGETS = {"max_steps": 10 ** 6, "timeout": 2.0, "max_memory": 1 << 30}


# ---------------------------------------------------------------- seeds
def seed_models() -> list[tuple[str, onnx.ModelProto]]:
    from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx

    from .strategies import random_case
    seeds = [("small_cnn", small_cnn(channels=4)), ("transformer", transformer_block_onnx(d_model=16, d_ff=32))]
    seeds.append(("matmul_external", _matmul_model()))
    picked = 0
    for i in range(200):   # generated graphs with If, Conv, shape arithmetic
        case = random_case(seed=99, index=i)
        ops = set(case.ops)
        if len(case.ops) >= 4 and ops & {"If", "Conv", "Reshape", "Gather"}:
            seeds.append((f"generated_{i}", case.model))
            picked += 1
        if picked == 6:
            break
    return seeds


def _matmul_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


_SEEDS: list | None = None


def seeds() -> list[tuple[str, onnx.ModelProto]]:
    global _SEEDS
    if _SEEDS is None:
        _SEEDS = seed_models()
    return _SEEDS


# ---------------------------------------------------------------- cases
@dataclass
class Case:
    index: int
    seed_name: str
    mutations: list[str]
    root: Path                    # root/model/ is the model's folder; root/ holds the sentinel
    model_path: Path
    escape: bool = False          # an external-data location that leaves the model's folder
    notes: list[str] = field(default_factory=list)
    run: bool = True              # run the built model (a hostile family may say its run cannot be bounded)

    @property
    def folder(self) -> Path:
        return self.model_path.parent

    def describe(self) -> str:
        return f"case {self.index}: seed {self.seed_name}, mutations {self.mutations}"


def make_case(seed: int, index: int, root: Path, family: str = "mutations") -> Case:
    """Case ``index`` of ``seed``: a mutated model (or one of a hostile ``family``,
    tests/robustness/hostile_models.py) written under ``root``."""
    rng = random.Random(f"{seed}:{index}")
    if family != "mutations":
        from . import hostile_models
        description, model, run = hostile_models.make(family, rng)
        folder = root / "model"
        folder.mkdir(parents=True, exist_ok=True)
        (root / "secret.bin").write_bytes(SENTINEL_BYTES)
        case = Case(index, family, [description], root, folder / "model.onnx", run=run)
        case.model_path.write_bytes(model.SerializeToString())
        return case
    name, base = rng.choice(seeds())
    model = onnx.ModelProto()
    model.CopyFrom(base)
    folder = root / "model"
    folder.mkdir(parents=True, exist_ok=True)
    (root / "secret.bin").write_bytes(SENTINEL_BYTES)
    case = Case(index, name, [], root, folder / "model.onnx")
    file_mutation = None
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        kind = rng.choice(M.KINDS)
        if kind in M.FILE_MUTATIONS:
            file_mutation = kind
            case.mutations.append(kind)
            continue
        applied = M.MUTATIONS[kind](model, rng, case)
        case.mutations.append(f"{kind}: {applied}" if applied else f"{kind} (no-op)")
    data = model.SerializeToString()
    if file_mutation is not None:
        data = M.FILE_MUTATIONS[file_mutation](data, rng)
        case.escape = False   # the mangled file may no longer point anywhere (the audit hook still watches)
    case.model_path.write_bytes(data)
    return case


# ---------------------------------------------------------------- watching file access
class OpenWatch:
    """Records every ``open`` of a path under ``root`` but outside ``root/model`` (an audit hook:
    builtins.open, io.open, os.open and numpy's file reads all raise the ``open`` event)."""

    _installed = False
    root: Path | None = None
    seen: list[str] = []

    @classmethod
    def start(cls, root: Path) -> None:
        if not cls._installed:
            sys.addaudithook(cls._hook)
            cls._installed = True
        cls.root = Path(os.path.realpath(root))
        cls.seen = []

    @classmethod
    def stop(cls) -> list[str]:
        cls.root = None
        return cls.seen

    @classmethod
    def _hook(cls, event, args):
        if event != "open" or cls.root is None or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        try:
            path = Path(os.path.realpath(os.fsdecode(args[0])))
        except (ValueError, OSError):
            return
        model_folder = cls.root / "model"
        if (path == cls.root or cls.root in path.parents) and not (path == model_folder
                                                                     or model_folder in path.parents):
            cls.seen.append(str(path))


# ---------------------------------------------------------------- known failures
#: What the campaign finds today: (name, regex over the case's mutations, regex over the problem).
#: Each has a strict-xfail reproduction in test_regressions.py; anything else is new.
KNOWN_FAILURES: list[tuple[str, str, str]] = []  # (name, mutation regex, problem regex); none known today


def known_failure(case: str, problem: str) -> str | None:
    """The name of the known failure this is, or None (new)."""
    import re
    for name, mutations, message in KNOWN_FAILURES:
        if re.search(mutations, case) and re.search(message, problem):
            return name
    return None


# ---------------------------------------------------------------- checking one case
def clear_message(err: BaseException) -> str | None:
    """Why ``err``'s message is not clear enough for a user, or None."""
    text = str(err)
    first = text.splitlines()[0] if text else ""
    if len(first.strip()) < 12:
        return f"message too short: {text!r}"
    if "Traceback" in text or " object at 0x" in text:
        return f"message shows internals: {first[:200]!r}"
    return None


def _memory_in_chain(err: BaseException) -> bool:
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, MemoryError):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def _api(case: Case) -> str | None:
    import relaxpack
    from relaxpack.runtime import VirtualMachine
    try:
        mod = relaxpack.from_onnx(case.model_path)
        for level in (0, 2):
            exe = relaxpack.build(mod, opt_level=level)
        feeds = _small_inputs(exe) if case.run else None
        if feeds is not None:
            with np.errstate(all="ignore"):
                VirtualMachine(exe, **BUDGETS).run(feeds)
    except RelaxpackError as err:
        if _memory_in_chain(err):
            return f"MemoryError behind {type(err).__name__}: {str(err)[:300]}"
        if case.escape and "outside the model's folder" not in str(err):
            case.notes.append(f"escape rejected for another reason: {str(err)[:200]}")
        return clear_message(err)
    except MemoryError as err:
        return f"MemoryError: {str(err)[:300]}"
    except Exception as err:
        tb = "".join(traceback.format_exception(type(err), err, err.__traceback__)[-4:])
        return f"{type(err).__name__} (not a RelaxpackError): {str(err)[:300]}\n{tb}"
    if case.escape:
        return "a model whose external data leaves its folder was accepted"
    return None


def _small_inputs(exe) -> dict | None:
    """Random inputs at dims of 2 when the model's inputs are small, else None."""
    from relaxpack.feeds import random_inputs
    from relaxpack.ir.dims import free_vars, parse_dim
    params = exe.function("main").params
    names = set()
    for p in params:
        if p.kind != "tensor" or p.shape is None or len(p.shape) > 32:
            return None
        for d in p.shape:
            if isinstance(d, str):
                names |= free_vars(parse_dim(d))
    values = {n: 2 for n in names}
    total = 0
    for p in params:
        size = 1
        for d in p.shape:
            size *= d if isinstance(d, int) else 2
        total += size
    if total > 1 << 20:
        return None
    try:
        return random_inputs(exe, values, np.random.default_rng(0))
    except RelaxpackError:
        return None


def _cli(case: Case) -> str | None:
    
    from tests.cli_helpers import invoke
    result = invoke("convert", str(case.model_path), "-o", str(case.folder / "out.rpk"))
    if result.exit_code == 0:
        if case.escape:
            return "relaxpack convert accepted external data outside the model's folder"
        return None
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err = result.exception
        tb = "".join(traceback.format_exception(type(err), err, err.__traceback__)[-4:])
        return f"relaxpack convert raised {type(err).__name__}: {str(err)[:300]}\n{tb}"
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    if result.exit_code != 1 or len(errors) != 1:
        return f"relaxpack convert exited {result.exit_code} with {result.output[-400:]!r}"
    if len(errors[0]) < 20:
        return f"relaxpack convert's message is unclear: {errors[0]!r}"
    return None


def check_case(case: Case, cli: bool = True) -> str | None:
    """What went wrong with this case, or None."""
    OpenWatch.start(case.root)
    try:
        problem = _api(case)
        if problem is None and cli:
            problem = _cli(case)
    finally:
        opened = OpenWatch.stop()
    if opened:
        return f"opened files outside the model's folder: {sorted(set(opened))}"
    return problem


__all__ = ["Case", "make_case", "check_case", "seeds", "OpenWatch", "SENTINEL_BYTES", "clear_message",
           "KNOWN_FAILURES", "known_failure"]
