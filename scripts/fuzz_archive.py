"""Fuzz the archive loader: every mutated archive must load or raise ArchiveError.

    python scripts/fuzz_archive.py --cases 10000 --seed 0
    python scripts/fuzz_archive.py --seed 0 --replay 1234      # one case, with its traceback
    python scripts/fuzz_archive.py --family dags --cases 10000  # a family of hostile programs

Families of hostile programs (issue 20; scripts/fuzz_archive_families.py):
``dags`` (call graphs of random depth and fan-out, cycles), ``loops``
(``vm.builtin.loop`` with immediate trip counts up to 2**63 - 1, scan
outputs), ``allocs`` (shape heaps and static tensors of absurd sizes),
``lifetimes`` (a seed's memory plan edited to disagree with its bytecode;
whatever loads must answer exactly as the seed did) and ``powers`` (input
shapes written with powers, big numbers and deep nesting; tools parse them).
Every case's VM runs with budgets (:data:`BUDGETS`), as a server runs
untrusted archives. The io families are fuzz_archive_io's.

Seed archives (a CNN, a transformer block with linked and external params,
an ``If`` module, an executable with constants of many dtypes, strings and
duplicates) are mutated by truncation, bit flips, inserted or deleted
bytes, header fields set to boundary values, and numbers, types, keys or
text of the manifest changed and then re-sealed (length and checksum
recomputed, so the change reaches the structural checks). A case passes
when ``load`` raises :class:`~relaxpack.errors.ArchiveError`, or succeeds
and one run of the VM returns outputs or raises a ``RelaxpackError``; when
the mutation left the manifest and constants intact, the outputs must equal
the unmutated archive's. Each case has a time limit (a hang is a failure).
Case ``i`` of seed ``S`` is reproducible on its own (``--replay``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from relaxpack.errors import ArchiveError, RelaxpackError
from relaxpack.runtime import Executable, FuncEntry, VirtualMachine, load
from relaxpack.runtime.bytecode import Call, ParamInfo, Ret, VMFunction

HEADER = struct.Struct("<8sIIQ32sQ")
NAME = "seed.rpk"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "scripts"), ROOT]   # the io families; tests.robustness.input_bombs
import fuzz_archive_families as families  # noqa: E402
import fuzz_archive_io as io_families  # noqa: E402
#: --family: the structural mutations below, one of fuzz_archive_io's, or a family of hostile programs
FAMILIES = ("structure", *io_families.ARCHIVE_FAMILIES, "input-files", *families.FAMILIES)
#: what a case's VM may use: a server's budgets for untrusted archives
BUDGETS = {"max_steps": 10 ** 6, "timeout": 0.5, "max_memory": 1 << 30}


# ---------------------------------------------------------------- seeds
@dataclass
class Seed:
    name: str
    files: dict[str, bytes]          # file name -> bytes (the archive, maybe its params file)
    inputs: dict
    outputs: dict


def mixed_dtype_executable(extra=()) -> Executable:
    """One function returning a tuple of constants of many dtypes (two with equal bytes), then ``extra``."""
    consts = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array(True), np.arange(5, dtype=np.int64),
              np.arange(6, dtype=np.float32).reshape(3, 2), np.zeros((0, 4), np.float16),
              np.array(["a", "bc", "\u00e9"], dtype=object), np.array([b"\x00\xff"], dtype=object),
              np.arange(4, dtype=np.uint8)]
    try:
        import ml_dtypes
        consts.append(np.arange(3, dtype=ml_dtypes.bfloat16))
    except ImportError:
        pass
    consts.extend(extra)
    table = [FuncEntry("builtin", "vm.builtin.make_tuple"), FuncEntry("kernel", "add")]
    tensor = ParamInfo("x", "tensor", "float32", 2, (2, 3))
    instrs = (Call(2, 0, tuple(("c", i) for i in range(len(consts)))),
              Call(-1, 1, (("r", 0), ("c", 0)), (("out", ("r", 1)),)),
              Ret(2))
    fn = VMFunction("main", (tensor, ParamInfo("out", "tensor", "float32", 2, (2, 3))), 3, instrs,
                    outputs=("consts",))
    return Executable({"main": fn}, table, consts, {"stage": "lower", "source_sha256": "0" * 64})


def _narrow_constants(rng) -> list:
    """Constants a compact archive stores narrower (format 3): in int8, float16, int16, twice the same."""
    weight = rng.integers(-100, 100, (32, 40)).astype(np.float32)
    return [weight, rng.standard_normal(1100).astype(np.float16).astype(np.float32),
            rng.integers(-3000, 3000, 600).astype(np.int64), weight.copy().reshape(-1)]


def build_seeds(workdir: str) -> list[Seed]:
    import relaxpack
    from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
    from relaxpack.ir import BlockBuilder, If, TensorStructInfo, Var, sym
    from relaxpack.ops import make_call

    rng = np.random.default_rng(0)
    n = sym("n")
    cond, x = Var("c", TensorStructInfo((), "bool")), Var("x", TensorStructInfo((n,), "float32"))
    bb = BlockBuilder()
    with bb.function("main", [cond, x]):
        bb.begin_scope()
        then = bb.end_scope(bb.emit(make_call("exp", x)))
        bb.begin_scope()
        other = bb.end_scope(bb.emit(make_call("negative", x)))
        bb.emit_func_output(bb.emit(If(cond, then, other), "out"))
    transformer = relaxpack.build(relaxpack.from_onnx(transformer_block_onnx()))
    builds = [
        ("cnn", relaxpack.build(relaxpack.from_onnx(small_cnn())), "linked",
         {"input": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}),
        ("transformer", transformer, "linked", {"x": rng.standard_normal((2, 5, 32)).astype(np.float32)}),
        ("transformer-external", transformer, "external", {"x": rng.standard_normal((1, 3, 32)).astype(np.float32)}),
        ("if", relaxpack.build(bb.get()), "linked", {"c": np.array(False), "x": np.arange(3, dtype=np.float32)}),
        ("mixed", mixed_dtype_executable(), "linked",
         {"x": np.ones((2, 3), np.float32), "out": np.zeros((2, 3), np.float32)}),
        ("compact", mixed_dtype_executable(_narrow_constants(rng)), "linked",
         {"x": np.ones((2, 3), np.float32), "out": np.zeros((2, 3), np.float32)}),
    ]
    seeds = []
    for name, exe, params, inputs in builds:
        path = os.path.join(workdir, NAME)
        exe.save(path, params=params, constants="compact" if name == "compact" else "mapped")
        files = {name: _read(os.path.join(workdir, name)) for name in sorted(os.listdir(workdir))}
        for name in files:       # the archive and, external, its params file (named by its content)
            os.remove(os.path.join(workdir, name))
        seeds.append(Seed(name, files, inputs, _run(load_files(files, workdir), inputs)))
    return seeds


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def load_files(files: dict[str, bytes], workdir: str) -> Executable:
    for name in sorted(set(os.listdir(workdir)) | set(files)):
        path = os.path.join(workdir, name)
        if name in files:
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(files[name])
            os.replace(tmp, path)  # a new file: mappings of the last case stay valid
        else:
            os.remove(path)
    return load(os.path.join(workdir, NAME))


def _run(exe: Executable, inputs: dict, **budgets) -> dict:
    inputs = {k: v.copy() for k, v in inputs.items()}
    return VirtualMachine(exe, **budgets).run(inputs)


# ---------------------------------------------------------------- mutations
INTERESTING = (0, 1, -1, 63, 64, 65, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1)


def boundary_ints(rng: random.Random, v: int) -> int:
    choices = [v + 1, v - 1, v + 64, v - 64, v * 2, v // 2, -v, rng.randint(0, 2 * abs(v) + 1),
               rng.choice(INTERESTING), 10**30, -2**63]
    return rng.choice(choices)


def parts(data: bytes):
    """(manifest bytes, data section bytes, header fields) of an intact archive."""
    magic, version, flags, length, digest, offset = HEADER.unpack(data[:64])
    return data[64:64 + length], data[offset:], (magic, version, flags, length, digest, offset)


def reseal(data: bytes, manifest: bytes) -> bytes:
    """The archive with a new manifest: length, checksum and data offset recomputed."""
    _, section, (magic, version, flags, *_rest) = parts(data)
    offset = -(-(64 + len(manifest)) // 64) * 64
    header = HEADER.pack(magic, version, flags, len(manifest), hashlib.sha256(manifest).digest(), offset)
    return header + manifest + bytes(offset - 64 - len(manifest)) + section


def dump(m) -> bytes:
    return json.dumps(m, sort_keys=True, separators=(",", ":")).encode()


def _nodes(value, path=()):
    """Every (path, value) in a JSON document."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, path + (i,))


