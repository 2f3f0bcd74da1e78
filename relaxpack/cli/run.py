"""``relaxpack run``: run an archive on inputs from .npy / .npz files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from ..errors import InputError
from .common import PLUGIN_HELP, app, echo, existing_file, load_plugins, user_errors
from .files import archive_files, input_files
from .outputs import output_arrays, output_lines


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
    from ..runtime.input_files import signature_check
    from ..runtime.safe_write import check_destination, write_with

    with user_errors():
        load_plugins(plugin)
        exe = load(existing_file(archive, "archive"))
        sources = archive_files(archive, exe) + input_files(input, inputs)
        if output is not None:
            check_destination(output, sources)
        feeds = load_inputs(input, inputs, signature_check(exe))
        outputs = VirtualMachine(exe).run(feeds)
        if output is not None:
            arrays = output_arrays(outputs)
            write_with(output, lambda f: np.savez(f, **arrays), sources)
    for name, value in outputs.items():
        echo("\n".join(output_lines(name, value)))
    if output is not None:
        echo(f"wrote {output}")
