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
def demo(show_meta: bool = typer.Option(False, help="Include the weights' data in the printed IR.")):
    """Build the bundled example (a transformer block with symbolic batch and
    seq), print its IR, and check it: well formed, and its text reads back
    as the same program."""
    from .examples import transformer_block
    from .ir.equality import structural_equal
    from .ir.parser import parse
    from .ir.well_formed import check_well_formed

    with _user_errors():
        mod = transformer_block()
        typer.echo(mod.script(show_meta=show_meta))
        check_well_formed(mod)
        same = structural_equal(parse(mod.script()), mod)
    n_bindings = sum(len(b.bindings) for b in mod["main"].body.blocks)
    typer.echo(f"# {n_bindings} bindings; well formed: yes; text round trip: {'yes' if same else 'NO'}")
    if not same:
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