def _set(root, path, value):
    node = root
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _pick_node(rng: random.Random, m, predicate):
    # favour the parts the loader must bound: the header-like numbers, the constant table, the bytecode
    nodes = [(p, v) for p, v in _nodes(m) if p and predicate(v)]
    focus = [(p, v) for p, v in nodes if p[0] in ("constants", "data", "format_version", "func_table")
             or (p[0] == "functions" and "attrs" not in p)]
    pool = focus if focus and rng.random() < 0.7 else nodes
    return rng.choice(pool) if pool else (None, None)


@dataclass
class Target:
    """What a mutation works on: the seed's files and the parts of its archive."""
    files: dict[str, bytes]
    data: bytes
    manifest: bytes
    section: bytes
    fields: tuple

    def replace(self, data: bytes) -> dict[str, bytes]:
        return {**self.files, NAME: data}


def truncate(rng, t: Target):
    data, offset = t.data, t.fields[5]
    cut = rng.choice([rng.randrange(len(data)), rng.randrange(64), 64 + len(t.manifest) - 1, offset,
                      len(data) - 1, offset + rng.randrange(max(len(t.section), 1))])
    return f"truncate to {cut} of {len(data)}", t.replace(data[:cut])


def bitflip(rng, t: Target):
    buf = bytearray(t.data)
    region = rng.choice([(0, 64), (64, 64 + len(t.manifest)), (0, len(buf))])
    flips = [(rng.randrange(*region), rng.randrange(8)) for _ in range(rng.choice([1, 1, 2, 8]))]
    for pos, bit in flips:
        buf[pos] ^= 1 << bit
    return f"flip bits {flips}", t.replace(bytes(buf))


