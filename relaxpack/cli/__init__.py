"""The ``relaxpack`` command line: the only part that talks to the terminal.

Every error a user can cause ends in one line on stderr and exit code 1;
``--debug`` shows the traceback instead. Plain argparse: the runtime
commands (run, inspect, bench) work in a numpy-only install.
"""

import sys

from ..errors import NumpyTooOld

try:
    # importing a command module registers its parser; this order is --help's
    from . import convert, run, check, inspect_cmd, bench, demo, serve, batch  # noqa: F401,I001
    from .common import build_parser, main
except NumpyTooOld as too_old:     # the runtime's numpy check: every command says it in one line
    _TOO_OLD = str(too_old)

    def build_parser():
        raise NumpyTooOld(_TOO_OLD)

    def main(argv: list[str] | None = None) -> int:
        print(f"error: {_TOO_OLD}", file=sys.stderr, flush=True)
        return 1

__all__ = ["build_parser", "main"]
