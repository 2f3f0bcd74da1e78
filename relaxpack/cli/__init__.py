"""The ``relaxpack`` command line: the only part that talks to the terminal.

Every error a user can cause ends in one line on stderr and exit code 1;
``--debug`` shows the traceback instead.
"""

from . import bench, check, convert, demo, inspect_cmd, run  # noqa: F401  (register the commands)
from .common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