def padding(rng, t: Target):
    """Harmless: a byte no field covers (after the manifest, between constants)."""
    external = params_name(t.files)
    name, base = (external, 64) if external else (NAME, t.fields[5])
    holes = [(NAME, range(64 + len(t.manifest), t.fields[5]))]
    ranges = sorted((c["offset"], c["offset"] + c["nbytes"]) for c in json.loads(t.manifest)["constants"]
                    if "offset" in c and c["nbytes"])
    holes += [(name, range(base + end, base + start)) for (_, end), (start, _) in zip(ranges, ranges[1:])]
    name, hole = rng.choice([(n, h) for n, h in holes if len(h)])
    buf = bytearray(t.files[name])
    pos = rng.choice(hole)
    buf[pos] = rng.randrange(1, 256)
    return f"padding byte {pos} of {name} = {buf[pos]}", {**t.files, name: bytes(buf)}


def header(rng, t: Target):
    names = ["magic", "version", "flags", "length", "digest", "offset"]
    i = rng.choice([0, 1, 2, 3, 3, 4, 5, 5])
    values = list(t.fields)
    if i == 0:
        values[0] = rng.choice([b"\x89RPK\r\n\x1a\x00", b"PK\x03\x04\x00\x00\x00\x00", bytes(8)])
    elif i == 4:
        values[4] = hashlib.sha256(t.manifest + b" ").digest()
    else:
        limit = 2**32 if i in (1, 2) else 2**64
        values[i] = boundary_ints(rng, values[i]) % limit
    return f"header {names[i]} = {values[i]!r}", t.replace(HEADER.pack(*values) + t.data[64:])


def resize(rng, t: Target):
    """Insert, delete or append bytes: every later offset shifts."""
    data = t.data
    how = rng.choice(["insert", "delete", "append"])
    pos = rng.choice([rng.randrange(len(data)), 64 + len(t.manifest), t.fields[5]])
    count = rng.choice([1, 7, 64, 4096])
    if how == "insert":
        data = data[:pos] + bytes(rng.randrange(256) for _ in range(count)) + data[pos:]
    elif how == "delete":
        data = data[:pos] + data[pos + count:]
    else:
        data = data + bytes(count)
    return f"{how} {count} bytes at {pos}", t.replace(data)


def params_name(files: dict) -> str | None:
    """The params file among ``files`` (external params), or None."""
    return next((name for name in files if name != NAME), None)


