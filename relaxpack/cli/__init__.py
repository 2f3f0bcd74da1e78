"""The ``relaxpack`` command line: the only part that talks to the terminal.

Every error a user can cause ends in one line on stderr and exit code 1;
``--debug`` shows the traceback instead. Plain argparse: the runtime
commands (run, inspect, bench) work in a numpy-only install.
"""

# importing a command module registers its parser; this order is --help's
from . import convert, run, check, inspect_cmd, bench, demo, serve, batch  # noqa: F401,I001
from .common import build_parser, main

__all__ = ["build_parser", "main"]
