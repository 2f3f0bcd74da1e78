"""What the CLI commands share: the parser, error handling, option parsing.

The command line is plain :mod:`argparse` (standard library), so ``pip
install relaxpack`` (numpy only) has a working ``relaxpack run | inspect |
bench``; commands that need the converter say which extra to install
(:func:`require_extra`). Each command module registers a parser builder with
:func:`command`; :func:`build_parser` puts them together.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import re
import sys
from pathlib import Path
from typing import Callable, Iterator

from ..errors import InputError, RelaxpackError
from ..ir.dim_text import dim_identifier
from .terminal import one_line, printable

state = {"debug": False}
NO_MMAP_HELP = ("Read the archive's constants into private memory instead of mapping the file "
                "(then nothing done to the file while running can change the results).")

#: functions that add one command's parser to the subparsers (see :func:`command`)
COMMANDS: list[Callable] = []

#: what the ``onnx`` extra brings, by module name
ONNX_EXTRA = ("onnx", "onnxruntime")
INSTALL_ONNX = "pip install 'relaxpack[onnx]'"


class Exit(Exception):
    """Ends a command with an exit code (after it printed what it had to say)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class UsageError(InputError):
    """The command line itself is wrong (unknown option, missing argument, an option given twice)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, exit code 1, like every user error,
    and whose single-valued options refuse to be given twice (argparse would keep the last)."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")

    def exit(self, status=0, message=None):   # after --help: return from main(), do not end the process
        if message:
            self._print_message(message, sys.stderr)
        raise Exit(status)

    def add_argument(self, *args, **kwargs):
        if args and args[0].startswith("-") and kwargs.get("action", "store") == "store":
            kwargs["action"] = _StoreOnce
        return super().add_argument(*args, **kwargs)


class _StoreOnce(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        seen = namespace.__dict__.setdefault("_given", set())
        if self.dest in seen:
            raise argparse.ArgumentError(self, "given twice; give it once")
        seen.add(self.dest)
        setattr(namespace, self.dest, values)


def command(add_parser: Callable) -> Callable:
    """Register ``add_parser(subparsers)``, which adds one command and sets
    ``handler`` to the function that runs it (called with the options as keywords)."""
    COMMANDS.append(add_parser)
    return add_parser


def build_parser() -> Parser:
    parser = Parser(prog="relaxpack", description="ONNX models to self-contained, numpy-only deployment archives.")
    parser.add_argument("--debug", action="store_true", help="Show tracebacks and debug logs.")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=Parser)
    for add_parser in COMMANDS:
        add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help()
        return 0
    try:
        with user_errors():
            args = parser.parse_args(argv)
            state["debug"] = args.debug
            logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING)
            options = {k: v for k, v in vars(args).items() if k not in ("debug", "handler", "_given")}
            if "handler" not in vars(args):
                parser.print_help()
                return 0
            args.handler(**options)
    except Exit as done:
        return done.code
    return 0


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
        print(f"error: {one_line(message)}{more}", file=sys.stderr, flush=True)
        raise Exit(1) from None


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require_extra(what: str, modules=ONNX_EXTRA, extra: str = "onnx") -> None:
    """Fail in one line naming the extra to install when ``modules`` are not installed
    (``pip install relaxpack`` is the numpy-only runtime)."""
    missing = [m for m in modules if not _installed(m)]
    if missing:
        raise RelaxpackError(f"{what} needs {' and '.join(missing)}, which this install lacks: "
                             f"pip install 'relaxpack[{extra}]'")


def positive(text: str) -> int:
    """An argparse type: an int of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return value


def add_build_options(p: argparse.ArgumentParser) -> None:
    """``-O`` and ``--pool``: the same on ``convert`` and ``check`` (check tests what convert ships)."""
    p.add_argument("-O", dest="opt_level", type=int, choices=(0, 1, 2), default=2,
                   help="Optimization level: -O0, -O1 or -O2 (default -O2).")
    p.add_argument("--pool", action="append", metavar="NAME=SIZE",
                   help="A bounded memory pool, NAME=SIZE (e.g. fast=256KiB; repeatable).")


_DIM = re.compile(r"^([^=\s]+?)=(\d+)(?:\.\.(\d+)?)?$")
#: the largest dim value an option may give (as archives bound their dims)
MAX_DIM_VALUE = 1 << 48


def parse_dims(specs: list[str] | None) -> dict[str, int | tuple[int, int | None]]:
    """``--dim batch=8 --dim seq=1..512 --dim N=?`` -> ``{"batch": 8, "seq": (1, 512), "N": "?"}``
    (``?`` unties a name the model writes on axes that may differ)."""
    dims: dict = {}
    for spec in specs or ():
        name, _, value = spec.strip().partition("=")
        name = dim_identifier(name) if name else name     # the model's spelling (DynamicDimension.0) too
        if name in dims:
            raise InputError(f"--dim {name}=... is given twice")
        if value == "?" and name.isidentifier():
            dims[name] = "?"
            continue
        m = _DIM.match(spec.strip())
        if not m:
            raise InputError(f"bad --dim {spec!r}: expected NAME=VALUE, NAME=LO..HI (e.g. seq=1..512) or NAME=? "
                             f"(each axis named NAME a dim of its own)")
        if any(len(g) > 16 or int(g) > MAX_DIM_VALUE for g in m.groups()[1:] if g):
            raise InputError(f"bad --dim {spec.strip()[:60]!r}: a dim is at most 2**48 = {MAX_DIM_VALUE}")
        lo, hi = int(m.group(2)), m.group(3)
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


def byte_size(text: str) -> int:
    """An argparse type: a size in bytes, ``1048576``, ``64MiB`` or ``1GB``."""
    m = _SIZE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 64MiB)")
    return int(m.group(1)) * _UNITS[(m.group(2) or "B").lower()]


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
            hint = f" ({INSTALL_ONNX})" if getattr(err, "name", None) in ONNX_EXTRA else ""
            raise RelaxpackError(f"cannot load plugin {spec!r}: {type(err).__name__}: {first}{hint}") from None


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
    print(printable(text), flush=True)