def params_file(rng, t: Target):
    name = params_name(t.files)
    files = dict(t.files)
    if name is None:
        return manifest_number(rng, t)
    params = files[name]
    how = rng.choice(["truncate", "flip", "remove", "append", "header"])
    if how == "truncate":
        files[name] = params[:rng.randrange(len(params))]
    elif how == "flip":
        buf = bytearray(params)
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
        files[name] = bytes(buf)
    elif how == "remove":
        del files[name]
    elif how == "append":
        files[name] = params + bytes(64)
    else:
        at, size = rng.choice([(8, 4), (12, 4), (16, 8)])
        value = boundary_ints(rng, int.from_bytes(params[at:at + size], "little")) % 2**(8 * size)
        files[name] = params[:at] + value.to_bytes(size, "little") + params[at + size:]
    return f"params file: {how}", files


# the re-sealed mutations: the checksum passes, the change reaches the structural checks
def manifest_text(rng, t: Target):
    buf = bytearray(t.manifest)
    for _ in range(rng.choice([1, 2, 4])):
        buf[rng.randrange(len(buf))] = rng.choice(b'{}[]",:0123456789-e. \\"\xff')
    return "manifest text edit", t.replace(reseal(t.data, bytes(buf)))


def manifest_number(rng, t: Target):
    m = json.loads(t.manifest)
    path, v = _pick_node(rng, m, lambda v: isinstance(v, int) and not isinstance(v, bool))
    new = boundary_ints(rng, v)
    _set(m, path, new)
    return f"manifest {_fmt(path)}: {v} -> {new}", t.replace(reseal(t.data, dump(m)))


def manifest_structure(rng, t: Target):
    m = json.loads(t.manifest)
    path, v = _pick_node(rng, m, lambda v: True)
    op = rng.choice(["delete", "retype", "retype", "duplicate", "wrap", "rename", "swap"])
    parent = m
    for key in path[:-1]:
        parent = parent[key]
    if op == "delete":
        del parent[path[-1]]
    elif op == "retype":
        parent[path[-1]] = rng.choice([None, True, 1.5, "x", [], {}, [v], -1, "float33", "kernel", "r"])
    elif op == "duplicate" and isinstance(parent, list):
        parent.insert(path[-1], v)
    elif op == "wrap":  # nest the value in lists, written as text (json.dumps would recurse too deep)
        depth = rng.choice([1, 2, 200, 5000])
        parent[path[-1]] = "\0deep\0"
        text = dump(m).replace(b'"\\u0000deep\\u0000"', b"[" * depth + dump(v) + b"]" * depth, 1)
        return f"manifest wrap {depth} at {_fmt(path)}", t.replace(reseal(t.data, text))
    elif op == "rename" and isinstance(v, str):
        parent[path[-1]] = rng.choice([v + "x", "", "main", "vm.builtin.identity", "add", "../x", "string",
                                       "bfloat16", "packed", "i", "c", "f"])
    elif op == "swap":
        other_path, other = _pick_node(rng, m, lambda o: type(o) is type(v))
        if not _is_prefix(path, other_path) and not _is_prefix(other_path, path):
            parent[path[-1]] = other
            _set(m, other_path, v)
    return f"manifest {op} at {_fmt(path)}", t.replace(reseal(t.data, dump(m)))


MUTATIONS = [(truncate, 1), (bitflip, 2), (padding, 1), (header, 2), (resize, 3), (params_file, 1),
             (manifest_text, 1), (manifest_number, 3), (manifest_structure, 2)]


def mutate(rng: random.Random, seed: Seed) -> tuple[str, dict[str, bytes], bool]:
    """(description, mutated files, whether the manifest was changed and re-sealed)."""
    data = seed.files[NAME]
    manifest, section, fields = parts(data)
    target = Target(seed.files, data, manifest, section, fields)
    mutation = rng.choices([m for m, _ in MUTATIONS], weights=[w for _, w in MUTATIONS])[0]
    description, files = mutation(rng, target)
    return description, files, description.startswith("manifest")


def _is_prefix(a, b) -> bool:
    return b[:len(a)] == a


def _fmt(path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)[:120]


# ---------------------------------------------------------------- running cases
class CaseTimeout(BaseException):
    """Raised in a case that ran past its time limit (not an Exception, so nothing swallows it)."""


