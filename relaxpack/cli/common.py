"""What the CLI commands share: the app, error handling, option parsing."""

from __future__ import annotations

import contextlib
import logging
import re
from pathlib import Path
from typing import Iterator

import typer

from ..errors import InputError, RelaxpackError
from .terminal import one_line, printable

app = typer.Typer(
    name="relaxpack",
    help="ONNX models to self-contained, numpy-only deployment archives.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
state = {"debug": False}


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logs.")):
    state["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn a RelaxpackError (or an OS error such as a missing file) into one
    line on stderr and exit code 1; ``--debug`` re-raises instead."""
    try:
        yield
    except (RelaxpackError, OSError) as err:
        if state["debug"]:
            raise
        text = str(err)
        message = text.splitlines()[0] if text else type(err).__name__
        if isinstance(err, OSError) and err.filename:
            message = f"{err.strerror}: {err.filename}"
        more = " (more with --debug)" if "\n" in text.strip() else ""
        typer.echo(f"error: {one_line(message)}{more}", err=True)
        raise typer.Exit(1) from None


_DIM = re.compile(r"^([A-Za-z_]\w*)=(\d+)(?:\.\.(\d+)?)?$")
#: the largest dim value an option may give (as archives bound their dims)
MAX_DIM_VALUE = 1 << 48


def parse_dims(specs: list[str] | None) -> dict[str, int | tuple[int, int | None]]:
    """``--dim batch=8 --dim seq=1..512 --dim N=?`` -> ``{"batch": 8, "seq": (1, 512), "N": "?"}``
    (``?`` unties a name the model writes on axes that may differ)."""
    dims: dict = {}
    for spec in specs or ():
        name, _, value = spec.strip().partition("=")
        if value == "?" and name.isidentifier():
            if name in dims:
                raise InputError(f"--dim {name}=... is given twice")
            dims[name] = "?"
            continue
        m = _DIM.match(spec.strip())
        if not m:
            raise InputError(f"bad --dim {spec!r}: expected NAME=VALUE, NAME=LO..HI (e.g. seq=1..512) or NAME=? "
                             f"(each axis named NAME a dim of its own)")
        if any(len(g) > 16 or int(g) > MAX_DIM_VALUE for g in m.groups()[1:] if g):
            raise InputError(f"bad --dim {spec.strip()[:60]!r}: a dim is at most 2**48 = {MAX_DIM_VALUE}")
        name, lo, hi = m.group(1), int(m.group(2)), m.group(3)
        if name in dims:
            raise InputError(f"--dim {name}=... is given twice")
        if ".." not in spec:
            dims[name] = lo
            continue
        hi = int(hi) if hi is not None else None
        if hi is not None and hi < lo:
            raise InputError(f"bad --dim {spec!r}: the upper bound {hi} is below the lower bound {lo}")
        dims[name] = (lo, hi)
    return dims


_SIZE = re.compile(r"^(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 1000, "kib": 1024, "mb": 1000 ** 2, "mib": 1024 ** 2, "gb": 1000 ** 3, "gib": 1024 ** 3}


def parse_pools(specs: list[str] | None) -> dict[str, int]:
    """``--pool fast=256KiB`` -> ``{"fast": 262144}``."""
    pools = {}
    for spec in specs or ():
        name, sep, size = spec.partition("=")
        m = _SIZE.match(size.strip())
        if not sep or not name.isidentifier() or not m:
            raise InputError(f"bad --pool {spec!r}: expected NAME=SIZE, e.g. fast=256KiB")
        pools[name] = int(m.group(1)) * _UNITS[(m.group(2) or "B").lower()]
    return pools


def load_plugins(specs: list[str] | None) -> None:
    """Import each ``--plugin``: a module name (``acme.relaxpack_ops``) or a
    ``.py`` file. A plugin registers converters (``register_converter``) for
    ``convert``/``check`` and functions (``relaxpack.runtime.register_func``)
    for ``run``/``bench``."""
    import importlib
    import importlib.util

    for spec in specs or ():
        try:
            if spec.endswith(".py"):
                path = existing_file(Path(spec), "plugin")
                module_spec = importlib.util.spec_from_file_location(f"relaxpack_plugin_{path.stem}", path)
                module = importlib.util.module_from_spec(module_spec)
                module_spec.loader.exec_module(module)
            else:
                importlib.import_module(spec)
        except RelaxpackError:
            raise
        except Exception as err:  # the plugin's own failure: one line, not its traceback
            first = str(err).splitlines()[0] if str(err) else ""
            raise RelaxpackError(f"cannot load plugin {spec!r}: {type(err).__name__}: {first}") from None


#: the ``--plugin`` option, shared by the commands that convert or run
PLUGIN_HELP = "A module or .py file to import first (registers custom converters/functions; repeatable)."


def existing_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise InputError(f"{what} not found: {path}")
    if not path.is_file():
        raise InputError(f"{what} is not a file: {path}")
    return path


def fmt_bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def echo(text: str = "") -> None:
    """Print ``text``; control characters (from names in a model or archive) are shown escaped."""
    typer.echo(printable(text))
