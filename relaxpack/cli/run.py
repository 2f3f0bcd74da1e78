"""``relaxpack run``: run an archive on inputs from .npy / .npz files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError
from ..feeds import FILLS
from .common import (
    NO_MMAP_HELP, PLUGIN_HELP, Exit, command, echo, existing_file, load_plugins, parse_dims, positive, seconds,
    user_errors,
)
from .files import archive_files, input_files
from .outputs import MAP_KINDS, output_arrays, output_lines, value_text
from .terminal import one_line


def read_npz(path: Path, what: str = "inputs file") -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file by name (no pickles; headers checked before data is read)."""
    from ..runtime.input_files import read_npz as read_checked
    return read_checked(existing_file(path, what))


def load_inputs(input_specs: list[str] | None, inputs_file: Path | None, expect=None) -> dict[str, np.ndarray]:
    """``--inputs FILE.npz`` and ``--input NAME=FILE.npy``, each header checked (against the
    model's signature with ``expect``) before its data is read."""
    from ..runtime.input_files import read_inputs

    named: dict[str, Path] = {}
    for spec in input_specs or ():
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise InputError(f"bad --input {spec!r}: expected NAME=FILE.npy")
        if name in named:
            raise InputError(f"--input {name}=... is given twice")
        named[name] = existing_file(Path(file), f"input file for {name!r}")
    if inputs_file is not None:
        existing_file(inputs_file, "inputs file")
    return read_inputs(named, inputs_file, expect)


@command
def _parser(sub):
    p = sub.add_parser("run", help="Run an archive on inputs from .npy / .npz files.",
                       description="Run an archive and print its outputs' names, shapes, dtypes and a preview. "
                                   "Inputs come from files, or --fill makes the ones not given.")
    p.add_argument("archive", type=Path, help="The archive (.rpk).")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="NAME=FILE.npy (repeatable).")
    p.add_argument("--inputs", type=Path, metavar="FILE.npz", help="All inputs in one .npz file.")
    p.add_argument("--fill", choices=FILLS, help="Make the inputs not given: random (seeded), zeros or ones.")
    p.add_argument("--seed", type=int, default=0, help="Seed of --fill random and of dims drawn for it (default 0).")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="With --fill: a symbolic dim's value (else taken from given inputs, or drawn in its range).")
    p.add_argument("--output", type=Path, metavar="FILE.npz", help="Write the outputs to this .npz file.")
    p.add_argument("--expected", type=Path, metavar="FILE.npz",
                   help="Compare the outputs with these (by name); exit 1 on a mismatch.")
    p.add_argument("--rtol", type=float, default=1e-4, help="With --expected: relative tolerance (default 1e-4).")
    p.add_argument("--atol", type=float, default=1e-5, help="With --expected: absolute tolerance (default 1e-5).")
    p.add_argument("--threads", type=positive, metavar="N", help="BLAS threads (default: as they are).")
    p.add_argument("--plugin", action="append", help=PLUGIN_HELP)
    p.add_argument("--timeout", type=seconds, metavar="SECONDS",
                   help="Stop the run with an error after this many seconds (checked between instructions).")
    p.add_argument("--no-mmap", action="store_true", help=NO_MMAP_HELP)
    p.set_defaults(handler=run)


