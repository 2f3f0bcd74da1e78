"""``relaxpack run``: run an archive on inputs from .npy / .npz files."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import InputError
from ..feeds import FILLS
from .common import PLUGIN_HELP, Exit, command, echo, existing_file, load_plugins, parse_dims, positive, user_errors


def read_npz(path: Path, what: str = "inputs file") -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file by name (no pickles)."""
    existing_file(path, what)
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError) as err:
        raise InputError(f"cannot read {path} as .npz: {err}") from None


def load_inputs(input_specs: list[str] | None, inputs_file: Path | None) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    if inputs_file is not None:
        feeds.update(read_npz(inputs_file))
    for spec in input_specs or ():
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise InputError(f"bad --input {spec!r}: expected NAME=FILE.npy")
        path = existing_file(Path(file), f"input file for {name!r}")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise InputError(f"cannot read {path} as .npy: {err}") from None
    return feeds


def preview(array: np.ndarray, limit: int = 6) -> str:
    flat = np.asarray(array).reshape(-1)
    items = ", ".join(np.format_float_positional(v, precision=4, trim="-") if flat.dtype.kind == "f" else str(v)
                      for v in flat[:limit])
    return f"[{items}{', ...' if flat.size > limit else ''}]"


def describe(value, kind: str = "tensor") -> str:
    """``float32[2, 3]``, ``map`` or ``3 maps``: what a value of ``kind`` is, in a few characters."""
    if kind == "map" or isinstance(value, dict):
        return "map"
    if kind == "sequence_map":
        return f"{len(value)} map{'' if len(value) == 1 else 's'}"
    value = np.asarray(value)
    return f"{value.dtype}{list(value.shape)}"


def preview_value(value, kind: str = "tensor") -> str:
    """A value's first entries: a tensor's (:func:`preview`) or the first map's."""
    if kind in ("map", "sequence_map"):
        return preview_maps(value)
    return preview(np.asarray(value))


def preview_maps(value, limit: int = 4) -> str:
    """The first map's first entries: ``{0: 0.275, 1: 0.681, ...}``; ``[]`` for no maps."""
    if not value:
        return "[]" if not isinstance(value, dict) else "{}"
    first = value if isinstance(value, dict) else value[0]
    items = [f"{k!r}: {np.format_float_positional(v, precision=4, trim='-') if isinstance(v, float) else repr(v)}"
             for k, v in list(first.items())[:limit]]
    return "{" + ", ".join(items) + (", ...}" if len(first) > limit else "}")


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
    p.set_defaults(handler=run)


def run(archive: Path, input: list[str] | None = None, inputs: Path | None = None, fill: str | None = None,
        seed: int = 0, dim: list[str] | None = None, output: Path | None = None, expected: Path | None = None,
        rtol: float = 1e-4, atol: float = 1e-5, threads: int | None = None, plugin: list[str] | None = None):
    """Run an archive and print its outputs' names, shapes, dtypes and a preview."""
    from ..compare import compare_outputs
    from ..runtime import VirtualMachine, load
    from ..runtime.blas import blas_threads

    with user_errors():
        load_plugins(plugin)
        exe = load(existing_file(archive, "archive"))
        feeds = load_inputs(input, inputs)
        filled = fill_missing(exe, feeds, fill, parse_dims(dim), seed)
        want = read_npz(expected, "expected outputs file") if expected is not None else None
        with blas_threads(threads):
            outputs = VirtualMachine(exe).run(feeds)
        kinds = {p.name: p.kind for p in exe.function("main").output_info()}
        if output is not None:
            maps = [k for k in outputs if kinds.get(k) in ("map", "sequence_map")]
            if maps:
                raise InputError(f"output(s) {maps} are maps (dicts), which .npz cannot hold; run without --output "
                                 f"or read them with relaxpack.runtime.InferenceSession")
            np.savez(output, **{k: np.asarray(v) for k, v in outputs.items()})
        diffs = None
        if want is not None:
            unknown = sorted(set(want) - set(outputs))
            if unknown:
                raise InputError(f"{expected} holds {unknown}, which are not outputs of the model "
                                 f"(its outputs are {list(outputs)})")
            names = [n for n in outputs if n in want]
            diffs = compare_outputs(names, outputs, [want[n] for n in names], rtol, atol, reference="expected")
    for name in filled:
        echo(f"filled {name}: {describe(feeds[name])} ({fill}{', seed ' + str(seed) if fill == 'random' else ''})")
    for name, value in outputs.items():
        kind = kinds.get(name, "tensor")
        echo(f"{name}: {describe(value, kind)} {preview_value(value, kind)}")
    if output is not None:
        echo(f"wrote {output}")
    if diffs is not None:
        for d in diffs:
            note = f"  {d.note}" if d.note else ""
            echo(f"expected {d.name}: max abs {d.max_abs:.3e}  max rel {d.max_rel:.3e}  "
                 f"{'PASS' if d.passed else 'FAIL'}{note}")
        passed = all(d.passed for d in diffs)
        echo(f"{'PASS' if passed else 'FAIL'} ({len(diffs)} output(s) against {expected})")
        if not passed:
            raise Exit(1)


def fill_missing(exe, feeds: dict, fill: str | None, dims: dict, seed: int) -> list[str]:
    """Make the inputs ``feeds`` lacks with ``fill`` (added to ``feeds``); their names. Without
    ``fill`` a missing input is an error that lists every input's name, dtype and shape."""
    from ..feeds import dims_of_inputs, draw_dims, make_inputs

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
    values = draw_dims(exe, rng, {**dims_of_inputs(exe, feeds), **dims})
    feeds.update(make_inputs(exe, values, rng, fill, names=missing))
    return missing


def _input_text(p) -> str:
    """``float32[batch, seq, 8]``: an input's dtype and symbolic shape."""
    if p.kind != "tensor":
        return p.kind_text()
    shape = "[?]" if p.shape is None else "[" + ", ".join(str(d) for d in p.shape) + "]"
    return f"{p.dtype or '?'}{shape}"
