"""``relaxpack run``: run an archive on inputs from .npy / .npz files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from ..errors import InputError
from .common import PLUGIN_HELP, app, echo, existing_file, load_plugins, user_errors
from .files import archive_files, input_files


def load_inputs(input_specs: list[str] | None, inputs_file: Path | None) -> dict[str, np.ndarray]:
    feeds: dict[str, np.ndarray] = {}
    if inputs_file is not None:
        existing_file(inputs_file, "inputs file")
        try:
            with np.load(inputs_file, allow_pickle=False) as data:
                feeds.update({k: data[k] for k in data.files})
        except (ValueError, OSError) as err:
            raise InputError(f"cannot read {inputs_file} as .npz: {err}") from None
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


@app.command()
def run(
    archive: Path = typer.Argument(..., help="The archive (.rpk)."),
    input: list[str] = typer.Option(None, "--input", help="NAME=FILE.npy (repeatable)."),
    inputs: Path = typer.Option(None, "--inputs", help="All inputs in one .npz file."),
    output: Path = typer.Option(None, "--output", help="Write the outputs to this .npz file."),
    plugin: list[str] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
):
    """Run an archive and print its outputs' names, shapes, dtypes and a preview."""
    from ..runtime import VirtualMachine, load
    from ..runtime.safe_write import check_destination, write_with

    with user_errors():
        load_plugins(plugin)
        exe = load(existing_file(archive, "archive"))
        sources = archive_files(archive, exe) + input_files(input, inputs)
        if output is not None:
            check_destination(output, sources)
        feeds = load_inputs(input, inputs)
        outputs = VirtualMachine(exe).run(feeds)
        if output is not None:
            arrays = {k: np.asarray(v) for k, v in outputs.items()}
            write_with(output, lambda f: np.savez(f, **arrays), sources)
    for name, value in outputs.items():
        value = np.asarray(value)
        echo(f"{name}: {value.dtype}{list(value.shape)} {preview(value)}")
    if output is not None:
        echo(f"wrote {output}")
