"""The ``relaxpack`` command line. The only module that talks to the terminal.

Every error a user can cause ends in one line on stderr and exit code 1;
``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

import typer

from .errors import RelaxpackError

app = typer.Typer(
    name="relaxpack",
    help="ONNX models to self-contained, numpy-only deployment archives.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_state = {"debug": False}


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logs.")):
    _state["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING)


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    """Turn a RelaxpackError (or a missing file) into one line and exit 1."""
    try:
        yield
    except (RelaxpackError, OSError) as err:
        if _state["debug"]:
            raise
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        if isinstance(err, OSError) and err.filename:
            message = f"{err.strerror}: {err.filename}"
        more = " (more with --debug)" if "\n" in str(err) else ""
        typer.echo(f"error: {message}{more}", err=True)
        raise typer.Exit(1) from None


@app.command()
def demo(show_ir: bool = typer.Option(False, "--ir", help="Print the imported IR too.")):
    """Build the bundled example (an ONNX transformer block with symbolic batch
    and seq), import it, compile it, run it at several sizes and check every
    output against onnxruntime."""
    import time

    from .check import check_model
    from .examples.onnx_models import transformer_block_onnx
    from .importers.onnx import from_onnx
    from .ir.equality import structural_equal
    from .ir.parser import parse
    from .ir.well_formed import check_well_formed
    from .vm_build import build

    with _user_errors():
        model = transformer_block_onnx()
        t0 = time.perf_counter()
        mod = from_onnx(model, dims={"seq": (1, 128)})
        t1 = time.perf_counter()
        exe = build(mod)
        t2 = time.perf_counter()
        check_well_formed(mod)
        round_trip = structural_equal(parse(mod.script()), mod)
        report = check_model(model, dims={"seq": (1, 128)}, samples=3, seed=0)
    if show_ir:
        typer.echo(mod.script(show_meta=False))
    typer.echo(f"model      transformer block, {len(model.graph.node)} ONNX nodes, inputs {exe.signature()}")
    typer.echo(f"import     {(t1 - t0) * 1e3:.1f} ms; IR well formed; text round trip: "
               f"{'yes' if round_trip else 'NO'}")
    typer.echo(f"build      {(t2 - t1) * 1e3:.1f} ms; {exe.kernel_call_count()} kernel calls, "
               f"{len(exe.constants)} constants")
    for sample in report.samples:
        dims = ", ".join(f"{k}={v}" for k, v in sample.dims.items())
        for out in sample.outputs:
            verdict = "PASS" if out.passed else "FAIL"
            typer.echo(f"check      {dims}: {out.name}{list(out.shape)} max abs err {out.max_abs:.2e} "
                       f"vs onnxruntime  {verdict}")
    if not (report.passed and round_trip):
        raise typer.Exit(1)


@app.command("ir")
def ir_command(
    path: Path = typer.Argument(..., help="A module in the text format (as printed by mod.script())."),
    check: bool = typer.Option(True, help="Run the well-formedness checker."),
    show_meta: bool = typer.Option(False, help="Print the data of large constants too."),
):
    """Read a module in the text format, check it, and print it normalized."""
    from .ir.parser import parse
    from .ir.well_formed import check_well_formed

    with _user_errors():
        mod = parse(path.read_text())
        if check:
            check_well_formed(mod)
        typer.echo(mod.script(show_meta=show_meta))


@app.command()
def version():
    """Print relaxpack's version."""
    from . import __version__
    typer.echo(__version__)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