@contextlib.contextmanager
def deadline(seconds: float):
    """Interrupt the block after ``seconds`` (SIGALRM in the main thread; elsewhere measured after)."""
    use_alarm = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    start = time.perf_counter()
    if use_alarm:
        def on_alarm(signum, frame):
            raise CaseTimeout(f"ran longer than {seconds}s")
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    if time.perf_counter() - start > seconds:
        raise CaseTimeout(f"ran longer than {seconds}s")


@dataclass(frozen=True)
class Failure:
    case: int
    seed: str
    mutation: str
    stage: str          # "load" or "run" (the VM, on an archive the loader accepted)
    resealed: bool      # the mutation changed the manifest and recomputed its checksum
    error: str

    @property
    def blame(self) -> str:
        """Whose bug: the loader's, unless a changed but valid program made the VM fail."""
        return "vm" if self.stage == "run" and self.resealed else "loader"

    def __str__(self) -> str:
        return f"case {self.case} ({self.seed}; {self.mutation}) [{self.stage}] {self.error}"


@dataclass
class Report:
    cases: int = 0
    slowest: float = 0.0        # seconds of the slowest case
    outcomes: Counter = field(default_factory=Counter)       # (mutation kind, outcome) -> count
    failures: list[Failure] = field(default_factory=list)

    def blamed(self, who: str) -> list[Failure]:
        return [f for f in self.failures if f.blame == who]

    def summary(self, shown: int = 40) -> str:
        by_outcome = Counter()
        for (_, outcome), count in self.outcomes.items():
            by_outcome[outcome] += count
        lines = [f"cases tried: {self.cases}",
                 f"failures found: {len(self.failures)} (loader: {len(self.blamed('loader'))}, "
                 f"VM on accepted re-sealed archives: {len(self.blamed('vm'))})",
                 "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(by_outcome.items())),
                 f"slowest case: {self.slowest:.2f} s"]
        for kind in sorted({k for k, _ in self.outcomes}):
            counts = ", ".join(f"{o} {n}" for (k, o), n in sorted(self.outcomes.items()) if k == kind)
            lines.append(f"  {kind:9s} {counts}")
        kinds = Counter(f"[{f.stage}] {f.error.split(':')[0]}" for f in self.failures)
        lines += [f"  {count:6d}  {kind}" for kind, count in kinds.most_common()]
        lines += [f"  FAIL {f}" for f in self.failures[:shown]]
        return "\n".join(lines)


def run_case(index: int, seed_value: int, seeds: list[Seed], workdir: str, time_limit: float,
             report: Report, verbose: bool = False, family: str = "structure") -> None:
    rng = random.Random(f"{seed_value}:{index}" if family == "structure" else f"{family}:{seed_value}:{index}")
    seed = rng.choice(seeds)
    inputs = seed.inputs
    expected = parse_dims = None
    if family == "structure":
        description, files, resealed = mutate(rng, seed)
    elif family in families.FAMILIES:
        made = families.make_case(family, rng, seeds, sys.modules[__name__])
        description, files, inputs, resealed = made.description, made.files, made.inputs, True
        expected, parse_dims = made.expected, made.parse_dims
    elif family == "input-files":
        description, files, resealed = "input file", seed.files, False
    else:
        renames: dict = {}
        description, data = io_families.ARCHIVE_FAMILIES[family](rng, seed.files[NAME], renames)
        files, resealed = {**seed.files, NAME: data}, True
        inputs = {renames.get(k, k): v for k, v in seed.inputs.items()}
    kind = family if family in families.FAMILIES else \
        "manifest" if description.startswith("manifest") else description.split()[0]
    report.cases += 1
    outcome, error, stage = "rejected", None, "load"
    started = time.perf_counter()
    try:
        with deadline(time_limit), warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                exe = load_files(files, workdir)
            except ArchiveError as err:
                exe, error = None, str(err)
            exe_params = list(exe.function("main").params) if exe is not None and "main" in exe.functions else []
            if exe is not None:
                outcome, stage = "loaded", "run"
                try:
                    if parse_dims:
                        families.parse_input_dims(exe)
                    outputs = _run(exe, inputs, **BUDGETS)
                    outcome = "ran"
                    if not resealed and not _same(outputs, seed.outputs):
                        outcome, error = "failure", "an intact manifest and constants gave different outputs"
                    if expected is not None and not _same(outputs, expected):
                        outcome, error = "failure", "an archive the loader accepted gave different outputs"
                except RelaxpackError as err:
                    outcome, error = "run error", str(err)
                del exe
            if family != "structure" and family not in families.FAMILIES:
                what, code, problem = _cli_case(family, rng, workdir, inputs, exe_params)
                description += what
                if problem:
                    outcome, error, stage = "failure", problem, "cli"
                elif family == "input-files":
                    outcome = "cli ok" if code == 0 else "cli error"
    except CaseTimeout as err:
        outcome, error = "failure", f"hang: {err}"
    except Exception as err:  # noqa: BLE001 - anything else is what the fuzzer looks for
        outcome = "failure"
        error = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        if verbose:
            traceback.print_exc()
    report.slowest = max(report.slowest, time.perf_counter() - started)
    if outcome == "ran" and files == seed.files and family == "structure":
        outcome = "unchanged"   # the mutation happened to change nothing
    name = family if family in families.FAMILIES else seed.name
    if verbose:
        print(f"case {index} ({name}; {description}): {outcome}: {error}")
    if outcome == "failure":
        report.failures.append(Failure(index, name, description, stage, resealed, error))
    report.outcomes[kind, outcome] += 1