def run(archive: Path, input: list[str] | None = None, inputs: Path | None = None, fill: str | None = None,
        seed: int = 0, dim: list[str] | None = None, output: Path | None = None, expected: Path | None = None,
        rtol: float = 1e-4, atol: float = 1e-5, threads: int | None = None, plugin: list[str] | None = None,
        timeout: float | None = None, no_mmap: bool = False):
    """Run an archive and print its outputs' names, shapes, dtypes and a preview."""
    from ..compare import compare_outputs
    from ..runtime import VirtualMachine, load
    from ..runtime.blas import blas_threads
    from ..runtime.input_files import signature_check
    from ..runtime.safe_write import check_destination, write_with

    with user_errors():
        if not (rtol >= 0 and atol >= 0):    # NaN too
            raise InputError(f"--rtol {rtol} and --atol {atol} must be non-negative numbers")
        load_plugins(plugin)
        exe = load(existing_file(archive, "archive"), mmap=not no_mmap)
        sources = archive_files(archive, exe) + input_files(input, inputs) + ([expected] if expected else [])
        kinds = {p.name: p.kind for p in exe.function("main").output_info()}
        if output is not None:
            check_destination(output, sources)
            maps = [k for k, kind in kinds.items() if kind in MAP_KINDS]
            if maps:
                raise InputError(f"output(s) {maps} are maps (dicts), which .npz cannot hold; run without --output "
                                 f"or read them with relaxpack.runtime.InferenceSession")
        feeds = load_inputs(input, inputs, signature_check(exe))
        filled = fill_missing(exe, feeds, fill, parse_dims(dim), seed)
        want = read_npz(expected, "expected outputs file") if expected is not None else None
        with blas_threads(threads):
            outputs = VirtualMachine(exe, timeout=timeout).run(feeds)
        if output is not None:
            arrays = output_arrays(outputs)
            write_with(output, lambda f: np.savez(f, **arrays), sources)
        diffs = None
        if want is not None:
            unknown = sorted(set(want) - set(outputs))
            if unknown:
                raise InputError(f"{expected} holds {unknown}, which are not outputs of the model "
                                 f"(its outputs are {list(outputs)})")
            names = [n for n in outputs if n in want]
            diffs = compare_outputs(names, outputs, [want[n] for n in names], rtol, atol, reference="expected")
    for name in filled:
        echo(f"filled {one_line(name)}: {value_text(feeds[name])} "
             f"({fill}{', seed ' + str(seed) if fill == 'random' else ''})")
    for name, value in outputs.items():
        echo("\n".join(output_lines(name, value, kinds.get(name, "tensor"))))
    if output is not None:
        echo(f"wrote {output}")
    if diffs is not None:
        for d in diffs:
            note = f"  {d.note}" if d.note else ""
            echo(f"expected {one_line(d.name)}: max abs {d.max_abs:.3e}  max rel {d.max_rel:.3e}  "
                 f"{'PASS' if d.passed else 'FAIL'}{note}")
        passed = all(d.passed for d in diffs)
        echo(f"{'PASS' if passed else 'FAIL'} ({len(diffs)} output(s) against {expected})")
        if not passed:
            raise Exit(1)


def fill_missing(exe, feeds: dict, fill: str | None, dims: dict, seed: int) -> list[str]:
    """Make the inputs ``feeds`` lacks with ``fill`` (added to ``feeds``); their names. Without
    ``fill`` a missing input is an error that lists every input's name, dtype and shape."""
    from ..feeds import dims_of_inputs, draw_dims_holding, make_inputs

    params = exe.function("main").params
    signature = ", ".join(f"{p.name}: {_input_text(p)}" for p in params)
    unknown = sorted(set(feeds) - {p.name for p in params})
    if unknown:
        raise InputError(f"unknown input(s) {unknown}; the model's inputs are {signature}")
    missing = [p.name for p in params if p.name not in feeds]
    if dims and fill is None:
        raise InputError("--dim sizes the inputs --fill makes; add --fill random|zeros|ones")
    if not missing:
        return []
    if fill is None:
        raise InputError(f"missing input(s) {missing}; the model's inputs are {signature} (give them with "
                         f"--input NAME=FILE.npy or --inputs FILE.npz, or make them with --fill random|zeros|ones)")
    rng = np.random.default_rng(seed)
    values = draw_dims_holding(exe, rng, {**dims_of_inputs(exe, feeds), **dims})
    feeds.update(make_inputs(exe, values, rng, fill, names=missing))
    return missing


def _input_text(p) -> str:
    """``float32[batch, seq, 8]``: an input's dtype and symbolic shape."""
    if p.kind != "tensor":
        return p.kind_text()
    shape = "[?]" if p.shape is None else "[" + ", ".join(str(d) for d in p.shape) + "]"
    return f"{p.dtype or '?'}{shape}"
