"""The files a command reads, so that none of them is ever chosen as its output."""

from __future__ import annotations

from pathlib import Path


def archive_files(archive: Path, exe) -> list[Path]:
    """The archive and, for external params, its params file."""
    name = (exe.archive or {}).get("params_file")
    return [archive] + ([archive.parent / name] if name else [])


def input_files(input_specs: list[str] | None, inputs_file: Path | None) -> list[Path]:
    """The files named by ``--input NAME=FILE`` and ``--inputs FILE``."""
    files = [Path(spec.partition("=")[2]) for spec in input_specs or () if "=" in spec]
    return files + ([inputs_file] if inputs_file is not None else [])


__all__ = ["archive_files", "input_files"]