def _cli_case(family: str, rng: random.Random, workdir: str, inputs: dict,
              params: list) -> tuple[str, int, str | None]:
    """The CLI on the case's archive: ``inspect`` (text and JSON) and ``run`` on its inputs, or,
    for ``input-files``, ``run`` on a hostile input file: (what ran, exit code, problem or None)."""
    archive = os.path.join(workdir, NAME)
    if family == "input-files":
        tensors = [p for p in params if p.kind == "tensor" and p.shape is not None]
        if not tensors:
            return "", 0, None
        what, args = io_families.hostile_input(rng, tensors, workdir)
        return (f"; {what}", *io_families.cli_problem("run", archive, *args))
    for args in (["inspect", archive], ["inspect", archive, "--json", "--bytecode"]):
        code, problem = io_families.cli_problem(*args)
        if problem:
            return "", code, problem
    path = os.path.join(workdir, "inputs.npz")
    try:
        np.savez(path, **inputs)
    except (ValueError, OSError, TypeError):   # a name numpy cannot store
        return "", 0, None
    return ("", *io_families.cli_problem("run", archive, "--inputs", path))


def _same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(_equal(a[k], b[k]) for k in a)


def _equal(x, y) -> bool:
    if isinstance(x, tuple):
        return isinstance(y, tuple) and len(x) == len(y) and all(_equal(p, q) for p, q in zip(x, y))
    return np.array_equal(np.asarray(x), np.asarray(y))


def campaign(cases: int, seed_value: int, time_limit: float = 5.0, start: int = 0,
             seeds: list[Seed] | None = None, progress=None, family: str = "structure") -> Report:
    report = Report()
    with tempfile.TemporaryDirectory() as workdir:
        seeds = seeds if seeds is not None else build_seeds(workdir)
        for index in range(start, start + cases):
            run_case(index, seed_value, seeds, workdir, time_limit, report, family=family)
            if progress and (index - start + 1) % progress == 0:
                print(f"{index - start + 1} cases, {len(report.failures)} failures", file=sys.stderr, flush=True)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="index of the first case")
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds per case")
    parser.add_argument("--replay", type=int, help="run only this case, with its traceback")
    parser.add_argument("--family", choices=FAMILIES, default="structure",
                        help="what to mutate: the archive's structure (default), one of fuzz_archive_io's, "
                             "or a family of hostile programs (see the docstring)")
    parser.add_argument("--memory", type=float, default=None, help="address-space limit in GiB")
    args = parser.parse_args(argv)
    if args.memory is not None:
        import resource
        limit = int(args.memory * 2 ** 30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if args.replay is not None:
        with tempfile.TemporaryDirectory() as workdir:
            seeds = build_seeds(workdir)
            report = Report()
            run_case(args.replay, args.seed, seeds, workdir, args.time_limit, report, verbose=True,
                     family=args.family)
        print(report.summary())
        return 1 if report.failures else 0
    t0 = time.perf_counter()
    report = campaign(args.cases, args.seed, args.time_limit, args.start, progress=1000, family=args.family)
    print(report.summary())
    import resource
    print(f"seconds: {time.perf_counter() - t0:.1f}; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
